//! Crashes: a handler that always panics (its message is dead-lettered, the lane runs on),
//! and a lane relay that crashes with a delivery running (its handlers go with it, and its
//! status counts nothing in flight).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use outbox_relay::config::SupervisorConfig;
use outbox_relay::delivery::FailureKind;
use outbox_relay::relay::{LaneState, RelayEvent};
use outbox_relay::store::NackOutcome;
use outbox_relay::{OutboxRelay, OutboxStatus, RetryPolicy};
use tokio::sync::broadcast;

use super::lane;
use crate::faulty_store::FaultyStore;
use crate::{draft, enqueue, memory_store, wait_delivered, wait_for, TestHandler};
use outbox_relay::Outbox;

#[tokio::test(start_paused = true)]
async fn handler_that_always_panics_dead_letters_the_message_and_the_lane_runs_on() {
    let store = memory_store();
    let poison = enqueue(&store, draft(1).with_max_attempts(3)).await;
    let handler = TestHandler::new(|m| async move {
        if m.payload.to_value().unwrap()["value"] == 1 {
            panic!("poison pill");
        }
        Ok(())
    });
    let (relay, mut events) =
        crate::start(OutboxRelay::builder(&store).lane(lane(), handler.clone())).await;
    let dead = wait_for(&mut events, "the dead letter", |e| {
        matches!(
            e,
            RelayEvent::Failed {
                outcome: NackOutcome::DeadLettered,
                ..
            }
        )
    })
    .await;
    assert!(matches!(
        dead,
        RelayEvent::Failed {
            kind: FailureKind::Panic,
            ..
        }
    ));
    let message = store.get(poison).await.unwrap().unwrap();
    assert_eq!(message.status, OutboxStatus::DeadLetter);
    assert_eq!(message.attempt_count, 3);
    assert!(
        message
            .last_error
            .as_deref()
            .unwrap()
            .contains("handler panicked"),
        "{:?}",
        message.last_error
    );
    // The lane is still up, with its handlers replaced, and delivers the next message.
    let next = enqueue(&store, draft(2)).await;
    assert_eq!(wait_delivered(&mut events, 1).await, vec![next]);
    let status = relay.status().await.unwrap();
    assert_eq!(status[0].state, LaneState::Running);
    assert_eq!(status[0].restarts, 0);
    assert_eq!(status[0].dead_lettered, 1);
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}

/// Sets its flag when dropped: a delivery future dropped mid-way was cancelled.
struct OnDrop(Arc<AtomicBool>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A lane of two deliveries whose first ack panics the lane relay while the second (an
/// hour long) is still running; returns the relay, its events and the second's drop flag.
async fn crash_with_a_delivery_running(
    supervisor: SupervisorConfig,
) -> (
    outbox_relay::RelayHandle,
    broadcast::Receiver<RelayEvent>,
    Arc<AtomicBool>,
) {
    let inner = memory_store();
    let store = FaultyStore::new(inner.clone());
    store.panic_acks.store(1, Ordering::SeqCst);
    enqueue(&inner, draft(1)).await;
    enqueue(&inner, draft(2)).await;
    let dropped = Arc::new(AtomicBool::new(false));
    let handler = {
        let dropped = dropped.clone();
        TestHandler::new(move |m| {
            let guard =
                (m.payload.to_value().unwrap()["value"] == 2).then(|| OnDrop(dropped.clone()));
            async move {
                if let Some(guard) = guard {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    std::mem::forget(guard);
                }
                Ok(())
            }
        })
    };
    let (relay, mut events) = crate::start(
        OutboxRelay::builder(&Outbox::new(store))
            .supervisor(supervisor)
            .lane(lane().concurrency(2), handler),
    )
    .await;
    wait_for(&mut events, "the crash", |e| {
        matches!(e, RelayEvent::LaneCrashed { .. })
    })
    .await;
    (relay, events, dropped)
}

#[tokio::test(start_paused = true)]
async fn handlers_of_a_crashed_incarnation_are_stopped_with_it() {
    let (relay, _events, dropped) =
        crash_with_a_delivery_running(SupervisorConfig::default().restart_backoff(
            RetryPolicy::new(Duration::from_secs(60), Duration::from_secs(60)).jitter(false),
        ))
        .await;
    // Let the runtime settle (no timer is due for a minute).
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        dropped.load(Ordering::SeqCst),
        "the dead incarnation's delivery still runs"
    );
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_crashed_lane_reports_nothing_in_flight() {
    let (relay, mut events, _dropped) =
        crash_with_a_delivery_running(SupervisorConfig::default().max_restarts(0)).await;
    wait_for(&mut events, "the lane to be failed", |e| {
        matches!(e, RelayEvent::LaneFailed { .. })
    })
    .await;
    let status = relay.status().await.unwrap();
    assert_eq!(status[0].state, LaneState::Failed);
    assert_eq!(
        status[0].in_flight, 0,
        "a failed lane has no deliveries running"
    );
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}
