//! The prefetch in force ([`LaneConfig::prefetch_max`]): it grows while deliveries finish
//! faster than a claim round trip, at most twofold per claim answer and up to the ceiling,
//! falls back when they slow, never past what the lease allows, and the lane never holds
//! more than [`LaneConfig::most_held`].

use std::collections::HashMap;

use super::*;

/// Plays the store and the handlers for a lane: every claim is answered in full `claim`
/// after it went out, every delivery finishes `delivery` after it started, every ack is
/// applied. Checks after every input that the lane holds no more than its bound.
struct Drive {
    core: LaneCore,
    now: Instant,
    /// Deliveries running: slot and message.
    running: HashMap<Uuid, (Slot, OutboxMessage)>,
    /// Claims out: id, limit, the acks riding on it, and when it went.
    out: Vec<(ClaimId, usize, Vec<ClaimRef>, Instant)>,
    /// Plain ack flushes out: how many acks.
    acking: Vec<usize>,
    /// The most the lane held (running, buffered) with its claims' limits out.
    most: usize,
}

impl Drive {
    fn new(config: LaneConfig) -> Self {
        let mut drive = Self {
            core: LaneCore::new(config, false),
            now: Instant::now(),
            running: HashMap::new(),
            out: Vec::new(),
            acking: Vec::new(),
            most: 0,
        };
        drive.input(Input::Start);
        drive
    }

    fn input(&mut self, input: Input) {
        let commands = self.core.handle(self.now, input);
        for command in commands {
            match command {
                Command::Deliver { slot, message } => {
                    self.running.insert(message.outbox_id, (slot, *message));
                }
                Command::Store(StoreRequest::Claim { claim, limit, .. }) => {
                    self.out.push((claim, limit, Vec::new(), self.now))
                }
                Command::Store(StoreRequest::AckAndClaim {
                    claim, limit, acks, ..
                }) => self.out.push((claim, limit, acks, self.now)),
                Command::Store(StoreRequest::Ack(acks)) => self.acking.push(acks.len()),
                _ => {}
            }
        }
        let promised: usize = self.out.iter().map(|(_, limit, ..)| limit).sum();
        let held = self.core.in_flight() + self.core.buffered() + promised;
        self.most = self.most.max(held);
        let bound = self.core.config.most_held();
        assert!(held <= bound, "holds {held}, over the bound {bound}");
    }

    /// One round: each claim out comes back full `claim` after it went (and those it
    /// makes room for likewise), then every delivery running finishes after `delivery`,
    /// then the acks out are applied.
    fn round(&mut self, claim: Duration, delivery: Duration) {
        while !self.out.is_empty() {
            let (id, limit, acks, sent) = self.out.remove(0);
            self.now = self.now.max(sent + claim);
            let messages: Vec<OutboxMessage> = (0..limit).map(|_| message(None)).collect();
            let claimed = Ok(ClaimBatch {
                messages,
                dead_lettered: Vec::new(),
                unreadable: Vec::new(),
                next_due: NextDue::Unknown,
            });
            let answer = if acks.is_empty() {
                StoreAnswer::Claimed {
                    claim: id,
                    result: claimed,
                }
            } else {
                StoreAnswer::AckedAndClaimed {
                    claim: id,
                    result: Ok(AckAndClaim {
                        acked: vec![ClaimOutcome::Applied; acks.len()],
                        claimed,
                    }),
                    wall_ms: UnixMillis::EPOCH,
                }
            };
            self.input(Input::Store(answer));
        }
        self.now += delivery;
        for (outbox_id, (slot, _)) in std::mem::take(&mut self.running) {
            self.input(Input::DeliveryDone {
                slot,
                outbox_id,
                result: Ok(()),
                elapsed: delivery,
            });
        }
        for n in std::mem::take(&mut self.acking) {
            self.input(acked_all(n));
        }
    }

    fn prefetch(&self) -> usize {
        self.core.prefetch_in_force()
    }
}

