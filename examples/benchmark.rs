//! The project's benchmark: the supervised actor relay against the seed's single-loop relay
//! (claim a batch, deliver one message after another, ack each), side by side in one
//! process on the same kind of store and the same simulated target latency. These machines
//! are noisy, so the result is a ratio between runs made moments apart, never an absolute.
//!
//! Run:
//!   cargo run --release --example benchmark
//!   cargo run --release --example benchmark -- --messages 5000 --latency-ms 2 --rounds 5 \
//!       --concurrency 32 --store sqlite
//!   cargo run --release --example benchmark -- --store postgres://postgres@127.0.0.1:5432/test
//!
//! Prints one line per round with both throughputs and their ratio, then the median ratio.
//!
//! Then the webhook row: the actor relay delivering over HTTP to a local receiver (a minimal
//! keep-alive HTTP/1.1 server in this process answering 204) with the webhook sink at
//! concurrency 64, against the same relay delivering to the log sink (lines written to
//! nowhere), side by side per round on fresh stores: the ratio says what the HTTP round
//! trip costs relative to a sink that costs almost nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use outbox_relay::relay::RelayEvent;
use outbox_relay::sinks::webhook::{WebhookSink, WebhookSinkConfig};
use outbox_relay::sinks::LogSink;
use outbox_relay::store::{ClaimRequest, Nack, NackDisposition};
use outbox_relay::{
    DeliveryError, DeliveryHandler, InMemoryOutboxStore, LaneConfig, OutboxMessage,
    OutboxMessageDraft, OutboxRelay, OutboxStore,
};

/// How long a run may go without a relay event before the benchmark calls it stalled.
const STALL_TIMEOUT: Duration = Duration::from_secs(30);

/// A target that takes `latency` per message, as a broker or webhook round trip would.
struct SimulatedTarget {
    latency: Duration,
}

#[async_trait]
impl DeliveryHandler for SimulatedTarget {
    async fn deliver(&self, _message: &OutboxMessage) -> Result<(), DeliveryError> {
        tokio::time::sleep(self.latency).await;
        Ok(())
    }
}

struct Options {
    messages: usize,
    latency: Duration,
    rounds: usize,
    concurrency: usize,
    store: String,
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        messages: 2_000,
        latency: Duration::from_millis(2),
        rounds: 3,
        concurrency: 16,
        store: "memory".to_owned(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = || {
            value
                .parse::<usize>()
                .map_err(|e| format!("{flag} {value}: {e}"))
        };
        match flag.as_str() {
            "--messages" => options.messages = number()?,
            "--latency-ms" => options.latency = Duration::from_millis(number()? as u64),
            "--rounds" => options.rounds = number()?.max(1),
            "--concurrency" => options.concurrency = number()?.max(1),
            "--store" => options.store = value,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(options)
}

/// A fresh, empty store of the kind asked for: `memory`, `sqlite` (a temporary file) or a
/// `postgres://` URL (a schema of its own per run, dropped at the end).
async fn open_store(kind: &str, run: &str) -> Result<(Arc<dyn OutboxStore>, Cleanup), String> {
    match kind {
        "memory" => Ok((Arc::new(InMemoryOutboxStore::new()), Cleanup::None)),
        "sqlite" => {
            let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
            let store = outbox_relay::SqliteOutboxStore::open(dir.path().join("bench.db"))
                .await
                .map_err(|e| e.to_string())?;
            Ok((Arc::new(store), Cleanup::Dir(dir)))
        }
        url if url.starts_with("postgres") => {
            use outbox_relay::store::postgres::{PostgresConfig, PostgresOutboxStore};
            let schema = format!("bench_{run}_{}", std::process::id());
            let store = PostgresOutboxStore::connect_with(
                url,
                PostgresConfig::default().with_schema(schema.clone()),
            )
            .await
            .map_err(|e| e.to_string())?;
            let pool = store.pool().clone();
            Ok((Arc::new(store), Cleanup::Schema(pool, schema)))
        }
        other => Err(format!(
            "unknown store {other:?}: use memory, sqlite or a postgres:// URL"
        )),
    }
}

/// What a benchmark store leaves behind.
enum Cleanup {
    None,
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
                eprintln!("benchmark: could not drop schema {schema}: {error}");
            }
        }
    }
}

async fn fill(store: &dyn OutboxStore, n: usize) {
    let drafts: Vec<OutboxMessageDraft> = (0..n)
        .map(|i| {
            OutboxMessageDraft::new("bench", "target", serde_json::json!({ "n": i }))
                .expect("valid draft")
        })
        .collect();
    for chunk in drafts.chunks(500) {
        store.enqueue_many(chunk.to_vec()).await.expect("enqueue");
    }
}

/// The seed relay's loop: claim a batch, deliver each in turn, ack each on its own.
async fn baseline(store: Arc<dyn OutboxStore>, target: &SimulatedTarget, n: usize) -> Duration {
    let request = ClaimRequest::new("bench", "target", 64, Duration::from_secs(30), "baseline");
    let started = Instant::now();
    let mut delivered = 0;
    while delivered < n {
        let batch = store.claim(&request).await.expect("claim");
        for message in batch.messages {
            let Some(claim) = message.claim() else {
                continue;
            };
            match target.deliver(&message).await {
                Ok(()) => {
                    store.ack(&[claim]).await.expect("ack");
                    delivered += 1;
                }
                Err(error) => {
                    let nack = Nack {
                        claim,
                        error: error.to_string(),
                        disposition: NackDisposition::Retry(Duration::ZERO),
                    };
                    store.nack(&[nack]).await.expect("nack");
                }
            }
        }
    }
    started.elapsed()
}

