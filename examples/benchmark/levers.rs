//! The throughput levers past one store cycle, each against its own baseline in the same run:
//!
//! - `history`: per store, backlog and concurrency, a lane that keeps delivered rows against
//!   one that deletes them at the ack (`keep_delivered = false`), each beside the raw
//!   ceiling that does the same (the raw loop's ack an UPDATE, or a DELETE), and the
//!   default lane (one claim in flight) beside one with two, which is how each store's
//!   default was chosen.
//! - `replicas`: PostgreSQL, one lane drained by 1, 2 and 3 `outbox-relay` processes (real
//!   processes, each with its own pool, started from the binary next to this one), with the
//!   lane's concurrency split between them and with the full concurrency each. The rate is
//!   taken from the rows' own `delivered_at` (the middle 80 % of them), so process start-up
//!   and its skew between processes are not counted.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use outbox_relay::store::MessageFilter;
use outbox_relay::LaneConfig;
use sqlx::AssertSqlSafe;

use crate::options::{Keys, Options, StoreKind};
use crate::stores::{fill, BenchStore, Location, TARGET};
use crate::{drain, raw};

/// One store, backlog and concurrency: the four drains and two raw loops of `history`.
#[derive(Debug, Clone)]
pub struct HistoryRow {
    pub store: StoreKind,
    pub backlog: usize,
    pub concurrency: usize,
    /// Raw loop rows/s: its ack an UPDATE to delivered, and a DELETE.
    pub raw_keep: f64,
    pub raw_delete: f64,
    /// The relay's msg/s at its defaults (history kept), and deleting.
    pub relay_keep: f64,
    pub relay_delete: f64,
    /// The other claims in flight than the store's default (PostgreSQL 2, the others 1), and
    /// the relay's msg/s with it (history kept).
    pub other_claims: usize,
    pub relay_other_claims: f64,
}

impl HistoryRow {
    pub fn markdown(rows: &[HistoryRow]) -> String {
        let mut text = String::from(
            "\n### Delete on ack against keep history, and claims in flight\n\n\
             Each drain beside the raw ceiling that writes the same: the raw loop's ack an \
             UPDATE (keep) or a DELETE. \"other claims\" is the same lane (history kept) \
             with the other `claims_in_flight` than the store's default (PostgreSQL 2, the others 1).\n\n\
             | store | backlog | c | raw keep rows/s | raw delete rows/s | relay keep msg/s | \
             keep ÷ raw keep | relay delete msg/s | delete ÷ raw delete | delete ÷ keep | \
             other claims in flight: msg/s | default ÷ other |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for r in rows {
            text.push_str(&format!(
                "| {} | {} | {} | {:.0} | {:.0} | {:.0} | {:.2}× | {:.0} | {:.2}× | {:.2}× | {}: {:.0} | {:.2}× |\n",
                r.store.label(),
                r.backlog,
                r.concurrency,
                r.raw_keep,
                r.raw_delete,
                r.relay_keep,
                r.relay_keep / r.raw_keep.max(1e-9),
                r.relay_delete,
                r.relay_delete / r.raw_delete.max(1e-9),
                r.relay_delete / r.relay_keep.max(1e-9),
                r.other_claims,
                r.relay_other_claims,
                r.relay_keep / r.relay_other_claims.max(1e-9),
            ));
        }
        text
    }
}

/// The raw loop on a fresh store of `backlog` rows, its ack keeping or deleting.
async fn raw_case(
    kind: StoreKind,
    backlog: usize,
    delete: bool,
    options: &Options,
) -> Result<f64, String> {
    const LANE: &str = "raw";
    let bench = BenchStore::create(kind, &options.pg_url).await?;
    let outcome = async {
        fill(&bench.store, kind, LANE, Keys::None, backlog).await?;
        bench.settle().await;
        let ceiling = match (&bench.pg_pool, &bench.location) {
            (Some(pool), _) => {
                raw::postgres(pool, &bench.table, LANE, options.drain_timeout, delete).await?
            }
            (None, Location::Sqlite { path }) => {
                raw::sqlite(path, &bench.table, LANE, options.drain_timeout, delete).await?
            }
            (None, Location::Mysql { .. }) => match &bench.mysql_pool {
                Some(pool) => {
                    raw::mysql(pool, &bench.table, LANE, options.drain_timeout, delete).await?
                }
                None => return Err("no MySQL pool".to_owned()),
            },
            _ => return Err("no raw ceiling for this store".to_owned()),
        };
        Ok(ceiling.rate())
    }
    .await;
    bench.remove().await;
    outcome
}

