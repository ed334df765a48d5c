//! The differential run on PostgreSQL: the store and the in-memory reference store driven
//! through the same random operations on the same clock must give the same answers and
//! hold the same rows (`tests/support/differential.rs`).

use std::sync::Arc;

use outbox_relay::time::ManualClock;
use outbox_relay::time::UnixMillis;

use crate::differential_support::{differential_run, seeds, START_MILLIS};
use crate::{open, SchemaGuard};

/// Drives the PostgreSQL store and the in-memory reference through the same random
/// operations on the same clock, and requires the same answers and the same rows.
#[tokio::test]
async fn agrees_with_the_reference_store() {
    for seed in 0..seeds() {
        let schema = SchemaGuard::new();
        let clock = ManualClock::new(UnixMillis::from_millis(START_MILLIS));
        // Odd seeds without the cycle function: the claim statements on their own.
        let config = schema
            .config()
            .clock(Arc::new(clock.clone()))
            .cycle_function(seed.is_multiple_of(2));
        differential_run(open(config).await, clock, seed, 250).await;
        schema.drop().await;
    }
}
