//! `lanes`: many lanes in one relay on PostgreSQL, per lane count (`--lanes`): how long the
//! relay takes to be ready, what its lanes cost while idle (the process's CPU, the
//! database's commits, the store calls by operation, the resident memory), how soon one
//! message in every lane is delivered, and how fast `lanes × k` messages drain.
//!
//! Each lane count runs in a database of its own (created and dropped here), so
//! `pg_stat_database.xact_commit` counts this relay's transactions only, not those of
//! anything else on the server. The counter is read from the server's first database:
//! the reads are not counted either. PostgreSQL publishes a backend's counts at most once a
//! second while it is busy and within 10 s once it is idle, so a short `--lanes-window-s`
//! is a smoke run; 60 s is the measurement. Lanes are of concurrency 2
//! (`--lanes-concurrency`) with a no-op handler, every other setting at its default; with `--lanes-metrics on` (the default) the
//! Prometheus recorder is installed as the daemon installs it, and rendered every 15 s as a
//! scrape would; `shared` also has the lanes share their histograms.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use outbox_relay::store::{StoreCall, StoreHook};
use outbox_relay::{
    DeliveryError, DeliveryHandler, LaneConfig, Outbox, OutboxMessage, OutboxMessageDraft,
    OutboxRelay, RelayEvent,
};
use sqlx::AssertSqlSafe;

use crate::options::{Options, StoreKind};
use crate::stores::{BenchStore, FILL_BATCH, TARGET};

/// How long the lanes run after they are ready and before the idle window opens: their
/// first claims and stats samples are behind them, and PostgreSQL has published the
/// counts of those transactions (a backend that went idle publishes within 10 s), so they
/// do not land in the window.
const SETTLE: Duration = Duration::from_secs(11);
/// How often the recorder is rendered, as a Prometheus scrape would.
const SCRAPE_EVERY: Duration = Duration::from_secs(15);

/// What one step of a row measured, or why it failed: a row keeps the steps it measured
/// and shows the failed one's error in its cell.
pub type Step<T> = Result<T, String>;

/// One lane count's measurements.
#[derive(Debug, Clone)]
pub struct LanesRow {
    pub lanes: usize,
    /// Each lane's handlers.
    pub concurrency: usize,
    /// From the relay's start to every lane's first idle sleep (its first claim answered);
    /// `None`: not every lane within `--drain-timeout-s`, and how many were.
    pub ready: Step<Option<Duration>>,
    pub ready_lanes: usize,
    pub ready_timeout: Duration,
    /// What the idle lanes cost over the window.
    pub idle: Step<Idle>,
    /// Resident memory before the relay started.
    pub rss_before: u64,
    /// One message enqueued into each lane: from the enqueue's start to the last delivery.
    pub one_each: Step<Option<Duration>>,
    /// `lanes × per_lane` messages enqueued at once: from the enqueue's start to the last
    /// delivery.
    pub drain_messages: usize,
    pub drain: Step<Option<Duration>>,
    /// The connections the lanes may hold at once, against the pool's size.
    pub connections_needed: usize,
    pub pool: Option<u32>,
}

/// What the idle lanes cost over the window.
#[derive(Debug, Clone)]
pub struct Idle {
    /// The window the rest were taken over.
    pub window: Duration,
    /// The process's CPU time over the window, as a share of one core.
    pub cpu: f64,
    /// Transactions committed in the lanes' database per second over the window.
    pub commits: f64,
    /// Store calls per second over the window, by operation.
    pub calls: BTreeMap<&'static str, f64>,
    /// Resident memory at the end of the window.
    pub rss: u64,
    /// Lines of the Prometheus exposition at the end of the window (0: metrics off).
    pub metric_lines: usize,
}

/// A failed step's cell: its error, with what would end a Markdown cell escaped.
fn failed(error: &str) -> String {
    format!("failed: {}", error.replace('|', "\\|").replace('\n', " "))
}

impl LanesRow {
    pub fn drain_rate(&self) -> Option<f64> {
        let took = self.drain.as_ref().ok().copied().flatten()?;
        Some(self.drain_messages as f64 / took.as_secs_f64().max(1e-9))
    }

