//! Delete on ack (`keep_delivered = false`): an ack that deletes the row instead of marking
//! it delivered, under the same fencing, with dead letters kept and a key's next message
//! freed as after an ack. A store that cannot ([`Capabilities::delete_on_ack`] unset)
//! refuses with [`StoreError::Unsupported`] and changes nothing.
//!
//! [`Capabilities::delete_on_ack`]: crate::store::Capabilities::delete_on_ack

use crate::store::{AckMode, ClaimOutcome, MessageFilter, Nack, NackDisposition};
use crate::store::{ClaimRequest, StoreError};
use crate::time::Clock;
use crate::OutboxStatus;

use super::*;

/// Whether the store deletes on ack; if not, checks that it refuses, changing nothing.
async fn deletes_or_refuses(h: &Harness, claim: ClaimRef) -> bool {
    if h.store.capabilities().delete_on_ack {
        return true;
    }
    let before = get(h, claim.outbox_id).await;
    let error = h
        .store
        .ack_with(&[claim], AckMode::Delete)
        .await
        .expect_err("a store without delete_on_ack refuses");
    assert!(matches!(error, StoreError::Unsupported { .. }), "{error:?}");
    assert_eq!(get(h, claim.outbox_id).await, before, "nothing changed");
    false
}

pub async fn an_ack_that_deletes_removes_only_rows_still_held_under_their_token(h: Harness) {
    let a = put(&h, draft(1)).await;
    let b = put(&h, draft(2)).await;
    let c = put(&h, draft(3)).await;
    let batch = h.store.claim(&claim_req(3, "relay-a")).await.unwrap();
    assert_eq!(ids(&batch), vec![a.outbox_id, b.outbox_id, c.outbox_id]);
    if !deletes_or_refuses(&h, claim_of(&batch.messages[0])).await {
        return;
    }
    let outcomes = h
        .store
        .ack_with(
            &[
                claim_of(&batch.messages[0]),
                forged(b.outbox_id),
                claim_of(&batch.messages[2]),
                claim_of(&batch.messages[0]),
            ],
            AckMode::Delete,
        )
        .await
        .unwrap();
    assert_eq!(
        outcomes,
        vec![
            ClaimOutcome::Applied,
            ClaimOutcome::LostClaim,
            ClaimOutcome::Applied,
            ClaimOutcome::LostClaim,
        ],
        "a forged token and a second ack of a deleted row are lost claims"
    );
    assert_eq!(h.store.get(a.outbox_id).await.unwrap(), None);
    assert_eq!(h.store.get(c.outbox_id).await.unwrap(), None);
    let held = get(&h, b.outbox_id).await;
    assert_eq!(held.status, OutboxStatus::Claimed, "{held:?}");
    let stats = h.store.stats(&MessageFilter::all()).await.unwrap();
    assert_eq!(
        (stats[0].claimed, stats[0].delivered, stats[0].pending),
        (1, 0, 0),
        "{stats:?}"
    );

    // b's lease lapses and relay-b takes it: relay-a's late delete is fenced off.
    h.clock.advance(LEASE + ms(1));
    let again = claim_one(&h, &claim_req(1, "relay-b")).await;
    assert_eq!(again.outbox_id, b.outbox_id);
    let late = h
        .store
        .ack_with(&[claim_of(&batch.messages[1])], AckMode::Delete)
        .await
        .unwrap();
    assert_eq!(late, vec![ClaimOutcome::LostClaim]);
    assert_eq!(
        get(&h, b.outbox_id).await,
        again,
        "relay-b's claim is untouched"
    );
    // An unclaimed row is never deleted by an ack either.
    let pending = put(&h, draft(4)).await;
    let unclaimed = ClaimRef {
        outbox_id: pending.outbox_id,
        claim_token: claim_of(&again).claim_token,
    };
    assert_eq!(
        h.store
            .ack_with(&[unclaimed], AckMode::Delete)
            .await
            .unwrap(),
        vec![ClaimOutcome::LostClaim]
    );
    assert_eq!(get(&h, pending.outbox_id).await, pending);
}

