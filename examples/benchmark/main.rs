//! The project's benchmark: the relay against its own raw-SQL ceiling and against the
//! seed's single loop, on PostgreSQL and SQLite (and MySQL/MariaDB with `--stores mysql`),
//! in one process and one run. These machines are noisy, so what counts are ratios between
//! runs made moments apart.
//!
//! Run (release; PostgreSQL at the default URL, or `--pg URL`):
//!   cargo run --release --all-features --example benchmark
//!   cargo run --release --all-features --example benchmark -- --stores mysql \
//!       --concurrency 64 --keys none,1000 --sections ceiling,drain
//!   cargo run --release --all-features --example benchmark -- --million
//!   cargo run --release --all-features --example benchmark -- --stores sqlite \
//!       --sizes 1000 --concurrency 64 --keys none --sections ceiling,drain
//!
//! Sections (`--sections`, all by default; `--help` lists every flag):
//! - `single`: the seed's single loop (claim 64, deliver each, ack each) against the relay,
//!   with a simulated target latency.
//! - `ceiling`: per backlog size, a raw-SQL loop on one connection (claim 100, ack them in
//!   one statement) on a table the store's migration made.
//! - `drain`: per backlog size, key distribution and concurrency, a no-op drain through the
//!   relay, with claim latency p50/p99 from a timing store decorator.
//! - `crash`: a relay aborted while holding claims over a pending backlog; the time from
//!   each lease's lapse to its redelivery by a second relay.
//! - `pickup`: one message at a time on an idle PostgreSQL lane: commit-to-handler latency
//!   and the store calls each pickup costs, handed off (enqueued through the relay's store
//!   object), classic (through another store, as another process), and classic through a
//!   private PgBouncer in transaction mode, with and without a direct `listen_url`.
//! - `slow`: a 10 ms handler at concurrency 64, against the 6,400 msg/s ceiling.
//! - `webhook`: the relay at concurrency 64 with the webhook sink posting to a local HTTP
//!   receiver, against the log sink, alternating per round: msg/s of each and the ratio.
//! - `kafka`: the same with the Kafka sink producing to a local tansu broker (idempotent,
//!   `acks=all`), against the log sink.
//! - `ui`: the web UI's pages on a 1 M-row PostgreSQL or SQLite table (`--ui-rows`): p50,
//!   p95 and max of each page over `--ui-requests` requests, against the 100 ms p95 bound.
//! - `history`: delete on ack against keep history, each beside its raw ceiling (an UPDATE
//!   or a DELETE ack), and the default claims in flight against one (`levers.rs`).
//! - `lanes`: PostgreSQL, one relay with 1, 100, 1,000 and 10,000 lanes (`--lanes`): start
//!   to ready, idle CPU, database commits/s, store calls/s and RSS over `--lanes-window-s`,
//!   one message per lane, and a drain of `--lanes-per-lane` messages per lane (`lanes.rs`).
//! - `replicas`: 1, 2 and 3 `outbox-relay` processes on one PostgreSQL lane, concurrency
//!   split and full each (`levers.rs`; needs the binary built beside this program).
//!
//! Every scenario gets a fresh store (its own PostgreSQL schema, dropped at the end, or a
//! temporary SQLite file). Writes `<out>/results.md` and `<out>/throughput.svg` and prints
//! the report, with the machine's load at start and end.

mod crash;
mod drain;
mod kafka;
mod lanes;
mod levers;
mod metered;
mod options;
#[path = "../../tests/support/pgbouncer.rs"]
mod pgbouncer_process;
mod pickup;
mod plot;
mod raw;
mod report;
mod stores;
mod timer;
mod ui;
mod webhook;

use std::sync::Arc;
use std::time::{Duration, Instant};

use options::{Keys, Options, Section, StoreKind};
use report::{CeilingRow, DrainRow, Results, SingleRow, SlowRow};
use stores::{fill, BenchStore};

