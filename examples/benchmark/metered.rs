//! A store decorator that counts every call a relay makes, times its claims, and can stall
//! acks forever (to freeze a relay that holds claims before it is aborted).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use outbox_relay::message::DraftLimits;
use outbox_relay::store::{
    AckAndClaim, ClaimBatch, ClaimOutcome, ClaimRef, ClaimRequest, DraftBatch, Enqueued, LaneCount,
    LaneStats, MessageFilter, Nack, NackOutcome, Page, PageRequest, PurgeRequest, WakeUp,
};
use outbox_relay::{OrderingPolicy, OutboxMessage, OutboxMessageDraft, OutboxStore, StoreError};
use uuid::Uuid;

/// The store operations a relay issues, each counted on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Claim,
    AckAndClaim,
    Ack,
    Nack,
    ExtendLease,
    Release,
    NextDue,
    Stats,
    Other,
}

impl Op {
    pub const ALL: [Op; 9] = [
        Op::Claim,
        Op::AckAndClaim,
        Op::Ack,
        Op::Nack,
        Op::ExtendLease,
        Op::Release,
        Op::NextDue,
        Op::Stats,
        Op::Other,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Op::Claim => "claim",
            Op::AckAndClaim => "ack_and_claim",
            Op::Ack => "ack",
            Op::Nack => "nack",
            Op::ExtendLease => "extend_lease",
            Op::Release => "release",
            Op::NextDue => "next_due",
            Op::Stats => "stats",
            Op::Other => "other",
        }
    }
}

/// The claim calls (`claim` and `ack_and_claim`) of one drain.
#[derive(Debug, Clone, Copy)]
pub struct ClaimTimes {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub calls: usize,
    /// Their time added up: the lane keeps at most one out, so this over the drain's time
    /// is the share of it the lane spent waiting on a claim.
    pub total: Duration,
}

/// What the decorator saw.
#[derive(Debug, Default)]
pub struct Meter {
    calls: [AtomicU64; 9],
    /// Microseconds of every claim and ack_and_claim call.
    claim_micros: Mutex<Vec<u64>>,
    /// Microseconds of the plain claim calls alone (an idle lane's pickup claim).
    plain_claim_micros: Mutex<Vec<u64>>,
    /// Rows handed out by claims (either kind).
    claimed_rows: AtomicU64,
}

impl Meter {
    fn count(&self, op: Op) {
        self.calls[op as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn calls(&self, op: Op) -> u64 {
        self.calls[op as usize].load(Ordering::Relaxed)
    }

    pub fn snapshot(&self) -> [u64; 9] {
        Op::ALL.map(|op| self.calls(op))
    }

    pub fn claimed_rows(&self) -> u64 {
        self.claimed_rows.load(Ordering::Relaxed)
    }

    fn time_claim(&self, started: Instant, rows: usize) {
        let micros = started.elapsed().as_micros() as u64;
        if let Ok(mut samples) = self.claim_micros.lock() {
            samples.push(micros);
        }
        self.claimed_rows.fetch_add(rows as u64, Ordering::Relaxed);
    }

    /// p50 of the plain claim calls (not `ack_and_claim`), in milliseconds.
    pub fn plain_claim_p50(&self) -> Option<f64> {
        let mut samples = self.plain_claim_micros.lock().ok()?.clone();
        samples.sort_unstable();
        samples.get(samples.len() / 2).map(|&us| us as f64 / 1e3)
    }

    /// p50 and p99 of the claim calls, how many there were and their total time.
    pub fn claim_times(&self) -> Option<ClaimTimes> {
        let mut samples = self.claim_micros.lock().ok()?.clone();
        if samples.is_empty() {
            return None;
        }
        samples.sort_unstable();
        let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize] as f64 / 1e3;
        Some(ClaimTimes {
            p50_ms: at(0.50),
            p99_ms: at(0.99),
            calls: samples.len(),
            total: Duration::from_micros(samples.iter().sum()),
        })
    }
}

/// The decorator. Forwards everything, `ack_and_claim` included (so a store's one-round-trip
/// version is what runs, not the trait's two-call default).
#[derive(Debug)]
pub struct MeteredStore {
    inner: Arc<dyn OutboxStore>,
    pub meter: Arc<Meter>,
    /// When set, every ack (and ack_and_claim with acks) waits forever.
    stall_acks: AtomicBool,
    /// Raised the first time an ack stalls.
    pub stalled: tokio::sync::Notify,
}

impl MeteredStore {
    pub fn new(inner: Arc<dyn OutboxStore>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            meter: Arc::new(Meter::default()),
            stall_acks: AtomicBool::new(false),
            stalled: tokio::sync::Notify::new(),
        })
    }

    pub fn stalling_acks(inner: Arc<dyn OutboxStore>) -> Arc<Self> {
        let store = Self::new(inner);
        store.stall_acks.store(true, Ordering::Relaxed);
        store
    }

    async fn maybe_stall(&self) {
        if self.stall_acks.load(Ordering::Relaxed) {
            self.stalled.notify_one();
            std::future::pending::<()>().await;
        }
    }
}

