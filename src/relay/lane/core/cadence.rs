//! The claim cadence: whether a claim waits a moment for running handlers (the linger),
//! how long a key run it asks for, and how far ahead of the handlers the lane claims (the
//! prefetch in force), all from moving averages of how long deliveries and claims take.
//! Pure: the time comes in as a value.

use std::time::Duration;

use tokio::time::Instant;

/// A claim leaves room for at least this many keys: a key run takes at most this share of
/// its limit. (Measured with one hot key among 1,000 cold ones at concurrency 16: runs of
/// 16 in claims of 32 halved the cold keys' rate, the hot key's earlier rows being due
/// first. Runs of a quarter of the claim, measured side by side at 100 k and c=64 on
/// PostgreSQL, gained nothing at 1,000 keys and cost the cold keys beside a hot one.)
pub(crate) const RUNS_PER_CLAIM: usize = 8;

/// A claim of this many messages already spreads its round trip thin: it never lingers.
/// (Measured on PostgreSQL: lingering doubled the rows per round trip at concurrency 16,
/// 1.35 × the drain rate; at 64 the bigger cycles only cost more per row.)
pub(crate) const LINGER_ENOUGH: usize = 64;

/// The averages, the linger in progress and the prefetch in force.
#[derive(Debug)]
pub(super) struct Cadence {
    /// How many claimed messages the lane keeps ahead of its handlers now: between the
    /// lane's `prefetch` and `max(prefetch, prefetch_max)` ([`Cadence::adjust_prefetch`]).
    prefetch: usize,
    /// Until when the next claim waits for running handlers ([`crate::LaneConfig::claim_linger`]).
    linger_until: Option<Instant>,
    /// How long deliveries take, as a moving average (an eighth of each new one): a claim
    /// waits only for handlers that usually finish within the linger.
    pub(super) delivery_time: Option<Duration>,
    /// How long a claim takes from send to answer, as a moving average: with
    /// `delivery_time`, how long a key run may be ([`Cadence::key_run`]).
    pub(super) claim_time: Option<Duration>,
}

/// `average` moved an eighth of the way to `took` (or `took`, the first time).
fn moved(average: Option<Duration>, took: Duration) -> Duration {
    match average {
        Some(average) => average - average / 8 + took / 8,
        None => took,
    }
}

/// What the prefetch may be, from the lane's config ([`crate::LaneConfig::prefetch_max`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PrefetchBounds {
    /// The configured prefetch: the least, and all before both averages are known.
    pub(super) floor: usize,
    /// `max(prefetch, prefetch_max)`: the most.
    pub(super) ceiling: usize,
    /// The lane's handlers.
    pub(super) concurrency: usize,
    /// The grown prefetch waits at most this long in the buffer (a share of the lease).
    pub(super) max_wait: Duration,
}

impl Cadence {
    /// A cadence with nothing timed yet, claiming `prefetch` ahead.
    pub(super) fn new(prefetch: usize) -> Self {
        Self {
            prefetch,
            linger_until: None,
            delivery_time: None,
            claim_time: None,
        }
    }

    /// How many claimed messages the lane keeps ahead of its handlers now.
    pub(super) fn prefetch(&self) -> usize {
        self.prefetch
    }

    /// Moves the prefetch toward what keeps the handlers busy for two claim round trips:
    /// `concurrency × 2 × claim time ÷ delivery time`, no longer in the buffer than
    /// `max_wait` by the average delivery time, within `[floor, ceiling]`. It falls to that
    /// at once (handlers that slow down must not be fed claims that wait into their
    /// leases) and grows at most twofold per claim answer (`grow`), so one quick sample
    /// cannot fill the lane. Two round trips, since a claimed message is held from one
    /// claim's send until the ack riding on a later claim comes back.
    pub(super) fn adjust_prefetch(&mut self, bounds: PrefetchBounds, grow: bool) {
        let target = match (self.claim_time, self.delivery_time) {
            (Some(claim), Some(delivery)) => {
                let delivery = delivery.as_nanos().max(1);
                let handlers = bounds.concurrency as u128;
                let busy = handlers * 2 * claim.as_nanos() / delivery;
                let lease_safe = handlers * bounds.max_wait.as_nanos() / delivery;
                usize::try_from(busy.min(lease_safe)).unwrap_or(usize::MAX)
            }
            _ => bounds.floor,
        };
        let target = target.clamp(bounds.floor, bounds.ceiling.max(bounds.floor));
        self.prefetch = if target <= self.prefetch {
            target
        } else if grow {
            target.min(self.prefetch.max(1).saturating_mul(2))
        } else {
            self.prefetch
        };
    }

