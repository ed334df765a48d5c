//! The differential run on both dialects (the main server, MariaDB in CI, and Oracle
//! MySQL): the store and the in-memory reference store driven through the same random
//! operations on the same clock must give the same answers and hold the same rows
//! (`tests/support/differential.rs`).

use std::sync::Arc;

use outbox_relay::store::mysql::MysqlConfig;
use outbox_relay::time::ManualClock;
use outbox_relay::time::UnixMillis;
use outbox_relay::Outbox;

use crate::differential_support::{differential_run, seeds, START_MILLIS};
use crate::support::{open, Server, TestDatabase};

/// Drives the MySQL store and the in-memory reference through the same random
/// operations on the same clock, and requires the same answers and the same rows.
async fn agrees_with_the_reference_store_on(server: Server) {
    for seed in 0..seeds() {
        let db = TestDatabase::create_on(server).await;
        let clock = ManualClock::new(UnixMillis::from_millis(START_MILLIS));
        let config = MysqlConfig::default().clock(Arc::new(clock.clone()));
        let store = Outbox::new(open(&db, config).await);
        differential_run(store, clock, seed, 250).await;
        db.drop_now().await;
    }
}

#[tokio::test]
async fn agrees_with_the_reference_store() {
    agrees_with_the_reference_store_on(Server::Main).await;
}

#[tokio::test]
async fn agrees_with_the_reference_store_on_oracle_mysql() {
    agrees_with_the_reference_store_on(Server::OracleMysql).await;
}
