//! The conformance suite against a backend written outside the crate: it implements
//! `OutboxBackend` (the primitives) and nothing else, and passes the suite through the
//! public `testing` module and an `Outbox`, which does the validation and dedupe planning
//! for it (the trait's provided `ack_and_claim` makes its two calls). Its rows live in an
//! in-memory store used as its storage engine, reached only through the primitives.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use outbox_relay::message::ClaimRef;
use outbox_relay::message::DraftLimits;
use outbox_relay::store::{
    AckMode, ClaimBatch, ClaimOutcome, ClaimRequest, DraftBatch, Enqueued, LaneCount, LaneStats,
    MessageFilter, Nack, NackOutcome, OrderingPolicy, OutboxBackend, Page, PageRequest,
    PurgeRequest, StoreError, WakeUp,
};
use outbox_relay::testing::Harness;
use outbox_relay::time::{Clock, ManualClock};
use outbox_relay::{InMemoryOutboxStore, Outbox, OutboxMessage};
use uuid::Uuid;

/// The out-of-tree backend: no capabilities beyond the primitives.
#[derive(Debug)]
pub struct ExternalBackend {
    storage: InMemoryOutboxStore,
}

impl ExternalBackend {
    /// An empty backend on `clock`.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        Self {
            storage: InMemoryOutboxStore::with_clock(clock),
        }
    }
}

#[async_trait]
impl OutboxBackend for ExternalBackend {
    fn draft_limits(&self) -> DraftLimits {
        self.storage.draft_limits()
    }
    async fn write_drafts(&self, drafts: DraftBatch) -> Result<Vec<Enqueued>, StoreError> {
        self.storage.write_drafts(drafts).await
    }
    async fn claim(&self, requests: &[ClaimRequest]) -> Result<Vec<ClaimBatch>, StoreError> {
        self.storage.claim(requests).await
    }
    async fn ack(
        &self,
        claims: &[ClaimRef],
        mode: AckMode,
    ) -> Result<Vec<ClaimOutcome>, StoreError> {
        self.storage.ack(claims, mode).await
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
    async fn purge(&self, request: &PurgeRequest) -> Result<Vec<LaneCount>, StoreError> {
        self.storage.purge(request).await
    }
    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<WakeUp> {
        self.storage.subscribe()
    }
}

/// A fresh out-of-tree backend on a manual clock, under an outbox.
pub async fn harness() -> Harness {
    let clock = ManualClock::new(outbox_relay::time::UnixMillis::from_millis(
        1_700_000_000_000,
    ));
    let store = Outbox::new(ExternalBackend::with_clock(Arc::new(clock.clone())));
    let same = store.clone();
    Harness {
        cleanup: None,
        store,
        clock,
        reopen: Arc::new(move || {
            let same = same.clone();
            Box::pin(async move { same })
        }),
    }
}

outbox_relay::conformance!(harness);
