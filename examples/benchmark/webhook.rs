//! The webhook row: the real relay at concurrency 64 delivering with the webhook
//! sink to a local HTTP receiver, against the same relay delivering with the log sink
//! (lines written to nowhere), alternating on fresh stores per round. The ratio says what
//! the HTTP round trip costs next to a sink that costs almost nothing.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use outbox_relay::sinks::webhook::{WebhookSink, WebhookSinkConfig};
use outbox_relay::sinks::LogSink;
use outbox_relay::{DeliveryError, DeliveryHandler, Outbox, OutboxMessage, OutboxRelay};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use crate::drain::{self, Progress};
use crate::options::{Keys, StoreKind};
use crate::stores::{fill, BenchStore};

/// The concurrency of the webhook row: the no-op drains' default larger one, so the two
/// compare.
pub const CONCURRENCY: usize = 64;

/// How long a run may go without one more delivery before it is called stalled.
pub const STALL_TIMEOUT: Duration = Duration::from_secs(30);

const LANE: &str = "webhook";

/// Both sinks in one round, msg/s.
#[derive(Debug, Clone, Copy)]
pub struct Round {
    pub log: f64,
    /// The sink under test (the webhook sink here, the Kafka sink in the Kafka row).
    pub sink: f64,
}

impl Round {
    pub fn ratio(&self) -> f64 {
        self.sink / self.log.max(1e-9)
    }
}

/// Every round of one store, one sink against the log sink (the webhook row and the Kafka
/// row).
#[derive(Debug, Clone)]
pub struct SinkRow {
    pub store: StoreKind,
    pub messages: usize,
    pub concurrency: usize,
    pub rounds: Vec<Round>,
}

impl SinkRow {
    pub fn median_log(&self) -> f64 {
        median(self.rounds.iter().map(|r| r.log))
    }

    pub fn median_sink(&self) -> f64 {
        median(self.rounds.iter().map(|r| r.sink))
    }

    /// The median of the per-round ratios: each ratio compares runs made moments apart.
    pub fn median_ratio(&self) -> f64 {
        median(self.rounds.iter().map(Round::ratio))
    }
}

pub fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut values: Vec<f64> = values.collect();
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Runs `rounds` rounds of `messages` messages per sink on `kind`, log sink first in each.
pub async fn run(
    kind: StoreKind,
    pg_url: &str,
    messages: usize,
    rounds: usize,
    timeout: Duration,
) -> Result<SinkRow, String> {
    let receiver = Receiver::start().await?;
    let url = receiver
        .url
        .parse()
        .map_err(|e| format!("receiver URL {:?}: {e}", receiver.url))?;
    let config = WebhookSinkConfig::new(url);
    let webhook: Arc<dyn DeliveryHandler> =
        Arc::new(WebhookSink::new(&config, None).map_err(|e| format!("webhook sink: {e}"))?);
    let mut row = SinkRow {
        store: kind,
        messages,
        concurrency: CONCURRENCY,
        rounds: Vec::with_capacity(rounds),
    };
    for round in 0..rounds {
        let log = Arc::new(LogSink::new(std::io::sink()));
        let log = one_run(kind, pg_url, log, messages, timeout)
            .await
            .map_err(|e| format!("round {round}, log sink: {e}"))?;
        let hook = one_run(kind, pg_url, webhook.clone(), messages, timeout)
            .await
            .map_err(|e| format!("round {round}, webhook sink: {e}"))?;
        let round = Round { log, sink: hook };
        println!(
            "{} webhook row round {}: log {:.0} msg/s, webhook {:.0} msg/s, {:.2}×",
            kind.label(),
            row.rounds.len(),
            round.log,
            round.sink,
            round.ratio()
        );
        row.rounds.push(round);
    }
    Ok(row)
}

/// One drain of `messages` through `sink` on a fresh store, in msg/s.
pub async fn one_run(
    kind: StoreKind,
    pg_url: &str,
    sink: Arc<dyn DeliveryHandler>,
    messages: usize,
    timeout: Duration,
) -> Result<f64, String> {
    let bench = BenchStore::create(kind, pg_url).await?;
    let outcome = async {
        let filled = fill(&bench.store, kind, LANE, Keys::None, messages).await?;
        drain_through(bench.store.clone(), sink, filled.measured, timeout).await
    }
    .await;
    bench.remove().await;
    outcome
}