    /// A delivery finished after `took`.
    pub(super) fn note_delivery(&mut self, took: Duration) {
        self.delivery_time = Some(moved(self.delivery_time, took));
    }

    /// A claim came back `took` after it went out.
    pub(super) fn note_claim(&mut self, took: Duration) {
        self.claim_time = Some(moved(self.claim_time, took));
    }

    /// Until when a claim of `limit`, and the flush it would ride on, waits for running
    /// handlers (`None`: it goes out now). It waits only while they hold room it could take
    /// (`room`: what it could take once every running handler has finished), for a claim
    /// under [`LINGER_ENOUGH`], while deliveries usually take no longer than `linger` (slow
    /// ones would not finish within it: their buffer is what keeps them busy), and at most
    /// `linger` from the first time it was asked.
    pub(super) fn linger(
        &mut self,
        now: Instant,
        limit: usize,
        room: usize,
        linger: Duration,
    ) -> Option<Instant> {
        let quick = self.delivery_time.is_some_and(|took| took <= linger);
        if limit >= room || limit >= LINGER_ENOUGH || !quick {
            self.linger_until = None;
            return None;
        }
        let at = match self.linger_until {
            Some(at) if now >= at => {
                self.linger_until = None;
                return None;
            }
            Some(at) => at,
            None => now + linger,
        };
        self.linger_until = Some(at);
        Some(at)
    }

    /// The longest key run a claim of `limit` asks for, at most `cap`
    /// ([`crate::LaneConfig::key_run`]): as many deliveries as fit, one after another, in
    /// one claim round trip, so a run's last message waits in the buffer no longer than a
    /// claim would take, and slow deliveries keep the parallelism of heads only; and at
    /// most an eighth of the claim ([`RUNS_PER_CLAIM`]), so one hot key cannot fill a claim
    /// that other keys are due in. 1 until both have been timed.
    pub(super) fn key_run(&self, limit: usize, cap: usize) -> usize {
        let (Some(claim), Some(delivery)) = (self.claim_time, self.delivery_time) else {
            return 1;
        };
        let fits = claim.as_nanos() / delivery.as_nanos().max(1);
        let share = (limit / RUNS_PER_CLAIM).max(1);
        usize::try_from(fits)
            .unwrap_or(usize::MAX)
            .min(share)
            .clamp(1, cap.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds() -> PrefetchBounds {
        PrefetchBounds {
            floor: 4,
            ceiling: 64,
            concurrency: 4,
            max_wait: Duration::from_secs(1),
        }
    }

    #[test]
    fn the_prefetch_grows_at_most_twofold_per_claim_and_falls_at_once() {
        let mut cadence = Cadence::new(4);
        cadence.adjust_prefetch(bounds(), true);
        assert_eq!(cadence.prefetch(), 4, "untimed");
        cadence.note_claim(Duration::from_millis(2));
        cadence.note_delivery(Duration::from_micros(10));
        let mut seen = Vec::new();
        for _ in 0..6 {
            cadence.adjust_prefetch(bounds(), true);
            seen.push(cadence.prefetch());
        }
        assert_eq!(seen, [8, 16, 32, 64, 64, 64]);
        cadence.adjust_prefetch(bounds(), false);
        assert_eq!(cadence.prefetch(), 64, "a delivery alone never grows it");
        // Deliveries of a second against claims of 2 ms: 4 × 2 × 2 ms / ~1 s is none.
        for _ in 0..20 {
            cadence.note_delivery(Duration::from_secs(1));
        }
        cadence.adjust_prefetch(bounds(), false);
        assert_eq!(cadence.prefetch(), 4, "back to the floor at once");
    }
}
