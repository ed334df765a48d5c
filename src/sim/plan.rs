//! A run's schedule, drawn from its seed: the lane's settings (gates included), the
//! messages and when they are enqueued, the faults and when they strike, and how the
//! target behaves. The schedule is data, so a failing one can be shrunk (fewer messages,
//! fewer faults) and run again with the same seed for everything else.

use std::time::Duration;

use super::rng::Rng;
use crate::config::{CircuitBreakerConfig, LaneConfig, RateLimit, SupervisorConfig};
use crate::retry::RetryPolicy;
use crate::store::OrderingPolicy;

/// The one lane every relay of a run serves.
pub const LANE: &str = "orders";
/// Its target.
pub const TARGET: &str = "billing";

/// How big a run is.
#[derive(Debug, Clone, Copy)]
pub struct Size {
    /// Messages enqueued.
    pub messages: usize,
    /// Faults of the first kinds drawn (and half as many of the newer kinds).
    pub faults: usize,
}

/// One message to enqueue.
#[derive(Debug, Clone)]
pub struct MessagePlan {
    /// When (virtual time since the start) it is enqueued.
    pub at: Duration,
    /// Its ordering key.
    pub key: Option<String>,
    /// Its delay (`OutboxMessageDraft::with_delay`).
    pub delay: Option<Duration>,
    /// Its dedupe key.
    pub dedupe: Option<String>,
    /// Its `max_attempts`.
    pub max_attempts: u32,
    /// The relay process whose store object enqueues it (`None`: a process without a
    /// relay): a lane of that process may take it as a hand-off.
    pub via: Option<usize>,
}

/// A fault and when it strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The next `n` store calls fail before they commit.
    FailBeforeCommit(u32),
    /// The next `n` store calls commit, and their answers are lost (the caller sees an
    /// error).
    LoseAnswer(u32),
    /// Every store call issued in the next `for_` takes up to `extra` longer (past the
    /// lease: a silent store).
    Slow {
        /// How long the store stays slow.
        for_: Duration,
        /// The most a call's leg takes longer.
        extra: Duration,
    },
    /// A relay's process dies (its state is gone, its claims lapse); it starts again after
    /// `down`, with a new consumer id.
    Crash {
        /// Which relay process.
        relay: usize,
        /// How long it stays down.
        down: Duration,
    },
    /// The store's clock jumps (milliseconds; negative is backwards).
    ClockJump(i64),
    /// An operator pauses a relay's lane for `for_`.
    Pause {
        /// Which relay process.
        relay: usize,
        /// How long the lane stays paused.
        for_: Duration,
    },
    /// A relay's lane actor fails while its process lives: its deliveries and claims die
    /// with it, and the supervisor's restart policy (the production one) says when it
    /// starts again, or that it stays failed (then the process's liveness
    /// fails after `fail_liveness_after` and the process is restarted).
    LaneCrash {
        /// Which relay process.
        relay: usize,
    },
    /// One relay is cut off from the store for `for_` while the others reach it: each call
    /// it sends fails before it commits, or (`answers_lost`) commits and loses its answer.
    Cut {
        /// Which relay process.
        relay: usize,
        /// How long it stays cut off.
        for_: Duration,
        /// Its calls commit and lose their answers (else they fail before committing).
        answers_lost: bool,
    },
    /// The wake-ups meant for a relay in the next `for_` are lost (a listener connection
    /// that dropped and connected again): only its own claims and its poll find work.
    LoseWakeUps {
        /// Which relay process.
        relay: usize,
        /// For how long.
        for_: Duration,
    },
    /// The next `n` enqueues fail before they commit (a hand-off credit they took goes
    /// back to its lane).
    FailEnqueues(u32),
    /// A relay's process stops for `for_` (a long GC or `SIGSTOP` pause, a paused VM):
    /// nothing of it runs, and then what it missed comes at once; its clock reads `for_`
    /// later from one input to the next.
    Freeze {
        /// Which relay process.
        relay: usize,
        /// For how long.
        for_: Duration,
    },
}

/// How the target answers, as percentages of deliveries (the rest succeed), until the
/// faults stop; then every delivery succeeds.
#[derive(Debug, Clone, Copy)]
pub struct TargetPlan {
    /// Fails, retryable.
    pub retryable: u64,
    /// Fails for good.
    pub permanent: u64,
    /// Asks to be retried after a while (up to `longest_retry_after`).
    pub retry_after: u64,
    /// Panics.
    pub panic: u64,
    /// Hangs past the delivery timeout.
    pub hang: u64,
    /// The longest ordinary delivery.
    pub slowest: Duration,
    /// The longest Retry-After the target asks for.
    pub longest_retry_after: Duration,
}

