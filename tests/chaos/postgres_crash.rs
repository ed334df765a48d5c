//! A PostgreSQL crash under asynchronous commit. The relay commits its own transactions
//! (claims, acks) with `synchronous_commit = off` by default: a crash of the server may
//! forget the last of them, never an enqueue (an enqueue always waits for the disk). The
//! guide's guarantee: a crash forgets only a suffix of the relay's own commits, so nothing
//! is lost, per-key order holds, and what is delivered again is what the forgotten commits
//! and the claims held at the crash cover.
//!
//! Four `outbox-relay run` processes on one lane of a cluster the test makes itself
//! (`tests/support/postgres_cluster.rs`); with at least 20 claims held, the server is
//! crashed (`pg_ctl -m immediate stop`), what it recovers is read through its socket alone
//! (no relay can reach it), and it is started again on its port.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use outbox_relay::config::DEFAULT_PREFETCH;
use outbox_relay::database::PostgresOptions;
use outbox_relay::store::postgres::{PostgresConfig, PostgresOutboxStore};
use outbox_relay::{Outbox, OutboxStatus};
use tokio::runtime::Runtime;
use uuid::Uuid;

use crate::fleet::{wait_all_delivered, Fleet, LANE, TARGET};
use crate::{assert_first_deliveries_in_enqueue_order, enqueue, messages, pg, wait_until};

#[path = "../support/postgres_cluster.rs"]
mod postgres_cluster;

use postgres_cluster::Cluster;

const RELAYS: [&str; 4] = ["relay-a", "relay-b", "relay-c", "relay-d"];
/// Claims held when the server is crashed, at least.
const HELD_AT_CRASH: usize = 20;
/// The fleet's lane `concurrency` (`tests/chaos/fleet.rs`).
const CONCURRENCY: usize = 4;
/// What a relay logs when a store call fails (and it backs off).
const STORE_ERROR: &str = "store call failed";
/// The WAL writer flushes asynchronous commits every `wal_writer_delay` (200 ms by
/// default); at 1 s a crash finds more of the relays' commits unflushed, so the test sees
/// the forgetting it is about, not only its bound.
const CLUSTER_CONF: &str = "wal_writer_delay = '1s'\nmax_connections = 200\n";

async fn open(url: &str) -> Outbox {
    Outbox::new(
        PostgresOutboxStore::connect_with(url, PostgresConfig::default())
            .await
            .unwrap_or_else(|e| panic!("the PostgreSQL store on {url}: {e}")),
    )
}

/// Each message of the lane as the recovered database has it: (status, attempts).
type Rows = HashMap<Uuid, (OutboxStatus, u32)>;

/// The lane as recovery left it, read with the server reachable through its socket alone,
/// so no relay can change a row before it is read. Stops the server.
fn rows_after_recovery(runtime: &Runtime, cluster: &mut Cluster) -> Rows {
    cluster.start_socket_only();
    let rows = runtime.block_on(async {
        let store = open(&cluster.socket_url("postgres")).await;
        let rows = messages(&store, LANE, TARGET, None)
            .await
            .into_iter()
            .map(|m| (m.outbox_id, (m.status, m.attempt_count)))
            .collect();
        pg(&store).pool().close().await;
        rows
    });
    cluster.stop();
    rows
}

