//! Claim order, per-key order, the ordering policies, and many claimers at once.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::store::{
    ClaimOutcome, ClaimRequest, MessageFilter, Nack, NackDisposition, NackOutcome, OrderingPolicy,
};
use crate::{Outbox, OutboxStatus};

use super::*;

/// A lease no case outlives: the clock does not move in the concurrent cases.
const LONG_LEASE: Duration = Duration::from_secs(600);
/// How long a concurrent case may take before it is called hung (wall time: a guard only).
const HANG_GUARD: Duration = Duration::from_secs(120);

async fn fail(h: &Harness, message: &OutboxMessage, disposition: NackDisposition) -> NackOutcome {
    let outcome = h
        .store
        .nack(&[Nack {
            claim: claim_of(message),
            error: "failed".into(),
            disposition,
        }])
        .await
        .unwrap();
    outcome[0]
}

async fn ack(h: &Harness, message: &OutboxMessage) {
    assert_eq!(
        h.store.ack(&[claim_of(message)]).await.unwrap(),
        [ClaimOutcome::Applied]
    );
}

async fn claim_ids(h: &Harness, request: &ClaimRequest) -> Vec<Uuid> {
    ids(&h.store.claim(request).await.unwrap())
}

/// Three stores over the same data: the harness's and two more handles (other processes,
/// for the durable backends).
async fn handles(h: &Harness) -> Vec<Outbox> {
    vec![h.store.clone(), (h.reopen)().await, (h.reopen)().await]
}

pub async fn claim_order_is_due_time_then_enqueue_sequence(h: Harness) {
    let a = put(&h, draft(1)).await;
    let b = put(&h, draft(2)).await;
    let c = put(&h, draft(3).with_delay(ms(300))).await;
    let claimed_a = claim_one(&h, &claim_req(1, "relay-a")).await;
    assert_eq!(
        claimed_a.outbox_id, a.outbox_id,
        "the oldest due message first"
    );
    // a is retried at +200 ms; b has been due since 0, c is due at +300 ms.
    fail(&h, &claimed_a, NackDisposition::Retry(ms(200))).await;
    h.clock.advance(ms(100));
    let d = put(&h, draft(4)).await; // due at +100 ms: after b, before a
    h.clock.advance(ms(300));
    let e = put(&h, draft(5)).await; // due at +400 ms: last

    let order = claim_ids(&h, &claim_req(10, "relay-a")).await;
    assert_eq!(
        order,
        [
            b.outbox_id,
            d.outbox_id,
            a.outbox_id,
            c.outbox_id,
            e.outbox_id
        ]
    );
}

pub async fn claim_takes_at_most_limit_oldest_first(h: Harness) {
    let mut enqueued = Vec::new();
    for value in 0..5 {
        enqueued.push(put(&h, draft(value)).await.outbox_id);
    }
    assert_eq!(claim_ids(&h, &claim_req(2, "relay-a")).await, enqueued[..2]);
    assert_eq!(
        claim_ids(&h, &claim_req(2, "relay-a")).await,
        enqueued[2..4]
    );
    assert_eq!(claim_ids(&h, &claim_req(2, "relay-a")).await, enqueued[4..]);
    assert!(claim_ids(&h, &claim_req(2, "relay-a")).await.is_empty());
}

pub async fn seq_is_strict_within_one_millisecond(h: Harness) {
    // The clock does not move: every message is enqueued in the same millisecond, and
    // their ids (UUID v7) share a timestamp. Only the sequence orders them.
    let mut enqueued = Vec::new();
    for value in 0..12 {
        enqueued.push(put(&h, draft(value)).await);
    }
    let batch = h
        .store
        .enqueue_many((12..24).map(draft).collect())
        .await
        .unwrap();
    enqueued.extend(batch.into_iter().map(|e| e.message));
    assert!(
        enqueued.windows(2).all(|w| w[0].seq < w[1].seq),
        "seq strictly increases: {:?}",
        enqueued.iter().map(|m| m.seq).collect::<Vec<_>>()
    );
    let expected: Vec<_> = enqueued.iter().map(|m| m.outbox_id).collect();
    let listed: Vec<_> = all_messages(&h).await.iter().map(|m| m.outbox_id).collect();
    assert_eq!(listed, expected);
    assert_eq!(claim_ids(&h, &claim_req(100, "relay-a")).await, expected);
}

