//! Plays a stated load against a stated target behaviour for one lane, with the lane's real
//! settings, in virtual time: the crate's deterministic simulation (a real lane core over
//! the in-memory store on a manual clock) with one relay, no store faults, and the target
//! as the operator describes it. An hour of traffic runs in seconds, and one seed always
//! gives the same report. The binary's `outbox-relay simulate` prints it per lane.
//!
//! The run has two phases: the load (messages enqueued at a steady rate for `duration`,
//! the target failing as stated), then a drain (nothing more is enqueued, the target
//! answers every delivery), so every message ends delivered or dead-lettered and the
//! report's numbers add up.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::config::LaneConfig;
use crate::message::{OutboxStatus, DEFAULT_MAX_ATTEMPTS};
use crate::sim::{run_world, MessagePlan, Plan, Rng, Stated};
use crate::store::Capabilities;

/// How the messages' ordering keys are spread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keys {
    /// No ordering key: every message is independent.
    None,
    /// Uniformly over this many keys.
    Spread(u32),
    /// One hot key takes half the messages; the rest spread over 100 keys.
    Hot,
}

/// The load and the target's behaviour to play.
#[derive(Debug, Clone)]
pub struct Load {
    /// How long messages are enqueued (virtual time).
    pub duration: Duration,
    /// Messages enqueued per second.
    pub rate: f64,
    /// How ordering keys are spread.
    pub keys: Keys,
    /// Each message's `max_attempts`.
    pub max_attempts: u32,
    /// Share of deliveries that fail (retryable), in `0..=1`.
    pub failure_rate: f64,
    /// How long each delivery takes.
    pub latency: Duration,
    /// The Retry-After the target asks for, with `retry_after_rate`.
    pub retry_after: Duration,
    /// Share of deliveries answered with `retry_after`, in `0..=1`.
    pub retry_after_rate: f64,
    /// Outages: (start, length) since the start; every delivery fails during one.
    pub outages: Vec<(Duration, Duration)>,
    /// The seed of every draw.
    pub seed: u64,
}

impl Default for Load {
    fn default() -> Self {
        Self {
            duration: Duration::from_secs(3600),
            rate: 50.0,
            keys: Keys::None,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            failure_rate: 0.1,
            latency: Duration::from_millis(20),
            retry_after: Duration::from_secs(30),
            retry_after_rate: 0.0,
            outages: Vec::new(),
            seed: 1,
        }
    }
}

/// What one lane did under the load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneReport {
    /// Messages enqueued.
    pub enqueued: u64,
    /// Messages delivered.
    pub delivered: u64,
    /// Attempts that failed (or whose lease lapsed) and were tried again.
    pub retried: u64,
    /// Messages dead-lettered (attempts used up).
    pub dead_lettered: u64,
    /// End-to-end latency of delivered messages (enqueue to delivered): p50, p90, p99, max.
    pub latency: [Duration; 4],
    /// The longest time a key had a message waiting and none delivered or dead-lettered.
    pub longest_key_wait: Duration,
    /// Time the rate limit held the lane back.
    pub rate_limited: Duration,
    /// Time the lane waited on any gate (rate limit, breaker, Retry-After hold).
    pub throttled: Duration,
    /// Time the circuit breaker was open or half-open.
    pub breaker_open: Duration,
    /// When the last message settled (virtual time since the start).
    pub settled_at: Duration,
    /// The claims the lane kept out at once: its own setting, else the store's default.
    pub claims_in_flight: usize,
    /// Claims sent while another claim of the lane was out (none with one in flight).
    pub overlapping_claims: u64,
}

/// Why a simulation did not produce a report.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the simulation stopped at {at:?}: {what}")]
pub struct SimulationError {
    /// What went wrong.
    pub what: String,
    /// When (virtual time).
    pub at: Duration,
}

