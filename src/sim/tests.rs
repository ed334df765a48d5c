//! The seed runs: the CI budget, the long mode, a replay, and the seeds that once found a
//! bug, kept as regression tests.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::check::Overlaps;
use super::mutation::{self, Mutation};
use super::*;

/// Every seed of the CI budget runs this big a schedule.
const SIZE: Size = Size {
    messages: 200,
    faults: 20,
};

/// Every fourth seed of the seed runs (3, 7, 11, …) drives SQLite, with this many
/// messages and as many faults as `SIZE`: a SQLite call costs the world a round trip to
/// sqlx's worker thread and SQLite's own work (some fifty times a memory store call, in
/// a debug build), so its seeds have 30 messages: their count is kept, and the CI budget
/// stays within its time.
const SQLITE_SIZE: Size = Size {
    messages: 30,
    faults: SIZE.faults,
};

/// Seed `seed` as the seed runs draw it: every fourth on SQLite (`SQLITE_SIZE`), the rest
/// on the memory store (`SIZE`).
fn drawn(seed: u64) -> Plan {
    #[cfg(feature = "sqlite")]
    if seed % 4 == 3 {
        return Plan {
            store: Store::Sqlite,
            ..Plan::draw(seed, SQLITE_SIZE)
        };
    }
    Plan::draw(seed, SIZE)
}

fn env<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Per fault class, in how many seeds a fault of it took effect, and the first of them.
type Reached = BTreeMap<&'static str, (u64, u64)>;

/// Runs seeds from `first` on a few threads until `count` ran or `until` passed (or, with
/// `first_failure`, one failed), with `mutation` switched on; how many ran, the failing
/// seeds (smallest first), the overlaps past a lapse of the runs that passed, and the fault
/// classes they reached.
fn run_seeds(
    first: u64,
    count: u64,
    until: Option<Instant>,
    mutation: Option<Mutation>,
    first_failure: bool,
) -> (u64, Vec<(u64, Failure)>, Overlaps, Reached) {
    run_seeds_of(|seed| seed, first, count, until, mutation, first_failure)
}

/// [`run_seeds`], each `n` of `first..` standing for seed `seed_of(n)`.
fn run_seeds_of(
    seed_of: fn(u64) -> u64,
    first: u64,
    count: u64,
    until: Option<Instant>,
    mutation: Option<Mutation>,
    first_failure: bool,
) -> (u64, Vec<(u64, Failure)>, Overlaps, Reached) {
    let next = AtomicU64::new(first);
    let ran = AtomicU64::new(0);
    let failed = Mutex::new(Vec::new());
    let overlaps = Mutex::new(Overlaps::default());
    let reached = Mutex::new(Reached::new());
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get().min(4));
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                mutation::set(mutation);
                loop {
                    if until.is_some_and(|until| Instant::now() >= until) {
                        return;
                    }
                    if first_failure && !failed.lock().unwrap_or_else(|p| p.into_inner()).is_empty()
                    {
                        return;
                    }
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= first.saturating_add(count) {
                        return;
                    }
                    let seed = seed_of(n);
                    match run(&drawn(seed)) {
                        Ok(tally) => {
                            overlaps
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .add(tally.overlaps);
                            let mut reached = reached.lock().unwrap_or_else(|p| p.into_inner());
                            for class in tally.fault_effects.keys() {
                                let (seeds, first) = reached.entry(class).or_insert((0, seed));
                                *seeds += 1;
                                *first = (*first).min(seed);
                            }
                        }
                        Err(failure) => failed
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push((seed, failure)),
                    }
                    ran.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    let mut failed = failed.into_inner().unwrap_or_else(|p| p.into_inner());
    failed.sort_by_key(|(seed, _)| *seed);
    let overlaps = overlaps.into_inner().unwrap_or_else(|p| p.into_inner());
    let reached = reached.into_inner().unwrap_or_else(|p| p.into_inner());
    (ran.into_inner(), failed, overlaps, reached)
}

