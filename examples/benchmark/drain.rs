//! Draining a backlog through the real relay, and the seed's single loop it is compared
//! with.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use outbox_relay::store::ClaimRequest;
use outbox_relay::{
    DeliveryError, DeliveryHandler, LaneConfig, Outbox, OutboxMessage, OutboxRelay,
};

use crate::stores::TARGET;

/// Which measured messages a handler has seen. Payload `n` below `measured` is measured;
/// a message seen twice (a redelivery) counts once. Payloads from `measured` up to
/// `measured + others` (a hot key's rows) are delivered too but not waited for: they are
/// counted apart ([`Progress::others`]).
#[derive(Debug)]
pub struct Progress {
    seen: Vec<AtomicBool>,
    measured: usize,
    count: AtomicUsize,
    others: AtomicUsize,
    done: tokio::sync::Notify,
    /// Handler waits as timed around them ([`wait`]), in microseconds, and how many.
    slept_micros: AtomicU64,
    sleeps: AtomicU64,
    /// When a handler first saw a message.
    first: std::sync::OnceLock<Instant>,
}

impl Progress {
    pub fn new(measured: usize) -> Arc<Self> {
        Self::with_others(measured, 0)
    }

    /// Progress over `measured` messages, beside `others` that are counted apart.
    pub fn with_others(measured: usize, others: usize) -> Arc<Self> {
        Arc::new(Self {
            seen: (0..measured + others)
                .map(|_| AtomicBool::new(false))
                .collect(),
            measured,
            count: AtomicUsize::new(0),
            others: AtomicUsize::new(0),
            done: tokio::sync::Notify::new(),
            slept_micros: AtomicU64::new(0),
            sleeps: AtomicU64::new(0),
            first: std::sync::OnceLock::new(),
        })
    }

    pub fn count(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    pub fn is_done(&self) -> bool {
        self.count() >= self.measured
    }

    /// The distinct messages outside the measured range delivered so far.
    pub fn others(&self) -> usize {
        self.others.load(Ordering::Relaxed)
    }

    /// The mean handler sleep as measured, if the handler slept.
    pub fn mean_sleep(&self) -> Option<Duration> {
        let sleeps = self.sleeps.load(Ordering::Relaxed);
        (sleeps > 0)
            .then(|| Duration::from_micros(self.slept_micros.load(Ordering::Relaxed) / sleeps))
    }

    /// Resolves once every measured message has been seen.
    pub async fn done(&self) {
        self.done.notified().await;
    }

    /// Notes that `message` was delivered (messages outside the measured range are ignored).
    pub fn record(&self, message: &OutboxMessage) {
        #[derive(serde::Deserialize)]
        struct Numbered {
            n: u64,
        }
        let Ok(Numbered { n }) = message.payload.deserialize::<Numbered>() else {
            return;
        };
        self.first.get_or_init(Instant::now);
        let Some(seen) = self.seen.get(n as usize) else {
            return;
        };
        if seen.swap(true, Ordering::Relaxed) {
            return;
        }
        if n as usize >= self.measured {
            self.others.fetch_add(1, Ordering::Relaxed);
        } else if self.count.fetch_add(1, Ordering::Relaxed) + 1 == self.measured {
            // notify_one keeps a permit if nobody waits yet.
            self.done.notify_one();
        }
    }
}

/// Waits `latency` the way a call to a target that answers in `latency` would
/// ([`crate::timer`]).
async fn wait(latency: Duration) {
    crate::timer::sleep(latency).await;
}

/// A handler that notes the message and, after `latency` (zero: returns at once), succeeds.
#[derive(Debug)]
pub struct CountingHandler {
    pub progress: Arc<Progress>,
    pub latency: Duration,
}

#[async_trait]
impl DeliveryHandler for CountingHandler {
    async fn deliver(&self, message: &OutboxMessage) -> Result<(), DeliveryError> {
        if !self.latency.is_zero() {
            let slept = Instant::now();
            wait(self.latency).await;
            let micros = slept.elapsed().as_micros() as u64;
            self.progress
                .slept_micros
                .fetch_add(micros, Ordering::Relaxed);
            self.progress.sleeps.fetch_add(1, Ordering::Relaxed);
        }
        self.progress.record(message);
        Ok(())
    }
}

/// What one drain did.
#[derive(Debug, Clone, Copy)]
pub struct Drained {
    pub delivered: usize,
    /// Messages outside the measured ones (a hot key's) delivered in the same time.
    pub others: usize,
    pub took: Duration,
    pub timed_out: bool,
    /// The handler's mean sleep as measured (a slow handler's true latency).
    pub mean_sleep: Option<Duration>,
}

impl Drained {
    pub fn rate(&self) -> f64 {
        self.delivered as f64 / self.took.as_secs_f64().max(1e-9)
    }