async fn actor_relay(
    store: Arc<dyn OutboxStore>,
    latency: Duration,
    n: usize,
    concurrency: usize,
) -> Duration {
    actor_relay_with(store, Arc::new(SimulatedTarget { latency }), n, concurrency).await
}

async fn actor_relay_with(
    store: Arc<dyn OutboxStore>,
    handler: Arc<dyn DeliveryHandler>,
    n: usize,
    concurrency: usize,
) -> Duration {
    let started = Instant::now();
    let relay = OutboxRelay::builder(store)
        .lane_shared(
            LaneConfig::new("bench", "target")
                .concurrency(concurrency)
                .batch_size(concurrency.max(64)),
            handler,
        )
        .event_capacity(n * 4 + 1024)
        .start()
        .await
        .expect("start relay");
    let mut events = relay.subscribe();
    let mut delivered = 0;
    while delivered < n {
        // A run that stops making progress fails loudly instead of hanging the benchmark.
        let event = tokio::time::timeout(STALL_TIMEOUT, events.recv())
            .await
            .unwrap_or_else(|_| {
                panic!("the relay stalled: {delivered} of {n} delivered, no event for {STALL_TIMEOUT:?}")
            });
        match event {
            Ok(RelayEvent::Delivered { .. }) => delivered += 1,
            Ok(RelayEvent::Failed { error, .. }) => panic!("a delivery failed: {error}"),
            Ok(_) => {}
            Err(error) => panic!("lost relay events: {error}"),
        }
    }
    let took = started.elapsed();
    relay
        .shutdown(Duration::from_secs(5))
        .await
        .expect("shutdown");
    took
}

/// A local webhook receiver: HTTP/1.1 keep-alive, reads each request (headers and a
/// `content-length` body) and answers `204 No Content`. Returns its URL.
async fn start_receiver() -> String {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let addr = listener.local_addr().expect("local address");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut stream = BufReader::new(stream);
                loop {
                    let mut length = 0;
                    let mut line = String::new();
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
            });
        }
    });
    format!("http://{addr}/hook")
}

/// The webhook row: webhook sink to a local receiver vs. log sink, actor relay, c=64.
async fn webhook_row(options: &Options) {
    const CONCURRENCY: usize = 64;
    let url = start_receiver().await;
    let config = WebhookSinkConfig::new(url.parse().expect("a valid template"));
    let webhook: Arc<dyn DeliveryHandler> =
        Arc::new(WebhookSink::new(&config, None).expect("webhook sink"));
    println!(
        "\nwebhook sink (local HTTP receiver) vs log sink (to nowhere), actor relay, concurrency {CONCURRENCY}"
    );
    println!("round  log msg/s  webhook msg/s  ratio");
    let mut ratios = Vec::new();
    for round in 0..options.rounds {
        let run = |name: String, handler: Arc<dyn DeliveryHandler>| {
            let store_kind = options.store.clone();
            let n = options.messages;
            async move {
                let (store, cleanup) = open_store(&store_kind, &name).await.unwrap_or_else(|e| {
                    eprintln!("benchmark: {e}");
                    std::process::exit(2)
                });
                fill(&*store, n).await;
                let took = actor_relay_with(store, handler, n, CONCURRENCY).await;
                cleanup.run().await;
                rate(n, took)
            }
        };
        let log = run(
            format!("{round}_log"),
            Arc::new(LogSink::new(std::io::sink())),
        )
        .await;
        let hook = run(format!("{round}_webhook"), Arc::clone(&webhook)).await;
        let ratio = hook / log;
        ratios.push(ratio);
        println!("{round:>5}  {log:>9.0}  {hook:>13.0}  {ratio:>5.2}x");
    }
    ratios.sort_by(|a, b| a.total_cmp(b));
    println!(
        "median ratio (webhook / log): {:.2}x",
        ratios[ratios.len() / 2]
    );
}

fn rate(n: usize, took: Duration) -> f64 {
    n as f64 / took.as_secs_f64()
}

#[tokio::main]
async fn main() {
    let options = match options() {
        Ok(options) => options,
        Err(error) => {
            eprintln!("benchmark: {error}");
            std::process::exit(2);
        }
    };
    println!(
        "{} messages, {:?} per delivery, store {}, actor relay concurrency {}",
        options.messages, options.latency, options.store, options.concurrency
    );
    println!("round  baseline msg/s  actor msg/s  ratio");
    let target = SimulatedTarget {
        latency: options.latency,
    };
    let mut ratios = Vec::new();
    for round in 0..options.rounds {
        // Baseline and actor relay alternate within each round, each on a fresh store.
        let (store, cleanup) = open_store(&options.store, &format!("{round}_base"))
            .await
            .unwrap_or_else(|e| {
                eprintln!("benchmark: {e}");
                std::process::exit(2)
            });
        fill(&*store, options.messages).await;
        let base = rate(
            options.messages,
            baseline(store, &target, options.messages).await,
        );
        cleanup.run().await;
        let (store, cleanup) = open_store(&options.store, &format!("{round}_actor"))
            .await
            .unwrap_or_else(|e| {
                eprintln!("benchmark: {e}");
                std::process::exit(2)
            });
        fill(&*store, options.messages).await;
        let ours = rate(
            options.messages,
            actor_relay(
                store,
                options.latency,
                options.messages,
                options.concurrency,
            )
            .await,
        );
        cleanup.run().await;
        let ratio = ours / base;
        ratios.push(ratio);
        println!("{round:>5}  {base:>14.0}  {ours:>11.0}  {ratio:>5.2}x");
    }
    ratios.sort_by(|a, b| a.total_cmp(b));
    println!(
        "median ratio (actor / baseline): {:.2}x",
        ratios[ratios.len() / 2]
    );
    webhook_row(&options).await;
}