/// The failures, the first one shrunk, each with the command that replays it.
fn report(failed: &[(u64, Failure)]) -> String {
    let mut text = String::new();
    for (i, (seed, failure)) in failed.iter().take(5).enumerate() {
        let plan = drawn(*seed);
        let (cut, failure) = if i == 0 {
            shrink(&plan, failure.clone(), 150)
        } else {
            (Cut::all(&plan), failure.clone())
        };
        text.push_str(&format!(
            "\nseed {seed} ({} messages, {} faults) at {:?}: {}\n  replay: \
             OUTBOX_SIM_SEED={seed} OUTBOX_SIM_CUT={cut} cargo test --lib \
             sim::tests::replay -- --ignored --nocapture",
            cut.messages.len(),
            cut.faults.len(),
            failure.at,
            failure.what
        ));
    }
    text
}

/// The CI budget: 2,000 seeds (`OUTBOX_SIM_SEEDS` to change), each 200 messages and 20
/// faults (every fourth on SQLite, 30 messages), every invariant checked after every step.
#[test]
fn seeds_hold_every_invariant() {
    let count = env("OUTBOX_SIM_SEEDS").unwrap_or(2_000);
    let first = env("OUTBOX_SIM_FIRST").unwrap_or(0);
    let started = Instant::now();
    let (ran, failed, overlaps, _) = run_seeds(first, count, None, None, false);
    let on_sqlite = (first..first + ran)
        .filter(|seed| drawn(*seed).store != Store::Memory)
        .count();
    println!(
        "simulation: {ran} seeds ({} messages, {} faults each and half as many of the newer \
         kinds; {on_sqlite} of them on SQLite, {} messages each) in {:.1?}; \
         deliveries past their lapse beside the next holder's: {overlaps:?}",
        SIZE.messages,
        SIZE.faults,
        SQLITE_SIZE.messages,
        started.elapsed()
    );
    assert!(
        failed.is_empty(),
        "{} of {ran} seeds failed:{}",
        failed.len(),
        report(&failed)
    );
}

/// The long mode: seeds from `OUTBOX_SIM_FIRST` (default 1,000,000) for
/// `OUTBOX_SIM_SECONDS` (default 60).
#[test]
#[ignore = "long: run with --ignored and OUTBOX_SIM_SECONDS"]
fn seeds_for_a_while() {
    let seconds = env("OUTBOX_SIM_SECONDS").unwrap_or(60);
    let first = env("OUTBOX_SIM_FIRST").unwrap_or(1_000_000);
    let started = Instant::now();
    let (ran, failed, _, _) = run_seeds(
        first,
        u64::MAX - first,
        Some(started + Duration::from_secs(seconds)),
        None,
        false,
    );
    println!(
        "simulation: {ran} seeds from {first} in {:.1?}",
        started.elapsed()
    );
    assert!(
        failed.is_empty(),
        "{} of {ran} seeds failed:{}",
        failed.len(),
        report(&failed)
    );
}

