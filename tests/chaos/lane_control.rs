//! Fleet-wide lane control across processes: three `outbox-relay run` processes on one
//! database (PostgreSQL, then one SQLite file); `outbox-relay pause`, run with nothing but
//! the database, stops claims in all three within a second; a restart of all three keeps
//! the lane paused; `outbox-relay resume` restarts delivery.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use outbox_relay::{Outbox, SqliteOutboxStore};

use crate::fleet::RelayProcess;
use crate::{counts, direct_store, enqueue, postgres_url, wait_until, Schema, BIN};

const LANE: &str = "fleet";
const TARGET: &str = "log";
const RELAYS: [&str; 3] = ["relay-a", "relay-b", "relay-c"];
/// How long the test watches a paused lane for a claim. Each relay polls its lane every
/// 200 ms (`max_poll_interval`), and is woken by every enqueue besides: ten chances each
/// to claim if the pause did not hold.
const PAUSED_WINDOW: Duration = Duration::from_secs(2);
/// The bound the pause must keep: the lane-control poll is 500 ms.
const PAUSE_BOUND: Duration = Duration::from_secs(1);

/// One relay's config: `database` is the config's database lines.
fn relay_config(database: &str, consumer_id: &str) -> String {
    format!(
        r#"
{database}
metrics_listen = false
connect_timeout = "10s"
shutdown_timeout = "10s"
consumer_id = "{consumer_id}"

[[lanes]]
lane = "{LANE}"
target = "{TARGET}"
concurrency = 4
max_poll_interval = "200ms"
sink = {{ kind = "log" }}
"#
    )
}

