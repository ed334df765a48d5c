//! What a shutdown reports and how long it takes when the store misbehaves: acks it cannot
//! record are reported as such (those messages will be delivered again), and a store call
//! that never answers does not stretch the shutdown past its timeout.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use outbox_relay::relay::RelayEvent;
use outbox_relay::{LaneConfig, OutboxRelay};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::faulty_store::FaultyStore;
use crate::{draft, enqueue, held, memory_store, wait_for, TestHandler};
use outbox_relay::Outbox;

fn lane() -> LaneConfig {
    LaneConfig::new("canonical", "projector")
        .lease(Duration::from_secs(600))
        .max_poll_interval(Duration::from_secs(600))
}

/// A relay on a faulty store holding `n` claimed messages whose deliveries finish when the
/// returned `Notify` is told to; answers once the claim is made.
async fn holding(n: i64) -> (Arc<FaultyStore>, outbox_relay::RelayHandle, Arc<Notify>) {
    let inner = memory_store();
    let store = Arc::new(FaultyStore::new(inner.clone()));
    for value in 0..n {
        enqueue(&inner, draft(value)).await;
    }
    let release = Arc::new(Notify::new());
    let (relay, mut events) = crate::start(
        OutboxRelay::builder(&Outbox::from_arc(store.clone())).lane(lane(), held(&release)),
    )
    .await;
    wait_for(&mut events, "the claim", |e| {
        matches!(e, RelayEvent::Claimed { .. })
    })
    .await;
    (store, relay, release)
}

/// Dropping the handle stops the relay as `shutdown` would: the delivery running finishes
/// and is recorded, the claim not yet started is handed back at once (not left to its
/// lease), and the relay stops: its events end.
#[tokio::test(start_paused = true)]
async fn dropping_the_handle_shuts_the_relay_down() {
    let store = memory_store();
    let first = enqueue(&store, draft(1)).await;
    let second = enqueue(&store, draft(2)).await;
    let release = Arc::new(Notify::new());
    let (relay, mut events) = crate::start(
        OutboxRelay::builder(&store).lane(lane().concurrency(1).prefetch(1), held(&release)),
    )
    .await;
    wait_for(&mut events, "the claim", |e| {
        matches!(e, RelayEvent::Claimed { .. })
    })
    .await;
    drop(relay);
    // A permit: the delivery finishes whether it started yet or not.
    release.notify_one();
    let mut delivered = Vec::new();
    loop {
        let event = tokio::time::timeout(crate::EVENT_TIMEOUT, events.recv())
            .await
            .expect("the relay stops once its handle is dropped");
        match event {
            Ok(RelayEvent::Delivered { outbox_id, .. }) => delivered.push(outbox_id),
            Ok(_) => {}
            Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => panic!("lagged by {n}"),
            Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
        }
    }
    assert_eq!(delivered, [first], "the running delivery finished");
    crate::claimed_at_once_by_another(&store, second).await;
}

#[tokio::test(start_paused = true)]
async fn a_shutdown_whose_acks_fail_reports_them_unrecorded() {
    let (store, relay, release) = holding(3).await;
    // The database goes away with three deliveries running; they finish, and no ack can
    // be recorded.
    store.unavailable.store(u32::MAX, Ordering::SeqCst);
    release.notify_waiters();
    let report = relay.shutdown(Duration::from_secs(2)).await.unwrap();
    assert_eq!(report.unrecorded(), 3, "{report:?}");
    assert!(!report.is_clean(), "{report:?}");
}

#[tokio::test(start_paused = true)]
async fn a_clean_shutdown_says_so() {
    let store = memory_store();
    enqueue(&store, draft(1)).await;
    let (relay, mut events) =
        crate::start(OutboxRelay::builder(&store).lane(lane(), TestHandler::ok())).await;
    crate::wait_delivered(&mut events, 1).await;
    let report = relay.shutdown(Duration::from_secs(2)).await.unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.unrecorded() + report.unreleased(), 0);
}

#[tokio::test(start_paused = true)]
async fn shutdown_honours_its_timeout_when_the_store_goes_silent() {
    let (store, relay, release) = holding(8).await;
    // The connection stops answering: the acks of the finished deliveries hang forever.
    store.silent.store(true, Ordering::SeqCst);
    release.notify_waiters();
    let timeout = Duration::from_secs(5);
    let started = Instant::now();
    let report = relay.shutdown(timeout).await;
    let took = started.elapsed();
    let report = report.unwrap_or_else(|e| panic!("{e} after {took:?}"));
    assert!(
        took <= timeout,
        "shutdown took {took:?}, its timeout was {timeout:?}: {report:?}"
    );
    // The lane's store calls run off its mailbox, so the hanging acks do not hold the lane:
    // it answers at its own deadline, reporting the eight finished deliveries whose acks
    // were never recorded (they will be delivered again), rather than being abandoned.
    assert_eq!(report.unrecorded(), 8, "{report:?}");
    assert_eq!(report.abandoned().count(), 0, "{report:?}");
    assert!(!report.is_clean(), "{report:?}");
}
