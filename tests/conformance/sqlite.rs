//! The conformance suite against `SqliteOutboxStore`: a fresh file in a fresh temp dir per
//! case.

use std::sync::Arc;

use outbox_relay::store::sqlite::SqliteOutboxStore;
use outbox_relay::time::{Clock, ManualClock};
use outbox_relay::Outbox;

use outbox_relay::testing::Harness;
use outbox_relay::time::UnixMillis;

/// A fresh SQLite store on a manual clock. `reopen` opens a second store over the same file
/// and clock.
pub async fn harness() -> Harness {
    // The directory is owned by the `reopen` closure, which lives in the Harness for the
    // whole case, so the file outlives every store handle the case opens and is deleted
    // when the case ends.
    let dir = Arc::new(tempfile::tempdir().expect("temp dir"));
    let path = dir.path().join("outbox.db");
    let clock = ManualClock::new(UnixMillis::from_millis(1_700_000_000_000));
    let open = {
        let clock: Arc<dyn Clock> = Arc::new(clock.clone());
        move || {
            let path = path.clone();
            let clock = clock.clone();
            async move {
                let store = SqliteOutboxStore::builder(path)
                    .clock(clock)
                    .open()
                    .await
                    .expect("open sqlite store");
                Outbox::new(store)
            }
        }
    };
    let store = open().await;
    Harness {
        cleanup: None,
        store,
        clock,
        reopen: Arc::new(move || {
            let _keep = &dir;
            Box::pin(open())
        }),
    }
}

outbox_relay::conformance!(harness);
