//! Deterministic simulation of the whole relay: several relays, each a model of the lane
//! actor's shell around a real [`LaneCore`](crate::relay::lane::core::LaneCore), compete for
//! one lane of one store (the memory store, or SQLite for every fourth seed of the seed
//! runs: `world/store.rs`) on one thread, in virtual time, with every source of
//! chance drawn from one seed: the order of inputs that arrive together, store latency,
//! handler durations and outcomes, the messages (keys, delays, dedupe keys, and which
//! process enqueues them: an idle lane of that process may take them as hand-offs), the
//! lane's settings (gates, claims in flight and hand-off included) and the faults (store
//! calls that fail before they commit or commit and lose their answer, a slow or silent
//! store, one relay cut off from the store while the others reach it, crashes and restarts
//! with new consumer ids, lane crashes under the supervisor's restart policy, store clock
//! jumps, a relay process frozen and its clock jumping on, lost wake-ups, enqueues that
//! fail, pauses). A checker watches every store change and every
//! delivery ([`check`]); a failing seed replays exactly and its schedule is shrunk first.
//!
//! Why here: the simulation drives the crate's private core and store types directly (no
//! actors, no tokio). The seed runs, the shrinker and the mutations are `cfg(test)`; the
//! world, the plan and the checker also build under the `simulate` feature, where
//! `crate::simulate` plays an operator's stated load and target against one lane; the plan
//! and the checker are public under `testing` (`crate::testing::simulation`), where the SQL
//! stores' tests play drawn schedules with production relays against a real database
//! (`tests/support/drawn_plan.rs`).
//!
//! Layout: `plan.rs` (the schedule a seed draws), `world.rs` (the event loop and the
//! shell's commands; `world/calls.rs`: store calls, `world/target.rs`: deliveries,
//! `world/faults.rs`: faults and traces), `relay.rs` (the state of one relay process),
//! `check.rs` (the invariants), `rng.rs` (the seeded stream), `shrink.rs` (fewer messages
//! and faults that still fail), `mutation.rs` (which deliberate bug, `crate::mutation`, a thread's runs switch on),
//! `tests.rs` (the seed runs).
//!
//! Running it: `cargo test --lib sim::` runs the CI budget (2,000 seeds) and the
//! mutations; a failure prints the command that replays it (`sim::tests::replay`, ignored
//! unless asked for, with `OUTBOX_SIM_SEED`, `OUTBOX_SIM_CUT`; `OUTBOX_SIM_TRACE=1` prints
//! every event); `OUTBOX_SIM_SECONDS=1800 cargo test --lib sim::tests::seeds_for_a_while
//! -- --ignored --nocapture` runs new seeds for half an hour.
//!
//! The production code it runs: `LaneCore` (its decision lines, with a deliberate bug
//! switched on as a value: `crate::mutation`), the memory store or SQLite under an `Outbox`, the
//! hand-off registry, the supervisor's restart policy for lane crashes
//! (`relay::supervisor::restarts`) and the handler's timeout rule
//! (`relay::handler::within_timeout`).
//!
//! An ack-and-claim is one store call, as the lane sends it (one transaction on SQLite).
//! Each fault class's effects are tallied (`Tally::fault_effects`):
//! `sim::tests::how_many_seeds_each_fault_class_reaches` prints, over the CI budget, the
//! seeds each class reaches.
//!
//! What it does not model: drains and lane add/remove, retry jitter (off, so every draw comes from the seed),
//! and one lane per run. Hand-offs are drawn as the lane core sees them, without the lane
//! actor's rule that turns hand-off off beside several claims in flight.

// The seed drawing (plans, faults, the Rng's helpers) serves the seed runs; under
// `simulate` alone it is unused.
#![cfg_attr(not(test), allow(dead_code))]
// The plan and the checker are public for `testing::simulation` alone.
#![cfg_attr(not(feature = "testing"), allow(unreachable_pub))]

use std::time::Duration;

mod check;
#[cfg(test)]
pub(crate) mod mutation;
mod plan;
mod relay;
mod rng;
#[cfg(test)]
mod shrink;
mod world;

#[cfg(test)]
mod tests;

#[cfg(feature = "testing")]
pub use check::{Call, Checker, Overlaps};
#[cfg(feature = "testing")]
pub use plan::Fault;
#[cfg(any(test, feature = "testing"))]
pub use plan::Size;
#[cfg(feature = "simulate")]
pub use plan::{MessagePlan, Stated, TargetPlan, LANE, TARGET};
pub use plan::{Plan, Store};
#[cfg(feature = "simulate")]
pub(crate) use rng::Rng;
#[cfg(test)]
pub(crate) use shrink::{shrink, Cut};
#[cfg(test)]
use world::Tally;
pub(crate) use world::World;

/// How long a run goes on after every message settled, so a late answer of a silent
/// store or a zombie delivery's ack still meets the checker.
fn tail(plan: &Plan) -> Duration {
    plan.config.lease * 3
}