#[tokio::main]
async fn main() {
    let options = match Options::parse(std::env::args().skip(1)) {
        Ok(options) => options,
        Err(error) => {
            eprintln!("benchmark: {error}");
            std::process::exit(2);
        }
    };
    let started = Instant::now();
    let mut results = Results {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        load_start: report::loadavg(),
        ..Results::default()
    };
    println!("load average at start: {}", results.load_start);
    for &kind in &options.stores {
        run_store(kind, &options, &mut results).await;
    }
    results.keep_medians();
    results.load_end = report::loadavg();
    results.total = started.elapsed();
    println!("load average at end: {}", results.load_end);
    let markdown = results.markdown();
    println!("\n{markdown}");
    if let Err(error) = write(&options, &results, &markdown) {
        eprintln!("benchmark: {error}");
        std::process::exit(1);
    }
    if !results.errors.is_empty() {
        std::process::exit(1);
    }
}

fn write(options: &Options, results: &Results, markdown: &str) -> Result<(), String> {
    std::fs::create_dir_all(&options.out)
        .map_err(|e| format!("create {}: {e}", options.out.display()))?;
    let md = options.out.join("results.md");
    std::fs::write(&md, markdown).map_err(|e| format!("write {}: {e}", md.display()))?;
    let svg = options.out.join("throughput.svg");
    results.plot(&svg)?;
    println!("wrote {} and {}", md.display(), svg.display());
    Ok(())
}

/// Every section of one store. A failing scenario is reported and the run goes on.
async fn run_store(kind: StoreKind, options: &Options, results: &mut Results) {
    let label = kind.label();
    // The memory store has no SQL to race and no process to lose: drains only.
    let sql = kind != StoreKind::Memory;
    if options.runs(Section::Single) && sql {
        if let Err(error) = single(kind, options, results).await {
            results.errors.push(format!("{label} single loop: {error}"));
        }
    }
    // Round by round, so that a slow spell of the machine falls on every case alike.
    for _round in 0..options.rounds {
        for &backlog in &options.sizes {
            if options.runs(Section::Ceiling) && sql {
                if let Err(error) = ceiling(kind, backlog, options, results).await {
                    results
                        .errors
                        .push(format!("{label} raw ceiling at {backlog}: {error}"));
                }
            }
            if options.runs(Section::Drain) {
                for &keys in &options.keys {
                    for &c in &options.concurrency {
                        if let Err(error) =
                            no_op_drain(kind, backlog, keys, c, options, results).await
                        {
                            results.errors.push(format!(
                                "{label} drain of {backlog}, keys {}, c={c}: {error}",
                                keys.label()
                            ));
                        }
                    }
                }
            }
        }
    }
    if options.runs(Section::Crash) && sql {
        let outcome = in_fresh_store(kind, options, |bench| async move {
            let (backlog, lease) = (options.crash_backlog, options.crash_lease);
            crash::run(&bench, backlog, lease, options.drain_timeout).await
        })
        .await;
        match outcome {
            Ok(r) => {
                println!(
                    "{label} crash: {}/{} stranded claims redelivered, lapse→redelivery max {:?} ms",
                    r.redelivered,
                    r.stranded,
                    r.percentile(1.0).map(|v| v.round())
                );
                results.crashes.push((kind, r));
            }
            Err(error) => results
                .errors
                .push(format!("{label} crash redelivery: {error}")),
        }
    }
    if options.runs(Section::Pickup) && kind == StoreKind::Postgres {
        for path in pickup::Path::ALL {
            match in_fresh_store(kind, options, |b| async move {
                pickup::run(&b, options.pickup_messages, path).await
            })
            .await
            {
                Ok(p) => {
                    println!(
                        "{label} idle pickup, {}: p50 {:?} ms, p99 {:?} ms, {:.2} store calls per message",
                        path.label(),
                        p.percentile(0.5),
                        p.percentile(0.99),
                        p.statements_per_message()
                    );
                    results.pickup.push(p);
                }
                Err(error) => results
                    .errors
                    .push(format!("{label} idle pickup, {}: {error}", path.label())),
            }
        }
    }
    if options.runs(Section::Slow) && sql {
        for _round in 0..options.rounds {
            if let Err(error) = slow(kind, options, results).await {
                results
                    .errors
                    .push(format!("{label} slow handler: {error}"));
            }
        }
    }
    if options.runs(Section::Webhook) && sql {
        let (messages, rounds) = (options.webhook_messages, options.webhook_rounds);
        match webhook::run(
            kind,
            &options.pg_url,
            messages,
            rounds,
            options.drain_timeout,
        )
        .await
        {
            Ok(row) => {
                println!(
                    "{label} webhook row: log {:.0} msg/s, webhook {:.0} msg/s, median ratio {:.2}×",
                    row.median_log(),
                    row.median_sink(),
                    row.median_ratio()
                );
                results.webhooks.push(row);
            }
            Err(error) => results.errors.push(format!("{label} webhook row: {error}")),
        }
    }
    if options.runs(Section::History) && sql {
        for &backlog in &options.sizes {
            for &c in &options.history_concurrency {
                match levers::history(kind, backlog, c, options).await {
                    Ok(row) => results.histories.push(row),
                    Err(error) => results
                        .errors
                        .push(format!("{label} history at {backlog}, c={c}: {error}")),
                }
            }
        }
    }
    if options.runs(Section::Replicas) && kind == StoreKind::Postgres {
        match levers::replicas(options).await {
            Ok(rows) => results.replicas = rows,
            Err(error) => results.errors.push(format!("{label} replicas: {error}")),
        }
    }
    if options.runs(Section::Lanes) && kind == StoreKind::Postgres {
        for &n in &options.lanes {
            match lanes::run(n, options).await {
                Ok(row) => results.lanes.push(row),
                Err(error) => results.errors.push(format!("{label} {n} lanes: {error}")),
            }
        }
    }
    if options.runs(Section::Kafka) && sql {
        let (messages, rounds) = (options.kafka_messages, options.kafka_rounds);
        match kafka::run(
            kind,
            &options.pg_url,
            options.kafka_brokers.as_deref(),
            messages,
            rounds,
            options.drain_timeout,
        )
        .await
        {
            Ok(row) => {
                println!(
                    "{label} Kafka row: log {:.0} msg/s, Kafka {:.0} msg/s, median ratio {:.2}×",
                    row.median_log(),
                    row.median_sink(),
                    row.median_ratio()
                );
                results.kafkas.push(row);
            }
            Err(error) => results.errors.push(format!("{label} Kafka row: {error}")),
        }
    }
    if options.runs(Section::Ui) && matches!(kind, StoreKind::Postgres | StoreKind::Sqlite) {
        let (rows, requests) = (options.ui_rows, options.ui_requests);
        match in_fresh_store(kind, options, |bench| async move {
            ui::run(&bench, rows, requests).await
        })
        .await
        {
            Ok(row) => results.ui.push(row),
            Err(error) => results.errors.push(format!("{label} UI row: {error}")),
        }
    }
}

