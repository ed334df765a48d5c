//! The conformance suite against `PostgresOutboxStore` without the cycle function
//! (`PostgresConfig::cycle_function` false): the statements a store runs over a database
//! that lacks it. Same isolation as `postgres.rs`.

use std::sync::Arc;

use outbox_relay::store::postgres::PostgresConfig;
use outbox_relay::store::ManualClock;
use outbox_relay::testing::Harness;
use outbox_relay::time::UnixMillis;
use outbox_relay::OutboxStore;

use crate::postgres::{drop_schema, open, unique_schema};

/// A fresh store in a schema of its own, on a manual clock, without the cycle function.
pub async fn harness() -> Harness {
    let clock = ManualClock::new(UnixMillis::from_millis(1_700_000_000_000));
    let schema = unique_schema();
    let config = PostgresConfig::default()
        .with_schema(schema.clone())
        .with_clock(Arc::new(clock.clone()))
        .with_cycle_function(false);
    let store: Arc<dyn OutboxStore> = Arc::new(open(config.clone()).await);
    Harness {
        store,
        clock,
        cleanup: Some(Box::pin(async move { drop_schema(&schema).await })),
        reopen: Arc::new(move || {
            let config = config.clone();
            Box::pin(async move { Arc::new(open(config).await) as Arc<dyn OutboxStore> })
        }),
    }
}

outbox_relay::conformance!(harness);
