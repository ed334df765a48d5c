//! What only the PostgreSQL store does: the caller's transaction, migrations, LISTEN/NOTIFY,
//! its indexes, two processes claiming at once, its naming. In `postgres/`: the differential
//! run against the in-memory reference store (`differential.rs`), the key-head marker under
//! concurrency (`heads.rs`), the EXPLAIN guards on the claim's cost (`plans.rs`), and the
//! connections' session settings (`session.rs`).
//!
//! PostgreSQL must be reachable at `OUTBOX_TEST_DATABASE_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`); the tests panic when it is not.
#![cfg(feature = "postgres")]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_relay::store::postgres::{PostgresConfig, PostgresOutboxStore};
use outbox_relay::store::{
    ClaimOutcome, ClaimRef, ClaimRequest, ManualClock, MessageFilter, Nack, NackDisposition,
    StoreError, WakeUp,
};
use outbox_relay::time::UnixMillis;
use outbox_relay::{InMemoryOutboxStore, OutboxMessageDraft, OutboxStore};
use serde_json::json;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::Row;
use uuid::Uuid;

#[path = "postgres/cycle.rs"]
mod cycle;
#[path = "postgres/differential.rs"]
mod differential;
#[path = "postgres/hand_off.rs"]
mod hand_off;
#[path = "postgres/heads.rs"]
mod heads;
#[path = "postgres/plans.rs"]
mod plans;
#[path = "postgres/retention.rs"]
mod retention;
#[path = "postgres/session.rs"]
mod session;

const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

fn database_url() -> String {
    std::env::var("OUTBOX_TEST_DATABASE_URL").unwrap_or_else(|_| DEFAULT_DATABASE_URL.to_owned())
}

/// A pool of its own: each call is like another process.
async fn pool() -> PgPool {
    let url = database_url();
    PgPoolOptions::new()
        .max_connections(8)
        .connect(&url)
        .await
        .unwrap_or_else(|error| {
            panic!(
                "PostgreSQL is required for these tests and is unreachable at {url} ({error}). \
                 Start it, or point OUTBOX_TEST_DATABASE_URL at one."
            )
        })
}

fn unique_schema() -> String {
    format!("t_{}", Uuid::new_v4().simple())
}

async fn open(config: PostgresConfig) -> PostgresOutboxStore {
    let store = PostgresOutboxStore::new(pool().await, config)
        .await
        .expect("store");
    store.migrate().await.expect("migrate");
    store
}

/// Drops the schema when the test ends well (a failed test leaves it for inspection).
struct SchemaGuard(String);

impl SchemaGuard {
    fn new() -> Self {
        Self(unique_schema())
    }

    fn config(&self) -> PostgresConfig {
        PostgresConfig::default().with_schema(self.0.clone())
    }

    async fn drop(self) {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS \"{}\" CASCADE",
            self.0
        )))
        .execute(&pool().await)
        .await
        .expect("drop schema");
    }
}

fn draft(lane: &str, value: i64) -> OutboxMessageDraft {
    OutboxMessageDraft::new(lane, "sink", json!({ "value": value })).expect("draft")
}

async fn count_rows(store: &PostgresOutboxStore) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FROM {}",
        store.messages_table()
    )))
    .fetch_one(store.pool())
    .await
    .expect("count")
}

#[tokio::test]
async fn the_callers_transaction_decides() {
    let schema = SchemaGuard::new();
    let store = open(schema.config()).await;

    let mut tx = store.pool().begin().await.unwrap();
    let rolled_back = store.enqueue_in_tx(&mut tx, draft("l", 1)).await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(
        store.get(rolled_back.message.outbox_id).await.unwrap(),
        None
    );
    assert_eq!(count_rows(&store).await, 0);

    let mut tx = store.pool().begin().await.unwrap();
    let committed = store.enqueue_in_tx(&mut tx, draft("l", 2)).await.unwrap();
    // Not visible to others before the commit.
    assert_eq!(store.get(committed.message.outbox_id).await.unwrap(), None);
    tx.commit().await.unwrap();
    let stored = store
        .get(committed.message.outbox_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.payload, json!({ "value": 2 }));

    // A conflict inside the caller's transaction takes back what the call wrote, so a
    // caller that commits anyway commits none of it.
    store
        .enqueue(draft("l", 3).with_dedupe_key("d"))
        .await
        .unwrap();
    let mut tx = store.pool().begin().await.unwrap();
    let err = store
        .enqueue_many_in_tx(
            &mut tx,
            vec![draft("l", 4), draft("l", 5).with_dedupe_key("d")],
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict { .. }), "{err}");
    tx.commit().await.unwrap();
    assert_eq!(count_rows(&store).await, 2);
    schema.drop().await;
}