/// Runs `scenario` on a fresh store and removes the store afterwards, whatever happened.
async fn in_fresh_store<T, F, Fut>(
    kind: StoreKind,
    options: &Options,
    scenario: F,
) -> Result<T, String>
where
    F: FnOnce(Arc<BenchStore>) -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let bench = Arc::new(BenchStore::create(kind, &options.pg_url).await?);
    let outcome = scenario(bench.clone()).await;
    bench.remove().await;
    outcome
}

async fn ceiling(
    kind: StoreKind,
    backlog: usize,
    options: &Options,
    results: &mut Results,
) -> Result<(), String> {
    const LANE: &str = "raw";
    let bench = BenchStore::create(kind, &options.pg_url).await?;
    let outcome = async {
        let filled = fill(&bench.store, kind, LANE, Keys::None, backlog).await?;
        bench.settle().await;
        let ceiling = match (&bench.pg_pool, &bench.location) {
            (Some(pool), _) => {
                raw::postgres(pool, &bench.table, LANE, options.drain_timeout, false).await?
            }
            (None, stores::Location::Mysql { .. }) => match &bench.mysql_pool {
                Some(pool) => {
                    raw::mysql(pool, &bench.table, LANE, options.drain_timeout, false).await?
                }
                None => return Err("no MySQL pool".to_owned()),
            },
            (None, stores::Location::Sqlite { path }) => {
                raw::sqlite(path, &bench.table, LANE, options.drain_timeout, false).await?
            }
            (None, stores::Location::Postgres { .. } | stores::Location::Memory(_)) => {
                return Err("no raw ceiling for this store".to_owned())
            }
        };
        println!(
            "{} raw ceiling at {backlog}: {:.0} rows/s (fill {:.1} s)",
            kind.label(),
            ceiling.rate(),
            filled.took.as_secs_f64()
        );
        results.ceilings.push(CeilingRow {
            store: kind,
            backlog,
            fill: filled.took,
            ceiling,
            rounds: Vec::new(),
        });
        Ok(())
    }
    .await;
    bench.remove().await;
    outcome
}

