//! The claim at a backlog: a lapsed claim is not queued behind older pending rows, a hot key
//! does not crowd out cold keys (nor get two messages in flight), and a lapsed head keeps
//! its successors waiting. Each runs under both ordering policies, in lanes of their own.

use std::collections::{BTreeMap, HashSet};

use crate::store::{ClaimRequest, OrderingPolicy};

use super::*;

const POLICIES: [OrderingPolicy; 2] = [OrderingPolicy::Skip, OrderingPolicy::Block];

/// A lane of its own per policy, so one store serves both runs.
fn lane_of(policy: OrderingPolicy) -> String {
    format!("backlog-{policy:?}").to_lowercase()
}

fn in_lane(policy: OrderingPolicy, value: i64) -> OutboxMessageDraft {
    draft_in(&lane_of(policy), TARGET, value)
}

fn request(policy: OrderingPolicy, limit: usize, consumer: &str) -> ClaimRequest {
    ClaimRequest::new(lane_of(policy), TARGET, limit, LEASE, consumer).with_ordering(policy)
}

pub async fn lapsed_claims_come_before_older_pending_rows(h: Harness) {
    for policy in POLICIES {
        // Two claims taken 100 ms apart, then a backlog that has been due since long before
        // either lease lapses. A crashed claimer's work must not wait behind that backlog.
        let first = put(&h, in_lane(policy, 1)).await;
        let second = put(&h, in_lane(policy, 2)).await;
        let taken = claim_one(&h, &request(policy, 1, "crashed")).await;
        assert_eq!(taken.outbox_id, first.outbox_id, "{policy:?}");
        h.clock.advance(ms(100));
        let taken = claim_one(&h, &request(policy, 1, "crashed")).await;
        assert_eq!(taken.outbox_id, second.outbox_id, "{policy:?}");
        let mut backlog = Vec::new();
        for value in 0..5 {
            backlog.push(put(&h, in_lane(policy, 10 + value)).await.outbox_id);
        }
        h.clock.advance(LEASE); // the first lease lapsed 100 ms ago, the second just now

        assert_eq!(
            h.store
                .next_due(&lane_of(policy), TARGET, policy)
                .await
                .unwrap(),
            Some(Duration::ZERO),
            "{policy:?}"
        );
        let head = claim_one(&h, &request(policy, 1, "survivor")).await;
        assert_eq!(
            (head.outbox_id, head.attempt_count),
            (first.outbox_id, 2),
            "{policy:?}: the earliest lapse first, before every pending row"
        );
        let batch = h
            .store
            .claim(&request(policy, 3, "survivor"))
            .await
            .unwrap();
        assert_eq!(
            ids(&batch),
            [second.outbox_id, backlog[0], backlog[1]],
            "{policy:?}: the other lapsed claim, then the backlog in order"
        );
        assert_eq!(batch.messages[0].attempt_count, 2, "{policy:?}");
        assert_eq!(batch.messages[0].claimed_by.as_deref(), Some("survivor"));
    }
}