/// Replays one seed: `OUTBOX_SIM_SEED=n`, with `OUTBOX_SIM_CUT` (a shrunk schedule, as a
/// failure prints it) and `OUTBOX_SIM_TRACE=1` (every event) if wanted. Run on purpose
/// only (`--ignored`), and then the seed is required: a replay of nothing is no pass.
#[test]
#[ignore = "replays one seed: OUTBOX_SIM_SEED=n cargo test --lib sim::tests::replay -- --ignored"]
fn replay() {
    let seed = env::<u64>("OUTBOX_SIM_SEED")
        .expect("OUTBOX_SIM_SEED: the seed to replay (a failure prints the whole command)");
    // `OUTBOX_SIM_HAND_OFFS=1`: as `seeds_of_hand_offs_hold_every_invariant` runs it.
    let plan = if std::env::var_os("OUTBOX_SIM_HAND_OFFS").is_some() {
        all_handed_off(Plan::draw(seed, SIZE))
    } else {
        drawn(seed)
    };
    let cut = std::env::var("OUTBOX_SIM_CUT")
        .ok()
        .map(|text| Cut::parse(&text).expect("OUTBOX_SIM_CUT as a failure printed it"))
        .unwrap_or_else(|| Cut::all(&plan));
    // `OUTBOX_SIM_MUTATION=LostWakeUp` (any of `Mutation::ALL`) replays with that bug in.
    let mutation = std::env::var("OUTBOX_SIM_MUTATION").ok().map(|name| {
        Mutation::ALL
            .into_iter()
            .find(|m| format!("{m:?}") == name)
            .expect("OUTBOX_SIM_MUTATION names a mutation")
    });
    let plan = cut.apply(&plan);
    if std::env::var_os("OUTBOX_SIM_TRACE").is_some() {
        eprintln!(
            "relays {}, latency {:?}, faults end {:?}\n{:?}\n{:?}\nfaults {:?}",
            plan.relays, plan.latency, plan.faults_end, plan.config, plan.target, plan.faults
        );
    }
    mutation::set(mutation);
    let result = run(&plan);
    mutation::set(None);
    if let Err(failure) = result {
        panic!("seed {seed} at {:?}: {}", failure.at, failure.what);
    }
}

/// A failing schedule shrinks to fewer messages and faults, and the printed cut replays
/// the failure.
#[test]
fn a_failing_schedule_shrinks_and_its_cut_replays() {
    mutation::set(Some(Mutation::LapsedClaimsBehindPending));
    let plan = Plan::draw(1, SIZE);
    let failure = run(&plan).expect_err("seed 1 catches the mutation");
    let (cut, _) = shrink(&plan, failure, 150);
    let replayed = run(&Cut::parse(&cut.to_string()).expect("parses").apply(&plan));
    mutation::set(None);
    println!(
        "shrunk to {} messages, {} faults: {cut}",
        cut.messages.len(),
        cut.faults.len()
    );
    assert!(cut.messages.len() + cut.faults.len() < SIZE.messages + SIZE.faults);
    assert!(replayed.is_err(), "the cut {cut} replays the failure");
}

/// Every deliberate mutation is caught within the CI budget's seeds: the simulation's
/// checks bite. Prints, for each, the seeds it took. `NoStartMargin` is caught by seed
/// 1,525 of the budget (of 2,000; the only one), so its own test
/// (`the_start_margin_bounds_how_long_a_delivery_overlaps_the_next_holder`) catches it on
/// seeds drawn prone to it instead, at a fraction of the time.
#[test]
fn every_mutation_is_caught() {
    let budget = env("OUTBOX_SIM_SEEDS").unwrap_or(2_000);
    let mut missed = Vec::new();
    // Two have tests of their own: `NoStartMargin` (an overlap, not a failure), and
    // `LostTokenLapsesFreshClaim`, which the seeds rarely reach: the lane's test
    // `a_lost_token_that_lapses_the_fresh_claim_breaks_the_keys_order` builds its case.
    for mutation in Mutation::ALL.into_iter().filter(|m| {
        !matches!(
            m,
            Mutation::NoStartMargin | Mutation::LostTokenLapsesFreshClaim
        )
    }) {
        let started = Instant::now();
        let (ran, failed, _, _) = run_seeds(0, budget, None, Some(mutation), true);
        match failed.first() {
            Some((seed, failure)) => println!(
                "mutation {mutation:?}: caught by seed {seed} ({ran} seeds run, {:.1?}): {}",
                started.elapsed(),
                failure.what
            ),
            None => missed.push(mutation),
        }
    }
    assert!(
        missed.is_empty(),
        "not caught in {budget} seeds: {missed:?}"
    );
}

