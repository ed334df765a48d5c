//! Crash redelivery: relay A claims from a pending backlog, its handlers hang, and its whole
//! runtime is dropped: no shutdown, no release, its claims left to lapse, as after a
//! SIGKILL. Relay B, another "process" on the same outbox (its own pool or file handle),
//! drains the backlog meanwhile. Measured per stranded message: from its lease lapse (as the
//! store wrote it) to B's handler starting on it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use outbox_relay::store::{MessageFilter, PageRequest};
use outbox_relay::{DeliveryError, DeliveryHandler, OutboxMessage, OutboxRelay, OutboxStatus};
use uuid::Uuid;

use crate::drain::lane_config;
use crate::options::Keys;
use crate::raw::now_millis;
use crate::stores::{fill, reopen, BenchStore, TARGET};

const LANE: &str = "crash";
/// Relay A's concurrency: the claims it holds when it dies.
const CRASHED_CONCURRENCY: usize = 16;
/// Relay B's concurrency.
const SURVIVOR_CONCURRENCY: usize = 64;
/// B starts this long before the first lapse, so it is busy with the backlog when the
/// stranded claims become claimable (started at once, a fast B could finish the backlog
/// first and show only the idle case).
const SURVIVOR_HEAD_START: Duration = Duration::from_millis(500);

/// What the crash run measured.
#[derive(Debug, Clone)]
pub struct Redelivery {
    pub backlog: usize,
    pub lease: Duration,
    /// Claims A held when it died.
    pub stranded: usize,
    /// Of those, redelivered by B before the timeout.
    pub redelivered: usize,
    /// Pending rows when B started.
    pub pending_at_start: u64,
    /// Lapse to B's handler, per stranded message, in ms (sorted).
    pub delays_ms: Vec<f64>,
    /// Other messages B delivered before the last stranded one.
    pub others_before: usize,
    pub timed_out: bool,
}

impl Redelivery {
    pub fn percentile(&self, q: f64) -> Option<f64> {
        let d = &self.delays_ms;
        (!d.is_empty()).then(|| d[((d.len() - 1) as f64 * q).round() as usize])
    }
}

pub async fn run(
    bench: &BenchStore,
    backlog: usize,
    lease: Duration,
    timeout: Duration,
) -> Result<Redelivery, String> {
    fill(&bench.store, bench.kind, LANE, Keys::None, backlog).await?;
    abort_holding_claims(bench, lease).await?;
    // A statement the dead relay had sent may still finish on the server; let it land
    // before reading which claims were left.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let filter = MessageFilter::lane(LANE, TARGET).with_status(OutboxStatus::Claimed);
    let page = bench
        .store
        .list(
            &filter,
            PageRequest {
                after: None,
                limit: 100_000,
            },
        )
        .await
        .map_err(|e| format!("list stranded claims: {e}"))?;
    let stranded: HashMap<Uuid, i64> = page
        .messages
        .iter()
        .filter_map(|m| Some((m.outbox_id, m.lease_expires_at?.as_millis())))
        .collect();
    let Some(&first_lapse) = stranded.values().min() else {
        return Err("the aborted relay left no claims behind".to_owned());
    };
    let wait = first_lapse - SURVIVOR_HEAD_START.as_millis() as i64 - now_millis();
    if wait > 0 {
        tokio::time::sleep(Duration::from_millis(wait as u64)).await;
    }
    let pending_at_start = bench
        .store
        .stats(&MessageFilter::lane(LANE, TARGET))
        .await
        .map_err(|e| format!("stats: {e}"))?
        .first()
        .map_or(0, |s| s.pending);
    let watch = Arc::new(Watch {
        remaining: AtomicUsize::new(stranded.len()),
        stranded,
        seen_micros: Mutex::new(HashMap::new()),
        others: AtomicUsize::new(0),
        others_before_last: AtomicUsize::new(0),
        done: tokio::sync::Notify::new(),
    });
    let relay = OutboxRelay::builder(&bench.store)
        .lane_shared(lane_config(LANE, SURVIVOR_CONCURRENCY), watch.clone())
        .start()
        .await
        .map_err(|e| format!("start relay B: {e}"))?;
    let timed_out = tokio::time::timeout(timeout, watch.done.notified())
        .await
        .is_err();
    if let Err(error) = relay.shutdown(Duration::from_secs(10)).await {
        eprintln!("benchmark: relay B shutdown: {error}");
    }
    let seen = watch.seen_micros.lock().map_err(|e| e.to_string())?.clone();
    let mut delays_ms: Vec<f64> = seen
        .iter()
        .filter_map(|(id, at)| {
            let lapse = *watch.stranded.get(id)?;
            Some(*at as f64 / 1e3 - lapse as f64)
        })
        .collect();
    delays_ms.sort_by(f64::total_cmp);
    Ok(Redelivery {
        backlog,
        lease,
        stranded: watch.stranded.len(),
        redelivered: seen.len(),
        pending_at_start,
        delays_ms,
        others_before: watch.others_before_last.load(Ordering::Relaxed),
        timed_out,
    })
}

