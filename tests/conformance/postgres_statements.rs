//! The conformance suite against `PostgresOutboxStore` without the cycle function
//! (`PostgresConfig::cycle_function` false): the statements a store runs over a database
//! that lacks it. Same isolation as `postgres.rs`.

use outbox_relay::testing::Harness;

/// A fresh store in a schema of its own, on a manual clock, without the cycle function.
pub async fn harness() -> Harness {
    crate::postgres::harness_with(|config| config.cycle_function(false)).await
}

outbox_relay::conformance!(harness);