/// Plays `load` against one lane configured as `config` on a store that can do `store`
/// (what the lane leaves unset is the store's default, as in production: claims in flight,
/// [`Capabilities::claims_in_flight`]; `DatabaseUrl::capabilities` gives a URL's). Its
/// retry, lease, gates and delivery settings are used as they are; retry jitter is turned
/// off so the seed decides every draw, and hand-offs are off.
pub fn lane(
    config: &LaneConfig,
    load: &Load,
    store: Capabilities,
) -> Result<LaneReport, SimulationError> {
    let claims_in_flight = config.claims_in_flight_or(store.claims_in_flight);
    let mut config = config.clone().claims_in_flight(claims_in_flight);
    config.name = crate::sim::LANE.to_owned();
    config.target = crate::sim::TARGET.to_owned();
    config.retry.jitter = false;
    config.store_backoff.jitter = false;
    config.hand_off = false;
    let mut rng = Rng::new(load.seed).fork(2);
    let count = (load.rate * load.duration.as_secs_f64()).floor() as u64;
    let messages = (0..count)
        .map(|i| MessagePlan {
            at: Duration::from_secs_f64(i as f64 / load.rate),
            key: match load.keys {
                Keys::None => None,
                Keys::Spread(n) => Some(format!("k{}", rng.below(u64::from(n)))),
                Keys::Hot if rng.percent(50) => Some("hot".to_owned()),
                Keys::Hot => Some(format!("k{}", rng.below(100))),
            },
            delay: None,
            dedupe: None,
            max_attempts: load.max_attempts,
            via: None,
        })
        .collect();
    let plan = Plan {
        seed: load.seed,
        relays: 1,
        config,
        target: crate::sim::TargetPlan {
            retryable: 0,
            permanent: 0,
            retry_after: 0,
            panic: 0,
            hang: 0,
            slowest: load.latency,
            longest_retry_after: load.retry_after,
        },
        latency: Duration::from_millis(1),
        messages,
        faults: Vec::new(),
        supervisor: crate::config::SupervisorConfig::default(),
        clock_skew_ppm: Vec::new(),
        store: crate::sim::Store::Memory,
        // As every production relay runs it.
        watched: true,
        faults_end: load.duration,
        stated: Some(Stated {
            failure_rate: load.failure_rate,
            latency: load.latency,
            retry_after: load.retry_after,
            retry_after_rate: load.retry_after_rate,
            outages: load.outages.clone(),
        }),
    };
    let world = run_world(&plan).map_err(|failure| SimulationError {
        what: failure.what,
        at: failure.at,
    })?;
    let mut report = LaneReport {
        enqueued: count,
        delivered: 0,
        retried: 0,
        dead_lettered: 0,
        latency: [Duration::ZERO; 4],
        longest_key_wait: Duration::ZERO,
        rate_limited: world.tally.rate_limited,
        throttled: world.tally.throttled,
        breaker_open: world.tally.breaker_open,
        settled_at: world.tally.settled_at.unwrap_or(world.now),
        claims_in_flight,
        overlapping_claims: world.tally.parallel_claims,
    };
    let mut latencies = Vec::new();
    // Per key: (enqueued, settled) of each message.
    let mut keys: BTreeMap<String, Vec<(i64, i64)>> = BTreeMap::new();
    for id in world.check.ids() {
        let Ok(Some(row)) = world.store.run(world.store.backend().get(id)) else {
            continue;
        };
        let settled = match row.status {
            OutboxStatus::Delivered => {
                report.delivered += 1;
                row.delivered_at.unwrap_or(row.updated_at)
            }
            OutboxStatus::DeadLetter => {
                report.dead_lettered += 1;
                row.updated_at
            }
            OutboxStatus::Pending | OutboxStatus::Claimed => continue,
        };
        report.retried += u64::from(row.attempt_count.saturating_sub(1));
        if row.status == OutboxStatus::Delivered {
            latencies.push(settled.saturating_duration_since(row.created_at));
        }
        if let Some(key) = row.ordering_key {
            keys.entry(key)
                .or_default()
                .push((row.created_at.as_millis(), settled.as_millis()));
        }
    }
    latencies.sort_unstable();
    if let Some(max) = latencies.last() {
        let at = |q: usize| latencies[(latencies.len() - 1) * q / 100];
        report.latency = [at(50), at(90), at(99), *max];
    }
    for settles in keys.values_mut() {
        settles.sort_unstable_by_key(|(_, settled)| *settled);
        let mut previous = i64::MIN;
        for (enqueued, settled) in settles.iter() {
            let waited = settled - enqueued.max(&previous);
            report.longest_key_wait = report
                .longest_key_wait
                .max(Duration::from_millis(waited.max(0) as u64));
            previous = *settled;
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lane that leaves its claims in flight unset gets the store's default, as in
    /// production: two on PostgreSQL, whose claims then overlap; one on the memory store.
    #[test]
    fn a_lane_left_unset_takes_the_stores_defaults() {
        let config = LaneConfig::new("orders", "billing").concurrency(32);
        let load = Load {
            duration: Duration::from_secs(5),
            rate: 500.0,
            failure_rate: 0.0,
            ..Load::default()
        };
        let postgres = Capabilities::none().with_claims_in_flight(2);
        let on_postgres = lane(&config, &load, postgres).expect("simulated");
        let on_memory = lane(&config, &load, Capabilities::none()).expect("simulated");
        assert_eq!(
            (on_postgres.claims_in_flight, on_memory.claims_in_flight),
            (2, 1)
        );
        assert!(
            on_postgres.overlapping_claims > 0 && on_memory.overlapping_claims == 0,
            "overlapping claims: {} on PostgreSQL's default, {} on the memory store's",
            on_postgres.overlapping_claims,
            on_memory.overlapping_claims
        );
        let set = lane(&config.clone().claims_in_flight(1), &load, postgres).expect("simulated");
        assert_eq!(
            set.claims_in_flight, 1,
            "the lane's own setting comes first"
        );
    }
}