/// How many of the CI budget's seeds catch each mutation (all of them run, none stops at
/// the first failure): a quiet mutation, caught by few seeds, says the seeds reach rare
/// interleavings. Long (every mutation over the whole budget): run with `--ignored`.
#[test]
#[ignore = "long: every mutation over the whole CI budget"]
fn how_many_seeds_catch_each_mutation() {
    let budget = env("OUTBOX_SIM_SEEDS").unwrap_or(2_000);
    // `OUTBOX_SIM_MUTATIONS=LostWakeUp,NoStartMargin`: only those.
    let only = std::env::var("OUTBOX_SIM_MUTATIONS").ok();
    for mutation in Mutation::ALL.into_iter().filter(|m| {
        only.as_ref()
            .is_none_or(|only| only.split(',').any(|o| o == format!("{m:?}")))
    }) {
        let started = Instant::now();
        let (ran, failed, _, _) = run_seeds(0, budget, None, Some(mutation), false);
        println!(
            "mutation {mutation:?}: caught by {} of {ran} seeds ({:.2} %), first seed {:?} ({:.1?})",
            failed.len(),
            failed.len() as f64 * 100.0 / ran.max(1) as f64,
            failed.first().map(|(seed, _)| *seed),
            started.elapsed()
        );
    }
}

/// The mutations on the CI budget's SQLite seeds alone (3, 7, 11, …: every fourth): how
/// many of them catch each. The memory store's own mutations (`AckSkipsToken`,
/// `LapsedClaimsBehindPending`, `StaleAckAcceptedOnce`) live in the memory store's code, so
/// no SQLite seed can catch them; the lane's are the same lines on either store. Long: run
/// with `--ignored` (`OUTBOX_SIM_MUTATIONS` as above).
#[cfg(feature = "sqlite")]
#[test]
#[ignore = "long: every mutation over the CI budget's SQLite seeds"]
fn how_many_sqlite_seeds_catch_each_mutation() {
    let budget = env("OUTBOX_SIM_SEEDS").unwrap_or(2_000u64);
    let only = std::env::var("OUTBOX_SIM_MUTATIONS").ok();
    for mutation in Mutation::ALL.into_iter().filter(|m| {
        only.as_ref()
            .is_none_or(|only| only.split(',').any(|o| o == format!("{m:?}")))
    }) {
        let started = Instant::now();
        let (ran, failed, _, _) =
            run_seeds_of(|n| n * 4 + 3, 0, budget / 4, None, Some(mutation), false);
        println!(
            "mutation {mutation:?} on SQLite: caught by {} of {ran} seeds ({:.2} %), first seed \
             {:?} ({:.1?})",
            failed.len(),
            failed.len() as f64 * 100.0 / ran.max(1) as f64,
            failed.first().map(|(seed, _)| *seed),
            started.elapsed()
        );
    }
}

/// The fault class of a planned fault, as `Tally::fault_effects` names it.
fn fault_class(fault: &plan::Fault) -> &'static str {
    use plan::Fault;
    match fault {
        Fault::FailBeforeCommit(_) => "store call fails before commit",
        Fault::LoseAnswer(_) => "store answer lost",
        Fault::Slow { .. } => "slow store",
        Fault::Crash { .. } => "relay process crash",
        Fault::ClockJump(ms) if *ms > 0 => "store clock jump forward",
        Fault::ClockJump(_) => "store clock jump back",
        Fault::Pause { .. } => "pause",
        Fault::LaneCrash { .. } => "lane crash",
        Fault::Cut { .. } => "cut-off relay",
        Fault::LoseWakeUps { .. } => "lost wake-ups",
        Fault::FailEnqueues(_) => "failing enqueues",
        Fault::Freeze { .. } => "frozen process",
    }
}

