//! Timers that fire after the lane's state has moved on: a restart backoff that runs out
//! after a shutdown or after its lane was removed and added again, and a store-outage
//! retry that comes due while the lane is paused.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use outbox_relay::config::SupervisorConfig;
use outbox_relay::relay::{LaneState, RelayEvent};
use outbox_relay::{LaneConfig, OutboxRelay, RetryPolicy};
use tokio::sync::broadcast;
use tokio::time::Instant;

use super::lane;
use crate::faulty_store::FaultyStore;
use crate::{draft, enqueue, memory_store, wait_delivered, wait_for, TestHandler};
use outbox_relay::Outbox;

/// Whether an event the receiver still holds matches `pred` (without waiting).
fn seen(events: &mut broadcast::Receiver<RelayEvent>, pred: impl Fn(&RelayEvent) -> bool) -> bool {
    let mut found = false;
    while let Ok(event) = events.try_recv() {
        found |= pred(&event);
    }
    found
}

#[tokio::test(start_paused = true)]
async fn shutdown_while_a_lane_waits_out_its_restart_backoff_is_prompt_and_final() {
    let mut store = FaultyStore::new(memory_store());
    store.panic_claims_of = Some("doomed".into());
    let (relay, mut events) = crate::start(
        OutboxRelay::builder(&Outbox::new(store))
            .supervisor(SupervisorConfig::default().restart_backoff(
                RetryPolicy::new(Duration::from_secs(60), Duration::from_secs(60)).jitter(false),
            ))
            .lane(LaneConfig::new("doomed", "projector"), TestHandler::ok()),
    )
    .await;
    wait_for(&mut events, "the restart backoff", |e| {
        matches!(e, RelayEvent::LaneRestarting { .. })
    })
    .await;
    assert_eq!(
        relay.status().await.unwrap()[0].state,
        LaneState::Restarting
    );
    let started = Instant::now();
    let report = relay.shutdown(Duration::from_secs(5)).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!((report.completed(), report.released()), (0, 0));
    // The restart timer runs out after the shutdown: nothing may start.
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert!(!seen(&mut events, |e| matches!(
        e,
        RelayEvent::LaneStarted { incarnation: 2, .. }
    )));
    assert!(relay.status().await.is_err());
}

#[tokio::test(start_paused = true)]
async fn pause_during_a_store_outage_then_resume_delivers_everything() {
    let inner = memory_store();
    let store = Arc::new(FaultyStore::new(inner.clone()));
    let mut ids = Vec::new();
    for i in 0..10 {
        ids.push(enqueue(&inner, draft(i)).await);
    }
    store.unavailable.store(3, Ordering::SeqCst);
    let (relay, mut events) = crate::start(
        OutboxRelay::builder(&Outbox::from_arc(store.clone()))
            .lane(lane().concurrency(2), TestHandler::ok())
            .event_capacity(10_000),
    )
    .await;
    wait_for(&mut events, "the outage", |e| {
        matches!(e, RelayEvent::StoreError { .. })
    })
    .await;
    // Paused while backing off: the retry timer must not claim, and resume must.
    relay.pause("canonical", "projector").await.unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(!seen(&mut events, |e| matches!(
        e,
        RelayEvent::Claimed { .. }
    )));
    relay.resume("canonical", "projector").await.unwrap();
    let mut delivered = wait_delivered(&mut events, 10).await;
    delivered.sort();
    ids.sort();
    assert_eq!(delivered, ids);
    assert_eq!(relay.status().await.unwrap()[0].state, LaneState::Running);
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_removed_lanes_restart_timer_does_not_cut_its_successors_backoff_short() {
    let mut store = FaultyStore::new(memory_store());
    store.panic_claims_of = Some("doomed".into());
    let backoff = Duration::from_secs(10);
    let doomed = || LaneConfig::new("doomed", "projector");
    let (relay, mut events) = crate::start(
        OutboxRelay::builder(&Outbox::new(store))
            .supervisor(
                SupervisorConfig::default()
                    .restart_backoff(RetryPolicy::new(backoff, backoff).jitter(false)),
            )
            .lane(doomed(), TestHandler::ok()),
    )
    .await;
    wait_for(&mut events, "the first restart backoff", |e| {
        matches!(e, RelayEvent::LaneRestarting { .. })
    })
    .await;
    // Removed halfway through its backoff and added again: the new lane crashes at once
    // and owes its own full backoff, whatever the old lane's timer says.
    tokio::time::sleep(backoff / 2).await;
    relay
        .remove_lane("doomed", "projector", Duration::from_secs(1))
        .await
        .unwrap();
    relay.add_lane(doomed(), TestHandler::ok()).await.unwrap();
    wait_for(&mut events, "the successor's restart backoff", |e| {
        matches!(e, RelayEvent::LaneRestarting { .. })
    })
    .await;
    let crashed_at = Instant::now();
    wait_for(&mut events, "the successor's restart", |e| {
        matches!(e, RelayEvent::LaneStarted { incarnation: 2, .. })
    })
    .await;
    let waited = crashed_at.elapsed();
    assert!(
        waited >= backoff,
        "restarted after {waited:?}, not {backoff:?}"
    );
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}
