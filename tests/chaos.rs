//! Faults injected for real against PostgreSQL and MariaDB: a relay process killed with
//! SIGKILL in the middle of its deliveries, a database that goes away under a running relay
//! and comes back, and a database server that crashes and restarts.
//!
//! - [`killed_process`]: two `outbox-relay run` processes on one schema and lane; one is
//!   killed mid-batch; the survivor must take over its claims, in order, losing nothing.
//! - [`database_outage`]: a relay in this process reaches PostgreSQL through a TCP proxy
//!   (`tests/support/tcp_proxy.rs`) that the test cuts and restores; the lane must ride the
//!   outage out (store errors, backoff, no restart), and its pool and its LISTEN/NOTIFY
//!   listener must recover.
//! - [`partition`]: two `outbox-relay run` processes deliver keyed messages to an HTTP
//!   receiver in the test; one reaches PostgreSQL through a proxy that blackholes, then
//!   cuts, its connections for longer than the lease, three times. No two requests of a
//!   key in flight at once, first arrivals in per-key order, nothing lost, duplicates
//!   within the claims held at the cuts.
//! - [`mysql`]: three `outbox-relay run` processes on MariaDB, on a server the test starts
//!   itself: one SIGKILLed mid-batch, then the server SIGKILLed and started again while the
//!   others deliver; nothing lost, per-key order kept, only what was claimed at a kill
//!   attempted again.
//! - [`postgres_crash`]: four `outbox-relay run` processes on a PostgreSQL cluster the
//!   test makes itself, crashed (`pg_ctl -m immediate stop`) with at least 20 claims held,
//!   under the relay's asynchronous commit: nothing lost, per-key order kept, every
//!   duplicate one the crash left undelivered after it was printed.
//! - [`claim_bound`]: a relay process of quick deliveries, its prefetch grown past the
//!   concurrency, SIGKILLed while it holds at least 80 % of its lane's crash bound
//!   (`LaneConfig::most_held`): no more than that bound is delivered again.
//! - [`lane_control`]: three `outbox-relay run` processes on one database (PostgreSQL, and
//!   one SQLite file); `outbox-relay pause` stops their claims within a second (printed),
//!   a restart of all three keeps the lane paused, `resume` restarts delivery.
//!
//! The tests with relay processes on one lane share [`fleet`]: the processes, their output
//! in one order, their config and the checks on what they printed.
//!
//! Each test has its own schema (`chaos_<uuid>`, dropped when the test ends, pass or fail;
//! the MariaDB test has a server of its own, killed and removed likewise), its own
//! temporary directory and its own ports. Every wait polls a condition under a
//! generous deadline; no sleep stands in for a condition. Every child process is killed
//! by a guard, even when the test panics.
//!
//! PostgreSQL: `OUTBOX_TEST_DATABASE_URL`, default `postgres://postgres@127.0.0.1:5432/test`.
//! An unreachable server fails the tests; nothing is skipped. MariaDB: the server binaries
//! (`mariadbd`, `mariadb-install-db`), or the test fails saying so.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::thread;
use std::time::{Duration, Instant};

use outbox_relay::store::postgres::{PostgresConfig, PostgresOutboxStore};
use outbox_relay::store::{MessageFilter, PageRequest};
use outbox_relay::{Outbox, OutboxMessage, OutboxMessageDraft, OutboxStatus};
use serde_json::json;
use uuid::Uuid;

// The test's parts live in tests/chaos/ (a crate root looks for modules beside itself).
#[path = "chaos/claim_bound.rs"]
mod claim_bound;
#[path = "chaos/database_outage.rs"]
mod database_outage;
#[path = "chaos/fleet.rs"]
mod fleet;
#[path = "chaos/killed_process.rs"]
mod killed_process;
#[path = "chaos/lane_control.rs"]
mod lane_control;
#[path = "chaos/mysql.rs"]
mod mysql;
#[path = "chaos/partition.rs"]
mod partition;
#[path = "chaos/postgres_crash.rs"]
mod postgres_crash;
#[path = "support/stderr.rs"]
mod stderr;
#[path = "support/tcp_proxy.rs"]
mod tcp_proxy;

const BIN: &str = env!("CARGO_BIN_EXE_outbox-relay");
/// The longest any single wait may take before the test fails. Generous: the suite runs on
/// loaded 2-core machines.
const DEADLINE: Duration = Duration::from_secs(120);
/// How often a wait looks at its condition again.
const POLL: Duration = Duration::from_millis(20);

// ---- PostgreSQL --------------------------------------------------------------------------

fn postgres_url() -> String {
    std::env::var("OUTBOX_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// `url` with `application_name` set, so the server's `pg_stat_activity` tells one relay's
/// sessions from another's.
fn with_application_name(url: &str, name: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}application_name={name}")
}

/// The test's own schema, dropped when the test ends, pass or fail.
struct Schema {
    name: String,
}

impl Schema {
    fn new() -> Self {
        Self {
            name: format!("chaos_{}", Uuid::new_v4().simple()),
        }
    }

    fn config(&self) -> PostgresConfig {
        PostgresConfig::default().schema(self.name.clone())
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        // A thread with a runtime of its own: this drop may run inside an async test.
        let name = self.name.clone();
        let dropped = thread::spawn(move || {
            tokio::runtime::Runtime::new()
                .expect("a runtime")
                .block_on(async move {
                    use sqlx::Connection;
                    let mut conn = sqlx::PgConnection::connect(&postgres_url()).await?;
                    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                        "DROP SCHEMA IF EXISTS \"{name}\" CASCADE"
                    )))
                    .execute(&mut conn)
                    .await
                    .map(drop)
                })
        })
        .join();
        match dropped {
            Ok(Ok(())) => {}
            Ok(Err(error)) => eprintln!("could not drop schema {}: {error}", self.name),
            Err(_) => eprintln!(
                "could not drop schema {}: the dropping thread panicked",
                self.name
            ),
        }
    }
}