/// For each fault class, over the CI budget's seeds: how many draw a fault of it, how many
/// it reaches (a fault of it took effect: `Tally::fault_effects`), and the first seed it
/// reaches. A class drawn often and reaching few seeds is one the seeds barely test.
/// Long (the whole budget): run with `--ignored --nocapture`.
#[test]
#[ignore = "long: the whole CI budget, tallied by fault class"]
fn how_many_seeds_each_fault_class_reaches() {
    let budget = env("OUTBOX_SIM_SEEDS").unwrap_or(2_000u64);
    let mut drawn_in: BTreeMap<&'static str, u64> = BTreeMap::new();
    for seed in 0..budget {
        let plan = drawn(seed);
        let mut classes: std::collections::BTreeSet<&'static str> =
            plan.faults.iter().map(|(_, f)| fault_class(f)).collect();
        if (0..plan.relays).any(|r| plan.clock_skew_ppm(r).abs() >= 1_000) {
            classes.insert("relay clock skew");
        }
        for class in classes {
            *drawn_in.entry(class).or_default() += 1;
        }
    }
    let (ran, failed, _, reached) = run_seeds(0, budget, None, None, false);
    assert!(
        failed.is_empty(),
        "{} seeds failed:{}",
        failed.len(),
        report(&failed)
    );
    println!(
        "{:<32} {:>8} {:>8} {:>9} {:>6}",
        "fault class", "drawn", "reached", "share", "first"
    );
    for (class, drawn) in &drawn_in {
        let (seeds, first) = reached.get(class).copied().unwrap_or((0, 0));
        println!(
            "{class:<32} {drawn:>8} {seeds:>8} {:>8.1}% {:>6}",
            seeds as f64 * 100.0 / ran.max(1) as f64,
            if seeds > 0 {
                first.to_string()
            } else {
                "-".to_owned()
            }
        );
    }
}

/// `plan` where deliveries near their lapse are common: no lease extension (a delivery
/// past its lapse is not renewed), a long prefetch (claims wait in the buffer while their
/// leases run) and a target that hangs to the delivery timeout often.
fn overlap_prone(mut plan: Plan) -> Plan {
    let concurrency = plan.config.concurrency;
    plan.config = plan
        .config
        .clone()
        .lease_extend_margin(None)
        .prefetch(concurrency * 4)
        .batch_size(64);
    plan.target.hang = 25;
    plan
}

/// A delivery runs past its lapse beside the next holder's only as long as the start
/// margin allows (`delivery_timeout` less the margin, so none without lease extension;
/// the checker fails a run otherwise): seeds made prone to it hold it, and fail it with the
/// margin taken out (`Mutation::NoStartMargin`). Prints the overlaps past a lapse.
#[test]
fn the_start_margin_bounds_how_long_a_delivery_overlaps_the_next_holder() {
    let seeds = 0..100u64;
    let mut overlaps = Overlaps::default();
    for seed in seeds.clone() {
        match run(&overlap_prone(Plan::draw(seed, SIZE))) {
            Ok(tally) => overlaps.add(tally.overlaps),
            Err(failure) => panic!(
                "overlap-prone seed {seed} at {:?}: {}",
                failure.at, failure.what
            ),
        }
    }
    mutation::set(Some(Mutation::NoStartMargin));
    let caught: Vec<u64> = seeds
        .clone()
        .filter(|seed| run(&overlap_prone(Plan::draw(*seed, SIZE))).is_err())
        .collect();
    mutation::set(None);
    println!(
        "{} overlap-prone seeds: {overlaps:?}; without the start margin {} of them fail \
         (first {:?})",
        seeds.end - seeds.start,
        caught.len(),
        caught.first()
    );
    assert!(
        !caught.is_empty(),
        "no seed of {seeds:?} fails without the start margin"
    );
}

