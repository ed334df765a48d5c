//! Schedules the simulation draws, played by several production relays at once against
//! PostgreSQL and judged by the simulation's checker (`tests/support/drawn_plan.rs`).

use std::sync::Arc;

use outbox_relay::time::ManualClock;
use outbox_relay::time::UnixMillis;

use crate::drawn_plan::{play, seeds, START_MILLIS};
use crate::{open, SchemaGuard};

/// Several relays serve one lane of PostgreSQL through a drawn schedule of messages, target
/// answers and faults, and every invariant of the simulation holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relays_at_once_hold_the_simulations_invariants() {
    for seed in seeds() {
        let schema = SchemaGuard::new();
        let clock = ManualClock::new(UnixMillis::from_millis(START_MILLIS));
        let store = open(schema.config().clock(Arc::new(clock.clone()))).await;
        let played = play(seed, store.as_backend().clone(), clock).await;
        println!(
            "seed {seed}: {} messages, {} deliveries, {} store calls, {} faults, in {:.1?}",
            played.messages, played.deliveries, played.store_calls, played.faults, played.took
        );
        assert!(
            played.deliveries >= played.messages as u64 / 4,
            "seed {seed}: only {} deliveries of {} messages",
            played.deliveries,
            played.messages
        );
        schema.drop().await;
    }
}