pub async fn an_ack_that_deletes_frees_the_keys_next_message_and_keeps_dead_letters(h: Harness) {
    let doomed = put(&h, draft(0)).await;
    let first = put(&h, keyed(1, "k")).await;
    let second = put(&h, keyed(2, "k")).await;
    let batch = h.store.claim(&claim_req(10, "relay-a")).await.unwrap();
    assert_eq!(
        ids(&batch),
        vec![doomed.outbox_id, first.outbox_id],
        "one message per key in flight"
    );
    if !deletes_or_refuses(&h, claim_of(&batch.messages[1])).await {
        return;
    }
    let nack = Nack {
        claim: claim_of(&batch.messages[0]),
        error: "rejected (test)".to_owned(),
        disposition: NackDisposition::Permanent,
    };
    h.store.nack(&[nack]).await.unwrap();
    assert_eq!(
        h.store
            .ack_with(&[claim_of(&batch.messages[1])], AckMode::Delete)
            .await
            .unwrap(),
        vec![ClaimOutcome::Applied]
    );
    assert_eq!(h.store.get(first.outbox_id).await.unwrap(), None);
    // The key's next message is claimable at once, as after an ack that keeps the row.
    let next = claim_one(&h, &claim_req(10, "relay-a")).await;
    assert_eq!(next.outbox_id, second.outbox_id);
    // The dead letter is kept.
    let dead = get(&h, doomed.outbox_id).await;
    assert_eq!(dead.status, OutboxStatus::DeadLetter, "{dead:?}");
    assert_eq!(
        all_messages(&h)
            .await
            .iter()
            .map(|m| m.outbox_id)
            .collect::<Vec<_>>(),
        vec![doomed.outbox_id, second.outbox_id]
    );
}

pub async fn ack_and_claim_that_deletes_deletes_then_claims_what_the_deletes_freed(h: Harness) {
    let first = put(&h, keyed(1, "k")).await;
    let second = put(&h, keyed(2, "k")).await;
    let other = put(&h, draft(3)).await;
    let request = claim_req(1, "relay-a");
    let head = claim_one(&h, &request).await;
    assert_eq!(head.outbox_id, first.outbox_id);
    if !deletes_or_refuses(&h, claim_of(&head)).await {
        return;
    }
    let now = h.clock.now_millis();
    let answer = h
        .store
        .ack_and_claim_with(
            &[claim_of(&head), forged(other.outbox_id)],
            &ClaimRequest::new(LANE, TARGET, 2, LEASE, "relay-a"),
            AckMode::Delete,
        )
        .await
        .unwrap();
    assert_eq!(
        answer.acked,
        vec![ClaimOutcome::Applied, ClaimOutcome::LostClaim]
    );
    let claimed = answer.claimed.expect("the claim");
    assert_eq!(
        ids(&claimed),
        vec![second.outbox_id, other.outbox_id],
        "the claim sees the delete: the key's next message is its head now"
    );
    for message in &claimed.messages {
        assert_eq!(message.lease_expires_at, Some(now + LEASE));
    }
    assert_eq!(h.store.get(first.outbox_id).await.unwrap(), None);
    // The same call that keeps history marks the row delivered instead.
    let answer = h
        .store
        .ack_and_claim_with(
            &[claim_of(&claimed.messages[0])],
            &request,
            AckMode::KeepDelivered,
        )
        .await
        .unwrap();
    assert_eq!(answer.acked, vec![ClaimOutcome::Applied]);
    assert_unclaimed(&get(&h, second.outbox_id).await, OutboxStatus::Delivered);
}

/// A dedupe key lives as long as its row: once an ack deleted the row, the same draft
/// enqueued again is a second message with a new `outbox_id`, delivered again (what the
/// Guarantees and `OutboxMessageDraft::dedupe_key` say of `keep_delivered = false`).
pub async fn a_dedupe_key_is_forgotten_once_an_ack_deleted_its_row(h: Harness) {
    let first = put(&h, draft(1).with_dedupe_key("order-7")).await;
    let again = h
        .store
        .enqueue(draft(1).with_dedupe_key("order-7"))
        .await
        .unwrap();
    assert!(again.duplicate, "while its row lives, the key dedupes");
    assert_eq!(again.message.outbox_id, first.outbox_id);
    let batch = h.store.claim(&claim_req(1, "relay-a")).await.unwrap();
    assert_eq!(ids(&batch), vec![first.outbox_id]);
    if !deletes_or_refuses(&h, claim_of(&batch.messages[0])).await {
        return;
    }
    let outcomes = h
        .store
        .ack_with(&[claim_of(&batch.messages[0])], AckMode::Delete)
        .await
        .unwrap();
    assert_eq!(outcomes, vec![ClaimOutcome::Applied]);
    let second = h
        .store
        .enqueue(draft(1).with_dedupe_key("order-7"))
        .await
        .unwrap();
    assert!(
        !second.duplicate,
        "the row is gone, and its dedupe key with it"
    );
    assert_ne!(second.message.outbox_id, first.outbox_id);
    assert_eq!(second.message.status, OutboxStatus::Pending);
}
