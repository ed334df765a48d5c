//! A backend wrapper that misbehaves on demand (the one wrapper left: it must change
//! answers, which a hook cannot): panics in acks or in one lane's claims, and
//! outages (`StoreError::Unavailable`). Shared by the relay and relay-metrics tests.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use outbox_relay::message::ClaimRef;
use outbox_relay::message::DraftLimits;
use outbox_relay::store::{
    AckMode, Capabilities, ClaimBatch, ClaimOutcome, ClaimRequest, DraftBatch, Enqueued, LaneCount,
    LaneStats, MessageFilter, Nack, NackOutcome, OrderingPolicy, OutboxBackend, Page, PageRequest,
    PurgeRequest, StoreError, StoreOp, UnservedLane, WakeUp,
};
use outbox_relay::{Outbox, OutboxMessage};
use uuid::Uuid;

/// Wraps a store and misbehaves on demand.
#[derive(Debug)]
pub struct FaultyStore {
    pub inner: Outbox,
    /// Panic in the next this-many acks.
    pub panic_acks: AtomicU32,
    /// Panic in every claim of this lane.
    pub panic_claims_of: Option<String>,
    /// Fail the next this-many claims, acks and next_dues with `Unavailable`.
    pub unavailable: AtomicU32,
    /// How many claims each `extend_lease` call carried, in call order.
    pub extend_calls: Mutex<Vec<usize>>,
    /// Acks, nacks and releases never answer: a connection gone silent.
    pub silent: AtomicBool,
    /// While set, every ack waits for `ack_gate` before it reaches the store (and signals
    /// `ack_held` as it starts waiting): an ack held up on its way, by the network or by a
    /// process paused mid-call.
    pub hold_acks: AtomicBool,
    pub ack_gate: tokio::sync::Notify,
    pub ack_held: tokio::sync::Notify,
    /// While set, every lease extension fails with `Unavailable`: a relay that cannot reach
    /// the store to keep its leases.
    pub fail_extends: AtomicBool,
    /// While set, every claim waits for `claim_gate` (a store call that hangs).
    pub stall_claims: std::sync::atomic::AtomicBool,
    pub claim_gate: tokio::sync::Notify,
    /// While set, every claim reads the store first and then waits for `claim_gate` before
    /// it answers: a claim whose snapshot is taken and whose answer is on its way.
    pub stall_answers: std::sync::atomic::AtomicBool,
    /// Every claim takes this many milliseconds (tokio's clock): a store far away.
    pub claim_delay_ms: std::sync::atomic::AtomicU64,
    /// Calls made, by kind (an `ack_and_claim` counts as an ack and a claim: this wrapper
    /// keeps the backend trait's provided two-call version).
    pub calls: Calls,
    /// `list` calls running now, counted until their future ends, however it ends
    /// (answered, or dropped by a caller that gave up).
    pub lists: InFlight,
}

/// Calls of one kind running now: the most at once, how many started and ended, and a
/// signal at every end.
#[derive(Debug, Default)]
pub struct InFlight {
    pub now: std::sync::atomic::AtomicUsize,
    pub most: std::sync::atomic::AtomicUsize,
    pub started: std::sync::atomic::AtomicU64,
    pub ended: std::sync::atomic::AtomicU64,
    pub changed: tokio::sync::Notify,
}

impl InFlight {
    /// Counts a call in until the guard is dropped.
    pub fn enter(&self) -> InFlightGuard<'_> {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        self.started.fetch_add(1, Ordering::SeqCst);
        InFlightGuard(self)
    }
}

/// One call counted in [`InFlight`].
pub struct InFlightGuard<'a>(&'a InFlight);

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::SeqCst);
        self.0.ended.fetch_add(1, Ordering::SeqCst);
        self.0.changed.notify_waiters();
    }
}

/// Store calls counted by [`FaultyStore`].
#[derive(Debug, Default)]
pub struct Calls {
    pub claims: AtomicU32,
    pub acks: AtomicU32,
    pub next_dues: AtomicU32,
}

impl FaultyStore {
    pub fn new(inner: Outbox) -> Self {
        Self {
            inner,
            panic_acks: AtomicU32::new(0),
            panic_claims_of: None,
            unavailable: AtomicU32::new(0),
            extend_calls: Mutex::default(),
            silent: AtomicBool::new(false),
            hold_acks: AtomicBool::new(false),
            ack_gate: Default::default(),
            ack_held: Default::default(),
            fail_extends: AtomicBool::new(false),
            stall_claims: Default::default(),
            claim_gate: Default::default(),
            stall_answers: Default::default(),
            claim_delay_ms: Default::default(),
            calls: Calls::default(),
            lists: InFlight::default(),
        }
    }

    /// Never returns while `silent` is set.
    async fn silence(&self) {
        if self.silent.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
    }

