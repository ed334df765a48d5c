//! The memory store is the contract's plainest statement; the SQLite store must agree with
//! it to the letter. These tests drive both with the same seeded random sequence of calls
//! on one clock and compare every answer and, after every call, the whole state.
//!
//! Ids and claim tokens are random per store, so answers are compared with each message
//! named by its `seq` (both stores number enqueues the same way) and tokens reduced to
//! "present or not"; claims are handed back to each store with its own token.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use outbox_relay::message::ClaimRef;
use outbox_relay::store::sqlite::SqliteOutboxStore;
use outbox_relay::store::{
    ClaimRequest, MessageFilter, Nack, NackDisposition, OrderingPolicy, PageRequest, PurgeRequest,
    WakeUp,
};
use outbox_relay::time::ManualClock;
use outbox_relay::time::UnixMillis;
use outbox_relay::{
    InMemoryOutboxStore, Outbox, OutboxMessage, OutboxMessageDraft, OutboxStatus, StoreError,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use tokio::sync::broadcast;
use uuid::Uuid;

const LANES: [(&str, &str); 2] = [("orders", "billing"), ("orders", "audit")];

/// One store under test and the claims it has handed out, in the order handed out.
struct Side {
    store: Outbox,
    claims: Vec<ClaimRef>,
    wakeups: broadcast::Receiver<WakeUp>,
}

impl Side {
    fn new(store: Outbox) -> Self {
        let wakeups = store.subscribe();
        Self {
            store,
            claims: Vec::new(),
            wakeups,
        }
    }

    /// Everything in the store, in seq order.
    async fn all(&self) -> Vec<OutboxMessage> {
        let page = PageRequest {
            after: None,
            limit: usize::MAX,
        };
        let all = self.store.list(&MessageFilter::all(), page).await.unwrap();
        all.messages
    }

    async fn seq_of(&self, id: Uuid) -> Option<i64> {
        self.all()
            .await
            .iter()
            .find(|m| m.outbox_id == id)
            .map(|m| m.seq)
    }

    /// The ids of the given seqs, in this store (for id filters).
    async fn ids_of(&self, seqs: &[i64]) -> Vec<Uuid> {
        self.all()
            .await
            .iter()
            .filter(|m| seqs.contains(&m.seq))
            .map(|m| m.outbox_id)
            .collect()
    }

    fn drain_wakeups(&mut self) -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        while let Ok(wakeup) = self.wakeups.try_recv() {
            seen.insert(format!("{wakeup:?}"));
        }
        seen
    }
}

/// A message with its random parts reduced to what both stores must agree on.
fn normal(message: &OutboxMessage) -> String {
    let mut m = message.clone();
    m.outbox_id = Uuid::nil();
    m.claim_token = m.claim_token.map(|_| Uuid::nil());
    format!("{m:?}")
}

fn normal_all(messages: &[OutboxMessage]) -> Vec<String> {
    messages.iter().map(normal).collect()
}

async fn normal_error(side: &Side, error: StoreError) -> String {
    match error {
        StoreError::Conflict {
            lane,
            target,
            dedupe_key,
            existing,
        } => {
            let existing = if existing.is_nil() {
                None
            } else {
                side.seq_of(existing).await
            };
            format!("conflict {lane} {target} {dedupe_key} {existing:?}")
        }
        other => format!("{other}"),
    }
}

fn random_draft(rng: &mut StdRng) -> OutboxMessageDraft {
    let (lane, target) = LANES[rng.random_range(0..LANES.len())];
    let mut draft = OutboxMessageDraft::new(lane, target, json!({ "v": rng.random_range(0..3) }))
        .unwrap()
        .with_max_attempts(rng.random_range(1..=3));
    if rng.random_bool(0.6) {
        draft = draft.with_ordering_key(format!("k{}", rng.random_range(0..3)));
    }
    if rng.random_bool(0.3) {
        draft = draft.with_dedupe_key(format!("d{}", rng.random_range(0..4)));
    }
    if rng.random_bool(0.2) {
        draft = draft.with_delay(Duration::from_millis(rng.random_range(0..2_000)));
    }
    draft
}

