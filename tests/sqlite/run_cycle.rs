//! What a key run saves the SQLite store: a drain of 20,000 messages by one claimer, each
//! cycle a claim of 64 (heads only, or with key runs of 16) and one ack of what it got, on
//! a file, per key distribution. Prints ms per cycle and µs per message; asserts only that
//! every message was delivered once (timings are never asserted: these machines are noisy).
//!
//! Run (release, one at a time, on a quiet machine):
//!   cargo test --release --all-features --test sqlite -- --ignored --nocapture key_run_drain

use std::time::{Duration, Instant};

use outbox_relay::store::sqlite::SqliteOutboxStore;
use outbox_relay::store::{ClaimRequest, MessageFilter};
use outbox_relay::{Outbox, OutboxMessageDraft};
use serde_json::json;

const MESSAGES: usize = 20_000;
const LIMIT: usize = 64;
const COLD_KEYS: usize = 1_000;
const HOT: usize = 10_000;

/// The ordering key of message `i` (of `MESSAGES`) in each distribution.
#[derive(Debug, Clone, Copy)]
enum Keys {
    None,
    Many,
    Hot,
}

impl Keys {
    fn key(self, i: usize) -> Option<String> {
        match self {
            Keys::None => None,
            Keys::Many => Some(format!("k{}", i % COLD_KEYS)),
            // The hot key's messages first, then the cold keys' interleaved.
            Keys::Hot if i < HOT => Some("hot".into()),
            Keys::Hot => Some(format!("k{}", i % COLD_KEYS)),
        }
    }
}

struct Drain {
    cycles: usize,
    elapsed: Duration,
    /// The part of `elapsed` spent in acks.
    acking: Duration,
}

async fn drain(keys: Keys, run: usize) -> Drain {
    let dir = tempfile::tempdir().unwrap();
    let store = Outbox::new(
        SqliteOutboxStore::open(dir.path().join("outbox.db"))
            .await
            .unwrap(),
    );
    let drafts: Vec<_> = (0..MESSAGES)
        .map(|i| {
            let draft = OutboxMessageDraft::new("orders", "billing", json!({ "n": i })).unwrap();
            match keys.key(i) {
                Some(key) => draft.with_ordering_key(key),
                None => draft,
            }
        })
        .collect();
    for chunk in drafts.chunks(1_000) {
        store.enqueue_many(chunk.to_vec()).await.unwrap();
    }
    let request = ClaimRequest::new("orders", "billing", LIMIT, Duration::from_secs(60), "r")
        .with_key_run(run);
    let (mut cycles, mut delivered, mut acking) = (0, 0, Duration::ZERO);
    let started = Instant::now();
    loop {
        let batch = store.claim(&request).await.unwrap();
        if batch.messages.is_empty() {
            break;
        }
        let claims: Vec<_> = batch.messages.iter().filter_map(|m| m.claim()).collect();
        let ack_started = Instant::now();
        store.ack(&claims).await.unwrap();
        acking += ack_started.elapsed();
        cycles += 1;
        delivered += claims.len();
    }
    let elapsed = started.elapsed();
    assert_eq!(delivered, MESSAGES, "{keys:?}, run {run}");
    let stats = store.stats(&MessageFilter::all()).await.unwrap();
    assert_eq!(stats[0].delivered, MESSAGES as u64);
    Drain {
        cycles,
        elapsed,
        acking,
    }
}

/// Rounds of every case, interleaved so the machine's drift hits each alike; the median
/// round counts.
const ROUNDS: usize = 3;

#[tokio::test]
#[ignore = "a measurement: run it on purpose, in release"]
async fn key_run_drain_cost_per_cycle() {
    let cases = [
        (Keys::None, 1),
        (Keys::None, 16),
        (Keys::Many, 1),
        (Keys::Many, 16),
        (Keys::Hot, 1),
        (Keys::Hot, 16),
    ];
    let mut rounds: Vec<Vec<Drain>> = cases.iter().map(|_| Vec::new()).collect();
    for _ in 0..ROUNDS {
        for ((keys, run), drains) in cases.iter().zip(&mut rounds) {
            drains.push(drain(*keys, *run).await);
        }
    }
    let median = |drains: &mut Vec<Drain>| {
        drains.sort_by_key(|d| d.elapsed);
        let d = &drains[drains.len() / 2];
        (d.cycles, d.elapsed.as_secs_f64(), d.acking.as_secs_f64())
    };
    let medians: Vec<_> = rounds.iter_mut().map(median).collect();
    let per_msg = |secs: f64| secs * 1e6 / MESSAGES as f64;
    let keyless = per_msg(medians[0].1);
    println!("{MESSAGES} messages, claim {LIMIT} + ack per cycle, one claimer, a file;");
    println!("median of {ROUNDS} interleaved rounds");
    println!("keys          run  cycles  ms/cycle (ack)  us/msg  msg/s vs keyless run 1");
    for ((keys, run), (cycles, secs, acking)) in cases.iter().zip(medians) {
        println!(
            "{:<12} {run:>4} {cycles:>7} {:>9.2} ({:>4.2}) {:>7.1} {:>9.2}x",
            format!("{keys:?}"),
            secs * 1e3 / cycles as f64,
            acking * 1e3 / cycles as f64,
            per_msg(secs),
            keyless / per_msg(secs),
        );
    }
}