/// A target behaviour an operator states (`outbox-relay simulate`), in place of the seed's
/// drawn one: every delivery takes `latency`; during an outage it fails (retryable); else
/// it fails with `failure_rate`, or asks for `retry_after` with `retry_after_rate`.
#[derive(Debug, Clone, Default)]
pub struct Stated {
    /// The share of deliveries that fail, retryable.
    pub failure_rate: f64,
    /// How long each delivery takes.
    pub latency: Duration,
    /// The Retry-After the target asks for.
    pub retry_after: Duration,
    /// The share of deliveries that ask for `retry_after`.
    pub retry_after_rate: f64,
    /// (start, length) of each outage, since the start of the run.
    pub outages: Vec<(Duration, Duration)>,
}

/// A whole run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The seed it was drawn from.
    pub seed: u64,
    /// How many relay processes serve the lane.
    pub relays: usize,
    /// The lane's settings, the same in every relay (the consumer id aside).
    pub config: LaneConfig,
    /// How the target answers.
    pub target: TargetPlan,
    /// The longest store round trip leg (request or answer) without a fault.
    pub latency: Duration,
    /// The messages, in the order drawn (not by enqueue time).
    pub messages: Vec<MessagePlan>,
    /// The faults and when they strike, by time.
    pub faults: Vec<(Duration, Fault)>,
    /// When the faults stop (every fault strikes before; the target recovers then).
    pub faults_end: Duration,
    /// The target as stated, when not drawn from the seed.
    pub stated: Option<Stated>,
    /// Each relay process's supervisor: how it restarts a crashed lane.
    pub supervisor: SupervisorConfig,
    /// How fast each relay's monotonic clock runs against the store's, in parts per
    /// million (negative: slow, so the lane reads a lease as lasting longer than it does).
    pub clock_skew_ppm: Vec<i64>,
    /// The store the run drives (the memory store, as drawn; the seed runs put every
    /// fourth seed on SQLite).
    pub store: Store,
    /// Whether each relay process runs the due watcher, as production relays do
    /// (`relay/upkeep.rs`): its idle lane then arms no poll ceiling, and every
    /// `max_poll_interval` the world asks the store's `lanes_next_due` for the lane and
    /// pokes it with what falls due before the next pass. Drawn for half the seeds, so the
    /// lane's own ceiling poll stays covered too.
    pub watched: bool,
}

/// The store a run drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Store {
    /// The memory store, saying `pre_claim`: enqueues through a relay process hand off.
    Memory,
    /// SQLite in a temporary file, as a user of the embedded default runs it: no
    /// `pre_claim`, so no hand-offs (every message is claimed).
    #[cfg(all(test, feature = "sqlite"))]
    Sqlite,
}

