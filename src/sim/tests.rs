//! The seed runs: the CI budget, the long mode, a replay, and the seeds that once found a
//! bug, kept as regression tests.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::*;

/// Every seed of the CI budget runs this big a schedule.
const SIZE: Size = Size {
    messages: 200,
    faults: 20,
};

fn env<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Runs seeds from `first` on a few threads until `count` ran or `until` passed; the failing
/// seeds, smallest first.
fn run_seeds(first: u64, count: u64, until: Option<Instant>) -> (u64, Vec<(u64, Failure)>) {
    let next = AtomicU64::new(first);
    let ran = AtomicU64::new(0);
    let failed = Mutex::new(Vec::new());
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get().min(4));
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                if until.is_some_and(|until| Instant::now() >= until) {
                    return;
                }
                let seed = next.fetch_add(1, Ordering::Relaxed);
                if seed >= first.saturating_add(count) {
                    return;
                }
                if let Err(failure) = run(&Plan::draw(seed, SIZE)) {
                    failed
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((seed, failure));
                }
                ran.fetch_add(1, Ordering::Relaxed);
            });
        }
    });
    let mut failed = failed.into_inner().unwrap_or_else(|p| p.into_inner());
    failed.sort_by_key(|(seed, _)| *seed);
    (ran.into_inner(), failed)
}

fn report(failed: &[(u64, Failure)]) -> String {
    let mut text = String::new();
    for (seed, failure) in failed.iter().take(5) {
        text.push_str(&format!(
            "\nseed {seed} at {:?}: {}\n  replay: OUTBOX_SIM_SEED={seed} cargo test --all-features --lib sim::tests::replay -- --nocapture",
            failure.at, failure.what
        ));
    }
    text
}

/// The CI budget: 2,000 seeds (`OUTBOX_SIM_SEEDS` to change), each 200 messages and 20
/// faults, every invariant checked after every step.
#[test]
fn seeds_hold_every_invariant() {
    let count = env("OUTBOX_SIM_SEEDS").unwrap_or(2_000);
    let first = env("OUTBOX_SIM_FIRST").unwrap_or(0);
    let started = Instant::now();
    let (ran, failed) = run_seeds(first, count, None);
    println!(
        "simulation: {ran} seeds ({} messages, {} faults each) in {:.1?}",
        SIZE.messages,
        SIZE.faults,
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
    let (ran, failed) = run_seeds(
        first,
        u64::MAX - first,
        Some(started + Duration::from_secs(seconds)),
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

/// Replays one seed: `OUTBOX_SIM_SEED=n` (`OUTBOX_SIM_TRACE=1` prints every event).
#[test]
fn replay() {
    let Some(seed) = env::<u64>("OUTBOX_SIM_SEED") else {
        return;
    };
    if let Err(failure) = run(&Plan::draw(seed, SIZE)) {
        panic!("seed {seed} at {:?}: {}", failure.at, failure.what);
    }
}

/// Seeds that found a bug in the relay, kept: each failed before its fix.
/// - 9: a claim answered by a store that went silent after committing it came back after
///   its lease had lapsed and another relay had claimed the message again; the lane
///   started it anyway, two deliveries of one key at once (fixed: a lane starts a claim
///   only while its lease surely holds, `LeaseBook::may_have_lapsed`).
#[test]
fn seeds_that_found_bugs_pass() {
    for seed in [9] {
        if let Err(failure) = run(&Plan::draw(seed, SIZE)) {
            panic!("seed {seed} at {:?}: {}", failure.at, failure.what);
        }
    }
}
