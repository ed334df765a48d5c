//! The conformance suite against `PostgresOutboxStore` through a private PgBouncer in
//! `pool_mode = transaction` (`Pooler::Transaction`), its wake-ups over a direct
//! `listen_url`: every store behaviour holds with no named statement, no startup option
//! and no session outliving a transaction. Each case gets its own schema and its own
//! PgBouncer (two server connections), killed when the case's harness is dropped.

use std::sync::Arc;

use outbox_relay::store::postgres::{Pooler, PostgresConfig, PostgresOutboxStore};
use outbox_relay::testing::Harness;
use outbox_relay::time::ManualClock;
use outbox_relay::time::UnixMillis;
use outbox_relay::Outbox;
use sqlx::postgres::PgPoolOptions;

#[path = "../support/pgbouncer.rs"]
mod pgbouncer_process;

use crate::postgres::{database_url, drop_schema, unique_schema};
use pgbouncer_process::PgBouncer;

/// A migrated store through `bouncer` over `config`.
async fn open(bouncer: &PgBouncer, config: PostgresConfig) -> PostgresOutboxStore {
    let options = config
        .connect_options(&bouncer.url("postgres", "test"))
        .expect("connect options");
    let pool = PgPoolOptions::new()
        .max_connections(8)
        .connect_with(options)
        .await
        .unwrap_or_else(|e| panic!("connect through PgBouncer: {e}\n{}", bouncer.log()));
    let store = PostgresOutboxStore::new(pool, config)
        .await
        .expect("store through PgBouncer");
    store.migrate().await.expect("migrate through PgBouncer");
    store
}

/// A fresh store through a PgBouncer of its own, in a schema of its own, on a manual clock.
pub async fn harness() -> Harness {
    let bouncer = Arc::new(PgBouncer::start(&database_url(), 2));
    let clock = ManualClock::new(UnixMillis::from_millis(1_700_000_000_000));
    let schema = unique_schema();
    let config = PostgresConfig::default()
        .schema(schema.clone())
        .clock(Arc::new(clock.clone()))
        .pooler(Pooler::Transaction)
        .listen_url(database_url());
    let store: Outbox = Outbox::new(open(&bouncer, config.clone()).await);
    let for_cleanup = bouncer.clone();
    Harness {
        store,
        clock,
        cleanup: Some(Box::pin(async move {
            drop_schema(&schema).await;
            drop(for_cleanup);
        })),
        reopen: Arc::new(move || {
            let (bouncer, config) = (bouncer.clone(), config.clone());
            Box::pin(async move { Outbox::new(open(&bouncer, config).await) })
        }),
    }
}

outbox_relay::conformance!(harness);
