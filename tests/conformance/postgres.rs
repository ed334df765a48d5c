//! The conformance suite against `PostgresOutboxStore`, over a real connection.
//!
//! Each case gets a schema of its own (`t_` and a fresh uuid), so cases run in parallel and
//! never see each other's rows or wake-ups. PostgreSQL must be reachable at
//! `OUTBOX_TEST_DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/test`): when it
//! is not, the harness panics; nothing is skipped.

use std::sync::Arc;

use outbox_relay::store::postgres::{PostgresConfig, PostgresOutboxStore};
use outbox_relay::time::ManualClock;
use outbox_relay::Outbox;
use sqlx::postgres::{PgPool, PgPoolOptions};
use uuid::Uuid;

use outbox_relay::testing::Harness;
use outbox_relay::time::UnixMillis;

/// The default test database.
pub const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// The test database's URL: `OUTBOX_TEST_DATABASE_URL`, or the default.
pub fn database_url() -> String {
    std::env::var("OUTBOX_TEST_DATABASE_URL").unwrap_or_else(|_| DEFAULT_DATABASE_URL.to_owned())
}

/// A small pool on the test database, panicking with a clear message when it is down.
pub async fn test_pool() -> PgPool {
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

/// A schema name no other test uses.
pub fn unique_schema() -> String {
    format!("t_{}", Uuid::new_v4().simple())
}

/// A migrated store on its own pool over `config`.
pub async fn open(config: PostgresConfig) -> PostgresOutboxStore {
    let store = PostgresOutboxStore::new(test_pool().await, config)
        .await
        .expect("store");
    store.migrate().await.expect("migrate");
    store
}

/// Drops a test schema and everything in it. Call it at the end of a test that wants to
/// leave the database clean; leaving the schema is harmless.
pub async fn drop_schema(schema: &str) {
    let pool = test_pool().await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
    )))
    .execute(&pool)
    .await
    .expect("drop schema");
}

/// A fresh store in a schema of its own, on a manual clock.
pub async fn harness() -> Harness {
    harness_with(|config| config).await
}

/// A fresh store in a schema of its own, on a manual clock, with `configure` applied to its
/// config.
pub async fn harness_with(configure: fn(PostgresConfig) -> PostgresConfig) -> Harness {
    let clock = ManualClock::new(UnixMillis::from_millis(1_700_000_000_000));
    let schema = unique_schema();
    let config = configure(
        PostgresConfig::default()
            .schema(schema.clone())
            .clock(Arc::new(clock.clone())),
    );
    let store: Outbox = Outbox::new(open(config.clone()).await);
    Harness {
        store,
        clock,
        cleanup: Some(Box::pin(async move { drop_schema(&schema).await })),
        reopen: Arc::new(move || {
            let config = config.clone();
            Box::pin(async move { Outbox::new(open(config).await) })
        }),
    }
}

outbox_relay::conformance!(harness);
