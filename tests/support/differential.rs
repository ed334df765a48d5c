//! The differential run shared by the SQL stores' tests: a store and the in-memory
//! reference store driven through the same random operations on the same clock must give
//! the same answers and hold the same rows. Each store's test opens its store (and drops
//! its schema or database afterwards); this file is everything in between.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use outbox_relay::message::ClaimRef;
use outbox_relay::store::{
    ClaimRequest, MessageFilter, Nack, NackDisposition, OrderingPolicy, PageRequest, PurgeRequest,
    StoreError,
};
use outbox_relay::time::ManualClock;
use outbox_relay::time::UnixMillis;
use outbox_relay::{InMemoryOutboxStore, Outbox, OutboxMessage, OutboxMessageDraft};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use uuid::Uuid;

/// The instant both clocks start at.
pub const START_MILLIS: i64 = 1_700_000_000_000;

/// How many seeds a run tries: `OUTBOX_DIFFERENTIAL_SEEDS` widens the search when hunting
/// a divergence.
pub fn seeds() -> u64 {
    std::env::var("OUTBOX_DIFFERENTIAL_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4u64)
}

/// A message with the parts that must agree between stores; ids, tokens and sequence
/// numbers differ by nature and are replaced by the message's enqueue index.
#[derive(Debug, PartialEq)]
struct Seen {
    index: usize,
    status: String,
    attempts: u32,
    available_at: UnixMillis,
    lease_expires_at: Option<UnixMillis>,
    claimed: bool,
    last_error: Option<String>,
    updated_at: UnixMillis,
    delivered_at: Option<UnixMillis>,
    payload: outbox_relay::message::Payload,
}

/// One store under the differential run, with its own ids mapped to enqueue indexes.
struct Side {
    store: Outbox,
    clock: ManualClock,
    index_of: HashMap<Uuid, usize>,
    claims: BTreeMap<usize, ClaimRef>,
    stale: Vec<ClaimRef>,
}

impl Side {
    fn seen(&self, m: &OutboxMessage) -> Seen {
        Seen {
            index: self.index_of[&m.outbox_id],
            status: m.status.to_string(),
            attempts: m.attempt_count,
            available_at: m.available_at,
            lease_expires_at: m.lease_expires_at,
            claimed: m.claim_token.is_some(),
            last_error: m.last_error.clone(),
            updated_at: m.updated_at,
            delivered_at: m.delivered_at,
            payload: m.payload.clone(),
        }
    }

    /// The claims to act on: held ones by index (in the order given), or a stale one.
    fn pick(&self, indexes: &[usize], stale: bool) -> Vec<ClaimRef> {
        let mut refs: Vec<ClaimRef> = indexes
            .iter()
            .filter_map(|i| self.claims.get(i).copied())
            .collect();
        if stale {
            refs.extend(self.stale.last().copied());
        }
        refs
    }
}

/// Drives `store` (whose clock is `clock`, at [`START_MILLIS`]) and the in-memory
/// reference through `steps` random operations of `seed`, and requires the same answers
/// and the same rows after each.
pub async fn differential_run(store: Outbox, clock: ManualClock, seed: u64, steps: usize) {
    let start = START_MILLIS;
    let mem_clock = ManualClock::new(UnixMillis::from_millis(start));
    let mem = Outbox::new(InMemoryOutboxStore::with_clock(Arc::new(mem_clock.clone())));
    let mut sides = [
        Side {
            store: mem,
            clock: mem_clock,
            index_of: HashMap::new(),
            claims: BTreeMap::new(),
            stale: Vec::new(),
        },
        Side {
            store,
            clock,
            index_of: HashMap::new(),
            claims: BTreeMap::new(),
            stale: Vec::new(),
        },
    ];
    let mut rng = StdRng::seed_from_u64(seed);
    let mut enqueued = 0usize;
    let lanes = ["a", "b"];
    for step in 0..steps {
        let context = format!("seed {seed} step {step}");
        let op = rng.random_range(0..100);
        let lane = lanes[rng.random_range(0..lanes.len())];
        if op < 30 {
            let n = rng.random_range(1..=3);
            let drafts: Vec<OutboxMessageDraft> = (0..n)
                .map(|_| {
                    let mut d = OutboxMessageDraft::new(
                        lane,
                        "sink",
                        json!({ "v": rng.random_range(0..3) }),
                    )
                    .unwrap()
                    .with_max_attempts(rng.random_range(1..=3));
                    if rng.random_bool(0.7) {
                        d = d.with_ordering_key(format!("k{}", rng.random_range(0..3)));
                    }
                    if rng.random_bool(0.3) {
                        d = d.with_dedupe_key(format!("d{}", rng.random_range(0..4)));
                    }
                    if rng.random_bool(0.2) {
                        d = d.with_delay(Duration::from_millis(rng.random_range(1..2_000)));
                    }
                    d
                })
                .collect();
            let mut answers = Vec::new();
            for side in &mut sides {
                let answer = side.store.enqueue_many(drafts.clone()).await;
                answers.push(match answer {
                    Ok(list) => Ok(list
                        .into_iter()
                        .enumerate()
                        .map(|(i, e)| {
                            let index = *side
                                .index_of
                                .entry(e.message.outbox_id)
                                .or_insert(enqueued + i);
                            (index, e.duplicate)
                        })
                        .collect::<Vec<_>>()),
                    Err(StoreError::Conflict { .. }) => Err("conflict"),
                    Err(other) => panic!("{context}: {other}"),
                });
            }
            assert_eq!(answers[0], answers[1], "{context}: enqueue");
            enqueued += n;
        } else if op < 50 {
            let limit = rng.random_range(0..=4);
            let ordering = if rng.random_bool(0.5) {
                OrderingPolicy::Skip
            } else {
                OrderingPolicy::Block
            };
            let request = ClaimRequest::new(lane, "sink", limit, Duration::from_secs(1), "r")
                .with_ordering(ordering)
                .with_key_run(rng.random_range(0..=4));
            let mut answers = Vec::new();
            for side in &mut sides {
                let batch = side.store.claim(&request).await.unwrap();
                for m in &batch.messages {
                    let index = side.index_of[&m.outbox_id];
                    if let Some(old) = side.claims.insert(index, m.claim().unwrap()) {
                        side.stale.push(old);
                    }
                }
                answers.push((
                    batch
                        .messages
                        .iter()
                        .map(|m| side.seen(m))
                        .collect::<Vec<_>>(),
                    batch
                        .dead_lettered
                        .iter()
                        .map(|id| side.index_of[id])
                        .collect::<Vec<_>>(),
                ));
            }
            assert_eq!(answers[0], answers[1], "{context}: claim {request:?}");
        } else if op < 80 {
            let held: Vec<usize> = sides[0].claims.keys().copied().collect();
            let chosen: Vec<usize> = held.into_iter().filter(|_| rng.random_bool(0.6)).collect();
            let stale = rng.random_bool(0.2);
            let which = rng.random_range(0..4);
            let delay = Duration::from_millis(rng.random_range(0..1_500));
            let permanent = rng.random_bool(0.2);
            let mut answers = Vec::new();
            for side in &mut sides {
                let refs = side.pick(&chosen, stale);
                let answer = match which {
                    0 => format!("{:?}", side.store.ack(&refs).await.unwrap()),
                    1 => {
                        let nacks: Vec<Nack> = refs
                            .iter()
                            .map(|claim| Nack {
                                claim: *claim,
                                error: "boom".into(),
                                disposition: if permanent {
                                    NackDisposition::Permanent
                                } else {
                                    NackDisposition::Retry(delay)
                                },
                            })
                            .collect();
                        format!("{:?}", side.store.nack(&nacks).await.unwrap())
                    }
                    2 => format!(
                        "{:?}",
                        side.store
                            .extend_lease(&refs, Duration::from_secs(2))
                            .await
                            .unwrap()
                    ),
                    _ => format!("{:?}", side.store.release(&refs).await.unwrap()),
                };
                if which != 2 {
                    for i in &chosen {
                        if let Some(old) = side.claims.remove(i) {
                            side.stale.push(old);
                        }
                    }
                }
                answers.push(answer);
            }
            assert_eq!(answers[0], answers[1], "{context}: op {which}");
        } else if op < 90 {
            let by = Duration::from_millis(rng.random_range(0..1_500));
            for side in &sides {
                side.clock.advance(by);
            }
        } else if op < 94 {
            let filter = MessageFilter::lane(lane, "sink");
            let mut answers = Vec::new();
            for side in &sides {
                answers.push(side.store.requeue_dead_letters(&filter).await.unwrap());
            }
            assert_eq!(answers[0], answers[1], "{context}: requeue");
        } else if op < 97 {
            let mut answers = Vec::new();
            for side in &sides {
                answers.push(
                    side.store
                        .purge(&PurgeRequest::per_status(
                            Duration::from_millis(1_000),
                            Duration::from_millis(2_000),
                            2,
                        ))
                        .await
                        .unwrap(),
                );
            }
            assert_eq!(answers[0], answers[1], "{context}: purge");
        } else {
            let filter = MessageFilter {
                ordering_key: Some("k0".into()),
                ..MessageFilter::all()
            };
            let mut answers = Vec::new();
            for side in &sides {
                answers.push(side.store.discard_dead_letters(&filter).await.unwrap());
            }
            assert_eq!(answers[0], answers[1], "{context}: discard");
        }

        // After every step: the same rows, stats and next_due.
        let mut views = Vec::new();
        for side in &sides {
            let page = side
                .store
                .list(
                    &MessageFilter::all(),
                    PageRequest {
                        after: None,
                        limit: 10_000,
                    },
                )
                .await
                .unwrap();
            let rows: Vec<Seen> = page.messages.iter().map(|m| side.seen(m)).collect();
            let stats = side.store.stats(&MessageFilter::all()).await.unwrap();
            let mut due = Vec::new();
            for lane in lanes {
                for policy in [OrderingPolicy::Skip, OrderingPolicy::Block] {
                    due.push(side.store.next_due(lane, "sink", policy).await.unwrap());
                }
            }
            views.push((rows, stats, due));
        }
        assert_eq!(views[0], views[1], "{context}: state after op {op}");
    }
    assert!(enqueued > 0);
}