/// A no-op drain through the relay on a fresh store of `backlog` rows with `config`.
async fn relay_case(
    kind: StoreKind,
    backlog: usize,
    config: LaneConfig,
    options: &Options,
) -> Result<f64, String> {
    let bench = BenchStore::create(kind, &options.pg_url).await?;
    let outcome = async {
        let filled = fill(&bench.store, kind, &config.name, Keys::None, backlog).await?;
        bench.settle().await;
        let drained = drain::drain(
            bench.store.clone(),
            config,
            filled.measured,
            filled.total - filled.measured,
            Duration::ZERO,
            options.drain_timeout,
        )
        .await?;
        if drained.timed_out {
            return Err(format!("timed out after {:?}", drained.took));
        }
        Ok(drained.rate())
    }
    .await;
    bench.remove().await;
    outcome
}

/// The claims in flight a lane keeps by default on `kind` (the store's
/// `Capabilities::claims_in_flight`, as the relay resolves it).
fn bench_default_claims(kind: StoreKind) -> usize {
    match kind {
        StoreKind::Postgres => 2,
        _ => 1,
    }
}

/// The `history` row of one store, backlog and concurrency.
pub async fn history(
    kind: StoreKind,
    backlog: usize,
    concurrency: usize,
    options: &Options,
) -> Result<HistoryRow, String> {
    const LANE: &str = "drain";
    let lane = || drain::lane_config(LANE, concurrency);
    let raw_keep = raw_case(kind, backlog, false, options).await?;
    let relay_keep = relay_case(kind, backlog, lane(), options).await?;
    let raw_delete = raw_case(kind, backlog, true, options).await?;
    let relay_delete = relay_case(kind, backlog, lane().keep_delivered(false), options).await?;
    // The other choice than the store's default: one where it keeps two out, else two.
    let other_claims = match bench_default_claims(kind) {
        1 => 2,
        _ => 1,
    };
    let relay_other_claims = relay_case(
        kind,
        backlog,
        lane().claims_in_flight(other_claims),
        options,
    )
    .await?;
    let row = HistoryRow {
        store: kind,
        backlog,
        concurrency,
        raw_keep,
        raw_delete,
        relay_keep,
        relay_delete,
        other_claims,
        relay_other_claims,
    };
    println!(
        "{} history at {backlog}, c={concurrency}: raw keep {:.0}, raw delete {:.0}, relay keep {:.0} ({:.2}×), delete {:.0} ({:.2}×), {} claims in flight {:.0}",
        kind.label(),
        row.raw_keep,
        row.raw_delete,
        row.relay_keep,
        row.relay_keep / row.raw_keep.max(1e-9),
        row.relay_delete,
        row.relay_delete / row.raw_delete.max(1e-9),
        row.other_claims,
        row.relay_other_claims,
    );
    Ok(row)
}

/// One case of the `replicas` row.
#[derive(Debug, Clone)]
pub struct ReplicaRow {
    pub processes: usize,
    /// Each process's concurrency.
    pub concurrency: usize,
    /// Whether each process has the lane's full concurrency (else its share).
    pub full: bool,
    pub backlog: usize,
    /// Aggregate msg/s over the middle 80 % of the deliveries.
    pub rate: f64,
}

impl ReplicaRow {
    pub fn markdown(rows: &[ReplicaRow]) -> String {
        let mut text = String::from(
            "\n### Replicas: relay processes on one lane (PostgreSQL)\n\n\
             Each process is an `outbox-relay run` of its own (its own pool and claims), \
             the lane at its defaults but for the concurrency. The rate is taken from the \
             rows' `delivered_at`, the middle 80 % of them, so start-up is not counted.\n\n\
             | processes | concurrency each | backlog | msg/s (all processes) | × one process |\n\
             |---:|---:|---:|---:|---:|\n",
        );
        for full in [false, true] {
            let one = rows
                .iter()
                .find(|r| r.full == full && r.processes == 1)
                .map_or(f64::NAN, |r| r.rate);
            for r in rows.iter().filter(|r| r.full == full) {
                text.push_str(&format!(
                    "| {} | {} ({}) | {} | {:.0} | {:.2}× |\n",
                    r.processes,
                    r.concurrency,
                    if full { "full" } else { "split" },
                    r.backlog,
                    r.rate,
                    r.rate / one,
                ));
            }
        }
        text
    }
}

/// The relay binary: `OUTBOX_BENCH_RELAY_BIN`, else `outbox-relay` beside this program's
/// directory (`target/release/examples/benchmark` → `target/release/outbox-relay`).
fn relay_binary() -> Result<std::path::PathBuf, String> {
    if let Ok(path) = std::env::var("OUTBOX_BENCH_RELAY_BIN") {
        return Ok(path.into());
    }
    let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
    let path = exe
        .parent()
        .and_then(|examples| examples.parent())
        .map(|dir| dir.join("outbox-relay"))
        .ok_or("no directory above this program")?;
    if !path.exists() {
        return Err(format!(
            "{} is missing: cargo build --release --all-features --bin outbox-relay \
             (or set OUTBOX_BENCH_RELAY_BIN)",
            path.display()
        ));
    }
    Ok(path)
}

