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

use std::collections::HashMap;
use std::time::Instant;

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
/// - the relays' sessions commit asynchronously (`synchronous_commit` is `off` on a
///   connection made as theirs are), and recovery keeps every enqueued message;
/// - every message ends `delivered`; for each key, first deliveries come in enqueue order,
///   over all four relays' output;
/// - every message printed twice is one the crash left undelivered though it had been
///   printed: held at the crash (recovered `claimed`) or with its claim forgotten
///   (recovered `pending`). The counts of each are printed.
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
    let synchronous_commit: String = runtime
        .block_on(sqlx::query_scalar("SHOW synchronous_commit").fetch_one(pg(&store).pool()))
        .expect("SHOW synchronous_commit");
    assert_eq!(
        synchronous_commit, "off",
        "the relay's sessions commit asynchronously by default"
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

    let rows = wait_all_delivered(&runtime, &store, &fleet, MESSAGES);
    let drained_at = Instant::now();
    let lines = fleet.stop();
    let order: Vec<Uuid> = lines.iter().map(|l| l.outbox_id).collect();
    assert_first_deliveries_in_enqueue_order(&sent, &order);
    assert_eq!(rows.len(), MESSAGES);

    // Which printed messages the crash left undelivered, and why.
    let printed_before: HashMap<Uuid, usize> =
        lines[..lines_at_read]
            .iter()
            .fold(HashMap::new(), |mut seen, line| {
                *seen.entry(line.outbox_id).or_default() += 1;
                seen
            });
    let (mut held_and_printed, mut claim_forgotten) = (0, 0);
    for id in printed_before.keys() {
        match recovered.get(id).map(|(status, _)| *status) {
            Some(OutboxStatus::Claimed) => held_and_printed += 1,
            Some(OutboxStatus::Pending) => claim_forgotten += 1,
            _ => {}
        }
    }
    let mut printed: HashMap<Uuid, usize> = HashMap::new();
    for id in &order {
        *printed.entry(*id).or_default() += 1;
    }
    let duplicates = order.len() - printed.len();
    for (id, n) in &printed {
        if *n > 1 {
            let state = recovered.get(id).map(|(status, _)| *status);
            assert!(
                printed_before.contains_key(id)
                    && matches!(state, Some(OutboxStatus::Claimed | OutboxStatus::Pending)),
                "{id} printed {n} times, though the crash left it {state:?} and it was {} \
                 printed before the crash",
                if printed_before.contains_key(id) {
                    ""
                } else {
                    "not"
                }
            );
        }
    }
    assert!(
        duplicates <= held_and_printed + claim_forgotten,
        "{duplicates} duplicates, more than the {held_and_printed} held and printed plus the \
         {claim_forgotten} whose claim was forgotten"
    );
    let recovered_claimed = recovered
        .values()
        .filter(|(status, _)| *status == OutboxStatus::Claimed)
        .count();
    eprintln!(
        "PostgreSQL crash: {MESSAGES} messages, {KEYS} keys, 4 relays, synchronous_commit \
         {synchronous_commit}; {held} claims held just before the crash, {lines_at_crash} \
         lines printed; recovered: {recovered_claimed} claimed, {} pending, {} delivered; \
         printed before the crash and left undelivered by it: {held_and_printed} held \
         (claimed), {claim_forgotten} with their claim forgotten (pending); {duplicates} \
         duplicates in {} lines; {} server starts; down {:?}, drained {:?} after the \
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
