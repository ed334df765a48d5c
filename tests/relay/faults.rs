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
use tokio::sync::Notify;
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
/// `delivery_timeout` that does not), but one that waited in the prefetch buffer would start
/// late: its claim's lease ran from the claim. It is not started with less than its
/// delivery timeout left: it goes back unused and is claimed again with a whole lease, so
/// it never runs past a lapse.
#[tokio::test(start_paused = true)]
async fn without_extension_a_buffered_message_too_late_to_start_is_handed_back_unstarted() {
    let store = memory_store();
    let first = enqueue(&store, draft(1)).await;
    let id = enqueue(&store, draft(2)).await;
    // Both claimed together at 0 under a 3 s lease: the first runs 2 s, and the second,
    // buffered, would then have 1 s of its lease left for a delivery of up to 2.9 s.
    let slow = TestHandler::new(move |message| async move {
        let takes = if message.outbox_id == first {
            2_000
        } else {
            2_800
        };
        tokio::time::sleep(Duration::from_millis(takes)).await;
        Ok(())
    });
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
    let mut claims = Vec::new();
    let mut delivered = Vec::new();
    while delivered.len() < 2 {
        match wait_for(&mut events, "both delivered", |e| {
            matches!(
                e,
                RelayEvent::Claimed { .. }
                    | RelayEvent::Delivered { .. }
                    | RelayEvent::LeaseExpired { .. }
                    | RelayEvent::LostClaim { .. }
            )
        })
        .await
        {
            RelayEvent::Claimed {
                outbox_ids,
                redeliveries,
                ..
            } => claims.push((outbox_ids, redeliveries)),
            RelayEvent::Delivered { outbox_id, .. } => delivered.push(outbox_id),
            // Had the second started on its first claim, that claim would lapse at 3 s,
            // mid-delivery.
            other => panic!("a delivery ran past its lease: {other:?}"),
        }
    }
    // Handed back when the first ended, and claimed again before it was delivered: alone,
    // and not as a redelivery (the hand-back did not count its attempt).
    assert_eq!(claims, [(vec![first, id], 0), (vec![id], 0)]);
    assert_eq!(delivered, [first, id]);
    assert_eq!(slow.calls(), [first, id], "each delivered once");
    let message = store.get(id).await.unwrap().unwrap();
    assert_eq!(
        (message.status, message.attempt_count),
        (OutboxStatus::Delivered, 1)
    );
    assert_eq!(relay.status().await.unwrap()[0].lost_claims, 0);
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}

/// With extension on, a delivery may run longer than its lease: its lease is kept by
/// extending it. When the extensions fail (the relay cannot reach the store), the lease
/// lapses while the delivery runs; another relay takes the message, and the slow
/// delivery's ack, when it ends, is fenced: the store changes nothing, and the other
/// relay's delivery goes on to its own ack.
#[tokio::test(start_paused = true)]
async fn a_delivery_whose_lease_extensions_fail_runs_past_its_lapse_and_its_late_ack_is_fenced() {
    let inner = memory_store();
    let id = enqueue(&inner, draft(1)).await;
    let store = Arc::new(FaultyStore::new(inner.clone()));
    store.fail_extends.store(true, Ordering::SeqCst);
    let (started, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let slow = crate::started_then_held(&started, &release);
    let (relay, mut events) = crate::start(
        OutboxRelay::builder(&Outbox::from_arc(store.clone())).lane(
            lane()
                .lease(Duration::from_secs(2))
                .delivery_timeout(Duration::from_secs(60)),
            slow.clone(),
        ),
    )
    .await;
    tokio::time::timeout(crate::EVENT_TIMEOUT, started.notified())
        .await
        .expect("the delivery starts");
    // This relay claims nothing more, so the rival below is the one to take the lapse.
    relay.pause("canonical", "projector").await.unwrap();
    wait_for(&mut events, "a failed extension", |e| {
        matches!(
            e,
            RelayEvent::StoreError {
                op: StoreOp::ExtendLease,
                ..
            }
        )
    })
    .await;
    wait_for(
        &mut events,
        "the lapse",
        |e| matches!(e, RelayEvent::LeaseExpired { outbox_ids, .. } if outbox_ids == &vec![id]),
    )
    .await;
    // Another relay takes the lapsed message, and is still delivering it when the slow
    // delivery ends and acks.
    let (rival_started, rival_release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let rival = crate::started_then_held(&rival_started, &rival_release);
    let (rival_relay, mut rival_events) =
        crate::start(OutboxRelay::builder(&inner).lane(lane().consumer_id("rival"), rival.clone()))
            .await;
    tokio::time::timeout(crate::EVENT_TIMEOUT, rival_started.notified())
        .await
        .expect("the rival delivers the lapsed message");
    release.notify_one();
    wait_for(
        &mut events,
        "the fenced late ack",
        |e| matches!(e, RelayEvent::LostClaim { outbox_id, .. } if *outbox_id == id),
    )
    .await;
    let message = inner.get(id).await.unwrap().unwrap();
    assert_eq!(
        (
            message.status,
            message.attempt_count,
            message.claimed_by.as_deref()
        ),
        (OutboxStatus::Claimed, 2, Some("rival")),
        "the late ack changed nothing: the rival still holds the message"
    );
    rival_release.notify_one();
    assert_eq!(wait_delivered(&mut rival_events, 1).await, vec![id]);
    let message = inner.get(id).await.unwrap().unwrap();
    assert_eq!(
        (message.status, message.claimed_by),
        (OutboxStatus::Delivered, None)
    );
    assert_eq!(slow.calls(), [id]);
    assert_eq!(rival.calls(), [id]);
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