    pub fn markdown(rows: &[LanesRow], w: &mut String) {
        use std::fmt::Write as _;
        if rows.is_empty() {
            return;
        }
        let _ = writeln!(w, "## Many lanes in one relay (PostgreSQL)\n");
        let _ = writeln!(
            w,
            "A no-op handler, defaults otherwise, in a database of their own. Idle: over the \
             window, after every lane's first idle sleep and {} s more. Delivered within: from the enqueue's start to the last handler call.\n",
            SETTLE.as_secs()
        );
        let _ = writeln!(
            w,
            "| lanes | c | start to ready | idle: relay CPU | idle: database commits/s | idle: store calls/s | RSS (before start) | RSS per lane | one message per lane: all delivered within | drain of N × k messages | connections needed / pool | metric lines |"
        );
        let _ = writeln!(
            w,
            "|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"
        );
        for r in rows {
            let ready = match &r.ready {
                Ok(Some(t)) => format!("{:.2} s", t.as_secs_f64()),
                Ok(None) => format!(
                    "{} of {} lanes after {} s",
                    r.ready_lanes,
                    r.lanes,
                    r.ready_timeout.as_secs()
                ),
                Err(error) => failed(error),
            };
            let idle: [String; 6] = match &r.idle {
                Ok(idle) => {
                    let calls: Vec<String> = idle
                        .calls
                        .iter()
                        .filter(|(_, rate)| **rate > 0.0)
                        .map(|(op, rate)| format!("{op} {rate:.1}"))
                        .collect();
                    let per_lane = idle.rss.saturating_sub(r.rss_before) as f64 / r.lanes as f64;
                    [
                        format!("{:.1} % of a core", idle.cpu * 100.0),
                        format!("{:.1} (over {} s)", idle.commits, idle.window.as_secs()),
                        calls.join(", "),
                        format!("{:.0} MiB ({:.0} MiB)", mib(idle.rss), mib(r.rss_before)),
                        format!("{:.1} KiB", per_lane / 1024.0),
                        idle.metric_lines.to_string(),
                    ]
                }
                Err(error) => {
                    let cell = failed(error);
                    [
                        cell.clone(),
                        cell.clone(),
                        cell.clone(),
                        format!("{cell} ({:.0} MiB)", mib(r.rss_before)),
                        cell.clone(),
                        cell,
                    ]
                }
            };
            let one_each = match &r.one_each {
                Ok(Some(t)) => format!("{:.2} s", t.as_secs_f64()),
                Ok(None) => "timed out".to_owned(),
                Err(error) => failed(error),
            };
            let drain = match (&r.drain, r.drain_rate()) {
                (Ok(Some(took)), Some(rate)) => format!(
                    "{:.1} k msg/s ({} in {:.1} s)",
                    rate / 1e3,
                    r.drain_messages,
                    took.as_secs_f64()
                ),
                (Err(error), _) => failed(error),
                _ => format!("timed out ({})", r.drain_messages),
            };
            let [cpu, commits, calls, rss, per_lane, metric_lines] = idle;
            let _ = writeln!(
                w,
                "| {} | {} | {ready} | {cpu} | {commits} | {calls} | {rss} | {per_lane} | {one_each} | {drain} | {} / {} | {metric_lines} |",
                r.lanes,
                r.concurrency,
                r.connections_needed,
                r.pool.map_or("–".to_owned(), |p| p.to_string()),
            );
        }
        let _ = writeln!(w);
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Counts deliveries, and wakes whoever waits for a number of them.
#[derive(Debug, Default)]
struct Deliveries {
    count: AtomicUsize,
    target: AtomicUsize,
    reached: tokio::sync::Notify,
}

impl Deliveries {
    /// Runs `write`, then waits until `more` deliveries beyond those counted before it
    /// have been made, or `timeout`: how long it took from the write's start, or `None`.
    async fn expect(
        &self,
        more: usize,
        timeout: Duration,
        write: impl std::future::Future<Output = Result<(), String>>,
    ) -> Result<Option<Duration>, String> {
        let target = self.count.load(Ordering::Acquire) + more;
        self.target.store(target, Ordering::Release);
        let reached = self.reached.notified();
        tokio::pin!(reached);
        reached.as_mut().enable();
        let started = Instant::now();
        write.await?;
        if self.count.load(Ordering::Acquire) >= target {
            return Ok(Some(started.elapsed()));
        }
        Ok(tokio::time::timeout(timeout, reached)
            .await
            .ok()
            .map(|()| started.elapsed()))
    }
}

#[derive(Debug)]
struct NoOp(Arc<Deliveries>);

#[async_trait]
impl DeliveryHandler for NoOp {
    async fn deliver(&self, _message: &OutboxMessage) -> Result<(), DeliveryError> {
        let count = self.0.count.fetch_add(1, Ordering::AcqRel) + 1;
        if count == self.0.target.load(Ordering::Acquire) {
            self.0.reached.notify_waiters();
        }
        Ok(())
    }
}

/// A store hook counting every call by operation.
#[derive(Debug, Default)]
struct CallCounts(Mutex<BTreeMap<&'static str, u64>>);

impl StoreHook for CallCounts {
    fn finished(&self, call: &StoreCall<'_>) {
        if let Ok(mut counts) = self.0.lock() {
            *counts.entry(call.op.as_str()).or_default() += 1;
        }
    }
}

impl CallCounts {
    fn snapshot(&self) -> BTreeMap<&'static str, u64> {
        self.0.lock().map(|c| c.clone()).unwrap_or_default()
    }
}

/// The process's CPU time (user and system) so far, from `/proc/self/stat`.
fn cpu_time() -> Result<Duration, String> {
    let stat =
        std::fs::read_to_string("/proc/self/stat").map_err(|e| format!("/proc/self/stat: {e}"))?;
    // The fields after the command name, which is in parentheses and may hold spaces.
    let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are the 14th and 15th fields of the line, the 12th and 13th here.
    let ticks = |i: usize| -> Result<u64, String> {
        fields
            .get(i)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("/proc/self/stat field {i}: {after:?}"))
    };
    // Linux reports them in USER_HZ, 100 per second on every architecture it runs on.
    Ok(Duration::from_millis((ticks(11)? + ticks(12)?) * 10))
}

/// The process's resident memory, from `/proc/self/status`.
fn rss() -> Result<u64, String> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("/proc/self/status: {e}"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .ok_or_else(|| "no VmRSS in /proc/self/status".to_owned())
}

/// `url` with its database name replaced by `database`.
fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let base = base.rsplit_once('/').map_or(base, |(server, _)| server);
    match query {
        Some(query) => format!("{base}/{database}?{query}"),
        None => format!("{base}/{database}"),
    }
}

