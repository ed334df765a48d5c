//! The behaviours every store must show. Each case is a `pub async fn(Harness)` that gets a
//! fresh, empty store on a manual clock, and is listed in the `conformance!` macro.
//!
//! Cases never sleep: time moves only through `h.clock`. They never depend on a backend
//! detail (row order of an answer that promises none, the text of a database error), so
//! the same list holds for memory, SQLite and PostgreSQL.
//!
//! The cases are grouped by concern:
//! - `lifecycle`: claim, ack, nack, leases, release, fencing (the seed relay's scenarios).
//! - `ordering`: claim order, per-key order, ordering policies, concurrent claimers.
//! - `enqueue`: dedupe, validation, atomic batches.
//! - `admin`: list, stats, requeue, discard, purge, next_due, wake-ups.
//! - `backlog`: the claim at a backlog: lapsed claims first, hot keys, lapsed heads.
//! - `idle`: what a short claim tells an idle relay (its `next_due` answer).
//! - `runs`: key runs, a head handed out with the messages queued behind it.
//! - `payload`: the bytes of a payload are delivered unchanged, or refused alike.
//! - `retention`: automatic retention keeps a dead letter that holds its key; many lanes
//!   purged at once.
//! - `delete_on_ack`: an ack that deletes the row (`keep_delivered = false`), fenced alike.
//! - `served`: the lanes nobody serves, by the record of the lanes relays serve.

use std::time::Duration;

use crate::message::ClaimRef;
use crate::store::{ClaimBatch, ClaimRequest, MessageFilter, PageRequest};
use crate::{OutboxMessage, OutboxMessageDraft, OutboxStatus};
use serde_json::json;
use uuid::Uuid;

use crate::testing::Harness;

mod admin;
mod backlog;
mod delete_on_ack;
mod enqueue;
mod idle;
mod keys;
mod lifecycle;
mod ordering;
mod payload;
mod retention;
mod runs;
mod served;

pub use admin::*;
pub use backlog::*;
pub use delete_on_ack::*;
pub use enqueue::*;
pub use idle::*;
pub use keys::*;
pub use lifecycle::*;
pub use ordering::*;
pub use payload::*;
pub use retention::*;
pub use runs::*;
pub use served::*;

/// The lane most cases use.
pub const LANE: &str = "canonical";
/// The target most cases use.
pub const TARGET: &str = "projector";
/// The lease most cases claim with.
pub const LEASE: Duration = Duration::from_secs(1);

/// A draft in the lane and target most cases use.
pub fn draft(value: i64) -> OutboxMessageDraft {
    OutboxMessageDraft::new(LANE, TARGET, json!({ "value": value })).expect("valid draft")
}

/// A draft of the default lane with an ordering key.
pub fn keyed(value: i64, key: &str) -> OutboxMessageDraft {
    draft(value).with_ordering_key(key)
}

/// A draft for another lane and target.
pub fn draft_in(lane: &str, target: &str, value: i64) -> OutboxMessageDraft {
    OutboxMessageDraft::new(lane, target, json!({ "value": value })).expect("valid draft")
}

/// A claim of up to `limit` messages of the default lane with the default lease.
pub fn claim_req(limit: usize, consumer: &str) -> ClaimRequest {
    ClaimRequest::new(LANE, TARGET, limit, LEASE, consumer)
}

/// Milliseconds, for readable clock moves.
pub fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

/// The ids of a claim batch, in claim order.
pub fn ids(batch: &ClaimBatch) -> Vec<Uuid> {
    batch.messages.iter().map(|m| m.outbox_id).collect()
}

/// The claim of a message the store handed out.
pub fn claim_of(message: &OutboxMessage) -> ClaimRef {
    message
        .claim()
        .expect("a claimed message carries its token")
}

/// A claim with a token nobody was handed.
pub fn forged(outbox_id: Uuid) -> ClaimRef {
    ClaimRef {
        outbox_id,
        claim_token: Uuid::new_v4(),
    }
}

/// Enqueues a draft and returns the stored message.
pub async fn put(h: &Harness, draft: OutboxMessageDraft) -> OutboxMessage {
    let enqueued = h.store.enqueue(draft).await.expect("enqueue");
    assert!(!enqueued.duplicate, "a fresh draft is not a duplicate");
    enqueued.message
}

/// Claims with `request` and expects exactly one message.
pub async fn claim_one(h: &Harness, request: &ClaimRequest) -> OutboxMessage {
    let batch = h.store.claim(request).await.expect("claim");
    assert_eq!(batch.messages.len(), 1, "expected one message: {batch:?}");
    batch.messages.into_iter().next().expect("one message")
}

/// Acks every message of a batch; each ack must apply.
pub async fn ack_all(h: &Harness, batch: &ClaimBatch) {
    let claims: Vec<_> = batch.messages.iter().map(claim_of).collect();
    let outcomes = h.store.ack(&claims).await.expect("ack");
    assert!(
        outcomes
            .iter()
            .all(|o| *o == crate::store::ClaimOutcome::Applied),
        "{outcomes:?}"
    );
}

/// Claims with `request` and expects nothing.
pub async fn claim_none(h: &Harness, request: &ClaimRequest) {
    let batch = h.store.claim(request).await.expect("claim");
    assert!(batch.messages.is_empty(), "expected nothing: {batch:?}");
}

/// Reads a message back; it must exist.
pub async fn get(h: &Harness, outbox_id: Uuid) -> OutboxMessage {
    h.store
        .get(outbox_id)
        .await
        .expect("get")
        .expect("message exists")
}

/// Every stored message, in enqueue order (one large page).
pub async fn all_messages(h: &Harness) -> Vec<OutboxMessage> {
    let page = h
        .store
        .list(
            &MessageFilter::all(),
            PageRequest {
                after: None,
                limit: 10_000,
            },
        )
        .await
        .expect("list");
    assert_eq!(page.next_cursor, None);
    page.messages
}

/// The store holds nothing, by list and by stats.
pub async fn assert_empty(h: &Harness) {
    assert!(all_messages(h).await.is_empty(), "store should be empty");
    let stats = h.store.stats(&MessageFilter::all()).await.expect("stats");
    assert!(stats.is_empty(), "stats should be empty: {stats:?}");
}

/// Asserts a message's status and that its claim fields match it.
pub fn assert_unclaimed(message: &OutboxMessage, status: OutboxStatus) {
    assert_eq!(message.status, status, "{message:?}");
    assert_eq!(message.claimed_by, None, "{message:?}");
    assert_eq!(message.claim_token, None, "{message:?}");
    assert_eq!(message.lease_expires_at, None, "{message:?}");
}