pub async fn one_message_per_key_in_flight_in_enqueue_order(h: Harness) {
    let k1 = put(&h, keyed(1, "k")).await;
    let k2 = put(&h, keyed(2, "k")).await;
    let l1 = put(&h, keyed(3, "l")).await;
    let free = put(&h, draft(4)).await;
    let k3 = put(&h, keyed(5, "k")).await;
    let l2 = put(&h, keyed(6, "l")).await;

    let batch = h.store.claim(&claim_req(10, "relay-a")).await.unwrap();
    assert_eq!(ids(&batch), [k1.outbox_id, l1.outbox_id, free.outbox_id]);
    let (k1c, l1c) = (batch.messages[0].clone(), batch.messages[1].clone());
    ack(&h, &batch.messages[2]).await;
    assert!(claim_ids(&h, &claim_req(10, "relay-b")).await.is_empty());

    // The head of k waits for a retry: k stays held, l moves on once its head is done.
    assert_eq!(
        fail(&h, &k1c, NackDisposition::Retry(ms(1_000))).await,
        NackOutcome::Requeued
    );
    assert!(claim_ids(&h, &claim_req(10, "relay-b")).await.is_empty());
    ack(&h, &l1c).await;
    let l2c = claim_one(&h, &claim_req(10, "relay-b")).await;
    assert_eq!(l2c.outbox_id, l2.outbox_id, "other keys proceed");
    ack(&h, &l2c).await;
    h.clock.advance(ms(999));
    assert!(claim_ids(&h, &claim_req(10, "relay-b")).await.is_empty());
    h.clock.advance(ms(1));
    let k1c = claim_one(&h, &claim_req(10, "relay-b")).await;
    assert_eq!((k1c.outbox_id, k1c.attempt_count), (k1.outbox_id, 2));

    // A lapsed head is still the head: it is handed out again, not its successor.
    h.clock.advance(LEASE);
    let k1c = claim_one(&h, &claim_req(10, "relay-c")).await;
    assert_eq!((k1c.outbox_id, k1c.attempt_count), (k1.outbox_id, 3));
    // A released head is still the head.
    h.store.release(&[claim_of(&k1c)]).await.unwrap();
    let k1c = claim_one(&h, &claim_req(10, "relay-c")).await;
    assert_eq!(k1c.outbox_id, k1.outbox_id);

    ack(&h, &k1c).await;
    let k2c = claim_one(&h, &claim_req(10, "relay-c")).await;
    assert_eq!(k2c.outbox_id, k2.outbox_id);
    ack(&h, &k2c).await;
    let k3c = claim_one(&h, &claim_req(10, "relay-c")).await;
    assert_eq!(k3c.outbox_id, k3.outbox_id);
}

pub async fn skip_policy_moves_past_a_dead_head(h: Harness) {
    let k1 = put(&h, keyed(1, "k").with_max_attempts(1)).await;
    let k2 = put(&h, keyed(2, "k")).await;
    let skip = claim_req(10, "relay-a").with_ordering(OrderingPolicy::Skip);
    let head = claim_one(&h, &skip).await;
    assert_eq!(head.outbox_id, k1.outbox_id);
    assert_eq!(
        fail(&h, &head, NackDisposition::Retry(ms(0))).await,
        NackOutcome::DeadLettered
    );
    let next = claim_one(&h, &skip).await;
    assert_eq!(next.outbox_id, k2.outbox_id);
    assert_eq!(get(&h, k1.outbox_id).await.status, OutboxStatus::DeadLetter);
}

pub async fn skip_policy_moves_past_a_head_dead_lettered_by_lapse(h: Harness) {
    let k1 = put(&h, keyed(1, "k").with_max_attempts(1)).await;
    let k2 = put(&h, keyed(2, "k")).await;
    let skip = claim_req(10, "relay-a").with_ordering(OrderingPolicy::Skip);
    assert_eq!(claim_one(&h, &skip).await.outbox_id, k1.outbox_id);
    h.clock.advance(LEASE);
    let first = h.store.claim(&skip).await.unwrap();
    assert_eq!(first.dead_lettered, [k1.outbox_id]);
    // The successor may come with the claim that dead-lettered its head, or the next one.
    let mut handed = ids(&first);
    handed.extend(claim_ids(&h, &skip).await);
    assert_eq!(handed, [k2.outbox_id]);
}