pub async fn a_hot_key_among_cold_keys_yields_one_head_per_key(h: Harness) {
    const HOT: usize = 40;
    const COLD_KEYS: usize = 6;
    const PER_COLD_KEY: usize = 3;
    for policy in POLICIES {
        // The hot key's backlog is enqueued first, so its rows precede every cold row.
        let mut queues: BTreeMap<String, Vec<Uuid>> = BTreeMap::new();
        let hot: Vec<_> = (0..HOT)
            .map(|i| in_lane(policy, i as i64).with_ordering_key("hot"))
            .collect();
        let cold: Vec<_> = (0..PER_COLD_KEY)
            .flat_map(|i| {
                (0..COLD_KEYS).map(move |k| {
                    in_lane(policy, (100 + i * COLD_KEYS + k) as i64)
                        .with_ordering_key(format!("cold-{k}"))
                })
            })
            .collect();
        for drafts in [hot, cold] {
            for enqueued in h.store.enqueue_many(drafts).await.unwrap() {
                let key = enqueued.message.ordering_key.clone().expect("keyed");
                queues
                    .entry(key)
                    .or_default()
                    .push(enqueued.message.outbox_id);
            }
        }

        let mut delivered: BTreeMap<String, Vec<Uuid>> = BTreeMap::new();
        let mut rounds = 0;
        loop {
            let batch = h
                .store
                .claim(&request(policy, 100, "relay-a"))
                .await
                .unwrap();
            if batch.messages.is_empty() {
                break;
            }
            rounds += 1;
            // Every key with messages left hands out exactly its head, in enqueue order.
            let heads: Vec<Uuid> = queues
                .iter()
                .filter_map(|(key, queue)| queue.get(delivered.get(key).map_or(0, Vec::len)))
                .copied()
                .collect();
            let mut handed: Vec<Uuid> = ids(&batch);
            let keys: HashSet<_> = batch
                .messages
                .iter()
                .map(|m| m.ordering_key.clone().expect("keyed"))
                .collect();
            assert_eq!(
                keys.len(),
                batch.messages.len(),
                "{policy:?} round {rounds}: two messages of one key: {batch:?}"
            );
            handed.sort();
            let mut expected = heads.clone();
            expected.sort();
            assert_eq!(
                handed, expected,
                "{policy:?} round {rounds}: every key's head, nothing else"
            );
            for m in &batch.messages {
                let key = m.ordering_key.clone().expect("keyed");
                delivered.entry(key).or_default().push(m.outbox_id);
            }
            // Nothing more until these are acked: every key with work has one in flight.
            assert!(
                h.store
                    .claim(&request(policy, 100, "relay-b"))
                    .await
                    .unwrap()
                    .messages
                    .is_empty(),
                "{policy:?} round {rounds}"
            );
            ack_all(&h, &batch).await;
        }
        assert_eq!(
            rounds, HOT,
            "{policy:?}: the hot key sets the number of rounds"
        );
        assert_eq!(delivered, queues, "{policy:?}: each key in enqueue order");
    }
}

pub async fn a_lapsed_head_is_reclaimed_before_its_pending_successors(h: Harness) {
    for policy in POLICIES {
        let k1 = put(&h, in_lane(policy, 1).with_ordering_key("k")).await;
        let k2 = put(&h, in_lane(policy, 2).with_ordering_key("k")).await;
        let k3 = put(&h, in_lane(policy, 3).with_ordering_key("k")).await;
        let head = claim_one(&h, &request(policy, 1, "crashed")).await;
        assert_eq!(head.outbox_id, k1.outbox_id, "{policy:?}");
        // Enqueued while the head is in flight: due long before the head's lease lapses.
        let free = put(&h, in_lane(policy, 4)).await;
        let other = put(&h, in_lane(policy, 5).with_ordering_key("other")).await;
        h.clock.advance(LEASE);

        let batch = h
            .store
            .claim(&request(policy, 10, "survivor"))
            .await
            .unwrap();
        assert_eq!(
            ids(&batch),
            [k1.outbox_id, free.outbox_id, other.outbox_id],
            "{policy:?}: the lapsed head first, its successors held"
        );
        assert_eq!(batch.messages[0].attempt_count, 2, "{policy:?}");
        let again = batch.messages[0].clone();
        ack_all(
            &h,
            &ClaimBatch {
                messages: batch.messages[1..].to_vec(),
                ..ClaimBatch::default()
            },
        )
        .await;
        claim_none(&h, &request(policy, 10, "survivor")).await;
        assert_eq!(
            h.store
                .next_due(&lane_of(policy), TARGET, policy)
                .await
                .unwrap(),
            Some(LEASE),
            "{policy:?}: the successors wait for the head's new lease"
        );

        ack_all(
            &h,
            &ClaimBatch {
                messages: vec![again],
                ..ClaimBatch::default()
            },
        )
        .await;
        let next = claim_one(&h, &request(policy, 10, "survivor")).await;
        assert_eq!(
            (next.outbox_id, next.attempt_count),
            (k2.outbox_id, 1),
            "{policy:?}"
        );
        claim_none(&h, &request(policy, 10, "survivor")).await;
        ack_all(
            &h,
            &ClaimBatch {
                messages: vec![next],
                ..ClaimBatch::default()
            },
        )
        .await;
        let last = claim_one(&h, &request(policy, 10, "survivor")).await;
        assert_eq!(last.outbox_id, k3.outbox_id, "{policy:?}");
    }
}
