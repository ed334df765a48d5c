//! What only the PostgreSQL store does. Here: what every file shares (a pool, a schema of
//! its own, a store on it), the caller's transaction, and how database errors read. In
//! `postgres/`: migrations, indexes and naming (`schema.rs`), LISTEN/NOTIFY wake-ups
//! (`wakeups.rs`), ordering and dedupe keys under contention (`keys.rs`), the differential
//! run against the in-memory reference store (`differential.rs`), schedules the simulation
//! draws played by several relays at once and judged by its checker (`drawn_plans.rs`), the
//! key-head marker under
//! concurrency (`heads.rs`), the EXPLAIN guards on the claim's cost (`plans.rs`), the ack's
//! (`ack_plans.rs`) and the purge's over many lanes (`purge_plans.rs`), the
//! connections' session settings (`session.rs`), the cycle function (`cycle.rs`), local
//! hand-off (`hand_off.rs`), retention shared by two relays (`retention.rs`), and the relay
//! and a service through PgBouncer in transaction mode (`pgbouncer.rs`).
//!
//! PostgreSQL must be reachable at `OUTBOX_TEST_DATABASE_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`); the tests panic when it is not.
#![cfg(feature = "postgres")]

use std::time::Duration;

use outbox_relay::store::postgres::{PostgresConfig, PostgresOutboxStore};
use outbox_relay::store::StoreError;
use outbox_relay::{Outbox, OutboxMessageDraft};
use serde_json::json;
use sqlx::postgres::{PgPool, PgPoolOptions};
use uuid::Uuid;

#[cfg(feature = "plans")]
#[path = "postgres/ack_plans.rs"]
mod ack_plans;
#[path = "postgres/cycle.rs"]
mod cycle;
#[path = "postgres/differential.rs"]
mod differential;
#[path = "support/differential.rs"]
mod differential_support;
#[path = "support/drawn_plan.rs"]
mod drawn_plan;
#[path = "postgres/drawn_plans.rs"]
mod drawn_plans;
#[path = "postgres/hand_off.rs"]
mod hand_off;
#[path = "postgres/heads.rs"]
mod heads;
#[path = "postgres/keys.rs"]
mod keys;
#[cfg(feature = "plans")]
#[path = "postgres/list_plans.rs"]
mod list_plans;
#[path = "postgres/pgbouncer.rs"]
mod pgbouncer;
#[path = "support/pgbouncer.rs"]
mod pgbouncer_process;
#[cfg(feature = "plans")]
#[path = "postgres/plans.rs"]
mod plans;
#[cfg(feature = "plans")]
#[path = "postgres/purge_plans.rs"]
mod purge_plans;
#[path = "postgres/retention.rs"]
mod retention;
#[path = "postgres/schema.rs"]
mod schema;
#[path = "postgres/session.rs"]
mod session;
#[path = "postgres/wakeups.rs"]
mod wakeups;

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

async fn open(config: PostgresConfig) -> Outbox {
    let store = PostgresOutboxStore::new(pool().await, config)
        .await
        .expect("store");
    store.migrate().await.expect("migrate");
    Outbox::new(store)
}

/// The PostgreSQL store under an outbox, for its own API.
fn pg(outbox: &Outbox) -> &PostgresOutboxStore {
    outbox.backend().expect("a PostgreSQL outbox")
}

/// Drops the schema when the test ends well (a failed test leaves it for inspection).
struct SchemaGuard(String);

impl SchemaGuard {
    fn new() -> Self {
        Self(unique_schema())
    }

    fn config(&self) -> PostgresConfig {
        PostgresConfig::default().schema(self.0.clone())
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

async fn count_rows(store: &Outbox) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FROM {}",
        pg(store).messages_table()
    )))
    .fetch_one(pg(store).pool())
    .await
    .expect("count")
}

#[tokio::test]
async fn the_callers_transaction_decides() {
    let schema = SchemaGuard::new();
    let store = open(schema.config()).await;

    let mut tx = pg(&store).pool().begin().await.unwrap();
    let rolled_back = store.enqueue_in_tx(&mut tx, draft("l", 1)).await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(
        store.get(rolled_back.message.outbox_id).await.unwrap(),
        None
    );
    assert_eq!(count_rows(&store).await, 0);

    let mut tx = pg(&store).pool().begin().await.unwrap();
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
    let mut tx = pg(&store).pool().begin().await.unwrap();
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

    let mut pooled = pg(&store).pool().acquire().await.unwrap();
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
    let mut tx = pg(&store).pool().begin().await.unwrap();
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
    assert_eq!(
        err.op(),
        Some(outbox_relay::store::StoreOp::Enqueue),
        "{err:?}"
    );
    assert_eq!(err.sqlstate().as_deref(), Some("25P02"), "{err:?}");
    assert!(!err.is_retryable(), "{err:?}");
    let source = err.source().expect("the sqlx error is the source");
    assert!(source.downcast_ref::<sqlx::Error>().is_some(), "{source:?}");
    tx.rollback().await.unwrap();
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