pub async fn block_policy_holds_key_until_requeue_or_discard(h: Harness) {
    let block = claim_req(10, "relay-a").with_ordering(OrderingPolicy::Block);
    let lane = MessageFilter::lane(LANE, TARGET);
    let k1 = put(&h, keyed(1, "k").with_max_attempts(1)).await;
    let k2 = put(&h, keyed(2, "k")).await;
    let free = put(&h, draft(3)).await;

    let batch = h.store.claim(&block).await.unwrap();
    assert_eq!(ids(&batch), [k1.outbox_id, free.outbox_id]);
    fail(&h, &batch.messages[0], NackDisposition::Permanent).await;
    ack(&h, &batch.messages[1]).await;
    assert!(claim_ids(&h, &block).await.is_empty(), "k is blocked");
    h.clock.advance(ms(60_000));
    assert!(claim_ids(&h, &block).await.is_empty(), "k stays blocked");
    let stats = h.store.stats(&lane).await.unwrap();
    assert_eq!(stats.len(), 1);
    assert_eq!(stats[0].blocked_keys, 1);
    assert_eq!(stats[0].dead_letter, 1);

    // Requeue: the dead head goes first again, then its successor.
    let requeued = h
        .store
        .requeue_dead_letters(&MessageFilter::all().with_ids([k1.outbox_id]))
        .await
        .unwrap();
    assert_eq!(requeued, 1);
    assert_eq!(h.store.stats(&lane).await.unwrap()[0].blocked_keys, 0);
    let head = claim_one(&h, &block).await;
    assert_eq!((head.outbox_id, head.attempt_count), (k1.outbox_id, 1));
    ack(&h, &head).await;
    assert_eq!(claim_one(&h, &block).await.outbox_id, k2.outbox_id);

    // Discard: the key moves on without its dead head.
    let m1 = put(&h, keyed(4, "m").with_max_attempts(1)).await;
    let m2 = put(&h, keyed(5, "m")).await;
    let head = claim_one(&h, &block).await;
    assert_eq!(head.outbox_id, m1.outbox_id);
    fail(&h, &head, NackDisposition::Permanent).await;
    assert!(claim_ids(&h, &block).await.is_empty(), "m is blocked");
    assert_eq!(h.store.stats(&lane).await.unwrap()[0].blocked_keys, 1);
    let discarded = h
        .store
        .discard_dead_letters(&MessageFilter::all().with_ids([m1.outbox_id]))
        .await
        .unwrap();
    assert_eq!(discarded, 1);
    assert_eq!(claim_one(&h, &block).await.outbox_id, m2.outbox_id);
    assert_eq!(h.store.stats(&lane).await.unwrap()[0].blocked_keys, 0);
}

pub async fn block_policy_holds_key_behind_a_head_dead_lettered_by_lapse(h: Harness) {
    let block = claim_req(10, "relay-a").with_ordering(OrderingPolicy::Block);
    let k1 = put(&h, keyed(1, "k").with_max_attempts(1)).await;
    put(&h, keyed(2, "k")).await;
    assert_eq!(claim_one(&h, &block).await.outbox_id, k1.outbox_id);
    h.clock.advance(LEASE);
    let batch = h.store.claim(&block).await.unwrap();
    assert_eq!(batch.dead_lettered, [k1.outbox_id]);
    assert!(batch.messages.is_empty(), "k is blocked: {batch:?}");
    assert!(claim_ids(&h, &block).await.is_empty());
    let stats = h.store.stats(&MessageFilter::all()).await.unwrap();
    assert_eq!((stats[0].dead_letter, stats[0].blocked_keys), (1, 1));
}

/// What the concurrent per-key cases saw, shared by their claimers.
#[derive(Default)]
struct KeyTracker {
    in_flight: HashSet<String>,
    delivered: HashMap<String, Vec<Uuid>>,
}

pub async fn concurrent_claimers_keep_per_key_order(h: Harness) {
    claimers_keep_per_key_order(h, |_| 1).await;
}

