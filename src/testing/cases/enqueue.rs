//! Enqueue: dedupe, validation, and atomic batches.

use std::collections::HashSet;

use crate::message::DEFAULT_MAX_PAYLOAD_BYTES;
use crate::store::{ClaimOutcome, ClaimRequest};
use crate::{OutboxStatus, StoreError};

use super::*;

fn deduped(value: i64, key: &str) -> OutboxMessageDraft {
    draft(value).with_dedupe_key(key)
}

fn assert_validation(result: Result<impl std::fmt::Debug, StoreError>, field: &str) {
    match result {
        Err(StoreError::Validation(error)) => assert_eq!(error.field, field, "{error}"),
        other => panic!("expected a validation error on {field}, got {other:?}"),
    }
}

pub async fn dedupe_returns_the_first_message(h: Harness) {
    let first = put(&h, deduped(1, "order-7")).await;
    h.clock.advance(ms(10));
    let again = h.store.enqueue(deduped(1, "order-7")).await.unwrap();
    assert!(again.duplicate);
    assert_eq!(again.message, first, "the first message, unchanged");
    assert_eq!(all_messages(&h).await.len(), 1);

    // Still a duplicate once the first was delivered: the key is used while the row lives.
    let claimed = claim_one(&h, &claim_req(1, "relay-a")).await;
    assert_eq!(
        h.store.ack(&[claim_of(&claimed)]).await.unwrap(),
        [ClaimOutcome::Applied]
    );
    let after = h.store.enqueue(deduped(1, "order-7")).await.unwrap();
    assert!(after.duplicate);
    assert_eq!(after.message.outbox_id, first.outbox_id);
    assert_eq!(after.message.status, OutboxStatus::Delivered);
    assert_eq!(all_messages(&h).await.len(), 1);
    assert!(h
        .store
        .claim(&claim_req(1, "relay-a"))
        .await
        .unwrap()
        .messages
        .is_empty());
}

pub async fn dedupe_key_with_other_content_is_a_conflict(h: Harness) {
    let first = put(&h, deduped(1, "order-7")).await;
    let before = all_messages(&h).await;
    let conflicting = [
        deduped(2, "order-7"),
        deduped(1, "order-7").with_header("x-trace", "abc"),
        deduped(1, "order-7").with_ordering_key("k"),
        deduped(1, "order-7").with_max_attempts(9),
    ];
    for draft in conflicting {
        match h.store.enqueue(draft).await {
            Err(StoreError::Conflict {
                lane,
                target,
                dedupe_key,
                existing,
            }) => {
                assert_eq!((lane.as_str(), target.as_str()), (LANE, TARGET));
                assert_eq!(dedupe_key, "order-7");
                assert_eq!(existing, first.outbox_id);
            }
            other => panic!("expected a conflict, got {other:?}"),
        }
    }
    assert_eq!(all_messages(&h).await, before, "nothing written");
}

pub async fn dedupe_keys_are_per_lane_and_target(h: Harness) {
    let mine = put(&h, deduped(1, "order-7")).await;
    let other_target = put(&h, draft_in(LANE, "billing", 1).with_dedupe_key("order-7")).await;
    let other_lane = put(&h, draft_in("other", TARGET, 2).with_dedupe_key("order-7")).await;
    let ids: HashSet<_> = [mine.outbox_id, other_target.outbox_id, other_lane.outbox_id]
        .into_iter()
        .collect();
    assert_eq!(ids.len(), 3);
    assert_eq!(all_messages(&h).await.len(), 3);
    let again = h
        .store
        .enqueue(draft_in(LANE, "billing", 1).with_dedupe_key("order-7"))
        .await
        .unwrap();
    assert!(again.duplicate);
    assert_eq!(again.message.outbox_id, other_target.outbox_id);
}

pub async fn concurrent_enqueues_of_one_dedupe_key_write_one_row(h: Harness) {
    let stores = [h.store.clone(), (h.reopen)().await];
    let mut tasks = Vec::new();
    for i in 0..16 {
        let store = stores[i % stores.len()].clone();
        tasks.push(tokio::spawn(async move {
            store.enqueue(deduped(1, "once")).await.expect("enqueue")
        }));
    }
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.expect("enqueue task"));
    }
    let first_id = answers[0].message.outbox_id;
    assert!(answers.iter().all(|a| a.message.outbox_id == first_id));
    let written = answers.iter().filter(|a| !a.duplicate).count();
    assert_eq!(written, 1, "exactly one enqueue wrote the row");
    let rows = all_messages(&h).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].outbox_id, first_id);
}

