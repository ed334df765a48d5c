//! The conformance suite against `InMemoryOutboxStore`.

use std::sync::Arc;

use outbox_relay::time::ManualClock;
use outbox_relay::{InMemoryOutboxStore, Outbox};

use outbox_relay::testing::Harness;
use outbox_relay::time::UnixMillis;

/// A fresh in-memory store on a manual clock.
pub async fn harness() -> Harness {
    let clock = ManualClock::new(UnixMillis::from_millis(1_700_000_000_000));
    let store: Outbox = Outbox::new(InMemoryOutboxStore::with_clock(Arc::new(clock.clone())));
    let same = store.clone();
    Harness {
        cleanup: None,
        store,
        clock,
        reopen: Arc::new(move || {
            let same = same.clone();
            Box::pin(async move { same })
        }),
    }
}

outbox_relay::conformance!(harness);
