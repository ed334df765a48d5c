//! Automatic retention over the store: what a pass of `RetentionTask` deletes, and what it
//! must keep (a dead letter that holds its key on a `Block` lane), and a purge of many lanes
//! at once.

use crate::lane::LaneKey;
use crate::retention::{RetentionConfig, RetentionTask, DEFAULT_DEAD_LETTER_RETENTION};
use crate::store::{
    ClaimRequest, LaneCount, Nack, NackDisposition, NackOutcome, OrderingPolicy, PurgeRequest,
};
use crate::OutboxStatus;

use super::*;

const DAY: Duration = Duration::from_secs(24 * 3600);

/// In the default lane: key `k` with a dead head and two messages waiting behind it, and
/// one dead letter without a key. Returns (dead head, waiting, keyless dead letter).
async fn dead_head_with_waiting(h: &Harness, ordering: OrderingPolicy) -> (Uuid, Vec<Uuid>, Uuid) {
    let head = put(h, keyed(1, "k")).await;
    let waiting = vec![
        put(h, keyed(2, "k")).await.outbox_id,
        put(h, keyed(3, "k")).await.outbox_id,
    ];
    let keyless = put(h, draft(4)).await;
    let request = ClaimRequest::new(LANE, TARGET, 10, LEASE, "relay-a")
        .with_ordering(ordering)
        .with_key_run(1);
    let batch = h.store.claim(&request).await.unwrap();
    assert_eq!(ids(&batch), [head.outbox_id, keyless.outbox_id]);
    let nacks = batch
        .messages
        .iter()
        .map(|m| Nack {
            claim: claim_of(m),
            error: "the target refused it".into(),
            disposition: NackDisposition::Permanent,
        })
        .collect::<Vec<_>>();
    assert_eq!(
        h.store.nack(&nacks).await.unwrap(),
        [NackOutcome::DeadLettered, NackOutcome::DeadLettered]
    );
    (head.outbox_id, waiting, keyless.outbox_id)
}

/// One pass of automatic retention with the default ages, for the default lane under
/// `ordering`.
async fn one_retention_pass(h: &Harness, ordering: OrderingPolicy) -> u64 {
    let retention = RetentionConfig::default().ordering(ordering);
    let task = RetentionTask::new(
        h.store.clone(),
        vec![(LaneKey::new(LANE, TARGET), retention)],
    );
    let passes = task.purge_once().await;
    assert_eq!(passes.len(), 1, "{passes:?}");
    passes[0].1.as_ref().copied().expect("the purge succeeds")
}

async fn status_of(h: &Harness, id: Uuid) -> Option<OutboxStatus> {
    h.store.get(id).await.unwrap().map(|m| m.status)
}

pub async fn retention_keeps_a_dead_head_that_blocks_its_key(h: Harness) {
    let (head, waiting, keyless) = dead_head_with_waiting(&h, OrderingPolicy::Block).await;
    h.clock.advance(DEFAULT_DEAD_LETTER_RETENTION + DAY);

    let purged = one_retention_pass(&h, OrderingPolicy::Block).await;
    assert_eq!(purged, 1, "only the dead letter without a key goes");
    assert_eq!(status_of(&h, keyless).await, None);
    assert_eq!(
        status_of(&h, head).await,
        Some(OutboxStatus::DeadLetter),
        "31 days on, the dead head still holds its key"
    );
    for id in &waiting {
        assert_eq!(status_of(&h, *id).await, Some(OutboxStatus::Pending));
    }
    // And still blocks it: nothing of `k` is handed out until an operator acts.
    let block = claim_req(10, "relay-a").with_ordering(OrderingPolicy::Block);
    claim_none(&h, &block).await;
    let stats = h
        .store
        .stats(&MessageFilter::lane(LANE, TARGET))
        .await
        .unwrap();
    assert_eq!(stats[0].blocked_keys, 1, "{stats:?}");

    // A second pass later still keeps it; the operator's requeue lets the key go on.
    h.clock.advance(DAY * 365);
    assert_eq!(one_retention_pass(&h, OrderingPolicy::Block).await, 0);
    assert_eq!(status_of(&h, head).await, Some(OutboxStatus::DeadLetter));
    let requeued = h
        .store
        .requeue_dead_letters(&MessageFilter::all().with_ids([head]))
        .await
        .unwrap();
    assert_eq!(requeued, 1);
    assert_eq!(claim_one(&h, &block).await.outbox_id, head);
}

pub async fn retention_deletes_an_old_dead_head_on_a_skip_lane(h: Harness) {
    let (head, waiting, keyless) = dead_head_with_waiting(&h, OrderingPolicy::Skip).await;
    // Under Skip the key moved on at once: its next message is claimable.
    let skip = claim_req(1, "relay-a").with_key_run(1);
    let next = claim_one(&h, &skip).await;
    assert_eq!(next.outbox_id, waiting[0]);
    h.store.release(&[claim_of(&next)]).await.expect("release");
    h.clock.advance(DEFAULT_DEAD_LETTER_RETENTION + DAY);

    let purged = one_retention_pass(&h, OrderingPolicy::Skip).await;
    assert_eq!(purged, 2, "both dead letters are past 30 days");
    assert_eq!(status_of(&h, head).await, None);
    assert_eq!(status_of(&h, keyless).await, None);
    for id in &waiting {
        assert_eq!(
            status_of(&h, *id).await,
            Some(OutboxStatus::Pending),
            "live rows never go"
        );
    }
}