async fn xact_commit(admin: &sqlx::PgPool, database: &str) -> Result<i64, String> {
    sqlx::query_scalar("SELECT xact_commit FROM pg_stat_database WHERE datname = $1")
        .bind(database)
        .fetch_one(admin)
        .await
        .map_err(|e| format!("pg_stat_database: {e}"))
}

/// Installs the Prometheus recorder once, with the daemon's buckets, and renders it every
/// [`SCRAPE_EVERY`]; the handle, to render at the end of each window.
fn recorder(options: &Options) -> Result<Option<outbox_relay::metrics::PrometheusHandle>, String> {
    static HANDLE: std::sync::OnceLock<outbox_relay::metrics::PrometheusHandle> =
        std::sync::OnceLock::new();
    if !options.lanes_metrics {
        return Ok(None);
    }
    if let Some(handle) = HANDLE.get() {
        return Ok(Some(handle.clone()));
    }
    let handle = outbox_relay::metrics::prometheus_builder()
        .map_err(|e| format!("Prometheus builder: {e}"))?
        .install_recorder()
        .map_err(|e| format!("Prometheus recorder: {e}"))?;
    outbox_relay::metrics::describe();
    let scraped = handle.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(SCRAPE_EVERY);
        loop {
            every.tick().await;
            let _ = scraped.render();
        }
    });
    Ok(Some(HANDLE.get_or_init(|| handle).clone()))
}

/// The `lanes` row of `lanes` lanes, in a database of its own.
pub async fn run(lanes: usize, options: &Options) -> Result<LanesRow, String> {
    let admin = sqlx::PgPool::connect(&options.pg_url)
        .await
        .map_err(|e| format!("PostgreSQL {}: {e}", options.pg_url))?;
    let database = format!("bench_lanes_{}_{lanes}", std::process::id());
    sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE \"{database}\"")))
        .execute(&admin)
        .await
        .map_err(|e| format!("create database {database}: {e}"))?;
    let outcome = async {
        let bench = BenchStore::create(
            StoreKind::Postgres,
            &with_database(&options.pg_url, &database),
        )
        .await?;
        let outcome = measure(&bench, &admin, &database, lanes, options).await;
        bench.remove().await;
        outcome
    }
    .await;
    let drop = format!("DROP DATABASE IF EXISTS \"{database}\" WITH (FORCE)");
    if let Err(error) = sqlx::raw_sql(AssertSqlSafe(drop)).execute(&admin).await {
        eprintln!("benchmark: could not drop database {database}: {error}");
    }
    admin.close().await;
    outcome
}