/// The seeds reach the interleavings of several claims out at once (claims sent beside
/// another of the same relay, answers that come back before an older claim's), and of
/// hand-offs beside them (messages handed off to a lane that keeps several claims out).
#[test]
fn seeds_send_claims_beside_each_other_and_answers_overtake_older_ones() {
    let (mut parallel, mut reordered, mut handed_off, mut beside_claims) = (0, 0, 0, 0);
    for seed in 0..40 {
        let plan = Plan::draw(seed, SIZE);
        match run(&plan) {
            Ok(tally) => {
                parallel += tally.parallel_claims;
                reordered += tally.reordered_answers;
                handed_off += tally.handed_off;
                if plan.config.claims_in_flight_or_default() > 1 {
                    beside_claims += tally.handed_off;
                }
            }
            Err(failure) => panic!("seed {seed} at {:?}: {}", failure.at, failure.what),
        }
    }
    println!(
        "40 seeds: {parallel} claims beside another, {reordered} answers overtaking, \
         {handed_off} messages handed off ({beside_claims} to lanes with several claims in flight)"
    );
    assert!(parallel > 0, "no claim was ever sent beside another");
    assert!(reordered > 0, "no answer ever overtook an older claim's");
    assert!(
        beside_claims > 0,
        "no message was handed off to a lane with several claims in flight"
    );
}

/// The seeds again with every message eligible for a hand-off (no key, no delay, enqueued
/// through a relay process) and every lane taking them (no rate limit): handed-off
/// messages interleave with claims, wake-ups, crashes, pauses and the breaker far more often
/// than in the drawn mix, and every invariant still holds.
#[test]
fn seeds_of_hand_offs_hold_every_invariant() {
    let (mut handed_off, mut beside_claims) = (0, 0);
    for seed in 0..200 {
        let plan = all_handed_off(Plan::draw(seed, SIZE));
        match run(&plan) {
            Ok(tally) => {
                handed_off += tally.handed_off;
                if plan.config.claims_in_flight_or_default() > 1 {
                    beside_claims += tally.handed_off;
                }
            }
            Err(failure) => panic!(
                "seed {seed} with hand-offs at {:?}: {} (replay: OUTBOX_SIM_HAND_OFFS=1 \
                 OUTBOX_SIM_SEED={seed} cargo test --lib sim::tests::replay)",
                failure.at, failure.what
            ),
        }
    }
    println!(
        "200 seeds of hand-offs: {handed_off} messages handed off ({beside_claims} to lanes \
         with several claims in flight)"
    );
    assert!(
        beside_claims >= 1_000,
        "only {beside_claims} messages were handed off to lanes with several claims in flight"
    );
}

/// `plan` with every message eligible for a hand-off and every lane taking them.
fn all_handed_off(mut plan: Plan) -> Plan {
    plan.config = plan.config.clone().hand_off(true).rate_limit(None);
    let relays = plan.relays;
    for (i, message) in plan.messages.iter_mut().enumerate() {
        message.key = None;
        message.delay = None;
        message.via = Some(i % relays);
    }
    plan
}

/// Seeds that found a bug in the relay, kept as regression tests. Each passes, and fails
/// with the bug put back (its mutation), so it still reaches the case.
/// - A claim answered by a store that went silent after committing it came back after its
///   lease could have lapsed, and another relay had claimed the message again; the lane
///   started it anyway: two deliveries of one key at once. Fixed: a lane starts a claim
///   only while its lease surely holds (`LeaseBook::may_have_lapsed`); putting the bug back
///   is `Mutation::LapsedClaimStarts`. Played as drawn then, with no due watcher.
/// - A buffered key head was handed back (a pause) while its lease extension was out, and
///   claimed again with the key's next message; the extension's "lost claim" for the old
///   token lapsed the fresh claim, and the next message started first. Fixed: an
///   extension's answer counts only for the token it extended (`LeaseBook::holds_claim`);
///   putting the bug back is `Mutation::LostTokenLapsesFreshClaim`.
#[test]
fn seeds_that_found_bugs_pass() {
    // Each seed passes; where a bug is named, the seed still reaches it with the bug put
    // back. Seed 1242 found `LostTokenLapsesFreshClaim`, an interleaving the seeds rarely
    // draw: it no longer comes up there (nor in seeds 0..4,000 watched or 0..3,000
    // unwatched), so the lane's own test builds it step by step and catches the bug
    // (`a_lost_token_that_lapses_the_fresh_claim_breaks_the_keys_order`).
    let regressions: &[(u64, bool, Option<Mutation>)] = &[
        (10, false, Some(Mutation::LapsedClaimStarts)),
        (1242, true, None),
    ];
    for &(seed, watched, bug) in regressions {
        let plan = Plan {
            watched,
            ..Plan::draw(seed, SIZE)
        };
        if let Err(failure) = run(&plan) {
            panic!("seed {seed} at {:?}: {}", failure.at, failure.what);
        }
        let Some(bug) = bug else {
            continue;
        };
        mutation::set(Some(bug));
        let with_bug = run(&plan);
        mutation::set(None);
        assert!(with_bug.is_err(), "seed {seed} no longer reaches {bug:?}");
    }
}