/// Counts the purge calls through an outbox.
#[derive(Debug, Default)]
struct Purges(std::sync::atomic::AtomicUsize);

impl crate::store::StoreHook for Purges {
    fn finished(&self, call: &crate::store::StoreCall<'_>) {
        if call.op == crate::store::StoreOp::Purge {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

pub async fn a_purge_of_many_lanes_deletes_and_counts_each_named_lane(h: Harness) {
    // In each of four lanes: a delivered message, a keyed dead letter, a keyless one.
    let mut rows = Vec::new();
    for (value, lane) in (0..).step_by(3).zip(["a", "b", "c", "d"]) {
        h.store
            .enqueue_many(vec![
                draft_in(lane, TARGET, value),
                draft_in(lane, TARGET, value + 1).with_ordering_key("k"),
                draft_in(lane, TARGET, value + 2),
            ])
            .await
            .unwrap();
        let batch = h
            .store
            .claim(&ClaimRequest::new(lane, TARGET, 3, LEASE, "relay-a"))
            .await
            .unwrap();
        let [delivered, keyed, keyless] = &batch.messages[..] else {
            panic!("three messages: {batch:?}");
        };
        h.store.ack(&[claim_of(delivered)]).await.unwrap();
        let nacks = [keyed, keyless].map(|m| Nack {
            claim: claim_of(m),
            error: "the target refused it".into(),
            disposition: NackDisposition::Permanent,
        });
        h.store.nack(&nacks).await.unwrap();
        rows.push([delivered.outbox_id, keyed.outbox_id, keyless.outbox_id]);
    }
    let [a, b, c, d] = rows[..] else {
        unreachable!()
    };
    h.clock.advance(DEFAULT_DEAD_LETTER_RETENTION + DAY);

    // A retention pass over a and b (Skip) and c (Block), default ages; d is not named.
    // Lanes purged alike share a request: two purge calls, not three.
    let purges = std::sync::Arc::new(Purges::default());
    let counted = h.store.clone().with_hook(purges.clone());
    let skip = RetentionConfig::default();
    let block = skip.ordering(OrderingPolicy::Block);
    let task = RetentionTask::new(
        counted,
        vec![
            (LaneKey::new("a", TARGET), skip),
            (LaneKey::new("c", TARGET), block),
            (LaneKey::new("b", TARGET), skip),
        ],
    );
    let pass: Vec<(String, Option<u64>)> = task
        .purge_once()
        .await
        .into_iter()
        .map(|(lane, count)| (lane.name, count))
        .collect();
    assert_eq!(
        pass,
        [
            ("a".to_owned(), Some(3)),
            ("b".to_owned(), Some(3)),
            ("c".to_owned(), Some(2)),
        ],
        "c keeps the dead letter that holds its key"
    );
    assert_eq!(purges.0.load(std::sync::atomic::Ordering::Relaxed), 2);
    for id in a.into_iter().chain(b).chain([c[0], c[2]]) {
        assert_eq!(status_of(&h, id).await, None, "{id} went");
    }
    assert_eq!(status_of(&h, c[1]).await, Some(OutboxStatus::DeadLetter));
    for id in d {
        assert!(
            status_of(&h, id).await.is_some(),
            "{id} of a lane not named stays"
        );
    }

    // One request naming b, c and d, keeping keyed dead letters: only d loses rows, counted
    // as its own; a dry run without the keep counts c's and d's keyed dead letters.
    let named = [("b", TARGET), ("c", TARGET), ("d", TARGET)];
    let request = PurgeRequest {
        keep_keyed_dead_letters: true,
        ..PurgeRequest::older_than(DAY, 1).in_lanes(named)
    };
    let count = |lane: &str, count| LaneCount {
        lane: lane.to_owned(),
        target: TARGET.to_owned(),
        count,
    };
    assert_eq!(h.store.purge(&request).await.unwrap(), [count("d", 2)]);
    assert_eq!(status_of(&h, d[0]).await, None);
    assert_eq!(status_of(&h, d[2]).await, None);
    let dry = PurgeRequest {
        keep_keyed_dead_letters: false,
        ..request.dry_run()
    };
    assert_eq!(
        h.store.purge(&dry).await.unwrap(),
        [count("c", 1), count("d", 1)]
    );
    assert_eq!(status_of(&h, c[1]).await, Some(OutboxStatus::DeadLetter));
    assert_eq!(status_of(&h, d[1]).await, Some(OutboxStatus::DeadLetter));
}