/// 16 claimers (over three store handles) drain 10 interleaved keys of 20 messages, claimer
/// `i` asking for key runs of `key_run(i)`: no key is ever held by two claims at once, a
/// claim holds at most one run per key (consecutive, no longer than asked), and each key is
/// delivered in enqueue order.
pub(super) async fn claimers_keep_per_key_order(h: Harness, key_run: fn(usize) -> usize) {
    const KEYS: usize = 10;
    const PER_KEY: usize = 20;
    const TOTAL: usize = KEYS * PER_KEY;
    // Interleaved, so every claim sees many keys.
    let drafts: Vec<_> = (0..PER_KEY)
        .flat_map(|i| (0..KEYS).map(move |k| keyed((i * KEYS + k) as i64, &format!("key-{k}"))))
        .collect();
    let mut expected: HashMap<String, Vec<Uuid>> = HashMap::new();
    for chunk in drafts.chunks(50) {
        for enqueued in h.store.enqueue_many(chunk.to_vec()).await.unwrap() {
            let key = enqueued.message.ordering_key.clone().expect("keyed");
            expected
                .entry(key)
                .or_default()
                .push(enqueued.message.outbox_id);
        }
    }

    let tracker = Arc::new(Mutex::new(KeyTracker::default()));
    let done = Arc::new(AtomicUsize::new(0));
    let stores = handles(&h).await;
    let mut claimers = Vec::new();
    for i in 0..16 {
        let store = stores[i % stores.len()].clone();
        let (tracker, done) = (tracker.clone(), done.clone());
        let run = key_run(i);
        claimers.push(tokio::spawn(async move {
            let request = ClaimRequest::new(LANE, TARGET, 3, LONG_LEASE, format!("claimer-{i}"))
                .with_key_run(run);
            while done.load(Ordering::SeqCst) < TOTAL {
                let batch = store.claim(&request).await.expect("claim");
                if batch.messages.is_empty() {
                    tokio::task::yield_now().await;
                    continue;
                }
                let keys: Vec<String> = batch
                    .messages
                    .iter()
                    .map(|m| m.ordering_key.clone().expect("keyed"))
                    .collect();
                {
                    let mut seen = tracker.lock().unwrap();
                    let mut run_len = 0;
                    for (at, key) in keys.iter().enumerate() {
                        if at > 0 && keys[at - 1] == *key {
                            run_len += 1;
                            assert!(run_len <= run, "a run over {run}: {keys:?}");
                        } else {
                            run_len = 1;
                            assert!(
                                seen.in_flight.insert(key.clone()),
                                "{key} held by two claims at once, or in two runs: {keys:?}"
                            );
                        }
                        seen.delivered
                            .entry(key.clone())
                            .or_default()
                            .push(batch.messages[at].outbox_id);
                    }
                }
                tokio::task::yield_now().await; // let the others try while these are held
                {
                    let mut seen = tracker.lock().unwrap();
                    for key in &keys {
                        seen.in_flight.remove(key);
                    }
                }
                let claims: Vec<_> = batch.messages.iter().map(claim_of).collect();
                let outcomes = store.ack(&claims).await.expect("ack");
                assert!(outcomes.iter().all(|o| *o == ClaimOutcome::Applied));
                done.fetch_add(claims.len(), Ordering::SeqCst);
            }
        }));
    }
    tokio::time::timeout(HANG_GUARD, async {
        for claimer in claimers {
            claimer.await.expect("claimer panicked");
        }
    })
    .await
    .expect("claimers finished");

    assert_eq!(done.load(Ordering::SeqCst), TOTAL);
    let delivered = std::mem::take(&mut tracker.lock().unwrap().delivered);
    assert_eq!(delivered, expected, "each key in enqueue order");
    let stats = h.store.stats(&MessageFilter::all()).await.unwrap();
    assert_eq!(stats.len(), 1);
    assert_eq!(stats[0].delivered, TOTAL as u64);
}

pub async fn concurrent_claimers_claim_each_message_once(h: Harness) {
    const TOTAL: usize = 1_000;
    let mut enqueued = HashSet::new();
    for chunk in (0..TOTAL as i64).collect::<Vec<_>>().chunks(100) {
        let drafts = chunk.iter().copied().map(draft).collect();
        for e in h.store.enqueue_many(drafts).await.unwrap() {
            enqueued.insert(e.message.outbox_id);
        }
    }
    assert_eq!(enqueued.len(), TOTAL);

    let stores = handles(&h).await;
    let mut claimers = Vec::new();
    for i in 0..16 {
        let store = stores[i % stores.len()].clone();
        claimers.push(tokio::spawn(async move {
            let request = ClaimRequest::new(LANE, TARGET, 10, LONG_LEASE, format!("claimer-{i}"));
            let mut mine = Vec::new();
            // The leases never lapse, so an empty claim means everything is taken.
            loop {
                let batch = store.claim(&request).await.expect("claim");
                if batch.messages.is_empty() {
                    return mine;
                }
                let claims: Vec<_> = batch.messages.iter().map(claim_of).collect();
                let outcomes = store.ack(&claims).await.expect("ack");
                assert!(outcomes.iter().all(|o| *o == ClaimOutcome::Applied));
                mine.extend(batch.messages.iter().map(|m| m.outbox_id));
                tokio::task::yield_now().await;
            }
        }));
    }
    let claimed: Vec<Uuid> = tokio::time::timeout(HANG_GUARD, async {
        let mut all = Vec::new();
        for claimer in claimers {
            all.extend(claimer.await.expect("claimer panicked"));
        }
        all
    })
    .await
    .expect("claimers finished");

    assert_eq!(claimed.len(), TOTAL, "claimed exactly once in total");
    let unique: HashSet<_> = claimed.iter().copied().collect();
    assert_eq!(unique.len(), TOTAL, "none claimed twice");
    assert_eq!(unique, enqueued);
    let stats = h.store.stats(&MessageFilter::all()).await.unwrap();
    assert_eq!((stats[0].delivered, stats[0].pending), (TOTAL as u64, 0));
}

