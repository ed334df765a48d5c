//! [`SlowCallLog`]: a store wrapper that logs a slow call by its operation's name and its
//! duration, and nothing else. sqlx's own slow-statement warning prints the whole statement
//! (5 KB for a claim) at WARN; the stores this crate opens turn that off and are wrapped in
//! this instead.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use uuid::Uuid;

use crate::message::{DraftLimits, OutboxMessage, OutboxMessageDraft};
use crate::store::{
    AckAndClaim, ClaimBatch, ClaimOutcome, ClaimRef, ClaimRequest, DraftBatch, Enqueued, LaneCount,
    LaneStats, MessageFilter, Nack, NackOutcome, OrderingPolicy, OutboxStore, Page, PageRequest,
    PurgeRequest, StoreError, WakeUp,
};

/// A store call slower than this is logged, unless configured otherwise (sqlx's own
/// threshold for its slow-statement warning).
pub const DEFAULT_SLOW_CALL_THRESHOLD: Duration = Duration::from_secs(1);

/// Wraps a store; a call slower than `threshold` is logged at WARN as
/// `slow store call op=claim duration_ms=1234`, without its statement or arguments.
pub struct SlowCallLog {
    inner: Arc<dyn OutboxStore>,
    threshold: Duration,
}

impl SlowCallLog {
    /// Wraps `inner`, logging calls slower than `threshold`.
    pub fn new(inner: Arc<dyn OutboxStore>, threshold: Duration) -> Self {
        Self { inner, threshold }
    }

    async fn timed<T>(&self, op: &'static str, call: impl Future<Output = T>) -> T {
        let started = Instant::now();
        let answer = call.await;
        let took = started.elapsed();
        if took >= self.threshold {
            tracing::warn!(
                op,
                duration_ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
                "slow store call"
            );
        }
        answer
    }
}

impl fmt::Debug for SlowCallLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlowCallLog")
            .field("inner", &self.inner)
            .field("threshold", &self.threshold)
            .finish()
    }
}

#[async_trait]
impl OutboxStore for SlowCallLog {
    async fn enqueue(&self, draft: OutboxMessageDraft) -> Result<Enqueued, StoreError> {
        self.timed("enqueue", self.inner.enqueue(draft)).await
    }
    async fn enqueue_many(
        &self,
        drafts: Vec<OutboxMessageDraft>,
    ) -> Result<Vec<Enqueued>, StoreError> {
        self.timed("enqueue_many", self.inner.enqueue_many(drafts))
            .await
    }
    fn draft_limits(&self) -> DraftLimits {
        self.inner.draft_limits()
    }
    async fn write_drafts(&self, drafts: DraftBatch) -> Result<Vec<Enqueued>, StoreError> {
        self.timed("write_drafts", self.inner.write_drafts(drafts))
            .await
    }
    async fn claim(&self, request: &ClaimRequest) -> Result<ClaimBatch, StoreError> {
        self.timed("claim", self.inner.claim(request)).await
    }
    async fn ack(&self, claims: &[ClaimRef]) -> Result<Vec<ClaimOutcome>, StoreError> {
        self.timed("ack", self.inner.ack(claims)).await
    }
    async fn ack_and_claim(
        &self,
        acks: &[ClaimRef],
        request: &ClaimRequest,
    ) -> Result<AckAndClaim, StoreError> {
        self.timed("ack_and_claim", self.inner.ack_and_claim(acks, request))
            .await
    }
    async fn nack(&self, nacks: &[Nack]) -> Result<Vec<NackOutcome>, StoreError> {
        self.timed("nack", self.inner.nack(nacks)).await
    }
    async fn extend_lease(
        &self,
        claims: &[ClaimRef],
        lease: Duration,
    ) -> Result<Vec<ClaimOutcome>, StoreError> {
        self.timed("extend_lease", self.inner.extend_lease(claims, lease))
            .await
    }
    async fn release(&self, claims: &[ClaimRef]) -> Result<Vec<ClaimOutcome>, StoreError> {
        self.timed("release", self.inner.release(claims)).await
    }
    async fn next_due(
        &self,
        lane: &str,
        target: &str,
        ordering: OrderingPolicy,
    ) -> Result<Option<Duration>, StoreError> {
        self.timed("next_due", self.inner.next_due(lane, target, ordering))
            .await
    }
    async fn stats(&self, filter: &MessageFilter) -> Result<Vec<LaneStats>, StoreError> {
        self.timed("stats", self.inner.stats(filter)).await
    }
    async fn list(&self, filter: &MessageFilter, page: PageRequest) -> Result<Page, StoreError> {
        self.timed("list", self.inner.list(filter, page)).await
    }
    async fn get(&self, outbox_id: Uuid) -> Result<Option<OutboxMessage>, StoreError> {
        self.timed("get", self.inner.get(outbox_id)).await
    }
    async fn requeue_dead_letters(&self, filter: &MessageFilter) -> Result<u64, StoreError> {
        self.timed(
            "requeue_dead_letters",
            self.inner.requeue_dead_letters(filter),
        )
        .await
    }
    async fn requeue_dead_letters_per_lane(
        &self,
        filter: &MessageFilter,
    ) -> Result<Vec<LaneCount>, StoreError> {
        self.timed(
            "requeue_dead_letters",
            self.inner.requeue_dead_letters_per_lane(filter),
        )
        .await
    }
    async fn discard_dead_letters(&self, filter: &MessageFilter) -> Result<u64, StoreError> {
        self.timed(
            "discard_dead_letters",
            self.inner.discard_dead_letters(filter),
        )
        .await
    }
    async fn purge(&self, request: &PurgeRequest) -> Result<u64, StoreError> {
        self.timed("purge", self.inner.purge(request)).await
    }
    fn hand_off(&self) -> Option<Arc<crate::store::hand_off::HandOff>> {
        self.inner.hand_off()
    }