/// `enqueue_in_tx` takes any `&mut PgConnection`: a connection of the caller's own (not
/// from the store's pool), in a transaction begun on it with plain SQL, and a pooled
/// connection outside any transaction, whose row commits at once.
#[tokio::test]
async fn enqueue_in_tx_takes_any_connection() {
    use sqlx::Connection;
    let schema = SchemaGuard::new();
    let store = open(schema.config()).await;

    let mut own = sqlx::PgConnection::connect(&database_url())
        .await
        .expect("a connection of the caller's own");
    sqlx::raw_sql("BEGIN").execute(&mut own).await.unwrap();
    let in_tx = store.enqueue_in_tx(&mut own, draft("l", 1)).await.unwrap();
    assert_eq!(store.get(in_tx.message.outbox_id).await.unwrap(), None);
    sqlx::raw_sql("COMMIT").execute(&mut own).await.unwrap();
    assert!(store.get(in_tx.message.outbox_id).await.unwrap().is_some());

    let mut pooled = store.pool().acquire().await.unwrap();
    let at_once = store
        .enqueue_in_tx(&mut pooled, draft("l", 2))
        .await
        .unwrap();
    drop(pooled);
    assert!(store
        .get(at_once.message.outbox_id)
        .await
        .unwrap()
        .is_some());

    // A nested transaction (a savepoint) derefs to the connection too.
    let mut tx = own.begin().await.unwrap();
    let mut savepoint = tx.begin().await.unwrap();
    let undone = store
        .enqueue_in_tx(&mut savepoint, draft("l", 3))
        .await
        .unwrap();
    savepoint.rollback().await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(store.get(undone.message.outbox_id).await.unwrap(), None);
    assert_eq!(count_rows(&store).await, 2);
    schema.drop().await;
}

/// A database error keeps its operation, the sqlx error as its source, and the SQLSTATE.
#[tokio::test]
async fn a_database_error_keeps_its_op_source_and_sqlstate() {
    use std::error::Error as _;
    let schema = SchemaGuard::new();
    let store = open(schema.config()).await;
    let mut tx = store.pool().begin().await.unwrap();
    sqlx::query("SELECT 1 / 0")
        .execute(&mut *tx)
        .await
        .expect_err("division by zero");
    // The transaction is aborted now: PostgreSQL refuses every statement with 25P02.
    let err = store
        .enqueue_in_tx(&mut tx, draft("l", 1))
        .await
        .expect_err("an aborted transaction refuses the enqueue");
    assert!(matches!(err, StoreError::Database { .. }), "{err:?}");
    assert_eq!(err.op(), Some("enqueue"), "{err:?}");
    assert_eq!(err.sqlstate().as_deref(), Some("25P02"), "{err:?}");
    assert!(!err.is_retryable(), "{err:?}");
    let source = err.source().expect("the sqlx error is the source");
    assert!(source.downcast_ref::<sqlx::Error>().is_some(), "{source:?}");
    tx.rollback().await.unwrap();
    schema.drop().await;
}

#[tokio::test]
async fn migrations_are_idempotent_and_safe_concurrently() {
    let schema = SchemaGuard::new();
    let store = open(schema.config()).await;
    store.migrate().await.unwrap();
    store.migrate().await.unwrap();

    // Two processes migrating a fresh schema at the same moment.
    let fresh = SchemaGuard::new();
    let a = PostgresOutboxStore::new(pool().await, fresh.config())
        .await
        .unwrap();
    let b = PostgresOutboxStore::new(pool().await, fresh.config())
        .await
        .unwrap();
    let (ra, rb) = tokio::join!(a.migrate(), b.migrate());
    ra.unwrap();
    rb.unwrap();
    let versions: Vec<i32> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT version FROM \"{}\".outbox_migrations ORDER BY version",
        fresh.0
    )))
    .fetch_all(a.pool())
    .await
    .unwrap();
    assert_eq!(versions, vec![1, 2, 3]);
    a.enqueue(draft("l", 1)).await.unwrap();
    assert_eq!(count_rows(&b).await, 1);
    schema.drop().await;
    fresh.drop().await;
}