pub async fn next_due_ignores_messages_held_behind_their_key(h: Harness) {
    // An idle relay sleeps until next_due: a message its key holds back is not due, or
    // the relay would spin on empty claims while the head is in flight.
    let k1 = put(&h, keyed(1, "k")).await;
    put(&h, keyed(2, "k")).await;
    let head = claim_one(&h, &claim_req(10, "relay-a")).await;
    assert_eq!(head.outbox_id, k1.outbox_id);
    let next_due = || h.store.next_due(LANE, TARGET, OrderingPolicy::Skip);
    assert_eq!(next_due().await.unwrap(), Some(LEASE), "the head's lapse");
    fail(&h, &head, NackDisposition::Retry(ms(400))).await;
    assert_eq!(next_due().await.unwrap(), Some(ms(400)), "the head's retry");
    h.clock.advance(ms(400));
    assert_eq!(next_due().await.unwrap(), Some(Duration::ZERO));
    let head = claim_one(&h, &claim_req(10, "relay-a")).await;
    assert_eq!(head.outbox_id, k1.outbox_id);
    // Another key's due message is still due at once.
    put(&h, keyed(3, "l")).await;
    assert_eq!(next_due().await.unwrap(), Some(Duration::ZERO));
}

pub async fn requeued_dead_head_waits_for_its_keys_message_in_flight(h: Harness) {
    // Under Skip a key moves past its dead head. When an operator requeues that head
    // while its successor is in flight, the key must still have one message in flight.
    let skip = claim_req(10, "relay-a").with_ordering(OrderingPolicy::Skip);
    let k1 = put(&h, keyed(1, "k").with_max_attempts(1)).await;
    let k2 = put(&h, keyed(2, "k")).await;
    let head = claim_one(&h, &skip).await;
    fail(&h, &head, NackDisposition::Permanent).await;
    let k2c = claim_one(&h, &skip).await;
    assert_eq!(k2c.outbox_id, k2.outbox_id);
    let requeue = MessageFilter::all().with_ids([k1.outbox_id]);
    assert_eq!(h.store.requeue_dead_letters(&requeue).await.unwrap(), 1);

    assert!(
        claim_ids(&h, &skip).await.is_empty(),
        "k2 is still in flight"
    );
    assert_eq!(
        h.store
            .next_due(LANE, TARGET, OrderingPolicy::Skip)
            .await
            .unwrap(),
        Some(LEASE),
        "k1 waits for k2's lapse"
    );
    ack(&h, &k2c).await;
    let again = claim_one(&h, &skip).await;
    assert_eq!((again.outbox_id, again.attempt_count), (k1.outbox_id, 1));
}

pub async fn next_due_under_block_skips_keys_behind_a_dead_head(h: Harness) {
    // Under Block a dead head holds its key: the messages behind it are not due (a Block
    // relay would otherwise spin on empty claims), while under Skip they are.
    let k1 = put(&h, keyed(1, "k").with_max_attempts(1)).await;
    put(&h, keyed(2, "k")).await;
    let head = claim_one(&h, &claim_req(10, "relay-a")).await;
    assert_eq!(head.outbox_id, k1.outbox_id);
    fail(&h, &head, NackDisposition::Permanent).await;
    assert_eq!(
        h.store
            .next_due(LANE, TARGET, OrderingPolicy::Block)
            .await
            .unwrap(),
        None,
        "nothing may be claimed under Block"
    );
    assert_eq!(
        h.store
            .next_due(LANE, TARGET, OrderingPolicy::Skip)
            .await
            .unwrap(),
        Some(Duration::ZERO),
        "under Skip the next message is due"
    );
}