/// Four relays deliver keyed messages; with at least 20 claims held, PostgreSQL crashes
/// and restarts. What must hold:
///
/// - the relays commit their own transactions asynchronously (the default, printed), and
///   recovery keeps every enqueued message;
/// - every message ends `delivered`; for each key, first deliveries come in enqueue order,
///   over all four relays' output;
/// - every message printed twice is one recovery left undelivered, and the duplicates are
///   at most the claims the relays can hold at the crash plus the printed messages whose
///   ack (or claim too: possible only because it committed asynchronously) the crash
///   forgot. The counts of each are printed.
#[test]
fn a_postgres_crash_under_asynchronous_commit_loses_nothing_and_keeps_per_key_order() {
    const MESSAGES: usize = 800;
    // More keys than the relays can hold heads of at once (4 × (4 handlers + prefetch)).
    const KEYS: usize = 96;
    let started = Instant::now();
    let runtime = Runtime::new().expect("a runtime");
    let mut cluster = Cluster::start(CLUSTER_CONF);
    let url = cluster.url("postgres");
    let store = runtime.block_on(open(&url));
    // The relays' config sets no `[postgres] synchronous_commit`: they run with the
    // default, which begins each of their transactions with `SET LOCAL synchronous_commit
    // = off` (enqueues excepted).
    let synchronous_commit = if PostgresOptions::default().synchronous_commit {
        "on"
    } else {
        "off"
    };
    assert_eq!(
        (
            synchronous_commit,
            PostgresConfig::default().settings.synchronous_commit
        ),
        ("off", false),
        "the relay commits its own transactions asynchronously by default"
    );
    let dir = tempfile::tempdir().expect("a temporary directory");
    let relays: Vec<(&'static str, String)> =
        RELAYS.iter().map(|name| (*name, url.clone())).collect();
    let fleet = Fleet::start(dir.path(), &relays, None);
    let sent = runtime.block_on(enqueue(&store, LANE, TARGET, 0..MESSAGES, KEYS));

    // The crash, under load: deliveries flowing and at least 20 claims out.
    let held = wait_until(
        &format!("50 deliveries and {HELD_AT_CRASH} claims held"),
        || {
            fleet.assert_running();
            let held = runtime
                .block_on(messages(&store, LANE, TARGET, Some(OutboxStatus::Claimed)))
                .len();
            (fleet.stream.len() >= 50 && held >= HELD_AT_CRASH).then_some(held)
        },
        || format!("{} log-sink lines\n{}", fleet.stream.len(), fleet.stderr()),
    );
    let errors_before: Vec<usize> = RELAYS
        .iter()
        .map(|name| fleet.relay(name).times_logged(STORE_ERROR))
        .collect();
    // WAL inserted but not yet written out: what an immediate stop can forget. Commits
    // that waited for the disk leave none behind them.
    let unwritten: i64 = runtime
        .block_on(
            sqlx::query_scalar(
                "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), pg_current_wal_lsn())::int8",
            )
            .fetch_one(pg(&store).pool()),
        )
        .expect("the WAL positions");
    let crashed_at = Instant::now();
    cluster.crash();
    let lines_at_crash = fleet.stream.len();
    wait_until(
        "each relay to report a store error",
        || {
            fleet.assert_running();
            RELAYS
                .iter()
                .zip(&errors_before)
                .all(|(name, &before)| fleet.relay(name).times_logged(STORE_ERROR) > before)
                .then_some(())
        },
        || fleet.stderr(),
    );
    // Deliveries a relay started before the crash finish without the database; the rows
    // are read after them, so each one's line is in.
    let lines_at_read = fleet.stream.len();
    let recovered = rows_after_recovery(&runtime, &mut cluster);
    assert_eq!(recovered.len(), MESSAGES, "recovery lost enqueued messages");
    cluster.restart();
    let restarted_at = Instant::now();
    // The test's own pool lost its connections in the crash, and a connection in recent
    // use is not pinged before its next statement: the observer reads through a new pool.
    runtime.block_on(pg(&store).pool().close());
    let store = runtime.block_on(open(&url));

    let rows = wait_all_delivered(&runtime, &store, &fleet, MESSAGES);
    let drained_at = Instant::now();
    let lines = fleet.stop();
    let order: Vec<Uuid> = lines.iter().map(|l| l.outbox_id).collect();
    assert_first_deliveries_in_enqueue_order(&sent, &order);
    assert_eq!(rows.len(), MESSAGES);

    // What was printed by the time the rows were read, yet left undelivered by recovery:
    // its ack was not made before the crash or was forgotten (recovered `claimed`), or its
    // claim was forgotten too (recovered `pending`: possible only because that claim
    // committed asynchronously).
    let printed_before: HashSet<Uuid> =
        lines[..lines_at_read].iter().map(|l| l.outbox_id).collect();
    let state = |id: &Uuid| recovered.get(id).map(|(status, _)| *status);
    let forgotten_acks = printed_before
        .iter()
        .filter(|id| state(id) == Some(OutboxStatus::Claimed))
        .count();
    let forgotten_claims = printed_before
        .iter()
        .filter(|id| state(id) == Some(OutboxStatus::Pending))
        .count();
    let mut printed: HashMap<Uuid, usize> = HashMap::new();
    for id in &order {
        *printed.entry(*id).or_default() += 1;
    }
    let duplicates = order.len() - printed.len();
    // A message is printed twice only when the crash left it undelivered: a delivered row
    // that recovery kept is never claimed again.
    for (id, n) in &printed {
        if *n > 1 {
            assert!(
                matches!(
                    state(id),
                    Some(OutboxStatus::Claimed | OutboxStatus::Pending)
                ),
                "{id} printed {n} times, though recovery kept it {:?}",
                state(id)
            );
        }
    }
    // The most the relays can hold at once: each lane's handlers and prefetch buffer.
    let window = RELAYS.len() * (CONCURRENCY + DEFAULT_PREFETCH);
    let bound = window + forgotten_acks + forgotten_claims;
    assert!(
        duplicates <= bound,
        "{duplicates} duplicates, more than the {window} claims the relays can hold at the \
         crash plus the {} printed messages recovery left undelivered",
        forgotten_acks + forgotten_claims
    );
    let recovered_claimed = recovered
        .values()
        .filter(|(status, _)| *status == OutboxStatus::Claimed)
        .count();
    eprintln!(
        "PostgreSQL crash: {MESSAGES} messages, {KEYS} keys, 4 relays, synchronous_commit \
         {synchronous_commit}; {held} claims held and {unwritten} bytes of WAL unwritten just \
         before the crash, {lines_at_crash} \
         lines printed; recovered: {recovered_claimed} claimed, {} pending, {} delivered; \
         printed before the rows were read yet left undelivered: {forgotten_acks} claimed (the \
         ack not yet made, or forgotten), {forgotten_claims} pending (the claim forgotten); \
         {duplicates} duplicates (bound {bound}: {window} claims the relays can hold at the \
         crash, plus those) in {} lines; {} server starts; down {:?}, drained {:?} after the \
         restart, test {:?}",
        recovered
            .values()
            .filter(|(status, _)| *status == OutboxStatus::Pending)
            .count(),
        recovered
            .values()
            .filter(|(status, _)| *status == OutboxStatus::Delivered)
            .count(),
        lines.len(),
        cluster.starts(),
        restarted_at - crashed_at,
        drained_at - restarted_at,
        started.elapsed()
    );
}
