//! Schedules the simulation draws, played by several production relays at once against
//! MariaDB (or MySQL) and judged by the simulation's checker (`tests/support/drawn_plan.rs`).

use std::sync::Arc;

use outbox_relay::store::mysql::MysqlConfig;
use outbox_relay::time::ManualClock;
use outbox_relay::time::UnixMillis;

use crate::drawn_plan::{play, seeds, START_MILLIS};
use crate::support::{open, TestDatabase};

/// Several relays serve one lane of MySQL through a drawn schedule of messages, target
/// answers and faults, and every invariant of the simulation holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relays_at_once_hold_the_simulations_invariants() {
    for seed in seeds() {
        let db = TestDatabase::create().await;
        let clock = ManualClock::new(UnixMillis::from_millis(START_MILLIS));
        let config = MysqlConfig::default().clock(Arc::new(clock.clone()));
        let store = Arc::new(open(&db, config).await);
        let played = play(seed, store, clock).await;
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
        db.drop_now().await;
    }
}