/// Runs relay A on a runtime of its own in a thread of its own, until its first delivery
/// starts (and hangs, holding its claim and every other one),
/// then drops that runtime: every actor task ends where it stands.
async fn abort_holding_claims(bench: &BenchStore, lease: Duration) -> Result<(), String> {
    let location = bench.location.clone();
    let thread = std::thread::spawn(move || -> Result<(), String> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(|e| format!("relay A runtime: {e}"))?;
        let outcome = runtime.block_on(async move {
            let store = reopen(&location).await?;
            let started = Arc::new(tokio::sync::Notify::new());
            // Without extension a delivery must fit in its lease (the no-op takes nothing).
            let config = lane_config(LANE, CRASHED_CONCURRENCY)
                .lease(lease)
                .lease_extend_margin(None)
                .delivery_timeout(lease / 2);
            let _relay = OutboxRelay::builder(&store)
                .lane(
                    config,
                    Hold {
                        started: started.clone(),
                    },
                )
                .start()
                .await
                .map_err(|e| format!("start relay A: {e}"))?;
            tokio::time::timeout(Duration::from_secs(60), started.notified())
                .await
                .map_err(|_| "relay A never delivered within 60 s".to_owned())
        });
        runtime.shutdown_timeout(Duration::from_secs(1));
        outcome
    });
    tokio::task::spawn_blocking(move || thread.join())
        .await
        .map_err(|e| format!("relay A thread: {e}"))?
        .map_err(|_| "relay A thread panicked".to_owned())?
}

/// Relay A's handler: says when the first delivery started, and never finishes one, so
/// no claim of A is acked before its runtime is dropped.
#[derive(Debug)]
struct Hold {
    started: Arc<tokio::sync::Notify>,
}

#[async_trait]
impl DeliveryHandler for Hold {
    async fn deliver(&self, _message: &OutboxMessage) -> Result<(), DeliveryError> {
        self.started.notify_one();
        std::future::pending().await
    }
}

/// Relay B's handler: notes when each stranded message reaches it.
#[derive(Debug)]
struct Watch {
    stranded: HashMap<Uuid, i64>,
    remaining: AtomicUsize,
    seen_micros: Mutex<HashMap<Uuid, i64>>,
    others: AtomicUsize,
    others_before_last: AtomicUsize,
    done: tokio::sync::Notify,
}

#[async_trait]
impl DeliveryHandler for Watch {
    async fn deliver(&self, message: &OutboxMessage) -> Result<(), DeliveryError> {
        let at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as i64);
        if !self.stranded.contains_key(&message.outbox_id) {
            self.others.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let first = match self.seen_micros.lock() {
            Ok(mut seen) => seen.insert(message.outbox_id, at).is_none(),
            Err(_) => false,
        };
        if first && self.remaining.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.others_before_last
                .store(self.others.load(Ordering::Relaxed), Ordering::Relaxed);
            self.done.notify_one();
        }
        Ok(())
    }
}