impl Plan {
    /// The schedule of `seed`.
    pub fn draw(seed: u64, size: Size) -> Self {
        let mut rng = Rng::new(seed);
        let mut lane = rng.fork(1);
        let config = lane_config(&mut lane);
        let mut traffic = rng.fork(2);
        let span = Duration::from_millis(traffic.between(2_000, 20_000));
        let key_space = traffic.weighted(&[(2, 0u64), (4, 3), (3, 30), (1, 1)]);
        let hot = traffic.percent(30);
        let messages: Vec<MessagePlan> = (0..size.messages)
            .map(|i| {
                let key = match key_space {
                    0 => None,
                    _ if hot && traffic.percent(60) => Some("k0".to_owned()),
                    n if traffic.percent(85) => Some(format!("k{}", traffic.below(n))),
                    _ => None,
                };
                MessagePlan {
                    at: Duration::from_millis(traffic.below(span.as_millis() as u64)),
                    key,
                    delay: traffic.percent(10).then(|| traffic.millis(1, 3_000)),
                    dedupe: traffic
                        .percent(10)
                        .then(|| format!("d{}", i.saturating_sub(traffic.below(2) as usize))),
                    max_attempts: traffic.between(1, 6) as u32,
                    via: None,
                }
            })
            .collect();
        let mut chaos = rng.fork(3);
        let relays = chaos.between(2, 4) as usize;
        let faults_end = span + Duration::from_millis(chaos.between(0, 5_000));
        let lease = config.lease.as_millis() as u64;
        let mut faults: Vec<(Duration, Fault)> = (0..size.faults)
            .map(|_| {
                let at = Duration::from_millis(chaos.below(faults_end.as_millis() as u64));
                let relay = chaos.below(relays as u64) as usize;
                let kind = chaos.weighted(&[(3, 0u8), (4, 1), (2, 2), (2, 3), (1, 4), (2, 5)]);
                let fault = match kind {
                    0 => Fault::FailBeforeCommit(chaos.between(1, 3) as u32),
                    1 => Fault::LoseAnswer(chaos.between(1, 3) as u32),
                    2 => Fault::Slow {
                        for_: chaos.millis(50, 2_000),
                        extra: chaos.millis(10, lease * 3 / 2),
                    },
                    3 => Fault::Crash {
                        relay,
                        down: chaos.millis(10, lease * 2),
                    },
                    4 => Fault::ClockJump(if chaos.percent(70) {
                        chaos.between(1, lease * 2) as i64
                    } else {
                        -(chaos.between(1, MAX_BACKWARD_JUMP_MS) as i64)
                    }),
                    _ => Fault::Pause {
                        relay,
                        for_: chaos.millis(10, 3_000),
                    },
                };
                (at, fault)
            })
            .collect();
        faults.sort_by_key(|(at, _)| *at);
        let mut target = rng.fork(4);
        let target = TargetPlan {
            retryable: target.between(0, 30),
            permanent: target.between(0, 5),
            retry_after: target.between(0, 5),
            panic: target.between(0, 3),
            hang: target.between(0, 3),
            slowest: if target.percent(30) {
                target.millis(1, 5)
            } else {
                target.millis(1, 300)
            },
            longest_retry_after: target.millis(10, 2_000),
        };
        let latency = rng.fork(5).millis(0, 20);
        // Which process enqueues each message: from a stream forked last, so the draws
        // above (and the seeds kept as regression tests) stay as they were.
        let mut via = rng.fork(7);
        let messages: Vec<MessagePlan> = messages
            .into_iter()
            .map(|message: MessagePlan| MessagePlan {
                via: via.percent(75).then(|| via.below(relays as u64) as usize),
                ..message
            })
            .collect();
        // The fault classes added since, and the supervisor: from a stream of their own, so
        // the draws above (and the seeds kept as regression tests) stay as they were.
        let mut more = rng.fork(8);
        let supervisor = supervisor_config(&mut more, config.lease);
        faults.extend((0..size.faults.div_ceil(2)).map(|_| {
            let at = Duration::from_millis(more.below(faults_end.as_millis() as u64));
            let relay = more.below(relays as u64) as usize;
            let fault = match more.weighted(&[(2, 0u8), (3, 1), (2, 2), (2, 3), (1, 4)]) {
                0 => Fault::LaneCrash { relay },
                1 => Fault::Cut {
                    relay,
                    for_: more.millis(50, lease * 2),
                    answers_lost: more.percent(30),
                },
                2 => Fault::LoseWakeUps {
                    relay,
                    for_: more.millis(10, 3_000),
                },
                3 => Fault::FailEnqueues(more.between(1, 3) as u32),
                _ => Fault::Freeze {
                    relay,
                    for_: more.millis(10, lease * 2),
                },
            };
            (at, fault)
        }));
        faults.sort_by_key(|(at, _)| *at);
        // Up to 0.2 % either way: four times what NTP may slew a clock by.
        let clock_skew_ppm = (0..relays)
            .map(|_| more.between(0, 4_000) as i64 - 2_000)
            .collect();
        // From a stream of its own, forked last, so the draws above stay as they were.
        let watched = rng.fork(9).percent(50);
        Self {
            seed,
            relays,
            config,
            target,
            latency,
            messages,
            faults,
            faults_end,
            stated: None,
            supervisor,
            clock_skew_ppm,
            store: Store::Memory,
            watched,
        }
    }

    /// `relay`'s clock skew (none if the plan says nothing of it).
    pub fn clock_skew_ppm(&self, relay: usize) -> i64 {
        self.clock_skew_ppm.get(relay).copied().unwrap_or(0)
    }

