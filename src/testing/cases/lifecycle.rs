//! Claim, ack, nack, leases, release and fencing: the life of one message. The first cases
//! are the seed relay's store scenarios.

use crate::store::LEASE_LAPSED_ERROR;
use crate::store::{
    AckMode, ClaimOutcome, ClaimRequest, MessageFilter, Nack, NackDisposition, NackOutcome,
    NextDue, PageRequest,
};
use crate::time::Clock;
use crate::OutboxStatus;

use super::*;

fn nack(message: &OutboxMessage, error: &str, disposition: NackDisposition) -> Nack {
    Nack {
        claim: claim_of(message),
        error: error.to_owned(),
        disposition,
    }
}

pub async fn enqueue_then_claim_and_ack(h: Harness) {
    let first = h.store.enqueue(draft(1)).await.unwrap();
    let second = put(&h, draft(2)).await;
    assert!(!first.duplicate);
    let first = first.message;
    assert_unclaimed(&first, OutboxStatus::Pending);
    assert_eq!(first.attempt_count, 0);
    assert_eq!(first.lane, LANE);
    assert_eq!(first.target, TARGET);
    assert_eq!(first.payload, json!({ "value": 1 }));
    assert_eq!(
        get(&h, first.outbox_id).await,
        first,
        "get returns what enqueue said"
    );

    let now = h.clock.now_millis();
    let batch = h.store.claim(&claim_req(10, "relay-a")).await.unwrap();
    assert_eq!(ids(&batch), vec![first.outbox_id, second.outbox_id]);
    assert!(batch.dead_lettered.is_empty());
    for message in &batch.messages {
        assert_eq!(message.status, OutboxStatus::Claimed);
        assert_eq!(message.attempt_count, 1);
        assert_eq!(message.claimed_by.as_deref(), Some("relay-a"));
        assert!(message.claim_token.is_some());
        assert_eq!(message.lease_expires_at, Some(now + LEASE));
        assert_eq!(&get(&h, message.outbox_id).await, message);
    }
    assert_ne!(
        batch.messages[0].claim_token, batch.messages[1].claim_token,
        "every claim gets its own token"
    );

    let claims: Vec<_> = batch.messages.iter().map(claim_of).collect();
    let outcomes = h.store.ack(&claims).await.unwrap();
    assert_eq!(outcomes, vec![ClaimOutcome::Applied; 2]);

    for id in [first.outbox_id, second.outbox_id] {
        let delivered = get(&h, id).await;
        assert_unclaimed(&delivered, OutboxStatus::Delivered);
        assert_eq!(delivered.delivered_at, Some(now));
        assert_eq!(delivered.attempt_count, 1);
    }
    let page = h
        .store
        .list(
            &MessageFilter::all().with_status(OutboxStatus::Delivered),
            PageRequest {
                after: None,
                limit: 10,
            },
        )
        .await
        .unwrap();
    assert_eq!(page.messages.len(), 2);
    claim_none(&h, &claim_req(10, "relay-a")).await;
}

pub async fn nack_requeues_then_dead_letters_at_max_attempts(h: Harness) {
    let message = put(&h, draft(1).with_max_attempts(2)).await;

    let first = claim_one(&h, &claim_req(10, "relay-a")).await;
    let outcome = h
        .store
        .nack(&[nack(
            &first,
            "publish failed",
            NackDisposition::Retry(ms(0)),
        )])
        .await
        .unwrap();
    assert_eq!(outcome, vec![NackOutcome::Requeued]);
    let requeued = get(&h, message.outbox_id).await;
    assert_unclaimed(&requeued, OutboxStatus::Pending);
    assert_eq!(requeued.attempt_count, 1);
    assert_eq!(requeued.last_error.as_deref(), Some("publish failed"));

    let second = claim_one(&h, &claim_req(10, "relay-a")).await;
    assert_eq!(second.attempt_count, 2);
    let outcome = h
        .store
        .nack(&[nack(
            &second,
            "publish failed again",
            NackDisposition::Retry(ms(0)),
        )])
        .await
        .unwrap();
    assert_eq!(outcome, vec![NackOutcome::DeadLettered]);

    let dead = get(&h, message.outbox_id).await;
    assert_unclaimed(&dead, OutboxStatus::DeadLetter);
    assert_eq!(dead.attempt_count, 2);
    assert_eq!(dead.last_error.as_deref(), Some("publish failed again"));
    claim_none(&h, &claim_req(10, "relay-a")).await;
    let listed = h
        .store
        .list(
            &MessageFilter::all().with_status(OutboxStatus::DeadLetter),
            PageRequest {
                after: None,
                limit: 10,
            },
        )
        .await
        .unwrap();
    assert_eq!(listed.messages, vec![dead]);
}

