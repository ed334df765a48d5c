//! A store backend written outside the crate, as a user of the `OutboxStore` trait would
//! write one: it implements only the trait's required methods and leaves every provided
//! one (`enqueue`, `enqueue_many`, `ack_and_claim`, `requeue_dead_letters`) as the trait
//! gives it. Its storage is an in-memory store reached only through that store's required
//! methods, so it keeps the contract to the letter while recording nothing itself: what
//! gets validated, planned and counted is what the trait does for any backend.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use outbox_relay::message::DraftLimits;
use outbox_relay::store::{
    ClaimBatch, ClaimOutcome, ClaimRef, ClaimRequest, Clock, DraftBatch, Enqueued, LaneCount,
    LaneStats, MessageFilter, Nack, NackOutcome, OrderingPolicy, Page, PageRequest, PurgeRequest,
    StoreError, WakeUp,
};
use outbox_relay::{InMemoryOutboxStore, OutboxMessage, OutboxStore};
use uuid::Uuid;

/// The out-of-tree backend.
#[derive(Debug)]
pub struct ExternalStore {
    storage: InMemoryOutboxStore,
}

impl ExternalStore {
    /// An empty store on `clock`.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        Self {
            storage: InMemoryOutboxStore::with_clock(clock),
        }
    }
}

#[async_trait]
impl OutboxStore for ExternalStore {
    fn draft_limits(&self) -> DraftLimits {
        self.storage.draft_limits()
    }
    async fn write_drafts(&self, drafts: DraftBatch) -> Result<Vec<Enqueued>, StoreError> {
        self.storage.write_drafts(drafts).await
    }
    async fn claim(&self, request: &ClaimRequest) -> Result<ClaimBatch, StoreError> {
        self.storage.claim(request).await
    }
    async fn ack(&self, claims: &[ClaimRef]) -> Result<Vec<ClaimOutcome>, StoreError> {
        self.storage.ack(claims).await
    }
    async fn nack(&self, nacks: &[Nack]) -> Result<Vec<NackOutcome>, StoreError> {
        self.storage.nack(nacks).await
    }
    async fn extend_lease(
        &self,
        claims: &[ClaimRef],
        lease: Duration,
    ) -> Result<Vec<ClaimOutcome>, StoreError> {
        self.storage.extend_lease(claims, lease).await
    }
    async fn release(&self, claims: &[ClaimRef]) -> Result<Vec<ClaimOutcome>, StoreError> {
        self.storage.release(claims).await
    }
    async fn next_due(
        &self,
        lane: &str,
        target: &str,
        ordering: OrderingPolicy,
    ) -> Result<Option<Duration>, StoreError> {
        self.storage.next_due(lane, target, ordering).await
    }
    async fn stats(&self, filter: &MessageFilter) -> Result<Vec<LaneStats>, StoreError> {
        self.storage.stats(filter).await
    }
    async fn list(&self, filter: &MessageFilter, page: PageRequest) -> Result<Page, StoreError> {
        self.storage.list(filter, page).await
    }
    async fn get(&self, outbox_id: Uuid) -> Result<Option<OutboxMessage>, StoreError> {
        self.storage.get(outbox_id).await
    }
    async fn requeue_dead_letters_per_lane(
        &self,
        filter: &MessageFilter,
    ) -> Result<Vec<LaneCount>, StoreError> {
        self.storage.requeue_dead_letters_per_lane(filter).await
    }
    async fn discard_dead_letters(&self, filter: &MessageFilter) -> Result<u64, StoreError> {
        self.storage.discard_dead_letters(filter).await
    }
    async fn purge(&self, request: &PurgeRequest) -> Result<u64, StoreError> {
        self.storage.purge(request).await
    }
    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<WakeUp> {
        self.storage.subscribe()
    }
}
