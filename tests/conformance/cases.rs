//! The behaviours every store must show. Each takes a fresh harness.

use std::time::Duration;

use outbox_relay::store::{ClaimOutcome, ClaimRequest};
use outbox_relay::{OutboxMessageDraft, OutboxStatus};
use serde_json::json;

use crate::Harness;

/// A draft in the lane and target most cases use.
pub fn draft(value: i64) -> OutboxMessageDraft {
    OutboxMessageDraft::new("canonical", "projector", json!({ "value": value }))
        .expect("valid draft")
}

/// A claim of up to `limit` messages of the default lane with a 1 s lease.
pub fn claim_req(limit: usize, consumer: &str) -> ClaimRequest {
    ClaimRequest::new(
        "canonical",
        "projector",
        limit,
        Duration::from_secs(1),
        consumer,
    )
}

pub async fn enqueue_then_claim_and_ack(h: Harness) {
    let first = h.store.enqueue(draft(1)).await.unwrap();
    h.store.enqueue(draft(2)).await.unwrap();
    assert!(!first.duplicate);
    assert_eq!(first.message.status, OutboxStatus::Pending);

    let batch = h.store.claim(&claim_req(10, "relay-a")).await.unwrap();
    assert_eq!(batch.messages.len(), 2);
    assert_eq!(batch.messages[0].outbox_id, first.message.outbox_id);
    let claims: Vec<_> = batch.messages.iter().filter_map(|m| m.claim()).collect();
    let outcomes = h.store.ack(&claims).await.unwrap();
    assert_eq!(outcomes, vec![ClaimOutcome::Applied; 2]);

    let delivered = h.store.get(first.message.outbox_id).await.unwrap().unwrap();
    assert_eq!(delivered.status, OutboxStatus::Delivered);
    assert_eq!(delivered.claimed_by, None);
    assert_eq!(delivered.claim_token, None);
}