pub async fn permanent_nack_dead_letters_with_attempts_left(h: Harness) {
    let message = put(&h, draft(1)).await;
    let claimed = claim_one(&h, &claim_req(1, "relay-a")).await;
    let outcome = h
        .store
        .nack(&[nack(
            &claimed,
            "422 unprocessable",
            NackDisposition::Permanent,
        )])
        .await
        .unwrap();
    assert_eq!(outcome, vec![NackOutcome::DeadLettered]);
    let dead = get(&h, message.outbox_id).await;
    assert_unclaimed(&dead, OutboxStatus::DeadLetter);
    assert_eq!(dead.attempt_count, 1);
    assert_eq!(dead.last_error.as_deref(), Some("422 unprocessable"));
}

pub async fn crashed_claimers_lease_lapses_and_another_claims(h: Harness) {
    let message = put(&h, draft(1)).await;
    let short = ClaimRequest::new(LANE, TARGET, 1, ms(100), "crashed-relay");
    let crashed = claim_one(&h, &short).await;
    assert_eq!(crashed.outbox_id, message.outbox_id);

    h.clock.advance(ms(99));
    claim_none(&h, &claim_req(10, "relay-b")).await;
    h.clock.advance(ms(1));
    let reclaimed = claim_one(&h, &claim_req(10, "relay-b")).await;
    assert_eq!(reclaimed.outbox_id, message.outbox_id);
    assert_eq!(reclaimed.attempt_count, 2);
    assert_eq!(reclaimed.claimed_by.as_deref(), Some("relay-b"));
    assert_ne!(reclaimed.claim_token, crashed.claim_token);

    assert_eq!(
        h.store.ack(&[claim_of(&reclaimed)]).await.unwrap(),
        vec![ClaimOutcome::Applied]
    );
    assert_unclaimed(&get(&h, message.outbox_id).await, OutboxStatus::Delivered);
}

pub async fn late_ack_after_reclaim_is_lost_and_changes_nothing(h: Harness) {
    let message = put(&h, draft(1)).await;
    let slow = claim_one(&h, &ClaimRequest::new(LANE, TARGET, 10, ms(10), "relay-a")).await;
    h.clock.advance(ms(25));
    let fast = claim_one(&h, &claim_req(10, "relay-b")).await;
    let held = get(&h, message.outbox_id).await;

    // Relay A's delivery finishes late: every answer it gets is a lost claim.
    let stale = claim_of(&slow);
    assert_eq!(
        h.store.ack(&[stale]).await.unwrap(),
        [ClaimOutcome::LostClaim]
    );
    assert_eq!(
        h.store
            .nack(&[nack(&slow, "late", NackDisposition::Permanent)])
            .await
            .unwrap(),
        [NackOutcome::LostClaim]
    );
    assert_eq!(
        h.store.extend_lease(&[stale], LEASE).await.unwrap(),
        [ClaimOutcome::LostClaim]
    );
    assert_eq!(
        h.store.release(&[stale]).await.unwrap(),
        [ClaimOutcome::LostClaim]
    );
    assert_eq!(
        get(&h, message.outbox_id).await,
        held,
        "B's claim is intact"
    );

    assert_eq!(
        h.store.ack(&[claim_of(&fast)]).await.unwrap(),
        [ClaimOutcome::Applied]
    );
    let delivered = get(&h, message.outbox_id).await;
    assert_unclaimed(&delivered, OutboxStatus::Delivered);
    h.clock.advance(ms(5));
    assert_eq!(
        h.store.ack(&[stale]).await.unwrap(),
        [ClaimOutcome::LostClaim]
    );
    assert_eq!(get(&h, message.outbox_id).await, delivered);
}