/// A forward jump of the store's clock past the lease: a key's head lapsed early by the
/// store's clock and was dead-lettered while a lane still held the key's next message, on a
/// lease it had every reason to trust (and extended). Under `Block` that start is no
/// violation the lane could have avoided. Seed 1,029,148 of the long mode found it before
/// the plan drew claims in flight and hand-offs; it no longer reaches the case, nor does
/// any seed of 0..20,000 or 1,000,000..1,200,000 that draws `Block` and a forward jump past
/// the lease. So the case is built step by step on the memory store and shown to the
/// checker: it must be reached (the checker counts the start it excused), and without the
/// jump it is a violation.
#[test]
fn a_forward_clock_jump_past_the_lease_is_no_violation() {
    let excused = forward_jump_past_a_dead_head(true);
    assert_eq!(excused.violation, None);
    assert_eq!(
        excused.past_dead_after_jump, 1,
        "the case is not reached: no start past a dead head after a forward jump"
    );
    let unexcused = forward_jump_past_a_dead_head(false);
    assert!(
        unexcused
            .violation
            .as_deref()
            .is_some_and(|what| what.contains("past a dead head")),
        "without the jump the start is a violation: {:?}",
        unexcused.violation
    );
}

/// Relay `a` claims a key's head and its next message (lease 5 s, the head on its last
/// attempt); the store's clock jumps 6 s (`jump_seen`: the checker hears of it); relay `b`
/// claims and so dead-letters the lapsed head, while the next message stays `a`'s; `a`
/// extends that message's lease and starts it. The checker as it ends.
fn forward_jump_past_a_dead_head(jump_seen: bool) -> super::check::Checker {
    use super::check::{Call, Checker};
    use crate::message::ClaimRef;
    use crate::store::{ClaimRequest, OrderingPolicy, Outbox};
    use crate::time::{Clock, ManualClock};
    use std::collections::HashMap;

    let start = crate::message::UnixMillis::from_millis(1_800_000_000_000);
    let clock = ManualClock::new(start);
    let store =
        crate::store::memory::InMemoryOutboxStore::with_clock(std::sync::Arc::new(clock.clone()));
    let outbox = Outbox::new(store);
    let backend = outbox.as_backend().clone();
    let mut check = Checker::new(OrderingPolicy::Block, Duration::ZERO);
    let lease = Duration::from_secs(5);
    for (n, attempts) in [(0, 1), (1, 2)] {
        let draft = crate::message::OutboxMessageDraft::new(
            plan::LANE,
            plan::TARGET,
            serde_json::json!({ "n": n }),
        )
        .expect("a valid draft")
        .with_ordering_key("k")
        .with_max_attempts(attempts);
        let enqueued = world::ready(outbox.enqueue(draft)).expect("enqueued");
        check.enqueued(&enqueued.message, false);
    }
    let request = |consumer: &str| {
        ClaimRequest::new(plan::LANE, plan::TARGET, 2, lease, consumer)
            .with_ordering(OrderingPolicy::Block)
            .with_key_run(2)
    };
    let by_id = |rows: &[crate::message::OutboxMessage]| -> HashMap<_, _> {
        rows.iter().map(|m| (m.outbox_id, m.clone())).collect()
    };
    let get = |id| world::ready(backend.get(id)).ok().flatten();

    let claimed = world::ready(outbox.claim(&request("a"))).expect("claimed");
    assert_eq!(claimed.messages.len(), 2, "a holds the head and the next");
    check.observe(
        Call::Claim {
            claimed: &claimed.messages,
            dead: &claimed.dead_lettered,
        },
        clock.now_millis(),
        &by_id(&claimed.messages),
    );
    let (head, next) = (&claimed.messages[0], &claimed.messages[1]);

    check.now = Duration::from_secs(1);
    clock.set(start.saturating_add(Duration::from_secs(7)));
    if jump_seen {
        check.jumped_forward = Some(check.now);
    }
    let by_b = world::ready(outbox.claim(&request("b"))).expect("claimed");
    assert_eq!(
        by_b.dead_lettered,
        vec![head.outbox_id],
        "b dead-letters the head"
    );
    assert!(
        by_b.messages.is_empty(),
        "the next stays a's, behind a dead head"
    );
    let dead: Vec<_> = by_b
        .dead_lettered
        .iter()
        .filter_map(|id| get(*id))
        .collect();
    check.observe(
        Call::Claim {
            claimed: &by_b.messages,
            dead: &by_b.dead_lettered,
        },
        clock.now_millis(),
        &by_id(&dead),
    );

    let claim = [ClaimRef {
        outbox_id: next.outbox_id,
        claim_token: next.claim_token.unwrap_or_default(),
    }];
    world::ready(backend.extend_lease(&claim, lease)).expect("extended");
    let extended: Vec<_> = get(next.outbox_id).into_iter().collect();
    check.observe(
        Call::Extend(&claim, lease),
        clock.now_millis(),
        &by_id(&extended),
    );
    check.started(next, clock.now_millis(), false);
    check
}