    fn outage(&self) -> Result<(), StoreError> {
        let left = self.unavailable.load(Ordering::SeqCst);
        if left > 0 {
            self.unavailable.store(left - 1, Ordering::SeqCst);
            return Err(StoreError::unavailable(
                StoreOp::Claim,
                "connection refused (injected)",
            ));
        }
        Ok(())
    }
}

#[async_trait]
impl OutboxBackend for FaultyStore {
    fn draft_limits(&self) -> DraftLimits {
        self.inner.as_backend().draft_limits()
    }
    async fn write_drafts(&self, drafts: DraftBatch) -> Result<Vec<Enqueued>, StoreError> {
        self.inner.as_backend().write_drafts(drafts).await
    }
    async fn claim(&self, requests: &[ClaimRequest]) -> Result<Vec<ClaimBatch>, StoreError> {
        if let Some(lane) = self.panic_claims_of.as_deref() {
            if requests.iter().any(|request| request.lane == lane) {
                panic!("injected claim panic in lane {lane}");
            }
        }
        self.calls.claims.fetch_add(1, Ordering::SeqCst);
        if self.stall_claims.load(Ordering::SeqCst) {
            self.claim_gate.notified().await;
        }
        let delay = self.claim_delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        self.outage()?;
        let answer = self.inner.as_backend().claim(requests).await;
        if self.stall_answers.load(Ordering::SeqCst) {
            self.claim_gate.notified().await;
        }
        answer
    }
    async fn ack(
        &self,
        claims: &[ClaimRef],
        mode: AckMode,
    ) -> Result<Vec<ClaimOutcome>, StoreError> {
        if self
            .panic_acks
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            panic!("injected ack panic");
        }
        self.silence().await;
        if self.hold_acks.load(Ordering::SeqCst) {
            self.ack_held.notify_one();
            self.ack_gate.notified().await;
        }
        self.calls.acks.fetch_add(1, Ordering::SeqCst);
        self.outage()?;
        self.inner.as_backend().ack(claims, mode).await
    }
    async fn nack(&self, nacks: &[Nack]) -> Result<Vec<NackOutcome>, StoreError> {
        self.silence().await;
        self.inner.as_backend().nack(nacks).await
    }
    async fn extend_lease(
        &self,
        claims: &[ClaimRef],
        lease: Duration,
    ) -> Result<Vec<ClaimOutcome>, StoreError> {
        self.extend_calls.lock().unwrap().push(claims.len());
        if self.fail_extends.load(Ordering::SeqCst) {
            return Err(StoreError::unavailable(
                StoreOp::ExtendLease,
                "connection refused (injected)",
            ));
        }
        self.inner.as_backend().extend_lease(claims, lease).await
    }
    async fn release(&self, claims: &[ClaimRef]) -> Result<Vec<ClaimOutcome>, StoreError> {
        self.silence().await;
        self.inner.as_backend().release(claims).await
    }
    async fn next_due(
        &self,
        lane: &str,
        target: &str,
        ordering: OrderingPolicy,
    ) -> Result<Option<Duration>, StoreError> {
        self.calls.next_dues.fetch_add(1, Ordering::SeqCst);
        self.outage()?;
        self.inner
            .as_backend()
            .next_due(lane, target, ordering)
            .await
    }
    async fn stats(&self, filter: &MessageFilter) -> Result<Vec<LaneStats>, StoreError> {
        self.inner.as_backend().stats(filter).await
    }
    async fn list(&self, filter: &MessageFilter, page: PageRequest) -> Result<Page, StoreError> {
        let _counted = self.lists.enter();
        self.inner.as_backend().list(filter, page).await
    }
    async fn get(&self, outbox_id: Uuid) -> Result<Option<OutboxMessage>, StoreError> {
        self.inner.as_backend().get(outbox_id).await
    }
    async fn requeue_dead_letters_per_lane(
        &self,
        filter: &MessageFilter,
    ) -> Result<Vec<LaneCount>, StoreError> {
        self.inner
            .as_backend()
            .requeue_dead_letters_per_lane(filter)
            .await
    }
    async fn discard_dead_letters(&self, filter: &MessageFilter) -> Result<u64, StoreError> {
        self.inner.as_backend().discard_dead_letters(filter).await
    }
    async fn purge(&self, request: &PurgeRequest) -> Result<Vec<LaneCount>, StoreError> {
        self.inner.as_backend().purge(request).await
    }
    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<WakeUp> {
        self.inner.as_backend().subscribe()
    }
    /// The primitives only, and the record of served lanes when the store has it.
    fn capabilities(&self) -> Capabilities {
        if self.inner.capabilities().served_lanes {
            Capabilities::none().with_served_lanes()
        } else {
            Capabilities::none()
        }
    }
    async fn record_served(
        &self,
        lanes: &[(String, String)],
        served_for: Duration,
    ) -> Result<(), StoreError> {
        self.inner
            .as_backend()
            .record_served(lanes, served_for)
            .await
    }
    async fn unserved_lanes(&self, limit: usize) -> Result<Vec<UnservedLane>, StoreError> {
        self.inner.as_backend().unserved_lanes(limit).await
    }
}