pub async fn ack_after_lapse_but_before_reclaim_still_applies(h: Harness) {
    // A lapsed lease frees the row for the next claimer, but until someone claims it the
    // claim is still held: its holder may finish (the contract: claimed, same token).
    let message = put(&h, draft(1)).await;
    let claimed = claim_one(&h, &claim_req(1, "relay-a")).await;
    h.clock.advance(LEASE + ms(500));
    assert_eq!(
        h.store.ack(&[claim_of(&claimed)]).await.unwrap(),
        [ClaimOutcome::Applied]
    );
    assert_unclaimed(&get(&h, message.outbox_id).await, OutboxStatus::Delivered);
    claim_none(&h, &claim_req(1, "relay-b")).await;
}

pub async fn lanes_and_targets_are_isolated(h: Harness) {
    let other_lane = put(&h, draft_in("other", TARGET, 1)).await;
    let other_target = put(&h, draft_in(LANE, "billing", 2)).await;
    let mine = put(&h, draft(3)).await;

    let batch = h.store.claim(&claim_req(10, "relay-a")).await.unwrap();
    assert_eq!(ids(&batch), vec![mine.outbox_id]);
    let batch = h
        .store
        .claim(&ClaimRequest::new("other", TARGET, 10, LEASE, "relay-a"))
        .await
        .unwrap();
    assert_eq!(ids(&batch), vec![other_lane.outbox_id]);
    let batch = h
        .store
        .claim(&ClaimRequest::new(LANE, "billing", 10, LEASE, "relay-a"))
        .await
        .unwrap();
    assert_eq!(ids(&batch), vec![other_target.outbox_id]);
    let batch = h
        .store
        .claim(&ClaimRequest::new("other", "billing", 10, LEASE, "relay-a"))
        .await
        .unwrap();
    assert!(batch.messages.is_empty());
}

pub async fn retry_delay_is_respected(h: Harness) {
    let message = put(&h, draft(1)).await;
    let claimed = claim_one(&h, &claim_req(1, "relay-a")).await;
    let outcome = h
        .store
        .nack(&[nack(&claimed, "busy", NackDisposition::Retry(ms(500)))])
        .await
        .unwrap();
    assert_eq!(outcome, [NackOutcome::Requeued]);
    claim_none(&h, &claim_req(1, "relay-a")).await;
    h.clock.advance(ms(499));
    claim_none(&h, &claim_req(1, "relay-a")).await;
    h.clock.advance(ms(1));
    let again = claim_one(&h, &claim_req(1, "relay-a")).await;
    assert_eq!(again.outbox_id, message.outbox_id);
    assert_eq!(again.attempt_count, 2);
}

pub async fn draft_delay_is_respected(h: Harness) {
    let message = put(&h, draft(1).with_delay(ms(500))).await;
    assert_eq!(message.status, OutboxStatus::Pending);
    claim_none(&h, &claim_req(1, "relay-a")).await;
    h.clock.advance(ms(499));
    claim_none(&h, &claim_req(1, "relay-a")).await;
    h.clock.advance(ms(1));
    assert_eq!(
        claim_one(&h, &claim_req(1, "relay-a")).await.outbox_id,
        message.outbox_id
    );
}

