//! Automatic retention over the store: what a pass of `RetentionTask` deletes, and what it
//! must keep (a dead letter that holds its key on a `Block` lane).

use crate::lane::LaneKey;
use crate::retention::{RetentionConfig, RetentionTask, DEFAULT_DEAD_LETTER_RETENTION};
use crate::store::{ClaimRequest, Nack, NackDisposition, NackOutcome, OrderingPolicy};
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
