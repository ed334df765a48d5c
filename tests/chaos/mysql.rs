//! Relay processes on MariaDB through a relay's SIGKILL and a crash of the database: three
//! `outbox-relay run` processes on one database and lane of a MariaDB server the test
//! starts itself (`tests/support/mariadb_server.rs`: the shared server must not restart
//! under the other tests). One relay is SIGKILLed mid-batch; then, while the other two hold
//! claims and deliver, the server is SIGKILLed and started again on the same data directory
//! and port. The relays keep running, report store errors and reconnect; nothing is lost,
//! per-key order holds over all three relays' output, and only what was claimed at a kill
//! is attempted again.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::time::Instant;

use outbox_relay::store::mysql::{MysqlConfig, MysqlOutboxStore};
use outbox_relay::{Outbox, OutboxStatus};
use tokio::runtime::Runtime;
use uuid::Uuid;

use crate::fleet::{
    assert_printed_attempts, claims_of, wait_all_delivered, wait_mid_batch, Fleet, LANE, TARGET,
};
use crate::{assert_first_deliveries_in_enqueue_order, counts, enqueue, messages, wait_until};

#[path = "../support/mariadb_server.rs"]
mod mariadb_server;

use mariadb_server::MariadbServer;

const DATABASE: &str = "outbox";
/// The server user the victim connects as, so that its connections can be told apart.
const VICTIM_USER: &str = "victim";
const VICTIM: &str = "victim";
const SURVIVORS: [&str; 2] = ["relay-a", "relay-b"];
/// What a relay logs when a store call fails (and it backs off).
const STORE_ERROR: &str = "store call failed";

/// The database, and the victim's user, on the test's own server.
fn create_database(runtime: &Runtime, server: &MariadbServer) {
    runtime.block_on(async {
        use sqlx::Connection;
        let mut admin = sqlx::MySqlConnection::connect(&server.url(""))
            .await
            .unwrap_or_else(|e| panic!("connect to the test's MariaDB: {e}\n{}", server.log()));
        for sql in [
            format!("CREATE DATABASE `{DATABASE}`"),
            format!("CREATE USER '{VICTIM_USER}'@'127.0.0.1' IDENTIFIED BY 'victim'"),
            format!("GRANT ALL ON `{DATABASE}`.* TO '{VICTIM_USER}'@'127.0.0.1'"),
        ] {
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                .execute(&mut admin)
                .await
                .expect("set up the test's database");
        }
    });
}

async fn open(url: &str) -> Outbox {
    Outbox::new(
        MysqlOutboxStore::connect_with(url, MysqlConfig::default())
            .await
            .unwrap_or_else(|e| panic!("the MySQL store on {url}: {e}")),
    )
}

/// Claims by message: (attempt count, holder).
type Claims = HashMap<Uuid, (u32, String)>;

/// Every claim on the lane as the crash left it, with its attempt count and holder, and
/// the lane's (pending, claimed, delivered, dead): read with the server reachable through
/// its socket alone, so no relay can change a row before it is read. Stops the server.
fn claims_at_crash(
    runtime: &Runtime,
    server: &mut MariadbServer,
) -> (Claims, (u64, u64, u64, u64)) {
    server.start_socket_only();
    let read = runtime.block_on(async {
        let store = open(&server.socket_url(DATABASE)).await;
        let claims = messages(&store, LANE, TARGET, Some(OutboxStatus::Claimed))
            .await
            .into_iter()
            .map(|m| {
                let holder = m.claimed_by.clone().expect("a claim has a holder");
                (m.outbox_id, (m.attempt_count, holder))
            })
            .collect();
        let counts = counts(&store, LANE, TARGET).await;
        let mysql: &MysqlOutboxStore = store.backend().expect("a MySQL outbox");
        mysql.pool().close().await;
        (claims, counts)
    });
    server.stop();
    read
}