pub async fn lease_lapsing_max_attempts_times_dead_letters(h: Harness) {
    let message = put(&h, draft(1).with_max_attempts(2)).await;
    let bystander = put(&h, draft(2).with_delay(ms(10_000))).await;
    let first = claim_one(&h, &claim_req(1, "crash-1")).await;
    assert_eq!(first.attempt_count, 1);
    h.clock.advance(LEASE);
    let second = claim_one(&h, &claim_req(1, "crash-2")).await;
    assert_eq!(second.outbox_id, message.outbox_id);
    assert_eq!(second.attempt_count, 2);
    h.clock.advance(LEASE);

    let batch = h.store.claim(&claim_req(10, "relay-c")).await.unwrap();
    assert!(batch.messages.is_empty(), "not handed out a third time");
    assert_eq!(batch.dead_lettered, vec![message.outbox_id]);
    let dead = get(&h, message.outbox_id).await;
    assert_unclaimed(&dead, OutboxStatus::DeadLetter);
    assert_eq!(dead.attempt_count, 2);
    assert_eq!(dead.last_error.as_deref(), Some(LEASE_LAPSED_ERROR));

    // The lapsed holder's late ack changes nothing, and later claims leave it alone.
    assert_eq!(
        h.store.ack(&[claim_of(&second)]).await.unwrap(),
        [ClaimOutcome::LostClaim]
    );
    let batch = h.store.claim(&claim_req(10, "relay-c")).await.unwrap();
    assert_eq!(
        batch,
        ClaimBatch {
            next_due: NextDue::Known(Some(ms(8_000))),
            ..ClaimBatch::default()
        },
        "nothing claimed, nothing dead-lettered; the delayed bystander is due in 8 s"
    );
    assert_eq!(get(&h, message.outbox_id).await, dead);
    assert_eq!(get(&h, bystander.outbox_id).await, bystander);
}

pub async fn release_returns_claim_without_spending_an_attempt(h: Harness) {
    let message = put(&h, draft(1).with_max_attempts(1)).await;
    let claimed = claim_one(&h, &claim_req(1, "relay-a")).await;
    assert_eq!(claimed.attempt_count, 1);
    h.clock.advance(ms(100));
    assert_eq!(
        h.store.release(&[claim_of(&claimed)]).await.unwrap(),
        [ClaimOutcome::Applied]
    );
    let released = get(&h, message.outbox_id).await;
    assert_unclaimed(&released, OutboxStatus::Pending);
    assert_eq!(released.attempt_count, 0);
    assert_eq!(released.available_at, h.clock.now_millis());

    // Claimable at once, by anyone, and it still has its one attempt.
    let again = claim_one(&h, &claim_req(1, "relay-b")).await;
    assert_eq!(again.outbox_id, message.outbox_id);
    assert_eq!(again.attempt_count, 1);
    assert_eq!(
        h.store.release(&[claim_of(&claimed)]).await.unwrap(),
        [ClaimOutcome::LostClaim],
        "the released token is spent"
    );
    assert_eq!(
        h.store
            .nack(&[nack(&again, "once", NackDisposition::Retry(ms(0)))])
            .await
            .unwrap(),
        [NackOutcome::DeadLettered]
    );
}

pub async fn release_after_a_retry_keeps_last_error_and_earlier_attempts(h: Harness) {
    let message = put(&h, draft(1)).await;
    let claimed = claim_one(&h, &claim_req(1, "relay-a")).await;
    h.store
        .nack(&[nack(&claimed, "busy", NackDisposition::Retry(ms(60_000)))])
        .await
        .unwrap();
    h.clock.advance(ms(60_000));
    let retried = claim_one(&h, &claim_req(1, "relay-a")).await;
    assert_eq!(retried.attempt_count, 2);
    h.store.release(&[claim_of(&retried)]).await.unwrap();
    let released = get(&h, message.outbox_id).await;
    assert_eq!(released.attempt_count, 1);
    assert_eq!(released.last_error.as_deref(), Some("busy"), "kept");
    assert_eq!(
        claim_one(&h, &claim_req(1, "relay-b")).await.attempt_count,
        2
    );
}