/// Processes killed when dropped, so a failed case leaves none behind.
struct Processes(Vec<Child>);

impl Drop for Processes {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Drains `backlog` rows of a fresh PostgreSQL lane with `processes` relay processes of
/// `concurrency` each.
async fn replica_case(
    processes: usize,
    concurrency: usize,
    backlog: usize,
    options: &Options,
) -> Result<f64, String> {
    const LANE: &str = "replicas";
    let binary = relay_binary()?;
    let bench = BenchStore::create(StoreKind::Postgres, &options.pg_url).await?;
    let outcome = async {
        let Location::Postgres { url, schema } = &bench.location else {
            return Err("replicas run on PostgreSQL".to_owned());
        };
        let pool = bench.pg_pool.as_ref().ok_or("no pool")?;
        fill(&bench.store, StoreKind::Postgres, LANE, Keys::None, backlog).await?;
        bench.settle().await;
        let dir = tempfile::tempdir().map_err(|e| format!("temporary directory: {e}"))?;
        let mut children = Processes(Vec::new());
        for i in 0..processes {
            let config = dir.path().join(format!("relay{i}.toml"));
            let text = format!(
                "database_url = \"{url}\"\nschema = \"{schema}\"\n\
                 consumer_id = \"replica-{i}\"\nshutdown_timeout = \"1s\"\n\n\
                 [listener]\naddress = false\n\n\
                 [[lanes]]\nlane = \"{LANE}\"\ntarget = \"{TARGET}\"\nconcurrency = {concurrency}\n\
                 batch_size = {batch}\nsink = {{ kind = \"log\" }}\n",
                batch = concurrency.max(outbox_relay::config::DEFAULT_BATCH_SIZE),
            );
            std::fs::write(&config, text).map_err(|e| format!("write {config:?}: {e}"))?;
            let child = Command::new(&binary)
                .arg("--config")
                .arg(&config)
                .arg("run")
                .env("RUST_LOG", "warn")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(|e| format!("start {}: {e}", binary.display()))?;
            children.0.push(child);
        }
        let started = Instant::now();
        let filter = MessageFilter::lane(LANE, TARGET);
        loop {
            for child in &mut children.0 {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!("a relay process ended early: {status}"));
                }
            }
            let stats = bench
                .store
                .stats(&filter)
                .await
                .map_err(|e| format!("stats: {e}"))?;
            let left = stats.first().map_or(0, |s| s.pending + s.claimed);
            if left == 0 {
                break;
            }
            if started.elapsed() > options.drain_timeout {
                return Err(format!("{left} left after {:?}", started.elapsed()));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        drop(children);
        let (p10, p90, n): (Option<f64>, Option<f64>, i64) = sqlx::query_as(AssertSqlSafe(
            format!(
                "SELECT extract(epoch FROM percentile_disc(0.1) WITHIN GROUP (ORDER BY delivered_at))::float8,
                        extract(epoch FROM percentile_disc(0.9) WITHIN GROUP (ORDER BY delivered_at))::float8,
                        count(*)
                 FROM {} WHERE lane = $1 AND status = 'delivered'",
                bench.table
            ),
        ))
        .bind(LANE)
        .fetch_one(pool)
        .await
        .map_err(|e| format!("delivered_at percentiles: {e}"))?;
        let (Some(p10), Some(p90)) = (p10, p90) else {
            return Err("nothing delivered".to_owned());
        };
        if (n as usize) < backlog {
            return Err(format!("{n} of {backlog} delivered"));
        }
        Ok(0.8 * n as f64 / (p90 - p10).max(1e-6))
    }
    .await;
    bench.remove().await;
    outcome
}

/// The `replicas` rows: 1, 2, 3 processes, the lane's concurrency split, then full each.
pub async fn replicas(options: &Options) -> Result<Vec<ReplicaRow>, String> {
    let total = options.replica_concurrency;
    let backlog = options.replica_backlog;
    let mut rows = Vec::new();
    for full in [false, true] {
        for processes in 1..=3usize {
            let concurrency = if full {
                total
            } else {
                (total / processes).max(1)
            };
            let mut rates = Vec::new();
            for _ in 0..options.rounds {
                rates.push(replica_case(processes, concurrency, backlog, options).await?);
            }
            rates.sort_by(f64::total_cmp);
            let rate = rates[rates.len() / 2];
            println!(
                "PostgreSQL replicas: {processes} process(es) of c={concurrency} ({}): {rate:.0} msg/s",
                if full { "full" } else { "split" }
            );
            rows.push(ReplicaRow {
                processes,
                concurrency,
                full,
                backlog,
                rate,
            });
        }
    }
    Ok(rows)
}