fn quick_lane(prefetch_max: usize) -> LaneConfig {
    config(4, 4).prefetch_max(prefetch_max).claims_in_flight(1)
}

#[test]
fn the_prefetch_grows_while_deliveries_are_quicker_than_claims() {
    let mut lane = Drive::new(quick_lane(64));
    assert_eq!(lane.prefetch(), 4, "untimed: the configured prefetch");
    let mut seen = vec![lane.prefetch()];
    for _ in 0..8 {
        lane.round(Duration::from_millis(2), Duration::from_micros(20));
        seen.push(lane.prefetch());
    }
    assert_eq!(
        seen[1], 4,
        "deliveries not yet timed: the configured prefetch"
    );
    assert!(
        seen.windows(2).all(|w| w[1] >= w[0]),
        "never shrinks while deliveries are quick: {seen:?}"
    );
    assert_eq!(*seen.last().unwrap(), 64, "up to the ceiling: {seen:?}");
    // And the claims take what it makes room for: the window of 4 + 64.
    assert!(lane.most > 32, "claims took the grown room: {}", lane.most);
}

#[test]
fn the_prefetch_shrinks_back_when_deliveries_slow() {
    let mut lane = Drive::new(quick_lane(64));
    for _ in 0..8 {
        lane.round(Duration::from_millis(2), Duration::from_micros(20));
    }
    assert_eq!(lane.prefetch(), 64);
    let mut seen = Vec::new();
    for _ in 0..6 {
        lane.round(Duration::from_millis(2), Duration::from_secs(1));
        seen.push(lane.prefetch());
    }
    assert_eq!(
        *seen.last().unwrap(),
        4,
        "1 s deliveries against 2 ms claims: back to the configured prefetch: {seen:?}"
    );
    assert!(
        seen.windows(2).all(|w| w[1] <= w[0]),
        "never grows while deliveries are slow: {seen:?}"
    );
}

#[test]
fn deliveries_slower_than_a_claim_keep_the_configured_prefetch() {
    let mut lane = Drive::new(quick_lane(64));
    for _ in 0..10 {
        lane.round(Duration::from_millis(2), Duration::from_millis(50));
        assert_eq!(lane.prefetch(), 4);
    }
    assert!(lane.most <= 8, "concurrency + prefetch: {}", lane.most);
}

#[test]
fn the_grown_prefetch_waits_at_most_its_share_of_the_lease() {
    // Claims slower than the lease allows to buffer for: 10 ms deliveries at concurrency 4
    // against 1 s claims would want 4 × 2 × 1 s / 10 ms = 800 ahead, 2 s of handler turns;
    // a lease of 8 s allows 1 s (an eighth), so 400.
    let config = quick_lane(1_000).lease(Duration::from_secs(8));
    let mut lane = Drive::new(config);
    for _ in 0..12 {
        lane.round(Duration::from_secs(1), Duration::from_millis(10));
    }
    assert_eq!(lane.prefetch(), 400);
}

#[test]
fn prefetch_max_zero_or_below_prefetch_keeps_the_prefetch() {
    for prefetch_max in [0, 2] {
        let mut lane = Drive::new(quick_lane(prefetch_max));
        for _ in 0..8 {
            lane.round(Duration::from_millis(2), Duration::from_micros(20));
        }
        assert_eq!(lane.prefetch(), 4, "prefetch_max {prefetch_max}");
        assert!(lane.most <= 8, "concurrency + prefetch: {}", lane.most);
    }
}

#[test]
fn two_claims_in_flight_hold_no_more_than_the_bound() {
    let mut lane = Drive::new(config(4, 4).prefetch_max(40).claims_in_flight(2));
    for _ in 0..12 {
        lane.round(Duration::from_millis(2), Duration::from_micros(20));
    }
    assert_eq!(lane.prefetch(), 40);
    assert!(
        lane.most > 8 && lane.most <= 44,
        "more than concurrency + prefetch, within the bound: {}",
        lane.most
    );
}