fn random_filter(rng: &mut StdRng) -> (MessageFilter, Vec<i64>) {
    let mut filter = MessageFilter::all();
    let mut seqs = Vec::new();
    match rng.random_range(0..4) {
        0 => {}
        1 => filter = MessageFilter::lane(LANES[0].0, LANES[0].1),
        2 => filter.ordering_key = Some(format!("k{}", rng.random_range(0..3))),
        _ => seqs = (0..3).map(|_| rng.random_range(1..40)).collect(),
    }
    (filter, seqs)
}

/// Indexes of claims to hand back: mostly recent ones, sometimes stale or repeated.
fn pick_claims(rng: &mut StdRng, handed_out: usize) -> Vec<usize> {
    if handed_out == 0 {
        return Vec::new();
    }
    let count = rng.random_range(1..=3);
    (0..count)
        .map(|_| {
            let back = rng.random_range(0..handed_out.min(6));
            handed_out - 1 - back
        })
        .collect()
}

/// Runs `steps` random calls against both stores and fails at the first disagreement.
async fn agree(seed: u64, steps: usize) {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(UnixMillis::from_millis(1_700_000_000_000));
    let memory: Outbox = Outbox::new(InMemoryOutboxStore::with_clock(Arc::new(clock.clone())));
    let sqlite = SqliteOutboxStore::builder(dir.path().join("outbox.db"))
        .clock(Arc::new(clock.clone()))
        .open()
        .await
        .unwrap();
    let mut sides = [Side::new(memory), Side::new(Outbox::new(sqlite))];
    let mut rng = StdRng::seed_from_u64(seed);
    // Messages handed out behind their head in a key run, counted on both sides.
    let mut runs_handed_out = 0;

    for step in 0..steps {
        let op = rng.random_range(0..100);
        let mut answers = Vec::new();
        // Draw everything random once, before either store runs, so both get the same call.
        let drafts: Vec<_> = (0..rng.random_range(1..=3))
            .map(|_| random_draft(&mut rng))
            .collect();
        let (lane, target) = LANES[rng.random_range(0..LANES.len())];
        let limit = rng.random_range(0..5);
        // Mostly heads only (the relay's default), often runs (0 is taken as 1).
        let key_run = if rng.random_bool(0.5) {
            1
        } else {
            rng.random_range(0..5)
        };
        let lease = Duration::from_millis(rng.random_range(200..2_000));
        let ordering = if rng.random_bool(0.5) {
            OrderingPolicy::Skip
        } else {
            OrderingPolicy::Block
        };
        let picked = pick_claims(&mut rng, sides[0].claims.len());
        let dispositions: Vec<_> = picked
            .iter()
            .map(|_| {
                if rng.random_bool(0.3) {
                    NackDisposition::Permanent
                } else {
                    NackDisposition::Retry(Duration::from_millis(rng.random_range(0..1_500)))
                }
            })
            .collect();
        let (filter, filter_seqs) = random_filter(&mut rng);
        let advance = Duration::from_millis(rng.random_range(0..1_500));
        let older_than = Duration::from_millis(rng.random_range(0..3_000));
        let batch_size = rng.random_range(0..3);

        for side in &mut sides {
            let store = side.store.clone();
            let claims: Vec<ClaimRef> = picked.iter().map(|i| side.claims[*i]).collect();
            let mut filter = filter.clone();
            if !filter_seqs.is_empty() {
                // Unknown seqs still filter (to nothing), as a stale id would.
                filter.ids = side.ids_of(&filter_seqs).await;
                filter.ids.push(Uuid::from_u128(7));
            }
            let answer = match op {
                0..=24 => match store.enqueue_many(drafts.clone()).await {
                    Ok(enqueued) => enqueued
                        .iter()
                        .map(|e| format!("{} {}", e.duplicate, normal(&e.message)))
                        .collect::<Vec<_>>()
                        .join("\n"),
                    Err(error) => normal_error(side, error).await,
                },
                25..=49 => {
                    let request = ClaimRequest::new(lane, target, limit, lease, "relay")
                        .with_ordering(ordering)
                        .with_key_run(key_run);
                    let batch = store.claim(&request).await.unwrap();
                    let keys: Vec<_> = batch.messages.iter().map(|m| &m.ordering_key).collect();
                    runs_handed_out += keys
                        .windows(2)
                        .filter(|pair| pair[0].is_some() && pair[0] == pair[1])
                        .count();
                    side.claims
                        .extend(batch.messages.iter().filter_map(|m| m.claim()));
                    let mut dead = Vec::new();
                    for id in &batch.dead_lettered {
                        dead.push(side.seq_of(*id).await);
                    }
                    format!("{:?} dead {dead:?}", normal_all(&batch.messages))
                }
                50..=59 => format!("{:?}", store.ack(&claims).await.unwrap()),
                60..=69 => {
                    let nacks: Vec<_> = claims
                        .iter()
                        .zip(&dispositions)
                        .map(|(claim, disposition)| Nack {
                            claim: *claim,
                            error: format!("failed at step {step}"),
                            disposition: *disposition,
                        })
                        .collect();
                    format!("{:?}", store.nack(&nacks).await.unwrap())
                }
                70..=73 => format!("{:?}", store.extend_lease(&claims, lease).await.unwrap()),
                74..=78 => format!("{:?}", store.release(&claims).await.unwrap()),
                79..=83 => format!("{:?}", store.requeue_dead_letters(&filter).await.unwrap()),
                84..=85 => format!("{:?}", store.discard_dead_letters(&filter).await.unwrap()),
                86..=88 => format!(
                    "{:?}",
                    store
                        .purge(&PurgeRequest::per_status(
                            older_than,
                            older_than * 2,
                            batch_size
                        ))
                        .await
                        .unwrap()
                ),
                _ => String::new(), // the clock moves below
            };
            answers.push(answer);
        }
        if op >= 89 {
            clock.advance(advance);
        }
        let context = format!("seed {seed}, step {step}, op {op}");
        assert_eq!(answers[0], answers[1], "answers differ: {context}");

        // The whole state, read every way the contract offers.
        let mut views = Vec::new();
        for side in &mut sides {
            let mut view = vec![format!("{:?}", normal_all(&side.all().await))];
            view.push(format!("{:?}", side.drain_wakeups()));
            for (lane, target) in LANES {
                for policy in [OrderingPolicy::Skip, OrderingPolicy::Block] {
                    view.push(format!(
                        "{:?}",
                        side.store.next_due(lane, target, policy).await
                    ));
                }
            }
            view.push(format!(
                "{:?}",
                side.store.stats(&MessageFilter::all()).await
            ));
            view.push(format!("{:?}", side.store.stats(&filter).await));
            let page = PageRequest {
                after: Some(2),
                limit: 3,
            };
            let paged = side.store.list(&filter, page).await.unwrap();
            view.push(format!(
                "{:?} {:?}",
                normal_all(&paged.messages),
                paged.next_cursor
            ));
            views.push(view);
        }
        for (memory, sqlite) in views[0].iter().zip(&views[1]) {
            assert_eq!(memory, sqlite, "state differs: {context}");
        }
    }
    // The run must have exercised the interesting states, or it proves little.
    let statuses: HashSet<OutboxStatus> = sides[0].all().await.iter().map(|m| m.status).collect();
    assert!(statuses.len() >= 3, "seed {seed} reached only {statuses:?}");
    assert!(runs_handed_out > 0, "seed {seed} handed out no key run");
}

#[tokio::test]
async fn sqlite_agrees_with_memory_on_random_call_sequences() {
    for seed in 0..10 {
        agree(seed, 200).await;
    }
}