/// Three relay processes share one database and lane; one is SIGKILLed mid-batch, then the
/// database server is SIGKILLed while the other two deliver, and started again. What must
/// hold:
///
/// - the surviving relays keep running through the crash: each reports a store error, and
///   each holds claims again after the restart;
/// - every message ends `delivered`, no row stays `claimed` or `pending`, none is dead;
/// - only what was claimed at a kill is attempted again: the victim's claims at its death
///   end with `attempt_count` 2; a claim the crash left (read from the recovered data
///   before any relay can reach it) ends one attempt later, or at the same attempt when
///   its holder's ack went through after the restart (a victim's claim cannot); every
///   other message ends at attempt 1;
/// - every message's printed attempts increase and end at its final one; per-key order
///   over all three relays' output: for each key, the sequence of *first* deliveries is
///   the key's messages in enqueue order, all of them.
#[test]
fn relays_on_mariadb_survive_a_killed_relay_and_a_database_crash_and_keep_per_key_order() {
    const MESSAGES: usize = 300;
    // More keys than the relays can claim heads at once (3 × (4 handlers + 4 prefetched)):
    // with 16, two relays could hold every key's head, and the third, finding nothing to
    // claim, slept until a lease's end while the other two drained the lane (MariaDB has no
    // wake-up for a head that another process's ack freed).
    const KEYS: usize = 48;
    let started = Instant::now();
    let runtime = Runtime::new().expect("a runtime");
    let mut server = MariadbServer::start();
    create_database(&runtime, &server);
    let store = runtime.block_on(open(&server.url(DATABASE)));
    let dir = tempfile::tempdir().expect("a temporary directory");
    let fleet = Fleet::start(
        dir.path(),
        &[
            (VICTIM, server.url_as(VICTIM_USER, "victim", DATABASE)),
            (SURVIVORS[0], server.url(DATABASE)),
            (SURVIVORS[1], server.url(DATABASE)),
        ],
        None,
    );
    let sent = runtime.block_on(enqueue(&store, LANE, TARGET, 0..MESSAGES, KEYS));

    // The relay's kill, mid-batch.
    wait_mid_batch(&runtime, &store, &fleet, VICTIM, 30);
    fleet.relay(VICTIM).sigkill();
    let lines_at_kill = fleet.stream.len();
    // A statement the victim sent may still run on the server; its claims are settled once
    // its sessions are gone.
    let mysql: &MysqlOutboxStore = store.backend().expect("a MySQL outbox");
    wait_until(
        "the victim's database sessions to end",
        || {
            let sessions: i64 = runtime
                .block_on(
                    sqlx::query_scalar(
                        "SELECT COUNT(*) FROM information_schema.processlist WHERE user = ?",
                    )
                    .bind(VICTIM_USER)
                    .fetch_one(mysql.pool()),
                )
                .expect("count sessions");
            (sessions == 0).then_some(())
        },
        String::new,
    );
    let orphans: HashMap<Uuid, u32> = claims_of(&runtime, &store, VICTIM)
        .into_iter()
        .map(|m| (m.outbox_id, m.attempt_count))
        .collect();
    assert!(
        !orphans.is_empty(),
        "the victim died holding no claims: the test killed nothing in flight"
    );
    assert!(orphans.values().all(|&a| a == 1), "{orphans:?}");

    // The database's crash, while both survivors hold claims and deliveries flow.
    let crash_lines = lines_at_kill + 40;
    wait_until(
        &format!("{crash_lines} deliveries, and claims held by both survivors"),
        || {
            fleet.assert_running();
            let holding = SURVIVORS
                .iter()
                .all(|name| !claims_of(&runtime, &store, name).is_empty());
            (fleet.stream.len() >= crash_lines && holding).then_some(())
        },
        || format!("{} log-sink lines\n{}", fleet.stream.len(), fleet.stderr()),
    );
    let errors_before: Vec<usize> = SURVIVORS
        .iter()
        .map(|name| fleet.relay(name).times_logged(STORE_ERROR))
        .collect();
    let crashed_at = Instant::now();
    server.crash();
    let lines_at_crash = fleet.stream.len();
    wait_until(
        "each survivor to report a store error",
        || {
            fleet.assert_running();
            SURVIVORS
                .iter()
                .zip(&errors_before)
                .all(|(name, &before)| fleet.relay(name).times_logged(STORE_ERROR) > before)
                .then_some(())
        },
        || fleet.stderr(),
    );
    let errors_at = Instant::now();
    let (crash_claims, counts_at_crash) = claims_at_crash(&runtime, &mut server);
    let read_at = Instant::now();
    server.restart();
    let restarted_at = Instant::now();
    fleet.assert_running();

    // Each survivor reconnects: it holds claims again.
    let reconnected = RefCell::new(HashSet::new());
    wait_until(
        "each survivor to hold claims after the restart",
        || {
            fleet.assert_running();
            for name in SURVIVORS {
                if !claims_of(&runtime, &store, name).is_empty() {
                    reconnected.borrow_mut().insert(name);
                }
            }
            (reconnected.borrow().len() == SURVIVORS.len()).then_some(())
        },
        || {
            format!(
                "{} log-sink lines; holding after the restart: {:?}\n{}\n{}",
                fleet.stream.len(),
                reconnected.borrow(),
                fleet.stderr(),
                server.log()
            )
        },
    );

    let rows = wait_all_delivered(&runtime, &store, &fleet, MESSAGES);
    let drained_at = Instant::now();
    let (mut acked_after_restart, mut claimed_again) = (0, 0);
    for row in &rows {
        let id = row.outbox_id;
        let orphan = u32::from(orphans.contains_key(&id));
        let want = match crash_claims.get(&id) {
            Some((attempts, holder)) if holder == VICTIM => vec![attempts + 1],
            Some((attempts, _)) => vec![*attempts, attempts + 1],
            None => vec![1 + orphan],
        };
        assert!(
            want.contains(&row.attempt_count),
            "{id}: delivered at attempt {}, expected one of {want:?} (the victim's claim: \
             {:?}; the crash's claim (attempts, holder): {:?})",
            row.attempt_count,
            orphans.get(&id),
            crash_claims.get(&id)
        );
        if let Some((attempts, _)) = crash_claims.get(&id) {
            match *attempts == row.attempt_count {
                true => acked_after_restart += 1,
                false => claimed_again += 1,
            }
        }
    }

    let lines = fleet.stop();
    let attempts = assert_printed_attempts(&lines, &rows);
    let order: Vec<Uuid> = lines.iter().map(|l| l.outbox_id).collect();
    assert_first_deliveries_in_enqueue_order(&sent, &order);
    eprintln!(
        "MariaDB chaos: {MESSAGES} messages, {KEYS} keys, 3 relays; 1 relay SIGKILLed after {} \
         lines, holding {} claims; 1 server crash after {} lines, (pending, claimed, \
         delivered, dead) = {counts_at_crash:?} at the crash, {} claims ({} of them the \
         victim's): {} acked by their holder after the restart, {} claimed again; {} server \
         starts; {} lines for {MESSAGES} messages, {} printed more than once; store errors \
         {:?} after the crash, claims read {:?} later, down {:?}, drained {:?} after the \
         restart, test {:?}",
        lines_at_kill,
        orphans.len(),
        lines_at_crash,
        crash_claims.len(),
        crash_claims
            .values()
            .filter(|(_, holder)| holder == VICTIM)
            .count(),
        acked_after_restart,
        claimed_again,
        server.starts(),
        lines.len(),
        attempts.values().filter(|seen| seen.len() > 1).count(),
        errors_at - crashed_at,
        read_at - errors_at,
        restarted_at - crashed_at,
        drained_at - restarted_at,
        started.elapsed()
    );
}