    /// Every message delivered in the time, the measured ones and the others.
    pub fn rate_all(&self) -> f64 {
        (self.delivered + self.others) as f64 / self.took.as_secs_f64().max(1e-9)
    }
}

/// A lane relaying `lane` at `concurrency`, with every other setting at its default.
pub fn lane_config(lane: &str, concurrency: usize) -> LaneConfig {
    let config = LaneConfig::new(lane, TARGET)
        .concurrency(concurrency)
        .batch_size(concurrency.max(outbox_relay::config::DEFAULT_BATCH_SIZE));
    let config = match std::env::var("OUTBOX_BENCH_CLAIM_LINGER_US") {
        Ok(us) => config.claim_linger(Duration::from_micros(us.parse().unwrap_or(0))),
        Err(_) => config,
    };
    // For side-by-side runs at other prefetch depths (default: the concurrency).
    let config = match std::env::var("OUTBOX_BENCH_PREFETCH") {
        Ok(n) => config.prefetch(n.parse().unwrap_or(concurrency)),
        Err(_) => config,
    };
    // For side-by-side runs at other prefetch ceilings (0: the prefetch never grows).
    let config = match std::env::var("OUTBOX_BENCH_PREFETCH_MAX") {
        Ok(n) => config.prefetch_max(n.parse().unwrap_or(0)),
        Err(_) => config,
    };
    // For side-by-side runs with and without key runs (1 = heads only).
    let config = match std::env::var("OUTBOX_BENCH_KEY_RUN") {
        Ok(run) => config.key_run(run.parse().unwrap_or(1)),
        Err(_) => config,
    };
    // For side-by-side runs at other claims in flight (default: the store's).
    match std::env::var("OUTBOX_BENCH_CLAIMS_IN_FLIGHT") {
        Ok(n) => config.claims_in_flight(n.parse().unwrap_or(1)),
        Err(_) => config,
    }
}

/// Relays per drain (`OUTBOX_BENCH_RELAYS`, default 1).
pub fn relays() -> usize {
    std::env::var("OUTBOX_BENCH_RELAYS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
        .max(1)
}

/// Starts a relay with one lane and waits until its handler has seen every measured
/// message (or `timeout`). Timed from before the relay starts to the last handler call: the
/// ack of the last few messages is not waited for, which is at most one store round trip.
pub async fn drain(
    store: Outbox,
    config: LaneConfig,
    measured: usize,
    others: usize,
    latency: Duration,
    timeout: Duration,
) -> Result<Drained, String> {
    let progress = Progress::with_others(measured, others);
    let handler = CountingHandler {
        progress: progress.clone(),
        latency,
    };
    perf_ctl("enable");
    let started = Instant::now();
    // More relays on one lane, as more processes on one database would be
    // (`OUTBOX_BENCH_RELAYS=N`, each at the lane's concurrency): the lane then has N claims
    // out at once instead of one.
    let mut more_relays = Vec::new();
    for _ in 1..relays() {
        let handler = CountingHandler {
            progress: progress.clone(),
            latency,
        };
        let relay = OutboxRelay::builder(&store)
            .lane(config.clone(), handler)
            .start()
            .await
            .map_err(|e| format!("start relay: {e}"))?;
        more_relays.push(relay);
    }
    let relay = OutboxRelay::builder(&store)
        .lane(config, handler)
        .start()
        .await
        .map_err(|e| format!("start relay: {e}"))?;
    let timed_out = tokio::time::timeout(timeout, progress.done.notified())
        .await
        .is_err();
    let took = started.elapsed();
    perf_ctl("disable");
    if let Some(first) = progress.first.get() {
        println!(
            "  first delivery {:.1} ms after the relay's start",
            first.duration_since(started).as_secs_f64() * 1e3
        );
    }
    for relay in more_relays {
        if let Err(error) = relay.shutdown(Duration::from_secs(10)).await {
            eprintln!("benchmark: relay shutdown: {error}");
        }
    }
    if let Err(error) = relay.shutdown(Duration::from_secs(10)).await {
        eprintln!("benchmark: relay shutdown: {error}");
    }
    Ok(Drained {
        delivered: progress.count(),
        others: progress.others(),
        took,
        timed_out,
        mean_sleep: progress.mean_sleep(),
    })
}

/// The seed relay's loop: claim a batch of 64, deliver each in turn, ack each on its own.
pub async fn single_loop(
    store: &Outbox,
    lane: &str,
    latency: Duration,
    n: usize,
    timeout: Duration,
) -> Result<Drained, String> {
    let request = ClaimRequest::new(lane, TARGET, 64, Duration::from_secs(30), "single-loop");
    let started = Instant::now();
    let mut delivered = 0;
    while delivered < n {
        if started.elapsed() > timeout {
            return Ok(Drained {
                delivered,
                others: 0,
                took: started.elapsed(),
                timed_out: true,
                mean_sleep: None,
            });
        }
        let batch = store
            .claim(&request)
            .await
            .map_err(|e| format!("single loop claim: {e}"))?;
        for message in batch.messages {
            let Some(claim) = message.claim() else {
                continue;
            };
            wait(latency).await;
            store
                .ack(&[claim])
                .await
                .map_err(|e| format!("single loop ack: {e}"))?;
            delivered += 1;
        }
    }
    Ok(Drained {
        delivered,
        others: 0,
        took: started.elapsed(),
        timed_out: false,
        mean_sleep: None,
    })
}

/// Tells a waiting `perf record --control=fifo:CTL,ACK -D -1` to start (`enable`) or stop
/// (`disable`) sampling, when `OUTBOX_BENCH_PERF_CTL=CTL,ACK` names its two fifos, and waits
/// for its answer: so a profile holds the drains only, not the fills around them.
fn perf_ctl(what: &str) {
    let Ok(fifos) = std::env::var("OUTBOX_BENCH_PERF_CTL") else {
        return;
    };
    let Some((ctl, ack)) = fifos.split_once(',') else {
        eprintln!("benchmark: OUTBOX_BENCH_PERF_CTL must be CTL,ACK (two fifos)");
        return;
    };
    use std::io::{Read, Write};
    let told = std::fs::OpenOptions::new()
        .write(true)
        .open(ctl)
        .and_then(|mut f| writeln!(f, "{what}"));
    // perf answers "ack\n\0".
    let answered = told.and_then(|()| std::fs::File::open(ack)?.read(&mut [0u8; 5]));
    if let Err(error) = answered {
        eprintln!("benchmark: perf control {ctl},{ack}: {error}");
    }
}