    /// The sum of the backward clock jumps, in milliseconds.
    pub fn backward_jumps(&self) -> u64 {
        self.faults
            .iter()
            .map(|(_, f)| match f {
                Fault::ClockJump(ms) if *ms < 0 => ms.unsigned_abs(),
                _ => 0,
            })
            .sum()
    }
}

/// The poll ceiling of the runs that must not need one.
pub(crate) const LONG_POLL: Duration = Duration::from_secs(600);

/// A backward clock jump is at most this (a store's clock stepped back by NTP).
pub(crate) const MAX_BACKWARD_JUMP_MS: u64 = 1_000;

/// A supervisor whose restarts all come within two leases (the settle bound's "a crashed
/// relay comes back within two leases"), which gives up on a lane in some runs.
fn supervisor_config(rng: &mut Rng, lease: Duration) -> SupervisorConfig {
    let lease_ms = lease.as_millis() as u64;
    let base = rng.millis(5, 200);
    SupervisorConfig::default()
        .max_restarts(rng.between(0, 4) as u32)
        .restart_window(rng.millis(lease_ms, lease_ms * 10))
        .restart_backoff(RetryPolicy::new(base, base.max(rng.millis(5, lease_ms))).jitter(false))
        .fail_liveness_after(Some(rng.millis(10, lease_ms * 2)))
}

fn lane_config(rng: &mut Rng) -> LaneConfig {
    let lease = rng.millis(1_000, 8_000);
    let concurrency = rng.between(1, 8) as usize;
    // Claims of 16 and more (with deliveries faster than a claim) take key runs.
    let mut config = LaneConfig::new(LANE, TARGET)
        .concurrency(concurrency)
        .prefetch(rng.between(0, 4 * concurrency as u64) as usize)
        .batch_size(rng.between(1, 64) as usize)
        .key_run(rng.between(1, 8) as usize)
        .claim_linger(rng.millis(0, 5))
        .lease(lease)
        .lease_extend_margin(rng.percent(75).then(|| lease / rng.between(2, 4) as u32))
        .delivery_timeout(lease * 2 / 3)
        // No jitter: every draw comes from the seed.
        .retry(RetryPolicy::new(rng.millis(5, 200), rng.millis(200, 3_000)).jitter(false))
        .ordering(if rng.percent(30) {
            OrderingPolicy::Block
        } else {
            OrderingPolicy::Skip
        })
        // A long poll ceiling in some runs: after the faults stop nothing may wait for it
        // (the settle bound leaves it out), so a lost wake-up shows as a stuck message.
        .max_poll_interval(if rng.percent(40) {
            LONG_POLL
        } else {
            rng.millis(200, 5_000)
        })
        .store_backoff(RetryPolicy::new(rng.millis(5, 100), rng.millis(100, 2_000)).jitter(false));
    if rng.percent(25) {
        let per = rng.millis(100, 1_000);
        let count = rng.between(5, 50) as u32;
        config = config.rate_limit(Some(RateLimit::new(count, per).burst(count)));
    }
    if rng.percent(25) {
        let cool_down = rng.millis(50, 2_000);
        config = config.circuit_breaker(Some(
            CircuitBreakerConfig::default()
                .consecutive_failures(Some(rng.between(2, 6) as u32))
                .cool_down(cool_down)
                .max_cool_down(cool_down * rng.between(1, 4) as u32),
        ));
    }
    config = config.retry_after_holds_lane(rng.percent(30));
    // Drawn last, so the draws above (and the seeds kept as regression tests) stay as
    // they were. Several claims out make their answers interleave with each other, with
    // wake-ups, failures, lapses and gate changes.
    let config = config.claims_in_flight(rng.weighted(&[(2, 1usize), (2, 2), (1, 3)]));
    // Hand-offs: an enqueue through a relay process's store object hands a keyless, undelayed
    // draft to that process's idle lane (`store::hand_off`), interleaving credits, revokes
    // and handed-off messages with claims, wake-ups, gates and crashes.
    let config = config.hand_off(rng.percent(50));
    // A prefetch that grows while deliveries are quick: off in some runs (the bound is then
    // `concurrency + prefetch`, which a claim that forgets the claims out or the credits
    // passes soon), up to a few times the concurrency in the others.
    let prefetch_max = if rng.percent(40) {
        0
    } else {
        rng.between(0, 8 * concurrency as u64) as usize
    };
    config.prefetch_max(prefetch_max)
}
