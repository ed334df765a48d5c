//! Edges of the actor relay found in review, one subject a module: draining, timers that
//! outlive their state, crashes, deliveries in flight, and ordering keys under failure.
//! The lane they share and the sleeping handler are here.

use std::time::Duration;

use outbox_relay::relay::RelayEvent;
use outbox_relay::{LaneConfig, Outbox, OutboxRelay, RelayHandle, RetryPolicy};
use tokio::sync::broadcast;
use uuid::Uuid;

use crate::{draft, enqueue, memory_store, wait_for, TestHandler};

mod crashes;
mod drain;
mod in_flight;
mod keys;
mod timers;

/// The lane every edge case runs unless it says otherwise: quick retries, and a lease, a
/// delivery timeout and a poll interval too long to fire unless a test waits them out.
fn lane() -> LaneConfig {
    LaneConfig::new("canonical", "projector")
        .consumer_id("relay-a")
        .retry(
            RetryPolicy::new(Duration::from_millis(10), Duration::from_millis(100)).jitter(false),
        )
        .lease(Duration::from_secs(600))
        .delivery_timeout(Duration::from_secs(7200))
        .max_poll_interval(Duration::from_secs(600))
}

/// A handler that sleeps `for_` on the paused clock before succeeding.
fn sleeping(for_: Duration) -> TestHandler {
    TestHandler::new(move |_| async move {
        tokio::time::sleep(for_).await;
        Ok(())
    })
}

/// One message on a fresh store, claimed by a relay running `lane` with a handler that
/// sleeps `handler_sleep`: the store, the message's id, the relay, and its events (the
/// claim already seen).
async fn one_claimed(
    lane: LaneConfig,
    handler_sleep: Duration,
) -> (Outbox, Uuid, RelayHandle, broadcast::Receiver<RelayEvent>) {
    let store = memory_store();
    let id = enqueue(&store, draft(1)).await;
    let (relay, mut events) =
        crate::start(OutboxRelay::builder(&store).lane(lane, sleeping(handler_sleep))).await;
    wait_for(&mut events, "the claim", |e| {
        matches!(e, RelayEvent::Claimed { .. })
    })
    .await;
    (store, id, relay, events)
}