/// A seed on SQLite replays event for event: two runs take the same events in the same
/// order at the same virtual times, with the same answers, and end with the same tally.
/// Message ids and claim tokens are drawn afresh by each run (`Uuid::now_v7`,
/// `Uuid::new_v4`, as in production), so they are compared by their order of appearance.
#[cfg(feature = "sqlite")]
#[test]
fn a_sqlite_seed_replays_event_for_event() {
    let seed = 3;
    let plan = drawn(seed);
    assert_eq!(plan.store, Store::Sqlite);
    let mut runs = (0..2).map(|_| match run_recorded(&plan) {
        Ok((tally, events)) => (format!("{tally:?}"), named_by_appearance(&events)),
        Err(failure) => panic!("seed {seed} at {:?}: {}", failure.at, failure.what),
    });
    let (Some((tally, events)), Some((again, replayed))) = (runs.next(), runs.next()) else {
        unreachable!("two runs")
    };
    assert!(events.len() > 100, "only {} events", events.len());
    if let Some(at) =
        (0..events.len().max(replayed.len())).find(|i| events.get(*i) != replayed.get(*i))
    {
        panic!(
            "seed {seed} replays differently from event {at} of {}:\n  {:?}\n  {:?}",
            events.len(),
            events.get(at),
            replayed.get(at)
        );
    }
    assert_eq!(tally, again);
}

/// `events` with each UUID replaced by its order of first appearance (`#0`, `#1`, …).
#[cfg(feature = "sqlite")]
fn named_by_appearance(events: &[String]) -> Vec<String> {
    let mut names: std::collections::HashMap<String, usize> = Default::default();
    events
        .iter()
        .map(|event| {
            let mut out = String::with_capacity(event.len());
            let mut rest = event.as_str();
            while !rest.is_empty() {
                match rest.get(..36).filter(|s| uuid::Uuid::try_parse(s).is_ok()) {
                    Some(id) => {
                        let next = names.len();
                        let n = *names.entry(id.to_owned()).or_insert(next);
                        out.push_str(&format!("#{n}"));
                        rest = &rest[36..];
                    }
                    None => {
                        let c = rest.chars().next().unwrap_or_default();
                        out.push(c);
                        rest = &rest[c.len_utf8()..];
                    }
                }
            }
            out
        })
        .collect()
}
