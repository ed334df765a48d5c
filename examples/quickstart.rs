//! Quickstart: a small order service and its outbox relay, on an embedded SQLite file.
//!
//! Run: `cargo run --release --example quickstart` (no database to set up).
//! With `-- --serve` it keeps its metrics endpoint up after the run, until Enter or
//! Ctrl-C, so that you can `curl` it.
//!
//! What it shows, in a few seconds:
//! - each business transaction writes an order row and its outbox messages together
//!   (`SqliteOutboxStore::begin`), for two lanes: `orders → billing` and `orders → email`,
//!   with one ordering key per customer;
//! - the supervised relay delivering them with targets that behave like real ones: some
//!   latency, transient failures (retried with backoff), one message that always fails (it
//!   ends as a dead letter) and one handler panic (the lane survives, the message is
//!   retried);
//! - Prometheus metrics served on a loopback port while it runs;
//! - a summary per lane, and a check that every customer's messages arrived in order.
//!
//! It exits 0 only if every message was delivered or dead-lettered as designed.

use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use outbox_relay::relay::RelayEvent;
use outbox_relay::store::{MessageFilter, NackOutcome};
use outbox_relay::{
    DeliveryError, DeliveryHandler, LaneConfig, Outbox, OutboxMessage, OutboxMessageDraft,
    OutboxRelay, RetryPolicy, SqliteOutboxStore,
};
use serde_json::json;

const ORDERS: u64 = 60;
const CUSTOMERS: u64 = 6;
/// Billing rejects this order every time: it ends in the dead letter.
const POISON_ORDER: u64 = 13;
/// The email handler panics the first time it sees this order.
const PANIC_ORDER: u64 = 21;
const MAX_ATTEMPTS: u32 = 4;
const LANES: [(&str, &str); 2] = [("orders", "billing"), ("orders", "email")];

/// A target that takes a little while, sometimes fails, and remembers what it received
/// per customer, so the order of each customer's messages can be checked afterwards.
/// Orders received per customer, in arrival order.
type Received = Arc<Mutex<HashMap<String, Vec<u64>>>>;

struct Target {
    name: &'static str,
    received: Received,
    panicked: Arc<Mutex<bool>>,
}

/// The payload's `order` field: the payload is raw JSON text, parsed only where read.
fn order_of(message: &OutboxMessage) -> u64 {
    #[derive(serde::Deserialize)]
    struct Order {
        order: u64,
    }
    message
        .payload
        .deserialize::<Order>()
        .map_or(0, |parsed| parsed.order)
}

#[async_trait]
impl DeliveryHandler for Target {
    async fn deliver(&self, message: &OutboxMessage) -> Result<(), DeliveryError> {
        let order = order_of(message);
        // 2–12 ms, like a broker or webhook round trip.
        tokio::time::sleep(Duration::from_millis(2 + order * 7 % 11)).await;
        if self.name == "billing" && order == POISON_ORDER {
            return Err(DeliveryError::retryable("card processor: account closed"));
        }
        if self.name == "email" && order == PANIC_ORDER {
            let mut panicked = self.panicked.lock().unwrap_or_else(|p| p.into_inner());
            if !*panicked {
                *panicked = true;
                drop(panicked);
                panic!("template engine crashed on order {order}");
            }
        }
        // Every 5th order's first attempt hits a transient failure.
        if order.is_multiple_of(5) && message.attempt_count == 1 {
            return Err(DeliveryError::retryable(format!(
                "{}: 503 service unavailable",
                self.name
            )));
        }
        let customer = message.ordering_key.clone().unwrap_or_default();
        self.received
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(customer)
            .or_default()
            .push(order);
        Ok(())
    }
}

#[derive(Default)]
struct Tally {
    enqueued: u64,
    delivered: u64,
    retried: u64,
    dead_lettered: u64,
    redelivered: u64,
    panics: u64,
}

/// What the run found; `ok()` says whether it went as designed.
struct Outcome {
    /// Where the metrics are served, if they are (a second run in one process finds the
    /// exporter already installed).
    metrics: Option<SocketAddr>,
    tallies: BTreeMap<String, Tally>,
    order_kept: bool,
    dead_letters: Vec<(String, u64, String)>,
}

impl Outcome {
    fn ok(&self) -> bool {
        let billing = &self.tallies["orders/billing"];
        let email = &self.tallies["orders/email"];
        self.order_kept
            && billing.delivered == ORDERS - 1
            && billing.dead_lettered == 1
            && email.delivered == ORDERS
            && email.dead_lettered == 0
            && email.panics == 1
            && self.dead_letters.len() == 1
            && self.dead_letters[0].1 == POISON_ORDER
    }
}

fn free_loopback_port() -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    listener.local_addr()
}