#[async_trait]
impl OutboxStore for MeteredStore {
    async fn enqueue(&self, draft: OutboxMessageDraft) -> Result<Enqueued, StoreError> {
        self.meter.count(Op::Other);
        self.inner.enqueue(draft).await
    }

    async fn enqueue_many(
        &self,
        drafts: Vec<OutboxMessageDraft>,
    ) -> Result<Vec<Enqueued>, StoreError> {
        self.meter.count(Op::Other);
        self.inner.enqueue_many(drafts).await
    }

    fn draft_limits(&self) -> DraftLimits {
        self.inner.draft_limits()
    }

    async fn write_drafts(&self, drafts: DraftBatch) -> Result<Vec<Enqueued>, StoreError> {
        self.inner.write_drafts(drafts).await
    }

    async fn claim(&self, request: &ClaimRequest) -> Result<ClaimBatch, StoreError> {
        self.meter.count(Op::Claim);
        let started = Instant::now();
        let batch = self.inner.claim(request).await?;
        if let Ok(mut samples) = self.meter.plain_claim_micros.lock() {
            samples.push(started.elapsed().as_micros() as u64);
        }
        self.meter.time_claim(started, batch.messages.len());
        Ok(batch)
    }

    async fn ack(&self, claims: &[ClaimRef]) -> Result<Vec<ClaimOutcome>, StoreError> {
        self.meter.count(Op::Ack);
        self.maybe_stall().await;
        self.inner.ack(claims).await
    }

    async fn ack_and_claim(
        &self,
        acks: &[ClaimRef],
        request: &ClaimRequest,
    ) -> Result<AckAndClaim, StoreError> {
        self.meter.count(Op::AckAndClaim);
        if !acks.is_empty() {
            self.maybe_stall().await;
        }
        let started = Instant::now();
        let answer = self.inner.ack_and_claim(acks, request).await?;
        let rows = answer.claimed.as_ref().map_or(0, |b| b.messages.len());
        self.meter.time_claim(started, rows);
        Ok(answer)
    }

    async fn nack(&self, nacks: &[Nack]) -> Result<Vec<NackOutcome>, StoreError> {
        self.meter.count(Op::Nack);
        self.inner.nack(nacks).await
    }

    async fn extend_lease(
        &self,
        claims: &[ClaimRef],
        lease: Duration,
    ) -> Result<Vec<ClaimOutcome>, StoreError> {
        self.meter.count(Op::ExtendLease);
        self.inner.extend_lease(claims, lease).await
    }

    async fn release(&self, claims: &[ClaimRef]) -> Result<Vec<ClaimOutcome>, StoreError> {
        self.meter.count(Op::Release);
        self.inner.release(claims).await
    }

    async fn next_due(
        &self,
        lane: &str,
        target: &str,
        ordering: OrderingPolicy,
    ) -> Result<Option<Duration>, StoreError> {
        self.meter.count(Op::NextDue);
        self.inner.next_due(lane, target, ordering).await
    }

    async fn stats(&self, filter: &MessageFilter) -> Result<Vec<LaneStats>, StoreError> {
        self.meter.count(Op::Stats);
        self.inner.stats(filter).await
    }

    async fn list(&self, filter: &MessageFilter, page: PageRequest) -> Result<Page, StoreError> {
        self.meter.count(Op::Other);
        self.inner.list(filter, page).await
    }

    async fn get(&self, outbox_id: Uuid) -> Result<Option<OutboxMessage>, StoreError> {
        self.meter.count(Op::Other);
        self.inner.get(outbox_id).await
    }

    async fn requeue_dead_letters(&self, filter: &MessageFilter) -> Result<u64, StoreError> {
        self.meter.count(Op::Other);
        self.inner.requeue_dead_letters(filter).await
    }

    async fn requeue_dead_letters_per_lane(
        &self,
        filter: &MessageFilter,
    ) -> Result<Vec<LaneCount>, StoreError> {
        self.inner.requeue_dead_letters_per_lane(filter).await
    }

    async fn discard_dead_letters(&self, filter: &MessageFilter) -> Result<u64, StoreError> {
        self.meter.count(Op::Other);
        self.inner.discard_dead_letters(filter).await
    }

    async fn purge(&self, request: &PurgeRequest) -> Result<u64, StoreError> {
        self.meter.count(Op::Other);
        self.inner.purge(request).await
    }

    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<WakeUp> {
        self.inner.subscribe()
    }

    fn hand_off(&self) -> Option<Arc<outbox_relay::store::hand_off::HandOff>> {
        self.inner.hand_off()
    }
}
