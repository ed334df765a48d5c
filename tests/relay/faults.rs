//! Supervision and faults injected for real: a lane relay that panics, a handler that
//! panics, a lane that keeps crashing, a store that fails for a while, slow deliveries
//! against their leases.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use outbox_relay::config::SupervisorConfig;
use outbox_relay::delivery::FailureKind;
use outbox_relay::relay::{LaneKey, LaneState, RelayError, RelayEvent};
use outbox_relay::store::StoreOp;
use outbox_relay::store::{MessageFilter, NackOutcome};
use outbox_relay::{LaneConfig, OutboxRelay, OutboxStatus, RetryPolicy};
use tokio::time::Instant;

use crate::faulty_store::FaultyStore;
use crate::{draft, enqueue, memory_store, wait_delivered, wait_for, TestHandler};
use outbox_relay::Outbox;

fn lane() -> LaneConfig {
    LaneConfig::new("canonical", "projector")
        .retry(
            RetryPolicy::new(Duration::from_millis(10), Duration::from_millis(100)).jitter(false),
        )
        .lease(Duration::from_secs(2))
        .max_poll_interval(Duration::from_secs(600))
}

#[tokio::test(start_paused = true)]
async fn crashed_lane_is_restarted_and_its_claims_redelivered_at_lease_lapse() {
    let inner = memory_store();
    let store = FaultyStore::new(inner.clone());
    store.panic_acks.store(1, Ordering::SeqCst);
    let store = Arc::new(store);
    let ids = [
        enqueue(&inner, draft(1)).await,
        enqueue(&inner, draft(2)).await,
    ];
    let handler = TestHandler::ok();
    let (relay, mut events) = crate::start(
        OutboxRelay::builder(&Outbox::from_arc(store.clone()))
            .lane(lane(), handler.clone())
            .event_capacity(10_000),
    )
    .await;
    // The first incarnation claims both, delivers them, and panics acking them.
    let claimed_at = Instant::now();
    wait_for(&mut events, "the crash", |e| {
        matches!(e, RelayEvent::LaneCrashed { .. })
    })
    .await;
    wait_for(&mut events, "the restart", |e| {
        matches!(e, RelayEvent::LaneStarted { incarnation: 2, .. })
    })
    .await;
    let mut redelivered = wait_delivered(&mut events, 2).await;
    let after = claimed_at.elapsed();
    redelivered.sort();
    let mut expected = ids.to_vec();
    expected.sort();
    assert_eq!(redelivered, expected);
    assert!(
        after >= Duration::from_secs(2),
        "redelivered before the lease lapsed: {after:?}"
    );
    assert!(
        after < Duration::from_secs(3),
        "redelivery waited for a poll (600 s): {after:?}"
    );
    // Delivered twice each: once by the crashed incarnation, once after the lapse.
    assert_eq!(handler.calls().len(), 4);
    let status = relay.status().await.unwrap();
    assert_eq!(status[0].state, LaneState::Running);
    assert_eq!(status[0].restarts, 1);
    assert!(status[0]
        .last_error
        .as_deref()
        .unwrap()
        .contains("injected ack panic"));
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn handler_panic_keeps_the_lane_up_and_the_message_is_retried() {
    let store = memory_store();
    let id = enqueue(&store, draft(1)).await;
    let calls = Arc::new(AtomicU32::new(0));
    let handler = {
        let calls = calls.clone();
        TestHandler::new(move |_| {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            async move {
                if n == 0 {
                    panic!("boom in the handler");
                }
                Ok(())
            }
        })
    };
    let (relay, mut events) =
        crate::start(OutboxRelay::builder(&store).lane(lane(), handler.clone())).await;
    let failed = wait_for(&mut events, "the panic", |e| {
        matches!(e, RelayEvent::Failed { .. })
    })
    .await;
    match failed {
        RelayEvent::Failed {
            kind,
            error,
            outcome,
            ..
        } => {
            assert_eq!(kind, FailureKind::Panic);
            assert!(error.starts_with("handler panicked: "), "{error}");
            assert!(error.contains("boom in the handler"), "{error}");
            assert_eq!(outcome, NackOutcome::Requeued);
        }
        _ => unreachable!(),
    }
    assert_eq!(wait_delivered(&mut events, 1).await, vec![id]);
    let status = relay.status().await.unwrap();
    assert_eq!(status[0].state, LaneState::Running);
    assert_eq!(
        status[0].restarts, 0,
        "a handler panic must not restart the lane"
    );
    assert_eq!(store.get(id).await.unwrap().unwrap().attempt_count, 2);
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn lane_that_keeps_crashing_is_marked_failed_while_others_deliver() {
    let inner = memory_store();
    let mut store = FaultyStore::new(inner.clone());
    store.panic_claims_of = Some("doomed".into());
    let store = Arc::new(store);
    let (relay, mut events) = crate::start(
        OutboxRelay::builder(&Outbox::from_arc(store.clone()))
            .supervisor(
                SupervisorConfig::default()
                    .max_restarts(3)
                    .restart_window(Duration::from_secs(60))
                    .restart_backoff(
                        RetryPolicy::new(Duration::from_millis(100), Duration::from_secs(1))
                            .jitter(false),
                    )
                    .fail_liveness_after(Some(Duration::from_secs(300))),
            )
            .lane(LaneConfig::new("doomed", "projector"), TestHandler::ok())
            .lane(lane(), TestHandler::ok())
            .event_capacity(10_000),
    )
    .await;
    let failed = wait_for(&mut events, "the lane to be marked failed", |e| {
        matches!(e, RelayEvent::LaneFailed { .. })
    })
    .await;
    assert!(matches!(failed, RelayEvent::LaneFailed { lane, .. } if lane.name == "doomed"));
    // The healthy lane keeps delivering after its neighbour failed.
    let id = enqueue(&inner, draft(7)).await;
    assert_eq!(wait_delivered(&mut events, 1).await, vec![id]);
    let status = relay.status().await.unwrap();
    let doomed = status.iter().find(|s| s.lane.name == "doomed").unwrap();
    assert_eq!(doomed.state, LaneState::Failed);
    assert_eq!(doomed.restarts, 3);
    assert!(doomed
        .last_error
        .as_deref()
        .unwrap()
        .contains("injected claim panic"));
    let healthy = status.iter().find(|s| s.lane.name == "canonical").unwrap();
    assert_eq!(healthy.state, LaneState::Running);

    // A failed lane stays down until the process restarts: once it has been failed for
    // longer than `fail_liveness_after`, the relay says the process should be restarted.
    relay
        .liveness()
        .await
        .expect("alive while the lane has been failed for less than 5m");
    tokio::time::sleep(Duration::from_secs(301)).await;
    match relay.liveness().await {
        Err(RelayError::LanesFailed { lanes, after }) => {
            assert_eq!(lanes, [LaneKey::new("doomed", "projector")]);
            assert_eq!(after, Duration::from_secs(300));
        }
        other => panic!("a lane failed for over 5m fails liveness, got {other:?}"),
    }
    let failed_for = relay
        .status()
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.lane.name == "doomed")
        .and_then(|s| s.failed_for);
    assert!(
        failed_for.is_some_and(|d| d > Duration::from_secs(300)),
        "{failed_for:?}"
    );
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn store_outage_leaves_the_lane_up_and_everything_is_delivered_after() {
    let inner = memory_store();
    let store = Arc::new(FaultyStore::new(inner.clone()));
    let mut ids = Vec::new();
    for i in 0..20 {
        ids.push(enqueue(&inner, draft(i)).await);
    }
    store.unavailable.store(6, Ordering::SeqCst);
    let handler = TestHandler::ok();
    let (relay, mut events) = crate::start(
        OutboxRelay::builder(&Outbox::from_arc(store.clone()))
            .lane(lane().concurrency(4), handler.clone())
            .event_capacity(10_000),
    )
    .await;
    let error = wait_for(&mut events, "a store error", |e| {
        matches!(e, RelayEvent::StoreError { .. })
    })
    .await;
    assert!(matches!(
        error,
        RelayEvent::StoreError {
            op: StoreOp::Claim,
            ..
        }
    ));
    let mut delivered = wait_delivered(&mut events, 20).await;
    delivered.sort();
    ids.sort();
    assert_eq!(delivered, ids);
    let status = relay.status().await.unwrap();
    assert_eq!(status[0].state, LaneState::Running);
    assert_eq!(status[0].restarts, 0);
    assert!(status[0]
        .last_error
        .as_deref()
        .unwrap()
        .contains("unavailable"));
    assert_eq!(store.unavailable.load(Ordering::SeqCst), 0);
    let stats = inner.stats(&MessageFilter::all()).await.unwrap();
    assert_eq!(stats[0].delivered, 20);
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn slow_delivery_has_its_lease_extended_and_is_delivered_once() {
    let store = memory_store();
    let id = enqueue(&store, draft(1)).await;
    let slow = TestHandler::new(|_| async {
        tokio::time::sleep(Duration::from_secs(10)).await;
        Ok(())
    });
    let lease = Duration::from_secs(3);
    let (relay, mut events) = crate::start(
        OutboxRelay::builder(&store).lane(
            lane()
                .lease(lease)
                .delivery_timeout(Duration::from_secs(60)),
            slow.clone(),
        ),
    )
    .await;
    // A second relay polls the same lane all along: it must never get the message.
    let rival = TestHandler::ok();
    let rival_relay = OutboxRelay::builder(&store)
        .lane(
            lane()
                .consumer_id("rival")
                .max_poll_interval(Duration::from_millis(500)),
            rival.clone(),
        )
        .start()
        .await
        .unwrap();
    wait_for(&mut events, "a lease extension", |e| {
        matches!(e, RelayEvent::LeaseExtended { count: 1, .. })
    })
    .await;
    assert_eq!(wait_delivered(&mut events, 1).await, vec![id]);
    assert_eq!(slow.calls(), vec![id]);
    assert!(
        rival.calls().is_empty(),
        "the rival got a message whose lease was kept"
    );
    let message = store.get(id).await.unwrap().unwrap();
    assert_eq!(
        (message.status, message.attempt_count),
        (OutboxStatus::Delivered, 1)
    );
    let status = relay.status().await.unwrap();
    assert_eq!(status[0].lost_claims, 0);
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
    rival_relay.shutdown(Duration::from_secs(1)).await.unwrap();
}

/// Without extension a delivery must fit in its lease (the config refuses a
/// `delivery_timeout` that does not), but one that waited in the prefetch buffer starts
/// late: its claim's lease ran from the claim, and lapses while it runs.
#[tokio::test(start_paused = true)]
async fn without_extension_a_buffered_delivery_that_starts_late_lapses_and_its_late_ack_is_fenced()
{
    let store = memory_store();
    let first = enqueue(&store, draft(1)).await;
    let id = enqueue(&store, draft(2)).await;
    // Both claimed together at 0 under a 3 s lease: the first runs 2 s, then the second,
    // buffered, runs from 2 s to 4.8 s (each within the 2.9 s delivery timeout).
    let second_started = Arc::new(tokio::sync::Notify::new());
    let slow = {
        let second_started = second_started.clone();
        TestHandler::new(move |message| {
            let second_started = second_started.clone();
            async move {
                let takes = if message.outbox_id == first {
                    2_000
                } else {
                    second_started.notify_one();
                    2_800
                };
                tokio::time::sleep(Duration::from_millis(takes)).await;
                Ok(())
            }
        })
    };
    let (relay, mut events) = crate::start(
        OutboxRelay::builder(&store).lane(
            lane()
                .concurrency(1)
                .prefetch(1)
                .lease(Duration::from_secs(3))
                .lease_extend_margin(None)
                .delivery_timeout(Duration::from_millis(2_900)),
            slow.clone(),
        ),
    )
    .await;
    wait_for(
        &mut events,
        "both claimed at once",
        |e| matches!(e, RelayEvent::Claimed { outbox_ids, .. } if outbox_ids.len() == 2),
    )
    .await;
    // This relay claims nothing more, so the rival below is the one to take the lapse
    // (paused once the buffered delivery started: a pause hands back what has not).
    second_started.notified().await;
    relay.pause("canonical", "projector").await.unwrap();
    wait_for(
        &mut events,
        "the lapse",
        |e| matches!(e, RelayEvent::LeaseExpired { outbox_ids, .. } if outbox_ids == &vec![id]),
    )
    .await;
    // Another relay takes the lapsed message and delivers it.
    let rival = TestHandler::ok();
    let (rival_relay, mut rival_events) =
        crate::start(OutboxRelay::builder(&store).lane(lane().consumer_id("rival"), rival.clone()))
            .await;
    assert_eq!(wait_delivered(&mut rival_events, 1).await, vec![id]);
    wait_for(
        &mut events,
        "the fenced late ack",
        |e| matches!(e, RelayEvent::LostClaim { outbox_id, .. } if *outbox_id == id),
    )
    .await;
    let message = store.get(id).await.unwrap().unwrap();
    assert_eq!(
        (message.status, message.attempt_count),
        (OutboxStatus::Delivered, 2)
    );
    assert_eq!(
        slow.calls(),
        [first, id],
        "the slow relay delivered both once"
    );
    assert_eq!(relay.status().await.unwrap()[0].lost_claims, 1);
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
    rival_relay.shutdown(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn hung_handler_times_out_and_is_retried() {
    let store = memory_store();
    let id = enqueue(&store, draft(1)).await;
    let calls = Arc::new(AtomicU32::new(0));
    let handler = {
        let calls = calls.clone();
        TestHandler::new(move |_| {
            let first = calls.fetch_add(1, Ordering::SeqCst) == 0;
            async move {
                if first {
                    std::future::pending::<()>().await;
                }
                Ok(())
            }
        })
    };
    let (relay, mut events) = crate::start(
        OutboxRelay::builder(&store).lane(lane().delivery_timeout(Duration::from_secs(1)), handler),
    )
    .await;
    let failed = wait_for(&mut events, "the timeout", |e| {
        matches!(e, RelayEvent::Failed { .. })
    })
    .await;
    assert!(matches!(
        failed,
        RelayEvent::Failed {
            kind: FailureKind::Timeout,
            outcome: NackOutcome::Requeued,
            ..
        }
    ));
    assert_eq!(wait_delivered(&mut events, 1).await, vec![id]);
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}