pub async fn wrong_token_or_unclaimed_row_is_a_lost_claim(h: Harness) {
    let one = claim_req(1, "relay-a");
    let delivered = put(&h, draft(1)).await;
    let delivered_claim = claim_of(&claim_one(&h, &one).await);
    h.store.ack(&[delivered_claim]).await.unwrap();
    let dead = put(&h, draft(2)).await;
    let dead_claim = claim_one(&h, &one).await;
    h.store
        .nack(&[nack(&dead_claim, "gone", NackDisposition::Permanent)])
        .await
        .unwrap();
    let claimed = claim_of(&{
        put(&h, draft(3)).await;
        claim_one(&h, &one).await
    });
    let released = put(&h, draft(4)).await;
    let released_claim = claim_of(&claim_one(&h, &one).await);
    h.store.release(&[released_claim]).await.unwrap();

    let before = all_messages(&h).await;
    let statuses: Vec<_> = before.iter().map(|m| m.status).collect();
    assert_eq!(
        statuses,
        [
            OutboxStatus::Delivered,
            OutboxStatus::DeadLetter,
            OutboxStatus::Claimed,
            OutboxStatus::Pending
        ]
    );

    let refs = [
        forged(claimed.outbox_id),  // claimed row, wrong token
        forged(Uuid::new_v4()),     // no such row
        forged(released.outbox_id), // pending row, made-up token
        released_claim,             // pending row, its released (spent) token
        delivered_claim,            // delivered row, its old token
        claim_of(&dead_claim),      // dead row, its old token
    ];
    assert_eq!(delivered_claim.outbox_id, delivered.outbox_id);
    assert_eq!(dead_claim.outbox_id, dead.outbox_id);
    let lost = vec![ClaimOutcome::LostClaim; refs.len()];
    h.clock.advance(ms(10));
    assert_eq!(h.store.ack(&refs).await.unwrap(), lost);
    assert_eq!(h.store.extend_lease(&refs, LEASE).await.unwrap(), lost);
    assert_eq!(h.store.release(&refs).await.unwrap(), lost);
    let nacks: Vec<_> = refs
        .iter()
        .map(|claim| Nack {
            claim: *claim,
            error: "stale".into(),
            disposition: NackDisposition::Retry(ms(0)),
        })
        .collect();
    assert_eq!(
        h.store.nack(&nacks).await.unwrap(),
        vec![NackOutcome::LostClaim; refs.len()]
    );
    assert_eq!(all_messages(&h).await, before, "nothing changed");
}

pub async fn extend_lease_moves_the_lapse(h: Harness) {
    let message = put(&h, draft(1)).await;
    let claimed = claim_one(&h, &claim_req(1, "relay-a")).await;
    h.clock.advance(ms(500));
    assert_eq!(
        h.store
            .extend_lease(&[claim_of(&claimed)], ms(1_000))
            .await
            .unwrap(),
        [ClaimOutcome::Applied]
    );
    let extended = get(&h, message.outbox_id).await;
    assert_eq!(extended.status, OutboxStatus::Claimed);
    assert_eq!(extended.claim_token, claimed.claim_token, "same claim");
    assert_eq!(extended.attempt_count, 1, "extending is not an attempt");
    assert_eq!(
        extended.lease_expires_at,
        Some(h.clock.now_millis() + Duration::from_secs(1))
    );

    h.clock.advance(ms(500)); // the old lapse
    claim_none(&h, &claim_req(1, "relay-b")).await;
    h.clock.advance(ms(499));
    claim_none(&h, &claim_req(1, "relay-b")).await;
    h.clock.advance(ms(1)); // the new lapse
    let taken = claim_one(&h, &claim_req(1, "relay-b")).await;
    assert_eq!(taken.outbox_id, message.outbox_id);
    assert_eq!(taken.attempt_count, 2);
    assert_eq!(
        h.store
            .extend_lease(&[claim_of(&claimed)], LEASE)
            .await
            .unwrap(),
        [ClaimOutcome::LostClaim]
    );
}