/// A store straight to PostgreSQL (no proxy), which also creates the schema. Panics, loudly,
/// when the server cannot be reached.
async fn direct_store(schema: &Schema) -> Outbox {
    let url = postgres_url();
    let store = PostgresOutboxStore::connect_with(&url, schema.config())
        .await
        .unwrap_or_else(|error| {
            panic!(
                "PostgreSQL is required for the chaos tests and is unreachable at {url} \
                 ({error}). Start it, or point OUTBOX_TEST_DATABASE_URL at one."
            )
        });
    Outbox::new(store)
}

/// The PostgreSQL store under an outbox, for its own API.
#[allow(dead_code)]
fn pg(outbox: &Outbox) -> &PostgresOutboxStore {
    outbox.backend().expect("a PostgreSQL outbox")
}

/// Every message of `lane`/`target` with `status`.
async fn messages(
    store: &Outbox,
    lane: &str,
    target: &str,
    status: Option<OutboxStatus>,
) -> Vec<OutboxMessage> {
    let mut filter = MessageFilter::lane(lane, target);
    filter.status = status;
    let mut all = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .list(&filter, PageRequest { after, limit: 500 })
            .await
            .expect("list messages");
        all.extend(page.messages);
        match page.next_cursor {
            Some(cursor) => after = Some(cursor),
            None => return all,
        }
    }
}

/// (pending, claimed, delivered, dead_letter) of one lane.
async fn counts(store: &Outbox, lane: &str, target: &str) -> (u64, u64, u64, u64) {
    let stats = store
        .stats(&MessageFilter::lane(lane, target))
        .await
        .expect("stats");
    let row = stats.into_iter().next().unwrap_or_default();
    (row.pending, row.claimed, row.delivered, row.dead_letter)
}

/// What was enqueued: the id, the ordering key, and the store's sequence number (the
/// enqueue order the relay must keep per key).
#[derive(Debug, Clone)]
struct Sent {
    id: Uuid,
    key: String,
    seq: i64,
}

/// Enqueues messages `range` of `lane`/`target` in one statement, key `k<n % keys>`.
async fn enqueue(
    store: &Outbox,
    lane: &str,
    target: &str,
    range: std::ops::Range<usize>,
    keys: usize,
) -> Vec<Sent> {
    let drafts = range
        .map(|n| {
            OutboxMessageDraft::new(lane, target, json!({ "n": n }))
                .expect("a valid draft")
                .with_ordering_key(format!("k{}", n % keys))
        })
        .collect();
    store
        .enqueue_many(drafts)
        .await
        .expect("enqueue")
        .into_iter()
        .map(|enqueued| Sent {
            id: enqueued.message.outbox_id,
            key: enqueued.message.ordering_key.expect("a key"),
            seq: enqueued.message.seq,
        })
        .collect()
}

/// Checks per-key order: for each key, the ids in the order they were *first* delivered
/// must be the key's ids in enqueue (`seq`) order, every one of them. `delivered` is the
/// global delivery order, repeats included.
fn assert_first_deliveries_in_enqueue_order(sent: &[Sent], delivered: &[Uuid]) {
    let key_of: HashMap<Uuid, &str> = sent.iter().map(|s| (s.id, s.key.as_str())).collect();
    let mut expected: BTreeMap<&str, Vec<&Sent>> = BTreeMap::new();
    for s in sent {
        expected.entry(&s.key).or_default().push(s);
    }
    let mut seen = HashSet::new();
    let mut firsts: BTreeMap<&str, Vec<Uuid>> = BTreeMap::new();
    for id in delivered {
        let key = key_of
            .get(id)
            .unwrap_or_else(|| panic!("delivered {id}, which was never enqueued"));
        if seen.insert(*id) {
            firsts.entry(key).or_default().push(*id);
        }
    }
    for (key, mut sent) in expected {
        sent.sort_by_key(|s| s.seq);
        let want: Vec<Uuid> = sent.iter().map(|s| s.id).collect();
        let got = firsts.remove(key).unwrap_or_default();
        assert_eq!(
            got, want,
            "key {key}: first deliveries out of enqueue order (or missing)"
        );
    }
}

/// Polls `check` until it answers `Some`, failing after `DEADLINE` with `what` and the
/// `context` at that moment.
fn wait_until<T>(
    what: &str,
    mut check: impl FnMut() -> Option<T>,
    context: impl Fn() -> String,
) -> T {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {DEADLINE:?} waiting for {what}\n{}",
            context()
        );
        thread::sleep(POLL);
    }
}

/// The async form of [`wait_until`], for conditions that ask the store.
async fn wait_until_async<T>(
    what: &str,
    timeout: Duration,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> T {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}