async fn run() -> Result<Outcome, Box<dyn std::error::Error>> {
    // The designed handler panic prints one line, not a backtrace: the relay reports it.
    std::panic::set_hook(Box::new(|info| eprintln!("  (a handler panicked: {info})")));
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("outbox.db");
    let store = Outbox::new(SqliteOutboxStore::open(&path).await?);
    println!("outbox: {}", path.display());

    // Metrics on a loopback port for as long as the relay runs.
    let metrics_addr = free_loopback_port()?;
    let metrics = match outbox_relay::http::install_prometheus_exporter(metrics_addr) {
        Ok(_) => {
            println!("metrics: http://{metrics_addr}/metrics");
            Some(metrics_addr)
        }
        // A second run in one process (the example's own test) finds one installed.
        Err(error) => {
            println!("metrics: not served ({error})");
            None
        }
    };

    // The service: each order row and its messages, in one transaction.
    let mut tx = store.begin().await?;
    sqlx::query("CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, customer TEXT NOT NULL, total_cents INTEGER NOT NULL)")
        .execute(tx.connection())
        .await?;
    tx.commit().await?;
    let mut expected: HashMap<(&str, String), Vec<u64>> = HashMap::new();
    for order in 1..=ORDERS {
        let customer = format!("customer-{}", order % CUSTOMERS);
        let total = 500 + order * 37;
        let mut tx = store.begin().await?;
        sqlx::query("INSERT INTO orders (id, customer, total_cents) VALUES (?1, ?2, ?3)")
            .bind(order as i64)
            .bind(&customer)
            .bind(total as i64)
            .execute(tx.connection())
            .await?;
        for (lane, target) in LANES {
            let draft = OutboxMessageDraft::new(
                lane,
                target,
                json!({ "order": order, "customer": customer, "total_cents": total }),
            )?
            .with_ordering_key(&customer)
            .with_dedupe_key(format!("order-{order}-{target}"))
            .with_max_attempts(MAX_ATTEMPTS);
            tx.enqueue(draft).await?;
            if !(target == "billing" && order == POISON_ORDER) {
                expected
                    .entry((target, customer.clone()))
                    .or_default()
                    .push(order);
            }
        }
        tx.commit().await?;
    }
    println!("enqueued {} orders, {} messages", ORDERS, ORDERS * 2);

    let received: HashMap<&str, Received> =
        LANES.iter().map(|(_, t)| (*t, Arc::default())).collect();
    let lane = |target: &str| {
        LaneConfig::new("orders", target)
            .concurrency(8)
            .lease(Duration::from_secs(10))
            .retry(
                RetryPolicy::new(Duration::from_millis(20), Duration::from_millis(200))
                    .jitter(false),
            )
            .stats_interval(Duration::from_millis(500))
    };
    let mut builder = OutboxRelay::builder(&store).event_capacity(100_000);
    for (_, target) in LANES {
        let handler = Target {
            name: target,
            received: received[target].clone(),
            panicked: Arc::default(),
        };
        builder = builder.lane(lane(target), handler);
    }
    let relay = builder.start().await?;
    let mut events = relay.subscribe();

    let mut tallies: BTreeMap<String, Tally> = BTreeMap::new();
    for (lane, target) in LANES {
        tallies
            .entry(format!("{lane}/{target}"))
            .or_default()
            .enqueued = ORDERS;
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut progress = tokio::time::interval(Duration::from_millis(250));
    loop {
        let settled: u64 = tallies
            .values()
            .map(|t| t.delivered + t.dead_lettered)
            .sum();
        if settled == ORDERS * 2 {
            break;
        }
        tokio::select! {
            event = events.recv() => match event? {
                RelayEvent::Delivered { lane, attempt, .. } => {
                    let tally = tallies.entry(lane.to_string()).or_default();
                    tally.delivered += 1;
                    if attempt > 1 {
                        tally.redelivered += 1;
                    }
                }
                RelayEvent::Failed { lane, outcome, kind, .. } => {
                    let tally = tallies.entry(lane.to_string()).or_default();
                    if kind == outbox_relay::delivery::FailureKind::Panic {
                        tally.panics += 1;
                    }
                    match outcome {
                        NackOutcome::Requeued => tally.retried += 1,
                        NackOutcome::DeadLettered => tally.dead_lettered += 1,
                        NackOutcome::LostClaim => {}
                    }
                }
                _ => {}
            },
            _ = progress.tick() => {
                let line: Vec<String> = tallies
                    .iter()
                    .map(|(lane, t)| format!("{lane}: {} delivered, {} retried, {} dead", t.delivered, t.retried, t.dead_lettered))
                    .collect();
                println!("  … {}", line.join(" | "));
            }
            _ = tokio::time::sleep_until(deadline) => {
                return Err("not every message settled within 60 s".into());
            }
        }
    }
    let report = relay.shutdown(Duration::from_secs(5)).await?;

    let mut order_kept = true;
    for ((target, customer), want) in &expected {
        let got = received[target]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(customer)
            .cloned()
            .unwrap_or_default();
        if &got != want {
            println!("order broken for {target}/{customer}: got {got:?}, want {want:?}");
            order_kept = false;
        }
    }
    let dead = store
        .list(
            &MessageFilter::all().with_status(outbox_relay::OutboxStatus::DeadLetter),
            outbox_relay::store::PageRequest {
                after: None,
                limit: 100,
            },
        )
        .await?;
    let dead_letters = dead
        .messages
        .iter()
        .map(|m| {
            (
                format!("{}/{}", m.lane, m.target),
                order_of(m),
                m.last_error.clone().unwrap_or_default(),
            )
        })
        .collect();
    let stats = store.stats(&MessageFilter::all()).await?;
    let unsettled: u64 = stats.iter().map(|s| s.pending + s.claimed).sum();
    if unsettled > 0 {
        return Err(format!("{unsettled} messages still pending or claimed").into());
    }
    println!(
        "relay stopped: {} deliveries finished during shutdown, {} claims released",
        report.completed(),
        report.released()
    );
    Ok(Outcome {
        metrics,
        tallies,
        order_kept,
        dead_letters,
    })
}

fn print_summary(outcome: &Outcome) {
    println!();
    println!(
        "{:<16} {:>9} {:>10} {:>8} {:>14} {:>12} {:>7}",
        "lane", "enqueued", "delivered", "retried", "dead-lettered", "redelivered", "panics"
    );
    for (lane, t) in &outcome.tallies {
        println!(
            "{:<16} {:>9} {:>10} {:>8} {:>14} {:>12} {:>7}",
            lane, t.enqueued, t.delivered, t.retried, t.dead_lettered, t.redelivered, t.panics
        );
    }
    for (lane, order, error) in &outcome.dead_letters {
        println!("dead letter: {lane} order {order}: {error}");
    }
    println!(
        "per-key order: {}",
        if outcome.order_kept {
            format!("kept for all {CUSTOMERS} customers on both lanes")
        } else {
            "BROKEN".to_owned()
        }
    );
}

/// Waits for a line on `input` (Enter on a terminal; its end counts too) or for Ctrl-C.
/// The line is read on a thread of its own: a blocked read cannot be cancelled, and a
/// plain thread, unlike `tokio::io::stdin` (a read on the runtime's blocking pool), does
/// not hold up the runtime's shutdown after Ctrl-C. It also keeps tokio's `io-std`
/// feature out of the build (see the tokio line in Cargo.toml's dev-dependencies).
async fn until_enter_or_ctrl_c(input: impl std::io::Read + Send + 'static) {
    use std::io::BufRead;
    let (line_read, enter) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let _ = std::io::BufReader::new(input).read_line(&mut String::new());
        let _ = line_read.send(());
    });
    tokio::select! {
        _ = enter => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

#[tokio::main]
async fn main() {
    let serve = std::env::args().skip(1).any(|arg| arg == "--serve");
    match run().await {
        Ok(outcome) => {
            print_summary(&outcome);
            // The exporter runs on a thread of its own for the life of the process: it
            // keeps answering (with the run's final numbers) until we exit.
            if let (true, Some(addr)) = (serve, outcome.metrics) {
                println!();
                println!(
                    "serving http://{addr}/metrics (also /healthz); press Enter or Ctrl-C to stop"
                );
                until_enter_or_ctrl_c(std::io::stdin()).await;
            }
            if outcome.ok() {
                println!("quickstart: every message was delivered or dead-lettered as designed");
            } else {
                eprintln!("quickstart: the run did not go as designed");
                std::process::exit(1);
            }
        }
        Err(error) => {
            eprintln!("quickstart failed: {error}");
            std::process::exit(1);
        }
    }
}

#[cfg(test)]
mod tests {
    /// The example is also a test: `cargo test` runs it (see Cargo.toml).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn quickstart_runs_as_designed() {
        let outcome = super::run().await.expect("the quickstart runs");
        super::print_summary(&outcome);
        assert!(outcome.ok(), "the quickstart did not go as designed");

        // What `--serve` relies on: the endpoint outlives the run, with its numbers.
        let addr = outcome.metrics.expect("the only exporter in this process");
        let page = tokio::time::timeout(std::time::Duration::from_secs(30), async {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
            stream
                .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                .await
                .expect("send");
            let mut page = String::new();
            stream.read_to_string(&mut page).await.expect("read");
            page
        })
        .await
        .expect("the metrics endpoint answers after the run");
        assert!(page.starts_with("HTTP/1.1 200"), "{page}");
        assert!(page.contains("outbox_delivered_total{"), "{page}");
        // And `--serve` stops at Enter.
        tokio::time::timeout(
            std::time::Duration::from_secs(30),
            super::until_enter_or_ctrl_c(&b"\n"[..]),
        )
        .await
        .expect("Enter stops the serving");
    }
}