/// A sink that notes each message it delivered, and the last error it returned.
struct Counted {
    sink: Arc<dyn DeliveryHandler>,
    progress: Arc<Progress>,
    last_error: Mutex<Option<String>>,
}

#[async_trait]
impl DeliveryHandler for Counted {
    async fn deliver(&self, message: &OutboxMessage) -> Result<(), DeliveryError> {
        let outcome = self.sink.deliver(message).await;
        match &outcome {
            Ok(()) => self.progress.record(message),
            Err(error) => {
                let mut last = self.last_error.lock().unwrap_or_else(|p| p.into_inner());
                *last = Some(error.to_string());
            }
        }
        outcome
    }
}

/// Drains through the real relay until `sink` has delivered every measured message. Fails
/// when no delivery happens for `STALL_TIMEOUT` or the whole drain passes `timeout`: a
/// partial rate would make the ratio meaningless.
async fn drain_through(
    store: Outbox,
    sink: Arc<dyn DeliveryHandler>,
    measured: usize,
    timeout: Duration,
) -> Result<f64, String> {
    let progress = Progress::new(measured);
    let counted = Arc::new(Counted {
        sink,
        progress: progress.clone(),
        last_error: Mutex::new(None),
    });
    let started = Instant::now();
    let relay = OutboxRelay::builder(&store)
        .lane_shared(
            drain::lane_config(LANE, CONCURRENCY),
            counted.clone() as Arc<dyn DeliveryHandler>,
        )
        .start()
        .await
        .map_err(|e| format!("start relay: {e}"))?;
    let mut seen = 0;
    let mut last_progress = Instant::now();
    let failure = loop {
        if progress.is_done() {
            break None;
        }
        // A short tick, so a notification lost between the check and the wait costs 100 ms
        // at most, not the stall timeout.
        let _ = tokio::time::timeout(Duration::from_millis(100), progress.done()).await;
        let count = progress.count();
        if count > seen {
            seen = count;
            last_progress = Instant::now();
        }
        if progress.is_done() {
            break None;
        }
        let last_error = || {
            counted
                .last_error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone()
                .map_or(String::new(), |e| format!("; last delivery error: {e}"))
        };
        if last_progress.elapsed() >= STALL_TIMEOUT {
            break Some(format!(
                "stalled: {seen} of {measured} delivered, none for {STALL_TIMEOUT:?}{}",
                last_error()
            ));
        }
        if started.elapsed() >= timeout {
            break Some(format!(
                "timed out: {seen} of {measured} delivered in {timeout:?}{}",
                last_error()
            ));
        }
    };
    let took = started.elapsed();
    if let Err(error) = relay.shutdown(Duration::from_secs(10)).await {
        eprintln!("benchmark: relay shutdown: {error}");
    }
    match failure {
        Some(failure) => Err(failure),
        None => Ok(measured as f64 / took.as_secs_f64().max(1e-9)),
    }
}

/// A local webhook receiver: HTTP/1.1 keep-alive, reads each request (headers and a
/// `content-length` body) and answers `204 No Content`. Stops when dropped.
struct Receiver {
    url: String,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    async fn start() -> Result<Self, String> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| format!("webhook receiver: bind a loopback port: {e}"))?;
        let addr = listener
            .local_addr()
            .map_err(|e| format!("webhook receiver: local address: {e}"))?;
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                // Disables Nagle: a 204 held back for a delayed ACK would time the kernel.
                let _ = stream.set_nodelay(true);
                connections.spawn(serve(stream));
            }
        });
        Ok(Self {
            url: format!("http://{addr}/hook"),
            task,
        })
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        // Aborting the accept loop drops its JoinSet, which aborts every connection.
        self.task.abort();
    }
}

/// Answers every request on one connection until the client closes it.
async fn serve(stream: tokio::net::TcpStream) {
    let mut stream = BufReader::new(stream);
    let mut line = String::new();
    loop {
        let mut length = 0;
        loop {
            line.clear();
            match stream.read_line(&mut line).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0; length];
        if stream.read_exact(&mut body).await.is_err() {
            return;
        }
        let answer = b"HTTP/1.1 204 No Content\r\n\r\n";
        if stream.get_mut().write_all(answer).await.is_err() {
            return;
        }
    }
}