/// Once the faults stop (and the target recovers), by when every message must be settled.
///
/// Derivation: each wait a message can still be in after the last fault, taken one after
/// another (the sum is an upper bound of any chain of them):
/// - the store clock stepped back: leases and due times read later by that much;
/// - a hung delivery runs to its `delivery_timeout`;
/// - a store call sent into a silent store returns up to the slow fault's extra latency
///   (at most 1.5 leases) plus two legs;
/// - a crashed relay (or lane, by the supervisor's policy) comes back within two leases,
///   and its claims lapse within one; a frozen relay runs again after its freeze;
/// - a lost wake-up leaves its message to the poll ceiling, or in the plans that run the
///   due watcher to its next pass, `max_poll_interval` either way (only in runs that lose
///   any);
/// - a retry waits at most `retry.max`, or the target's longest `Retry-After` (also the
///   longest Retry-After hold), a breaker at most `max_cool_down`, a store backoff at most
///   `store_backoff.max`;
/// - a delayed message comes due at most 3 s after it was enqueued (every enqueue is before
///   the faults end);
/// - the poll ceiling is not in the sum: after the faults stop, an idle lane sleeps until
///   the store's `next_due` (which counts retries and lease lapses), a wake-up, or a gate's
///   or backoff's timer, and a busy one claims again as its deliveries are recorded, so no
///   message waits for a poll (the plans give 40 % of runs a ceiling of 10 minutes);
/// - then each message, one after another in the worst case (one hot key), costs a claim
///   and an ack round trip (two legs each), a delivery and a claim linger, plus one
///   rate-limit interval when a rate limit is set.
pub fn settle_bound(plan: &Plan) -> Duration {
    let c = &plan.config;
    let slow = plan
        .faults
        .iter()
        .filter_map(|(_, f)| match f {
            plan::Fault::Slow { extra, .. } => Some(*extra),
            _ => None,
        })
        .max()
        .unwrap_or_default();
    let frozen = plan
        .faults
        .iter()
        .filter_map(|(_, f)| match f {
            plan::Fault::Freeze { for_, .. } => Some(*for_),
            _ => None,
        })
        .max()
        .unwrap_or_default();
    let lost_wake_up = if plan
        .faults
        .iter()
        .any(|(_, f)| matches!(f, plan::Fault::LoseWakeUps { .. }))
    {
        c.max_poll_interval
    } else {
        Duration::ZERO
    };
    let retry = c.retry.max.max(plan.target.longest_retry_after);
    let breaker = c
        .circuit_breaker
        .map(|b| b.max_cool_down)
        .unwrap_or_default();
    let per_message = plan.latency * 4
        + plan.target.slowest
        + c.claim_linger
        + Duration::from_millis(2)
        + c.rate_limit
            .map(|r| r.per / r.count.max(1))
            .unwrap_or_default();
    plan.faults_end
        + Duration::from_millis(plan.backward_jumps())
        + c.delivery_timeout
        + slow
        + frozen
        + lost_wake_up
        + plan.latency * 2
        + c.lease * 3
        + retry
        + breaker
        + c.store_backoff.max
        + Duration::from_secs(3)
        + per_message * plan.messages.len() as u32
}

/// The longest a delivery may run past its lapse beside the next holder of its key: it
/// started only with `start margin` of its lease left (`delivery_timeout`, or with lease
/// extension at most `lease_extend_margin`), and runs at most `delivery_timeout`.
pub fn overlap_bound(config: &crate::config::LaneConfig) -> Duration {
    let margin = config
        .lease_extend_margin
        .map_or(config.delivery_timeout, |m| m.min(config.delivery_timeout));
    config.delivery_timeout.saturating_sub(margin)
}

/// A run that broke an invariant.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    pub(crate) what: String,
    pub(crate) at: Duration,
}

/// Runs one schedule to the end.
#[cfg(test)]
pub(crate) fn run(plan: &Plan) -> Result<Tally, Failure> {
    mutation::run_begins();
    run_world(plan).map(|world| world.tally)
}

/// Runs one schedule to the end, and hands back the world as it ended (its store holds
/// every row).
pub(crate) fn run_world(plan: &Plan) -> Result<World<'_>, Failure> {
    drive(World::new(plan))
}

/// Runs one schedule to the end, recording every event in full.
#[cfg(all(test, feature = "sqlite"))]
pub(crate) fn run_recorded(plan: &Plan) -> Result<(Tally, Vec<String>), Failure> {
    mutation::run_begins();
    let mut world = World::new(plan);
    world.record = Some(Vec::new());
    drive(world).map(|mut world| {
        let record = world.record.take().unwrap_or_default();
        (world.tally, record)
    })
}

/// Takes `world`'s events until every message settled and the tail ran out.
fn drive(mut world: World<'_>) -> Result<World<'_>, Failure> {
    let plan = world.plan;
    let bound = settle_bound(plan);
    world.tally.bound = bound;
    let fail = |world: &World<'_>, what: String| Failure {
        what,
        at: world.now,
    };
    loop {
        if !world.step(bound) {
            let left = world.check.unsettled();
            if left.is_empty() {
                break;
            }
            return Err(fail(
                &world,
                format!(
                    "liveness: {} of {} messages neither delivered nor dead-lettered by {bound:?} \
                     (faults ended at {:?}), e.g. {:?}",
                    left.len(),
                    world.check.messages(),
                    plan.faults_end,
                    left.first()
                ),
            ));
        }
        if let Some(what) = world.check.violation.take() {
            return Err(fail(&world, what));
        }
        if world.now >= plan.faults_end
            && world.tally.events.is_multiple_of(64)
            && world.check.unsettled().is_empty()
        {
            break;
        }
    }
    world.tally.settled_at = Some(world.now);
    let end = world.now + tail(plan);
    while world.step(end) {
        if let Some(what) = world.check.violation.take() {
            return Err(fail(&world, what));
        }
    }
    world.check_all_rows();
    world.tally.overlaps = world.check.overlaps;
    match world.check.violation.take() {
        Some(what) => Err(fail(&world, what)),
        None => Ok(world),
    }
}