/// A backend's claim takes many requests (as one statement claiming for many lanes will):
/// one batch per request, in order, each with its own lane's messages under its own
/// consumer; `ack_and_claim` likewise, after its acks.
pub async fn a_claim_of_many_requests_answers_each_with_its_own_lanes_messages(h: Harness) {
    let a1 = put(&h, draft(1)).await;
    let a2 = put(&h, draft(2)).await;
    let o1 = put(&h, draft_in("other", TARGET, 3)).await;
    let backend = h.store.as_backend();
    assert!(
        backend.claim(&[]).await.unwrap().is_empty(),
        "no request, no batch"
    );
    let requests = [
        claim_req(10, "relay-a"),
        ClaimRequest::new("other", TARGET, 10, LEASE, "relay-b"),
        ClaimRequest::new("empty", TARGET, 10, LEASE, "relay-c"),
    ];
    let batches = backend.claim(&requests).await.unwrap();
    assert_eq!(batches.len(), 3, "one batch per request: {batches:?}");
    assert_eq!(ids(&batches[0]), vec![a1.outbox_id, a2.outbox_id]);
    assert_eq!(ids(&batches[1]), vec![o1.outbox_id]);
    assert!(batches[2].messages.is_empty(), "{batches:?}");
    for (batch, consumer) in batches.iter().zip(["relay-a", "relay-b"]) {
        for message in &batch.messages {
            assert_eq!(message.claimed_by.as_deref(), Some(consumer));
        }
    }

    let a3 = put(&h, draft(4)).await;
    let o2 = put(&h, draft_in("other", TARGET, 5)).await;
    let answer = backend
        .ack_and_claim(
            &[claim_of(&batches[0].messages[0]), forged(a2.outbox_id)],
            &requests[..2],
            AckMode::KeepDelivered,
        )
        .await
        .unwrap();
    assert_eq!(
        answer.acked,
        vec![ClaimOutcome::Applied, ClaimOutcome::LostClaim]
    );
    let claimed = answer.claimed.expect("the claims after the acks");
    assert_eq!(claimed.len(), 2, "one batch per request: {claimed:?}");
    assert_eq!(ids(&claimed[0]), vec![a3.outbox_id]);
    assert_eq!(ids(&claimed[1]), vec![o2.outbox_id]);
    assert_eq!(get(&h, a1.outbox_id).await.status, OutboxStatus::Delivered);
}

pub async fn ack_batch_answers_each_claim_in_order(h: Harness) {
    let a = put(&h, draft(1)).await;
    let b = put(&h, draft(2)).await;
    let c = put(&h, draft(3)).await;
    let d = put(&h, draft(4)).await;
    let first = h
        .store
        .claim(&ClaimRequest::new(LANE, TARGET, 2, ms(10), "relay-a"))
        .await
        .unwrap();
    assert_eq!(ids(&first), vec![a.outbox_id, b.outbox_id]);
    h.clock.advance(ms(10));
    // b's lease lapsed and relay-b took it (with c and d): relay-a's claim of b is stale.
    let second = h.store.claim(&claim_req(10, "relay-b")).await.unwrap();
    let second_ids = ids(&second);
    assert_eq!(
        second_ids.len(),
        4,
        "both lapsed and both new: {second_ids:?}"
    );
    let b_now = second
        .messages
        .iter()
        .find(|m| m.outbox_id == b.outbox_id)
        .expect("b reclaimed");
    let c_now = second
        .messages
        .iter()
        .find(|m| m.outbox_id == c.outbox_id)
        .expect("c claimed");
    let a_now = second
        .messages
        .iter()
        .find(|m| m.outbox_id == a.outbox_id)
        .expect("a reclaimed");

    let outcomes = h
        .store
        .ack(&[
            claim_of(&first.messages[1]), // b, stale
            claim_of(a_now),              // a, current
            forged(d.outbox_id),          // d, wrong token
            claim_of(c_now),              // c, current
            claim_of(&first.messages[0]), // a, stale (and already acked)
        ])
        .await
        .unwrap();
    assert_eq!(
        outcomes,
        [
            ClaimOutcome::LostClaim,
            ClaimOutcome::Applied,
            ClaimOutcome::LostClaim,
            ClaimOutcome::Applied,
            ClaimOutcome::LostClaim,
        ]
    );
    assert_eq!(get(&h, a.outbox_id).await.status, OutboxStatus::Delivered);
    assert_eq!(get(&h, c.outbox_id).await.status, OutboxStatus::Delivered);
    assert_eq!(
        &get(&h, b.outbox_id).await,
        b_now,
        "b still held by relay-b"
    );
    assert_eq!(get(&h, d.outbox_id).await.status, OutboxStatus::Claimed);
    assert_eq!(h.store.ack(&[]).await.unwrap(), []);
}