async fn no_op_drain(
    kind: StoreKind,
    backlog: usize,
    keys: Keys,
    concurrency: usize,
    options: &Options,
    results: &mut Results,
) -> Result<(), String> {
    const LANE: &str = "drain";
    let bench = BenchStore::create(kind, &options.pg_url).await?;
    let outcome = async {
        let filled = fill(&bench.store, kind, LANE, keys, backlog).await?;
        bench.settle().await;
        let (outbox, meter) = metered::metered(&bench.store);
        let drained = drain::drain(
            outbox,
            drain::lane_config(LANE, concurrency),
            filled.measured,
            filled.total - filled.measured,
            Duration::ZERO,
            options.drain_timeout,
        )
        .await?;
        println!(
            "{} drain of {backlog}, keys {}, c={concurrency}: {:.0} msg/s{} (fill {:.1} s)",
            kind.label(),
            keys.label(),
            drained.rate(),
            if drained.timed_out {
                " (timed out)"
            } else {
                ""
            },
            filled.took.as_secs_f64()
        );
        results.drains.push(DrainRow {
            store: kind,
            backlog,
            rows: filled.total,
            keys,
            concurrency,
            fill: filled.took,
            drained,
            claim: meter.claim_times(),
            claimed_rows: meter.claimed_rows(),
            rounds: Vec::new(),
        });
        Ok(())
    }
    .await;
    bench.remove().await;
    outcome
}

async fn single(kind: StoreKind, options: &Options, results: &mut Results) -> Result<(), String> {
    const LANE: &str = "single";
    let n = options.single_messages;
    let single = in_fresh_store(kind, options, |bench| async move {
        fill(&bench.store, kind, LANE, Keys::None, n).await?;
        drain::single_loop(
            &bench.store,
            LANE,
            options.single_latency,
            n,
            options.drain_timeout,
        )
        .await
    })
    .await?;
    let relay = in_fresh_store(kind, options, |bench| async move {
        fill(&bench.store, kind, LANE, Keys::None, n).await?;
        drain::drain(
            bench.store.clone(),
            drain::lane_config(LANE, options.single_concurrency),
            n,
            0,
            options.single_latency,
            options.drain_timeout,
        )
        .await
    })
    .await?;
    println!(
        "{} single loop {:.0} msg/s, relay {:.0} msg/s",
        kind.label(),
        single.rate(),
        relay.rate()
    );
    results.singles.push(SingleRow {
        store: kind,
        messages: n,
        latency: options.single_latency,
        concurrency: options.single_concurrency,
        single,
        relay,
    });
    Ok(())
}

async fn slow(kind: StoreKind, options: &Options, results: &mut Results) -> Result<(), String> {
    const LANE: &str = "slow";
    let n = options.slow_messages;
    let drained = in_fresh_store(kind, options, |bench| async move {
        fill(&bench.store, kind, LANE, Keys::None, n).await?;
        bench.settle().await;
        drain::drain(
            bench.store.clone(),
            drain::lane_config(LANE, options.slow_concurrency),
            n,
            0,
            options.slow_latency,
            options.drain_timeout,
        )
        .await
    })
    .await?;
    println!(
        "{} {:?} handler c={}: {:.0} msg/s",
        kind.label(),
        options.slow_latency,
        options.slow_concurrency,
        drained.rate()
    );
    results.slow.push(SlowRow {
        store: kind,
        latency: options.slow_latency,
        concurrency: options.slow_concurrency,
        drained,
        rounds: Vec::new(),
    });
    Ok(())
}