    async fn pause_lane(
        &self,
        request: &crate::store::LanePauseRequest,
    ) -> Result<crate::store::LanePause, StoreError> {
        self.timed("pause_lane", self.inner.pause_lane(request))
            .await
    }

    async fn resume_lane(
        &self,
        lane: &str,
        target: &str,
    ) -> Result<Option<crate::store::LanePause>, StoreError> {
        self.timed("resume_lane", self.inner.resume_lane(lane, target))
            .await
    }

    async fn lane_pauses(&self) -> Result<Vec<crate::store::LanePause>, StoreError> {
        self.timed("lane_pauses", self.inner.lane_pauses()).await
    }

    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<WakeUp> {
        self.inner.subscribe()
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::store::memory::InMemoryOutboxStore;

    /// Collects what the fmt subscriber writes.
    use crate::captured_log::Captured;

    async fn claim_logged(threshold: Duration) -> String {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        let store = SlowCallLog::new(Arc::new(InMemoryOutboxStore::new()), threshold);
        let request = ClaimRequest::new("orders", "billing", 10, Duration::from_secs(30), "me");
        store
            .claim(&request)
            .await
            .map(drop)
            .unwrap_or_else(|e| panic!("{e}"));
        let bytes = captured.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    #[tokio::test]
    async fn a_slow_call_is_logged_by_name_and_duration_only() {
        // Every call is "slow" at a zero threshold: the line is all there is to check.
        let log = claim_logged(Duration::ZERO).await;
        assert!(log.contains("slow store call"), "{log}");
        assert!(
            log.contains("op=\"claim\"") || log.contains("op=claim"),
            "{log}"
        );
        assert!(log.contains("duration_ms="), "{log}");
        assert!(
            !log.contains("orders") && !log.contains("billing"),
            "the call's arguments were logged: {log}"
        );
        assert_eq!(log.lines().count(), 1, "{log}");
    }

    #[tokio::test]
    async fn a_fast_call_is_not_logged() {
        let log = claim_logged(Duration::from_secs(3600)).await;
        assert!(log.is_empty(), "{log}");
    }
}
