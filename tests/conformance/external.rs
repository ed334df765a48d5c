//! The conformance suite against a backend written outside the crate that implements only
//! the trait's required methods (`tests/support/external_store.rs`): the provided methods
//! (validation, dedupe planning, the two-call `ack_and_claim`) keep it to the contract.

use std::sync::Arc;

use outbox_relay::store::ManualClock;
use outbox_relay::testing::Harness;
use outbox_relay::OutboxStore;

#[path = "../support/external_store.rs"]
mod external_store;

use external_store::ExternalStore;

/// A fresh out-of-tree store on a manual clock.
pub async fn harness() -> Harness {
    let clock = ManualClock::new(outbox_relay::time::UnixMillis::from_millis(
        1_700_000_000_000,
    ));
    let store: Arc<dyn OutboxStore> = Arc::new(ExternalStore::with_clock(Arc::new(clock.clone())));
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