pub async fn enqueue_many_answers_in_order_with_duplicates(h: Harness) {
    let existing = put(&h, deduped(0, "a")).await;
    let answers = h
        .store
        .enqueue_many(vec![
            draft(1),
            deduped(0, "a"),
            deduped(2, "b"),
            deduped(2, "b"),
            draft(3),
        ])
        .await
        .unwrap();
    let duplicate: Vec<_> = answers.iter().map(|a| a.duplicate).collect();
    assert_eq!(duplicate, [false, true, false, true, false]);
    assert_eq!(answers[1].message.outbox_id, existing.outbox_id);
    assert_eq!(answers[3].message.outbox_id, answers[2].message.outbox_id);
    let payloads: Vec<_> = all_messages(&h)
        .await
        .into_iter()
        .map(|m| m.payload.to_value().unwrap()["value"].as_i64().unwrap())
        .collect();
    assert_eq!(payloads, [0, 1, 2, 3]);
    assert!(h.store.enqueue_many(Vec::new()).await.unwrap().is_empty());
}

pub async fn enqueue_many_is_atomic(h: Harness) {
    let mut invalid = draft(3);
    invalid.max_attempts = 0;
    assert_validation(
        h.store
            .enqueue_many(vec![draft(1), draft(2), invalid])
            .await,
        "max_attempts",
    );
    assert_empty(&h).await;

    // A conflict with a stored key, after valid drafts: nothing of the batch is written.
    let existing = put(&h, deduped(0, "a")).await;
    let result = h
        .store
        .enqueue_many(vec![draft(1), deduped(2, "b"), deduped(9, "a")])
        .await;
    assert!(
        matches!(result, Err(StoreError::Conflict { .. })),
        "{result:?}"
    );
    // A conflict within the batch itself.
    let result = h
        .store
        .enqueue_many(vec![deduped(1, "c"), draft(2), deduped(3, "c")])
        .await;
    assert!(
        matches!(result, Err(StoreError::Conflict { .. })),
        "{result:?}"
    );
    assert_eq!(all_messages(&h).await, [existing]);
}

pub async fn invalid_drafts_are_refused_and_nothing_is_written(h: Harness) {
    let mut blank_lane = draft(1);
    blank_lane.lane = "  ".into();
    let mut blank_target = draft(1);
    blank_target.target = String::new();
    let huge = OutboxMessageDraft::new(LANE, TARGET, json!("x".repeat(DEFAULT_MAX_PAYLOAD_BYTES)))
        .expect("valid names");
    let cases = [
        (blank_lane, "lane"),
        (blank_target, "target"),
        (draft(1).with_ordering_key(" "), "ordering_key"),
        (draft(1).with_dedupe_key(""), "dedupe_key"),
        (draft(1).with_max_attempts(0), "max_attempts"),
        (draft(1).with_header("bad name", "x"), "headers.bad name"),
        (huge, "payload"),
    ];
    for (draft, field) in cases {
        assert_validation(h.store.enqueue(draft.clone()).await, field);
        assert_validation(h.store.enqueue_many(vec![draft]).await, field);
    }
    assert_empty(&h).await;
    let nothing = h
        .store
        .claim(&ClaimRequest::new(LANE, TARGET, 10, LEASE, "relay-a"))
        .await
        .unwrap();
    assert!(nothing.messages.is_empty());
}

/// PostgreSQL's `jsonb` cannot keep a NUL character; every store refuses it alike, with
/// the same validation error, so an enqueue behaves the same whatever the backend.
pub async fn a_nul_in_the_payload_is_refused_by_every_store(h: Harness) {
    for payload in [json!({"text": "a\u{0}b"}), json!({"a\u{0}": 1})] {
        let draft = OutboxMessageDraft::new(LANE, TARGET, payload).expect("valid names");
        assert_validation(h.store.enqueue(draft.clone()).await, "payload");
        assert_validation(h.store.enqueue_many(vec![draft]).await, "payload");
    }
    assert_empty(&h).await;
}
