//! Draining a lane or the whole relay: `remove_lane` and `shutdown` let in-flight deliveries
//! finish or release them at their timeout, keep that timeout when acks cannot be
//! recorded, answer two drains at once, and leave the relay ready for the next command.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use outbox_relay::relay::RelayEvent;
use outbox_relay::{OutboxRelay, OutboxStatus};
use tokio::time::Instant;

use super::{lane, one_claimed};
use crate::faulty_store::FaultyStore;
use crate::{draft, enqueue, memory_store, wait_for, TestHandler};
use outbox_relay::Outbox;

#[tokio::test(start_paused = true)]
async fn remove_lane_lets_an_in_flight_delivery_finish_and_acks_it() {
    let (store, id, relay, _events) = one_claimed(lane(), Duration::from_secs(2)).await;
    let report = relay
        .remove_lane("canonical", "projector", Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!((report.completed, report.released), (1, 0));
    assert_eq!(
        store.get(id).await.unwrap().unwrap().status,
        OutboxStatus::Delivered
    );
    assert!(relay.status().await.unwrap().is_empty());
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn remove_lane_past_its_timeout_releases_the_claim_for_anyone_at_once() {
    let (store, id, relay, _events) = one_claimed(lane(), Duration::from_secs(3600)).await;
    let started = Instant::now();
    let report = relay
        .remove_lane("canonical", "projector", Duration::from_secs(1))
        .await
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!((report.completed, report.released), (0, 1));
    // Claimable by another consumer now, not after the 600 s lease, the attempt not spent.
    crate::claimed_at_once_by_another(&store, id).await;
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}

/// A handler that starts a store outage (acks fail) once it has delivered, after `after`.
fn delivers_then_breaks_the_store(store: &Arc<FaultyStore>, after: Duration) -> TestHandler {
    let store = store.clone();
    TestHandler::new(move |_| {
        let store = store.clone();
        async move {
            tokio::time::sleep(after).await;
            store.unavailable.store(u32::MAX, Ordering::SeqCst);
            Ok(())
        }
    })
}

#[tokio::test(start_paused = true)]
async fn remove_lane_keeps_its_timeout_when_buffered_acks_cannot_be_recorded() {
    let inner = memory_store();
    let store = Arc::new(FaultyStore::new(inner.clone()));
    enqueue(&inner, draft(1)).await;
    let (relay, mut events) =
        crate::start(OutboxRelay::builder(&Outbox::from_arc(store.clone())).lane(
            lane(),
            delivers_then_breaks_the_store(&store, Duration::ZERO),
        ))
        .await;
    // Delivered, but the ack is stuck behind the outage.
    wait_for(&mut events, "the failed ack", |e| {
        matches!(
            e,
            RelayEvent::StoreError {
                op: outbox_relay::store::StoreOp::Ack,
                ..
            }
        )
    })
    .await;
    let started = Instant::now();
    let removed = relay
        .remove_lane("canonical", "projector", Duration::from_secs(1))
        .await;
    let took = started.elapsed();
    assert!(removed.is_ok(), "{removed:?} after {took:?}");
    assert!(
        took <= Duration::from_secs(2),
        "the drain ignored its timeout: {took:?}"
    );
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn shutdown_keeps_its_timeout_when_the_last_delivery_cannot_be_acked() {
    let inner = memory_store();
    let store = Arc::new(FaultyStore::new(inner.clone()));
    enqueue(&inner, draft(1)).await;
    let (relay, mut events) =
        crate::start(OutboxRelay::builder(&Outbox::from_arc(store.clone())).lane(
            lane(),
            delivers_then_breaks_the_store(&store, Duration::from_millis(500)),
        ))
        .await;
    wait_for(&mut events, "the claim", |e| {
        matches!(e, RelayEvent::Claimed { .. })
    })
    .await;
    // Draining starts with the delivery running; it finishes, and its ack fails until
    // long after the deadline.
    let started = Instant::now();
    let report = relay.shutdown(Duration::from_secs(2)).await;
    let took = started.elapsed();
    let report = report.unwrap_or_else(|e| panic!("{e} after {took:?}"));
    assert!(
        took <= Duration::from_secs(3),
        "the drain ignored its timeout: {took:?}"
    );
    assert_eq!(report.completed(), 1);
}

#[tokio::test(start_paused = true)]
async fn remove_and_shutdown_at_once_both_report_the_drain() {
    let (store, id, relay, _events) = one_claimed(lane(), Duration::from_secs(2)).await;
    // The second drain must not take the first one's answer away.
    let (removed, shut) = tokio::join!(
        relay.remove_lane("canonical", "projector", Duration::from_secs(10)),
        relay.shutdown(Duration::from_secs(10)),
    );
    let removed = removed.unwrap();
    let shut = shut.unwrap();
    assert_eq!((removed.completed, removed.released), (1, 0), "remove_lane");
    assert_eq!((shut.completed(), shut.released()), (1, 0), "shutdown");
    assert_eq!(
        store.get(id).await.unwrap().unwrap().status,
        OutboxStatus::Delivered
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_lane_can_be_added_again_as_soon_as_remove_returns() {
    let store = memory_store();
    let (relay, _events) = crate::start(OutboxRelay::builder(&store)).await;
    for round in 0..300 {
        relay
            .add_lane(lane(), TestHandler::ok())
            .await
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        relay
            .remove_lane("canonical", "projector", Duration::from_secs(1))
            .await
            .unwrap();
    }
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_second_shutdown_is_told_the_relay_has_stopped() {
    let store = memory_store();
    let (relay, _events) =
        crate::start(OutboxRelay::builder(&store).lane(lane(), TestHandler::ok())).await;
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
    let started = Instant::now();
    let again = relay.shutdown(Duration::from_secs(1)).await;
    assert!(
        matches!(again, Err(outbox_relay::relay::RelayError::Stopped)),
        "{again:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(1));
}