/// Runs `outbox-relay` with `args` and the config at `config`; panics unless it succeeds.
fn cli(dir: &Path, config: &Path, args: &[&str]) -> String {
    let output = Command::new(BIN)
        .arg("--config")
        .arg(config)
        .args(args)
        .current_dir(dir)
        .env_remove("OUTBOX_DATABASE_URL")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .expect("run outbox-relay");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "outbox-relay {args:?} failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

fn start_all(dir: &Path, configs: &[PathBuf]) -> Vec<RelayProcess> {
    let relays: Vec<RelayProcess> = RELAYS
        .iter()
        .zip(configs)
        .map(|(name, config)| RelayProcess::start(name, dir, config, Stdio::null()))
        .collect();
    for relay in &relays {
        relay.wait_for_log("relay running");
    }
    relays
}

fn stop_all(relays: Vec<RelayProcess>) {
    for relay in &relays {
        let status = relay.sigterm();
        assert!(status.success(), "{status}\n{}", relay.stderr());
    }
}

/// Waits until `delivered` messages of the lane are delivered.
fn wait_delivered(runtime: &tokio::runtime::Runtime, store: &Outbox, delivered: u64) {
    wait_until(
        &format!("{delivered} messages delivered"),
        || {
            let (_, _, done, _) = runtime.block_on(counts(store, LANE, TARGET));
            (done == delivered).then_some(())
        },
        || format!("{:?}", runtime.block_on(counts(store, LANE, TARGET))),
    );
}

/// Watches the paused lane for [`PAUSED_WINDOW`]: nothing of it may be claimed.
fn assert_nothing_claimed(
    runtime: &tokio::runtime::Runtime,
    store: &Outbox,
    pending: u64,
    delivered: u64,
    relays: &[RelayProcess],
) {
    let started = Instant::now();
    while started.elapsed() < PAUSED_WINDOW {
        let now = runtime.block_on(counts(store, LANE, TARGET));
        assert_eq!(
            now,
            (pending, 0, delivered, 0),
            "a paused lane claimed after {:?}:\n{}",
            started.elapsed(),
            relays
                .iter()
                .map(RelayProcess::stderr)
                .collect::<Vec<_>>()
                .join("\n")
        );
        thread::sleep(Duration::from_millis(50));
    }
}

/// The scenario on the database the configs name, with `store` (the test's own handle to
/// it) to enqueue and count.
fn pause_holds_across_processes_and_restarts(
    runtime: &tokio::runtime::Runtime,
    store: Outbox,
    dir: &Path,
    database: &str,
) {
    let configs: Vec<PathBuf> = RELAYS
        .iter()
        .map(|name| {
            let path = dir.join(format!("{name}.toml"));
            std::fs::write(&path, relay_config(database, name)).expect("write config");
            path
        })
        .collect();
    let relays = start_all(dir, &configs);

    // Delivery flows before the pause.
    runtime.block_on(enqueue(&store, LANE, TARGET, 0..30, 5));
    wait_delivered(runtime, &store, 30);

    let before = Instant::now();
    let out = cli(
        dir,
        &configs[0],
        &[
            "pause",
            "--lane",
            LANE,
            "--target",
            TARGET,
            "--reason",
            "broker upgrade",
            "--by",
            "chaos-test",
        ],
    );
    let committed = Instant::now();
    assert!(out.starts_with("paused fleet/log for every relay"), "{out}");
    for relay in &relays {
        relay.wait_for_log("fleet-wide lane control applied");
    }
    let applied = committed.elapsed();
    println!(
        "pause: the command took {:?} (process start, connect, commit); all three relays stopped claiming {applied:?} after its commit",
        committed - before
    );
    assert!(
        applied <= PAUSE_BOUND,
        "the pause took {applied:?} to reach all three relays (bound {PAUSE_BOUND:?})"
    );
    let pauses = runtime.block_on(store.lane_pauses()).expect("lane pauses");
    assert_eq!(pauses.len(), 1, "{pauses:?}");
    assert_eq!(
        (
            pauses[0].paused_by.as_str(),
            pauses[0].reason.as_deref(),
            pauses[0].lane.as_str()
        ),
        ("chaos-test", Some("broker upgrade"), LANE)
    );

    runtime.block_on(enqueue(&store, LANE, TARGET, 30..60, 5));
    assert_nothing_claimed(runtime, &store, 30, 30, &relays);

    // A restart of every relay keeps the lane paused: it starts paused.
    stop_all(relays);
    let relays = start_all(dir, &configs);
    for relay in &relays {
        relay.wait_for_log("lane paused fleet-wide: it starts paused");
    }
    assert_nothing_claimed(runtime, &store, 30, 30, &relays);

    let resumed = Instant::now();
    let out = cli(
        dir,
        &configs[1],
        &["resume", "--lane", LANE, "--target", TARGET],
    );
    assert!(
        out.starts_with("resumed fleet/log for every relay"),
        "{out}"
    );
    wait_delivered(runtime, &store, 60);
    println!(
        "resume: the 30 held messages delivered {:?} after the command started",
        resumed.elapsed()
    );
    assert!(runtime
        .block_on(store.lane_pauses())
        .expect("lane pauses")
        .is_empty());
    stop_all(relays);
}

#[test]
fn a_fleet_pause_holds_in_three_postgres_relays_and_across_their_restarts() {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let schema = Schema::new();
    let store: Outbox = runtime.block_on(direct_store(&schema));
    let dir = tempfile::tempdir().expect("a temporary directory");
    let database = format!(
        "database_url = \"{}\"\nschema = \"{}\"",
        postgres_url(),
        schema.name
    );
    pause_holds_across_processes_and_restarts(&runtime, store, dir.path(), &database);
}

#[test]
fn a_fleet_pause_holds_in_three_sqlite_relays_and_across_their_restarts() {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("outbox.db");
    let store: Outbox = Outbox::new(
        runtime
            .block_on(SqliteOutboxStore::open(&file))
            .expect("open the SQLite outbox"),
    );
    let database = format!("database_url = \"sqlite:{}\"", file.display());
    pause_holds_across_processes_and_restarts(&runtime, store, dir.path(), &database);
}
