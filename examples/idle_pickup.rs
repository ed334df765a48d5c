//! Idle pickup: how long an idle lane takes to start delivering a message enqueued on its
//! own, and how many store calls each picked-up message costs. Messages are enqueued one at
//! a time; each waits until the lane has gone idle again (its `Idle` event), so every one is
//! a cold pickup: a wake-up, a claim, a delivery, an ack.
//!
//! The latency runs from the enqueue call returning (the commit is done) to the handler
//! starting. These machines are noisy: state the load next to the numbers.
//!
//! Run:
//!   cargo run --release --example idle_pickup -- --store postgres://postgres@127.0.0.1:5432/test
//!   cargo run --release --example idle_pickup -- --messages 500 --store sqlite
//!
//! Prints p50, p90, p99 and max of the pickup latency, and the store calls by kind.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use outbox_relay::message::OutboxMessage;
use outbox_relay::relay::RelayEvent;
use outbox_relay::store::{
    AckAndClaim, ClaimBatch, ClaimOutcome, ClaimRef, ClaimRequest, Enqueued, LaneStats,
    MessageFilter, Nack, NackOutcome, OrderingPolicy, Page, PageRequest, StoreError, WakeUp,
};
use outbox_relay::{
    DeliveryError, DeliveryHandler, InMemoryOutboxStore, LaneConfig, OutboxMessageDraft,
    OutboxRelay, OutboxStore,
};
use tokio::sync::mpsc;
use uuid::Uuid;

/// A handler that reports the moment each delivery starts.
struct StartClock(mpsc::UnboundedSender<Instant>);

#[async_trait]
impl DeliveryHandler for StartClock {
    async fn deliver(&self, _message: &OutboxMessage) -> Result<(), DeliveryError> {
        // A closed receiver only means the run is over.
        let _ = self.0.send(Instant::now());
        Ok(())
    }
}

/// Store calls by kind, as the relay makes them.
#[derive(Default)]
struct Calls {
    claims: AtomicU64,
    acks: AtomicU64,
    acks_and_claims: AtomicU64,
    next_dues: AtomicU64,
    other: AtomicU64,
    /// How long each claim call took, to tell the store's share of the pickup.
    claim_times: std::sync::Mutex<Vec<Duration>>,
}

/// A store that counts the calls made to it, and otherwise is `inner`.
struct Counted {
    inner: Arc<dyn OutboxStore>,
    calls: Arc<Calls>,
}

impl fmt::Debug for Counted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Counted").finish_non_exhaustive()
    }
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