async fn measure(
    bench: &BenchStore,
    admin: &sqlx::PgPool,
    database: &str,
    lanes: usize,
    options: &Options,
) -> Result<LanesRow, String> {
    let metrics = recorder(options)?;
    let counts = Arc::new(CallCounts::default());
    let store: Outbox = bench.store.clone().with_hook(counts.clone());
    let deliveries = Arc::new(Deliveries::default());
    let handler: Arc<dyn DeliveryHandler> = Arc::new(NoOp(deliveries.clone()));
    let names: Vec<String> = (0..lanes).map(|i| format!("lane-{i:05}")).collect();
    let mut builder = OutboxRelay::builder(&store).event_capacity(lanes * 8 + 1024);
    for name in &names {
        builder = builder.lane_shared(
            LaneConfig::new(name, TARGET)
                .concurrency(options.lanes_concurrency)
                .shared_histograms(options.lanes_shared_histograms),
            handler.clone(),
        );
    }
    let connections_needed = builder.connections_needed();
    let pool = store.as_backend().max_connections();
    let mut events = builder.subscribe();
    let rss_before = rss()?;
    let started = Instant::now();
    let relay = builder
        .start()
        .await
        .map_err(|e| format!("start relay: {e}"))?;
    // Ready: every lane has claimed once and gone to sleep.
    let mut idle = std::collections::HashSet::new();
    let ready = match tokio::time::timeout(options.drain_timeout, async {
        while idle.len() < lanes {
            match events.recv().await {
                Ok(RelayEvent::Idle { lane, .. }) => {
                    idle.insert(lane);
                }
                Ok(_) => {}
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    return Err(format!("lost {n} relay events"))
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                    return Err("the relay stopped".to_owned())
                }
            }
        }
        Ok(started.elapsed())
    })
    .await
    {
        Ok(ready) => ready.map(Some),
        // Measured all the same: the idle window then shows what keeps them busy.
        Err(_) => Ok(None),
    };
    let ready_lanes = idle.len();
    drop(events);
    tokio::time::sleep(SETTLE).await;

    let idle = async {
        let (cpu0, commits0, calls0, t0) = (
            cpu_time()?,
            xact_commit(admin, database).await?,
            counts.snapshot(),
            Instant::now(),
        );
        tokio::time::sleep(options.lanes_window).await;
        let window = t0.elapsed();
        let (cpu1, commits1, calls1) = (
            cpu_time()?,
            xact_commit(admin, database).await?,
            counts.snapshot(),
        );
        let per_s = |n: f64| n / window.as_secs_f64();
        let calls = calls1
            .iter()
            .map(|(op, n)| {
                (
                    *op,
                    per_s((n - calls0.get(op).copied().unwrap_or(0)) as f64),
                )
            })
            .collect();
        Ok::<Idle, String>(Idle {
            window,
            cpu: (cpu1.saturating_sub(cpu0)).as_secs_f64() / window.as_secs_f64(),
            commits: per_s((commits1 - commits0) as f64),
            calls,
            rss: rss()?,
            metric_lines: metrics.map_or(0, |m| m.render().lines().count()),
        })
    }
    .await;

    // Round-robin over the lanes, `per_lane` each, numbered from `from`.
    let drafts = |per_lane: usize, from: usize| -> Result<Vec<OutboxMessageDraft>, String> {
        let mut drafts = Vec::with_capacity(per_lane * names.len());
        for _ in 0..per_lane {
            for name in &names {
                let n = from + drafts.len();
                let draft = OutboxMessageDraft::new(name, TARGET, serde_json::json!({ "n": n }))
                    .map_err(|e| format!("draft: {e}"))?;
                drafts.push(draft);
            }
        }
        Ok(drafts)
    };
    let write = |drafts: Vec<OutboxMessageDraft>| {
        let store = store.clone();
        async move {
            let mut drafts = drafts.into_iter().peekable();
            while drafts.peek().is_some() {
                let chunk: Vec<_> = drafts.by_ref().take(FILL_BATCH).collect();
                store
                    .enqueue_many(chunk)
                    .await
                    .map_err(|e| format!("enqueue: {e}"))?;
            }
            Ok::<(), String>(())
        }
    };
    let one_each = match drafts(1, 0) {
        Ok(drafts) => {
            deliveries
                .expect(lanes, options.drain_timeout, write(drafts))
                .await
        }
        Err(error) => Err(error),
    };
    let drain_messages = lanes * options.lanes_per_lane;
    let drain = match drafts(options.lanes_per_lane, lanes) {
        Ok(drafts) => {
            deliveries
                .expect(drain_messages, options.drain_timeout, write(drafts))
                .await
        }
        Err(error) => Err(error),
    };
    if let Err(error) = relay.shutdown(Duration::from_secs(30)).await {
        eprintln!("benchmark: relay shutdown: {error}");
    }
    let row = LanesRow {
        lanes,
        concurrency: options.lanes_concurrency,
        ready,
        ready_lanes,
        ready_timeout: options.drain_timeout,
        idle,
        rss_before,
        one_each,
        drain_messages,
        drain,
        connections_needed,
        pool,
    };
    println!(
        "PostgreSQL {lanes} lanes of c={}: ready {:?} ({} lanes); idle {:?}; RSS before {:.0} MiB; one each {:?}; drain {:?} msg/s",
        row.concurrency,
        row.ready,
        row.ready_lanes,
        row.idle,
        mib(row.rss_before),
        row.one_each,
        row.drain_rate().map(|r| r.round()),
    );
    Ok(row)
}