/// Waits for the next wake-up, failing after a generous timeout.
async fn next_wakeup(rx: &mut tokio::sync::broadcast::Receiver<WakeUp>) -> WakeUp {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("a wake-up within 10 s")
        .expect("wake-up channel open")
}

/// Counts wake-ups of `lane` until the marker lane's arrives.
async fn wakeups_before_marker(
    rx: &mut tokio::sync::broadcast::Receiver<WakeUp>,
    lane: &str,
) -> usize {
    let mut count = 0;
    loop {
        match next_wakeup(rx).await {
            WakeUp::Lane { lane: l, .. } if l == "marker" => return count,
            WakeUp::Lane { lane: l, .. } if l == lane => count += 1,
            other => panic!("unexpected wake-up {other:?}"),
        }
    }
}

#[tokio::test]
async fn wakeups_cross_processes_once_per_transaction() {
    let schema = SchemaGuard::new();
    let writer = open(schema.config()).await;
    let relay = open(schema.config()).await;
    let mut rx = relay.subscribe();

    writer.enqueue(draft("orders", 1)).await.unwrap();
    assert_eq!(
        next_wakeup(&mut rx).await,
        WakeUp::Lane {
            lane: "orders".into(),
            target: "sink".into()
        }
    );

    // 100 enqueues in one transaction, each its own statement: one notification.
    let mut tx = writer.pool().begin().await.unwrap();
    for i in 0..100 {
        writer
            .enqueue_in_tx(&mut tx, draft("bulk", i))
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    writer.enqueue(draft("marker", 0)).await.unwrap();
    assert_eq!(wakeups_before_marker(&mut rx, "bulk").await, 1);

    // 100 in one enqueue_many: one notification too.
    let drafts = (0..100).map(|i| draft("many", i)).collect();
    writer.enqueue_many(drafts).await.unwrap();
    writer.enqueue(draft("marker", 1)).await.unwrap();
    assert_eq!(wakeups_before_marker(&mut rx, "many").await, 1);

    // A rolled-back enqueue wakes nobody.
    let mut tx = writer.pool().begin().await.unwrap();
    writer
        .enqueue_in_tx(&mut tx, draft("ghost", 0))
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    writer.enqueue(draft("marker", 2)).await.unwrap();
    assert_eq!(wakeups_before_marker(&mut rx, "ghost").await, 0);

    // Another schema's outbox does not wake this one.
    let other = SchemaGuard::new();
    let stranger = open(other.config()).await;
    stranger.enqueue(draft("elsewhere", 0)).await.unwrap();
    writer.enqueue(draft("marker", 3)).await.unwrap();
    assert_eq!(wakeups_before_marker(&mut rx, "elsewhere").await, 0);
    schema.drop().await;
    other.drop().await;
}

#[tokio::test]
async fn claims_use_partial_indexes_over_heads_and_claims() {
    let schema = SchemaGuard::new();
    let store = open(schema.config()).await;
    let def = |name: &'static str| {
        let pool = store.pool().clone();
        let schema = schema.0.clone();
        async move {
            let row = sqlx::query(
                "SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND indexname = $2",
            )
            .bind(&schema)
            .bind(name)
            .fetch_one(&pool)
            .await
            .unwrap_or_else(|e| panic!("index {name}: {e}"));
            row.get::<String, _>("indexdef")
        }
    };
    // Due pending heads only: the rows queued behind a key's head are not in it.
    let head = def("outbox_head_idx").await;
    assert!(head.contains("(lane, target, available_at, seq)"), "{head}");
    assert!(
        head.contains("'pending'") && head.contains("key_head") && !head.contains("'claimed'"),
        "{head}"
    );
    // Lapsed claims in lapse order, over claimed rows only.
    let lease = def("outbox_lease_idx").await;
    assert!(
        lease.contains("(lane, target, lease_expires_at, seq)"),
        "{lease}"
    );
    assert!(
        lease.contains("'claimed'") && !lease.contains("'pending'"),
        "{lease}"
    );
    schema.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_processes_never_hold_two_messages_of_one_key() {
    const KEYS: i64 = 8;
    const PER_KEY: i64 = 25;
    let schema = SchemaGuard::new();
    let processes = [
        Arc::new(open(schema.config()).await),
        Arc::new(open(schema.config()).await),
    ];
    let drafts = (0..KEYS * PER_KEY)
        .map(|i| draft("keyed", i).with_ordering_key(format!("k{}", i % KEYS)))
        .collect();
    processes[0].enqueue_many(drafts).await.unwrap();

    // Who holds each key right now, and what each key delivered, in order.
    let held: Arc<Mutex<HashMap<String, String>>> = Arc::default();
    let delivered: Arc<Mutex<HashMap<String, Vec<i64>>>> = Arc::default();
    let mut workers = Vec::new();
    for (p, store) in processes.iter().enumerate() {
        for w in 0..4 {
            let (store, held, delivered) = (store.clone(), held.clone(), delivered.clone());
            let me = format!("p{p}-w{w}");
            workers.push(tokio::spawn(async move {
                let mut idle = 0;
                while idle < 20 {
                    let request =
                        ClaimRequest::new("keyed", "sink", 3, Duration::from_secs(60), &me);
                    let batch = store.claim(&request).await.unwrap();
                    if batch.messages.is_empty() {
                        idle += 1;
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        continue;
                    }
                    idle = 0;
                    for m in &batch.messages {
                        let key = m.ordering_key.clone().unwrap();
                        if let Some(other) = held.lock().unwrap().insert(key.clone(), me.clone()) {
                            panic!("{me} claimed key {key} while {other} holds it");
                        }
                    }
                    tokio::task::yield_now().await;
                    for m in &batch.messages {
                        let key = m.ordering_key.clone().unwrap();
                        delivered
                            .lock()
                            .unwrap()
                            .entry(key.clone())
                            .or_default()
                            .push(m.payload.to_value().unwrap()["value"].as_i64().unwrap());
                        // Let go before the ack commits: a gap can hide a violation but
                        // never invent one.
                        held.lock().unwrap().remove(&key);
                    }
                    let claims: Vec<ClaimRef> =
                        batch.messages.iter().filter_map(|m| m.claim()).collect();
                    let outcomes = store.ack(&claims).await.unwrap();
                    assert!(outcomes.iter().all(|o| *o == ClaimOutcome::Applied));
                }
            }));
        }
    }
    for worker in workers {
        worker.await.unwrap();
    }
    let delivered = std::mem::take(&mut *delivered.lock().unwrap());
    for k in 0..KEYS {
        let expected: Vec<i64> = (0..PER_KEY).map(|i| i * KEYS + k).collect();
        assert_eq!(delivered[&format!("k{k}")], expected, "key k{k}");
    }
    schema.drop().await;
}

#[tokio::test]
async fn schema_and_prefix_are_chosen_and_checked() {
    let schema = SchemaGuard::new();
    let store = open(schema.config().with_table_prefix("relay_q")).await;
    assert_eq!(
        store.messages_table(),
        format!("\"{}\".\"relay_q_messages\"", schema.0)
    );
    let sent = store.enqueue(draft("l", 1)).await.unwrap();
    let batch = store
        .claim(&ClaimRequest::new(
            "l",
            "sink",
            1,
            Duration::from_secs(5),
            "r",
        ))
        .await
        .unwrap();
    assert_eq!(batch.messages[0].outbox_id, sent.message.outbox_id);
    let exists: bool = sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
        .bind(format!("{}.relay_q_migrations", schema.0))
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert!(exists);

    for (config, field) in [
        (PostgresConfig::default().with_schema("Public"), "schema"),
        (PostgresConfig::default().with_schema("a;drop"), "schema"),
        (
            PostgresConfig::default().with_table_prefix("bad-prefix"),
            "table_prefix",
        ),
        (
            PostgresConfig::default().with_table_prefix(""),
            "table_prefix",
        ),
    ] {
        match PostgresOutboxStore::new(pool().await, config.clone()).await {
            Err(StoreError::Validation(e)) => assert_eq!(e.field, field),
            other => panic!("expected a validation error naming {field}, got {other:?}"),
        }
        // Checked before any connection is tried.
        match PostgresOutboxStore::connect_with("postgres://nobody@127.0.0.1:1/x", config).await {
            Err(StoreError::Validation(e)) => assert_eq!(e.field, field),
            other => panic!("expected a validation error naming {field}, got {other:?}"),
        }
    }
    schema.drop().await;
}

#[tokio::test]
async fn an_unreachable_database_is_retryable() {
    // A short acquire timeout: sqlx's default waits 30 s for a connection.
    let pool = PgPoolOptions::new()
        .acquire_timeout(Duration::from_millis(500))
        .connect_lazy("postgres://postgres@127.0.0.1:1/test")
        .unwrap();
    let err = PostgresOutboxStore::new(pool, PostgresConfig::default())
        .await
        .unwrap_err();
    assert!(err.is_retryable(), "{err}");
}

/// A dead letter requeued while its key's next message is in flight waits for that claim
/// to end: a key never has two messages in flight. Checked on both stores.
#[tokio::test]
async fn a_requeued_dead_letter_waits_for_its_in_flight_successor() {
    let schema = SchemaGuard::new();
    let clock = ManualClock::new(UnixMillis::from_millis(1_700_000_000_000));
    let stores: [Arc<dyn OutboxStore>; 2] = [
        Arc::new(InMemoryOutboxStore::with_clock(Arc::new(clock.clone()))),
        Arc::new(open(schema.config().with_clock(Arc::new(clock.clone()))).await),
    ];
    for store in &stores {
        let keyed = |v| draft("l", v).with_ordering_key("k").with_max_attempts(1);
        let first = store.enqueue(keyed(1)).await.unwrap().message;
        let second = store.enqueue(keyed(2)).await.unwrap().message;
        let request = ClaimRequest::new("l", "sink", 10, Duration::from_secs(1), "r");

        let batch = store.claim(&request).await.unwrap();
        assert_eq!(batch.messages.len(), 1);
        let nack = Nack {
            claim: batch.messages[0].claim().unwrap(),
            error: "no".into(),
            disposition: NackDisposition::Permanent,
        };
        store.nack(&[nack]).await.unwrap();
        let batch = store.claim(&request).await.unwrap();
        assert_eq!(batch.messages[0].outbox_id, second.outbox_id);
        let in_flight = batch.messages[0].claim().unwrap();

        let requeue = MessageFilter::all().with_ids([first.outbox_id]);
        assert_eq!(store.requeue_dead_letters(&requeue).await.unwrap(), 1);
        let batch = store.claim(&request).await.unwrap();
        assert!(batch.messages.is_empty(), "{store:?}: two in flight");

        store.ack(&[in_flight]).await.unwrap();
        let batch = store.claim(&request).await.unwrap();
        assert_eq!(batch.messages[0].outbox_id, first.outbox_id);
    }
    schema.drop().await;
}

/// When the listening connection dies, the store listens again and says every lane should
/// look (whatever was notified meanwhile is lost); wake-ups then flow as before.
#[tokio::test]
async fn a_lost_listener_connection_reconnects_and_wakes_everyone() {
    let schema = SchemaGuard::new();
    let store = open(schema.config()).await;
    let mut rx = store.subscribe();
    let killed: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE query LIKE 'LISTEN%' AND strpos(query, $1) > 0",
    )
    .bind(store.notify_channel())
    .fetch_all(store.pool())
    .await
    .unwrap();
    assert_eq!(killed, vec![true], "exactly our listener was terminated");
    assert_eq!(next_wakeup(&mut rx).await, WakeUp::All);

    store.enqueue(draft("after", 1)).await.unwrap();
    assert_eq!(
        next_wakeup(&mut rx).await,
        WakeUp::Lane {
            lane: "after".into(),
            target: "sink".into()
        }
    );
    schema.drop().await;
}

/// Sixteen enqueues of one dedupe key at once, from two pools: one row, no errors, every
/// answer the same message, all but one of them duplicates.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_enqueues_of_one_dedupe_key_write_one_row() {
    let schema = SchemaGuard::new();
    let stores = [
        Arc::new(open(schema.config()).await),
        Arc::new(open(schema.config()).await),
    ];
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let store = stores[i % 2].clone();
            tokio::spawn(async move {
                store
                    .enqueue(draft("l", 1).with_dedupe_key("once"))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    assert_eq!(count_rows(&stores[0]).await, 1);
    let id = answers[0].message.outbox_id;
    assert!(answers.iter().all(|a| a.message.outbox_id == id));
    assert_eq!(answers.iter().filter(|a| !a.duplicate).count(), 1);
    schema.drop().await;
}
