//! Checkpoints off the write path: closing the store lets go of the file, the background
//! checkpoints' connection included. (That they keep the WAL small is a unit test,
//! `src/store/sqlite/tests.rs`, at a lower restart size than the default.)

use outbox_relay::store::OutboxBackend as _;
use std::time::{Duration, Instant};

use outbox_relay::store::sqlite::SqliteOutboxStore;
use outbox_relay::Outbox;

use crate::{claim_req, draft};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_lets_go_of_the_file_after_background_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox.db");
    let store = std::sync::Arc::new(SqliteOutboxStore::open(&path).await.unwrap());
    let outbox = Outbox::from_arc(store.clone());
    outbox
        .enqueue_many((0..200).map(draft).collect())
        .await
        .unwrap();
    // Enough commits for several background checkpoints.
    for _ in 0..100 {
        outbox.claim(&claim_req(2)).await.unwrap();
    }
    store.close().await;
    // SQLite checkpoints and deletes the WAL when the file's last connection closes.
    let wal = dir.path().join("outbox.db-wal");
    let deadline = Instant::now() + Duration::from_secs(30);
    while wal.exists() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !wal.exists(),
        "a connection still holds {} 30 s after close",
        wal.display()
    );
    let reopened = SqliteOutboxStore::open(&path).await.unwrap();
    let stats = reopened
        .stats(&outbox_relay::store::MessageFilter::all())
        .await
        .unwrap();
    assert_eq!(stats[0].claimed, 200, "every claim survived the close");
}
