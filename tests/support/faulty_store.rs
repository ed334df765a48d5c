//! An in-memory store that fails on demand: an `Unavailable` claim, a panicking ack. Like
//! the `FaultyStore` of `tests/relay/faults.rs`, which lives in another test binary.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use outbox_relay::store::{
    ClaimBatch, ClaimOutcome, ClaimRef, ClaimRequest, Enqueued, LaneStats, MessageFilter, Nack,
    NackOutcome, OrderingPolicy, Page, PageRequest, StoreError, WakeUp,
};
use outbox_relay::{InMemoryOutboxStore, OutboxMessage, OutboxMessageDraft, OutboxStore};
use tokio::sync::broadcast;
use uuid::Uuid;

/// The in-memory store, failing on demand.
#[derive(Debug)]
pub struct FaultyStore {
    inner: Arc<InMemoryOutboxStore>,
    /// Fail the next this-many claims with `Unavailable`.
    pub unavailable_claims: AtomicU32,
    /// Panic in the next this-many acks.
    pub panic_acks: AtomicU32,
}

impl FaultyStore {
    pub fn new(inner: Arc<InMemoryOutboxStore>) -> Self {
        Self {
            inner,
            unavailable_claims: AtomicU32::new(0),
            panic_acks: AtomicU32::new(0),
        }
    }
}

fn take_one(counter: &AtomicU32) -> bool {
    counter
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

#[async_trait]
impl OutboxStore for FaultyStore {
    async fn enqueue(&self, draft: OutboxMessageDraft) -> Result<Enqueued, StoreError> {
        self.inner.enqueue(draft).await
    }
    async fn enqueue_many(
        &self,
        drafts: Vec<OutboxMessageDraft>,
    ) -> Result<Vec<Enqueued>, StoreError> {
        self.inner.enqueue_many(drafts).await
    }
    async fn claim(&self, request: &ClaimRequest) -> Result<ClaimBatch, StoreError> {
        if take_one(&self.unavailable_claims) {
            return Err(StoreError::Unavailable(
                "connection refused (injected)".into(),
            ));
        }
        self.inner.claim(request).await
    }
    async fn ack(&self, claims: &[ClaimRef]) -> Result<Vec<ClaimOutcome>, StoreError> {
        if take_one(&self.panic_acks) {
            panic!("injected ack panic");
        }
        self.inner.ack(claims).await
    }
    async fn nack(&self, nacks: &[Nack]) -> Result<Vec<NackOutcome>, StoreError> {
        self.inner.nack(nacks).await
    }
    async fn extend_lease(
        &self,
        claims: &[ClaimRef],
        lease: Duration,
    ) -> Result<Vec<ClaimOutcome>, StoreError> {
        self.inner.extend_lease(claims, lease).await
    }
    async fn release(&self, claims: &[ClaimRef]) -> Result<Vec<ClaimOutcome>, StoreError> {
        self.inner.release(claims).await
    }
    async fn next_due(
        &self,
        lane: &str,
        target: &str,
        ordering: OrderingPolicy,
    ) -> Result<Option<Duration>, StoreError> {
        self.inner.next_due(lane, target, ordering).await
    }
    async fn stats(&self, filter: &MessageFilter) -> Result<Vec<LaneStats>, StoreError> {
        self.inner.stats(filter).await
    }
    async fn list(&self, filter: &MessageFilter, page: PageRequest) -> Result<Page, StoreError> {
        self.inner.list(filter, page).await
    }
    async fn get(&self, outbox_id: Uuid) -> Result<Option<OutboxMessage>, StoreError> {
        self.inner.get(outbox_id).await
    }
    async fn requeue_dead_letters(&self, filter: &MessageFilter) -> Result<u64, StoreError> {
        self.inner.requeue_dead_letters(filter).await
    }
    async fn discard_dead_letters(&self, filter: &MessageFilter) -> Result<u64, StoreError> {
        self.inner.discard_dead_letters(filter).await
    }
    async fn purge(&self, older_than: Duration, batch_size: usize) -> Result<u64, StoreError> {
        self.inner.purge(older_than, batch_size).await
    }
    fn subscribe(&self) -> broadcast::Receiver<WakeUp> {
        self.inner.subscribe()
    }
}