#[async_trait]
impl OutboxStore for Counted {
    async fn enqueue_many(
        &self,
        drafts: Vec<OutboxMessageDraft>,
    ) -> Result<Vec<Enqueued>, StoreError> {
        self.inner.enqueue_many(drafts).await
    }
    async fn claim(&self, request: &ClaimRequest) -> Result<ClaimBatch, StoreError> {
        bump(&self.calls.claims);
        let started = Instant::now();
        let answer = self.inner.claim(request).await;
        if let Ok(mut times) = self.calls.claim_times.lock() {
            times.push(started.elapsed());
        }
        answer
    }
    async fn ack(&self, claims: &[ClaimRef]) -> Result<Vec<ClaimOutcome>, StoreError> {
        bump(&self.calls.acks);
        self.inner.ack(claims).await
    }
    async fn ack_and_claim(
        &self,
        acks: &[ClaimRef],
        request: &ClaimRequest,
    ) -> Result<AckAndClaim, StoreError> {
        bump(&self.calls.acks_and_claims);
        self.inner.ack_and_claim(acks, request).await
    }
    async fn nack(&self, nacks: &[Nack]) -> Result<Vec<NackOutcome>, StoreError> {
        bump(&self.calls.other);
        self.inner.nack(nacks).await
    }
    async fn extend_lease(
        &self,
        claims: &[ClaimRef],
        lease: Duration,
    ) -> Result<Vec<ClaimOutcome>, StoreError> {
        bump(&self.calls.other);
        self.inner.extend_lease(claims, lease).await
    }
    async fn release(&self, claims: &[ClaimRef]) -> Result<Vec<ClaimOutcome>, StoreError> {
        bump(&self.calls.other);
        self.inner.release(claims).await
    }
    async fn next_due(
        &self,
        lane: &str,
        target: &str,
        ordering: OrderingPolicy,
    ) -> Result<Option<Duration>, StoreError> {
        bump(&self.calls.next_dues);
        self.inner.next_due(lane, target, ordering).await
    }
    async fn stats(&self, filter: &MessageFilter) -> Result<Vec<LaneStats>, StoreError> {
        bump(&self.calls.other);
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
    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<WakeUp> {
        self.inner.subscribe()
    }
}

/// The store to measure, and the PostgreSQL schema to drop afterwards.
async fn open_store(kind: &str) -> Result<(Arc<dyn OutboxStore>, Option<Cleanup>), String> {
    match kind {
        "memory" => Ok((Arc::new(InMemoryOutboxStore::new()), None)),
        "sqlite" => {
            let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
            let store = outbox_relay::SqliteOutboxStore::open(dir.path().join("idle.db"))
                .await
                .map_err(|e| e.to_string())?;
            Ok((Arc::new(store), Some(Cleanup::Dir(dir))))
        }
        url if url.starts_with("postgres") => {
            use outbox_relay::store::postgres::{PostgresConfig, PostgresOutboxStore};
            let schema = format!("idle_pickup_{}", std::process::id());
            let store = PostgresOutboxStore::connect_with(
                url,
                PostgresConfig::default().with_schema(schema.clone()),
            )
            .await
            .map_err(|e| e.to_string())?;
            let pool = store.pool().clone();
            Ok((Arc::new(store), Some(Cleanup::Schema(pool, schema))))
        }
        other => Err(format!(
            "unknown store {other:?}: use memory, sqlite or a postgres:// URL"
        )),
    }
}

enum Cleanup {
    Dir(#[allow(dead_code)] tempfile::TempDir),
    Schema(sqlx::PgPool, String),
}

impl Cleanup {
    async fn run(self) {
        if let Cleanup::Schema(pool, schema) = self {
            let drop = format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE");
            if let Err(error) = sqlx::raw_sql(sqlx::AssertSqlSafe(drop))
                .execute(&pool)
                .await
            {
                eprintln!("idle_pickup: could not drop schema {schema}: {error}");
            }
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// Waits for the first relay event `pred` accepts.
async fn wait_for(
    events: &mut tokio::sync::broadcast::Receiver<RelayEvent>,
    what: &str,
    pred: impl Fn(&RelayEvent) -> bool,
) {
    let wait = async {
        loop {
            match events.recv().await {
                Ok(event) if pred(&event) => return,
                Ok(_) => {}
                Err(error) => panic!("lost relay events while waiting for {what}: {error}"),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), wait)
        .await
        .unwrap_or_else(|_| panic!("no {what} within 60 s"));
}

#[tokio::main]
async fn main() {
    let mut messages = 300usize;
    let mut store_kind = "memory".to_owned();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--messages" => messages = value.parse().expect("--messages: a number"),
            "--store" => store_kind = value,
            other => panic!("unknown flag {other}: use --messages N --store KIND"),
        }
    }
    let (inner, cleanup) = open_store(&store_kind).await.expect("open store");
    let calls = Arc::new(Calls::default());
    let store: Arc<dyn OutboxStore> = Arc::new(Counted {
        inner: inner.clone(),
        calls: calls.clone(),
    });
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let relay = OutboxRelay::builder(store)
        .lane(
            LaneConfig::new("idle", "target").concurrency(8),
            StartClock(started_tx),
        )
        .event_capacity(messages * 16 + 1024)
        .start()
        .await
        .expect("start relay");
    let mut events = relay.subscribe();
    let idle = |e: &RelayEvent| matches!(e, RelayEvent::Idle { .. });
    wait_for(&mut events, "the lane to go idle", idle).await;
    let before = [
        &calls.claims,
        &calls.acks,
        &calls.acks_and_claims,
        &calls.next_dues,
        &calls.other,
    ]
    .map(|c| c.load(Ordering::Relaxed));
    if let Ok(mut times) = calls.claim_times.lock() {
        times.clear();
    }

    let mut latencies = Vec::with_capacity(messages);
    let mut early = 0;
    for i in 0..messages {
        let draft = OutboxMessageDraft::new("idle", "target", serde_json::json!({ "i": i }))
            .expect("valid draft");
        inner.enqueue(draft).await.expect("enqueue");
        let committed = Instant::now();
        let start = tokio::time::timeout(Duration::from_secs(60), started.recv())
            .await
            .expect("a delivery within 60 s")
            .expect("the handler is alive");
        // The handler may start before the enqueue call has returned to us (the wake-up
        // travels while the commit's answer does): that counts as zero.
        if start < committed {
            early += 1;
        }
        latencies.push(start.saturating_duration_since(committed));
        wait_for(&mut events, "the delivery", |e| {
            matches!(e, RelayEvent::Delivered { .. })
        })
        .await;
        wait_for(&mut events, "the lane to go idle again", idle).await;
    }
    let after = [
        &calls.claims,
        &calls.acks,
        &calls.acks_and_claims,
        &calls.next_dues,
        &calls.other,
    ]
    .map(|c| c.load(Ordering::Relaxed));
    let [claims, acks, acks_and_claims, next_dues, other] =
        std::array::from_fn(|i| after[i] - before[i]);
    relay
        .shutdown(Duration::from_secs(5))
        .await
        .expect("shutdown");
    if let Some(cleanup) = cleanup {
        cleanup.run().await;
    }

    latencies.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!("store {store_kind}, {messages} messages picked up one at a time by an idle lane");
    println!(
        "pickup latency (enqueue returned -> handler started): p50 {:.3} ms, p90 {:.3} ms, \
         p99 {:.3} ms, max {:.3} ms ({early} started before the enqueue call returned)",
        ms(percentile(&latencies, 0.50)),
        ms(percentile(&latencies, 0.90)),
        ms(percentile(&latencies, 0.99)),
        ms(percentile(&latencies, 1.0)),
    );
    let mut claim_times = calls
        .claim_times
        .lock()
        .map(|times| times.clone())
        .unwrap_or_default();
    claim_times.sort();
    if !claim_times.is_empty() {
        println!(
            "claim call (inside the pickup): p50 {:.3} ms, p99 {:.3} ms",
            ms(percentile(&claim_times, 0.50)),
            ms(percentile(&claim_times, 0.99)),
        );
    }
    let total = claims + acks + acks_and_claims + next_dues + other;
    println!(
        "store calls: {claims} claims, {acks} acks, {acks_and_claims} ack_and_claims, \
         {next_dues} next_dues, {other} other: {:.2} per message",
        total as f64 / messages as f64
    );
}
