//! Edges of the actor relay found in review: draining, removal, restarts, pause during an
//! outage, poison handlers, `Block` ordering, and what status reports along the way.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use outbox_relay::config::SupervisorConfig;
use outbox_relay::metrics::FailureKind;
use outbox_relay::relay::{LaneState, RelayEvent};
use outbox_relay::store::{ClaimRequest, MessageFilter, NackOutcome, OrderingPolicy};
use outbox_relay::{
    DeliveryError, LaneConfig, OutboxRelay, OutboxStatus, OutboxStore, RetryPolicy,
};
use tokio::sync::{broadcast, Notify};
use tokio::time::Instant;

use crate::faulty_store::FaultyStore;
use crate::{draft, enqueue, memory_store, wait_delivered, wait_for, TestHandler};

fn lane() -> LaneConfig {
    LaneConfig::new("canonical", "projector")
        .consumer_id("relay-a")
        .retry(RetryPolicy::new(
            Duration::from_millis(10),
            Duration::from_millis(100),
        ))
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

/// Whether an event the receiver still holds matches `pred` (without waiting).
fn seen(events: &mut broadcast::Receiver<RelayEvent>, pred: impl Fn(&RelayEvent) -> bool) -> bool {
    let mut found = false;
    while let Ok(event) = events.try_recv() {
        found |= pred(&event);
    }
    found
}

#[tokio::test(start_paused = true)]
async fn remove_lane_lets_an_in_flight_delivery_finish_and_acks_it() {
    let store = memory_store();
    let id = enqueue(&*store, draft(1)).await;
    let (relay, mut events) = crate::start(
        OutboxRelay::builder(store.clone()).lane(lane(), sleeping(Duration::from_secs(2))),
    )
    .await;
    wait_for(&mut events, "the claim", |e| {
        matches!(e, RelayEvent::Claimed { .. })
    })
    .await;
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
    let store = memory_store();
    let id = enqueue(&*store, draft(1)).await;
    let (relay, mut events) = crate::start(
        OutboxRelay::builder(store.clone()).lane(lane(), sleeping(Duration::from_secs(3600))),
    )
    .await;
    wait_for(&mut events, "the claim", |e| {
        matches!(e, RelayEvent::Claimed { .. })
    })
    .await;
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
    let again = store
        .claim(&ClaimRequest::new(
            "canonical",
            "projector",
            10,
            Duration::from_secs(5),
            "relay-b",
        ))
        .await
        .unwrap();
    assert_eq!(again.messages.len(), 1);
    assert_eq!(again.messages[0].outbox_id, id);
    assert_eq!(again.messages[0].attempt_count, 1);
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn shutdown_while_a_lane_waits_out_its_restart_backoff_is_prompt_and_final() {
    let mut store = FaultyStore::new(memory_store());
    store.panic_claims_of = Some("doomed".into());
    let (relay, mut events) = crate::start(
        OutboxRelay::builder(Arc::new(store))
            .supervisor(SupervisorConfig {
                restart_backoff: RetryPolicy::new(Duration::from_secs(60), Duration::from_secs(60)),
                ..SupervisorConfig::default()
            })
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
        ids.push(enqueue(&*inner, draft(i)).await);
    }
    store.unavailable.store(3, Ordering::SeqCst);
    let (relay, mut events) = crate::start(
        OutboxRelay::builder(store.clone())
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
async fn handler_that_always_panics_dead_letters_the_message_and_the_lane_runs_on() {
    let store = memory_store();
    let poison = enqueue(&*store, draft(1).with_max_attempts(3)).await;
    let handler = TestHandler::new(|m| async move {
        if m.payload.to_value().unwrap()["value"] == 1 {
            panic!("poison pill");
        }
        Ok(())
    });
    let (relay, mut events) =
        crate::start(OutboxRelay::builder(store.clone()).lane(lane(), handler.clone())).await;
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
    let next = enqueue(&*store, draft(2)).await;
    assert_eq!(wait_delivered(&mut events, 1).await, vec![next]);
    let status = relay.status().await.unwrap();
    assert_eq!(status[0].state, LaneState::Running);
    assert_eq!(status[0].restarts, 0);
    assert_eq!(status[0].dead_lettered, 1);
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn block_lane_holds_a_dead_heads_key_lets_others_flow_and_requeue_resumes_in_order() {
    let store = memory_store();
    let a1 = enqueue(&*store, draft(1).with_ordering_key("a")).await;
    let a2 = enqueue(&*store, draft(2).with_ordering_key("a")).await;
    let b1 = enqueue(&*store, draft(3).with_ordering_key("b")).await;
    let b2 = enqueue(&*store, draft(4).with_ordering_key("b")).await;
    let rejected = Arc::new(AtomicBool::new(false));
    let handler = {
        let rejected = rejected.clone();
        TestHandler::new(move |m| {
            let first_a1 = m.payload.to_value().unwrap()["value"] == 1
                && !rejected.swap(true, Ordering::SeqCst);
            async move {
                if first_a1 {
                    return Err(DeliveryError::permanent("schema rejected"));
                }
                Ok(())
            }
        })
    };
    let (relay, mut events) = crate::start(
        OutboxRelay::builder(store.clone()).lane(
            lane()
                .ordering(OrderingPolicy::Block)
                .max_poll_interval(Duration::from_secs(1)),
            handler.clone(),
        ),
    )
    .await;
    let mut b = wait_delivered(&mut events, 2).await;
    b.sort();
    let mut expected = vec![b1, b2];
    expected.sort();
    assert_eq!(b, expected, "key b must flow past a's dead head");
    // Polls come and go; a2 stays behind its dead head.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(
        store.get(a1).await.unwrap().unwrap().status,
        OutboxStatus::DeadLetter
    );
    assert_eq!(
        store.get(a2).await.unwrap().unwrap().status,
        OutboxStatus::Pending
    );
    assert!(!handler.calls().contains(&a2));
    let stats = store
        .stats(&MessageFilter::lane("canonical", "projector"))
        .await
        .unwrap();
    assert_eq!(stats[0].blocked_keys, 1);
    let status = relay.status().await.unwrap();
    assert_eq!((status[0].dead_lettered, status[0].delivered), (1, 2));
    // The operator requeues the head: a1, then a2.
    assert_eq!(
        store
            .requeue_dead_letters(&MessageFilter::all().with_ids([a1]))
            .await
            .unwrap(),
        1
    );
    assert_eq!(wait_delivered(&mut events, 2).await, vec![a1, a2]);
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn status_reports_deliveries_in_flight_while_they_run() {
    let store = memory_store();
    let ids = [
        enqueue(&*store, draft(1)).await,
        enqueue(&*store, draft(2)).await,
    ];
    let release = Arc::new(Notify::new());
    let handler = {
        let release = release.clone();
        TestHandler::new(move |_| {
            let release = release.clone();
            async move {
                release.notified().await;
                Ok(())
            }
        })
    };
    let (relay, mut events) = crate::start(
        OutboxRelay::builder(store.clone()).lane(lane().concurrency(3), handler.clone()),
    )
    .await;
    wait_for(
        &mut events,
        "both claimed",
        |e| matches!(e, RelayEvent::Claimed { outbox_ids, .. } if outbox_ids.len() == 2),
    )
    .await;
    let status = relay.status().await.unwrap();
    assert_eq!(status[0].in_flight, 2);
    assert_eq!(status[0].claimed, 2);
    release.notify_one();
    wait_delivered(&mut events, 1).await;
    assert_eq!(relay.status().await.unwrap()[0].in_flight, 1);
    release.notify_one();
    wait_delivered(&mut events, 1).await;
    let status = relay.status().await.unwrap();
    assert_eq!((status[0].in_flight, status[0].delivered), (0, 2));
    assert_eq!(handler.calls().len(), ids.len());
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_retrying_head_does_not_starve_another_key_at_concurrency_one() {
    let store = memory_store();
    let a1 = enqueue(&*store, draft(1).with_ordering_key("a")).await;
    let mut b = Vec::new();
    for i in 0..5 {
        b.push(enqueue(&*store, draft(10 + i).with_ordering_key("b")).await);
    }
    let failures = Arc::new(AtomicU32::new(0));
    let handler = {
        let failures = failures.clone();
        TestHandler::new(move |m| {
            let fail = m.payload.to_value().unwrap()["value"] == 1
                && failures.fetch_add(1, Ordering::SeqCst) < 3;
            async move {
                if fail {
                    return Err(DeliveryError::retryable("target busy"));
                }
                Ok(())
            }
        })
    };
    let started = Instant::now();
    let (relay, mut events) = crate::start(OutboxRelay::builder(store.clone()).lane(
        lane().concurrency(1).retry(RetryPolicy::new(
            Duration::from_secs(10),
            Duration::from_secs(10),
        )),
        handler,
    ))
    .await;
    // b's five go out while a1 waits out its 10 s retry delays, not after.
    let first_five = wait_delivered(&mut events, 5).await;
    assert_eq!(first_five, b);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(wait_delivered(&mut events, 1).await, vec![a1]);
    assert_eq!(failures.load(Ordering::SeqCst), 4);
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
    enqueue(&*inner, draft(1)).await;
    let (relay, mut events) = crate::start(OutboxRelay::builder(store.clone()).lane(
        lane(),
        delivers_then_breaks_the_store(&store, Duration::ZERO),
    ))
    .await;
    // Delivered, but the ack is stuck behind the outage.
    wait_for(&mut events, "the failed ack", |e| {
        matches!(
            e,
            RelayEvent::StoreError {
                op: outbox_relay::metrics::StoreOp::Ack,
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
    enqueue(&*inner, draft(1)).await;
    let (relay, mut events) = crate::start(OutboxRelay::builder(store.clone()).lane(
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
    let store = memory_store();
    let id = enqueue(&*store, draft(1)).await;
    let (relay, mut events) = crate::start(
        OutboxRelay::builder(store.clone()).lane(lane(), sleeping(Duration::from_secs(2))),
    )
    .await;
    wait_for(&mut events, "the claim", |e| {
        matches!(e, RelayEvent::Claimed { .. })
    })
    .await;
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

#[tokio::test(start_paused = true)]
async fn a_lease_lost_while_delivering_is_reported_expired_once() {
    let store = memory_store();
    let id = enqueue(&*store, draft(1)).await;
    let (relay, mut events) = crate::start(OutboxRelay::builder(store.clone()).lane(
        // Checked every 2 s (lease 3 s, margin 1 s), delivering for 20 s.
        lane().concurrency(1).lease(Duration::from_secs(3)),
        sleeping(Duration::from_secs(20)),
    ))
    .await;
    wait_for(&mut events, "the claim", |e| {
        matches!(e, RelayEvent::Claimed { .. })
    })
    .await;
    // Another holder takes the message over mid-delivery.
    let ours = store.get(id).await.unwrap().unwrap().claim().unwrap();
    store.release(&[ours]).await.unwrap();
    let rival = store
        .claim(&ClaimRequest::new(
            "canonical",
            "projector",
            1,
            Duration::from_secs(600),
            "relay-b",
        ))
        .await
        .unwrap();
    assert_eq!(rival.messages.len(), 1);
    let mut expired = 0;
    while let RelayEvent::LeaseExpired { outbox_ids, .. } =
        wait_for(&mut events, "the fenced ack", |e| {
            matches!(
                e,
                RelayEvent::LeaseExpired { .. } | RelayEvent::LostClaim { .. }
            )
        })
        .await
    {
        expired += outbox_ids.iter().filter(|o| **o == id).count();
    }
    assert_eq!(expired, 1, "one lost lease, reported {expired} times");
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn our_own_lapsed_claim_reclaimed_is_adopted_by_the_running_delivery() {
    let inner = memory_store();
    let store = Arc::new(FaultyStore::new(inner.clone()));
    let id = enqueue(&*inner, draft(1)).await;
    let handler = sleeping(Duration::from_secs(20));
    let (relay, mut events) = crate::start(OutboxRelay::builder(store.clone()).lane(
        // A free handler, so the lane can claim the message again while delivering it.
        lane().concurrency(2).lease(Duration::from_secs(3)),
        handler.clone(),
    ))
    .await;
    wait_for(&mut events, "the claim", |e| {
        matches!(e, RelayEvent::Claimed { .. })
    })
    .await;
    // The claim is handed back under the running delivery (as if it had lapsed); the lane's
    // wake-up claims it again.
    let ours = inner.get(id).await.unwrap().unwrap().claim().unwrap();
    inner.release(&[ours]).await.unwrap();
    wait_for(
        &mut events,
        "the claim again",
        |e| matches!(e, RelayEvent::Claimed { outbox_ids, .. } if outbox_ids == &vec![id]),
    )
    .await;
    // The running delivery acks with the fresh token: one delivery, no lost claim.
    assert_eq!(wait_delivered(&mut events, 1).await, vec![id]);
    assert_eq!(handler.calls(), vec![id]);
    let status = relay.status().await.unwrap();
    assert_eq!((status[0].lost_claims, status[0].in_flight), (0, 0));
    // Nothing is left to keep a lease of: no timer may go on extending nothing.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let calls = store.extend_calls.lock().unwrap().clone();
    assert!(
        !calls.contains(&0),
        "extend_lease called with no claims: {calls:?}"
    );
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
    enqueue(&*inner, draft(1)).await;
    enqueue(&*inner, draft(2)).await;
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
        OutboxRelay::builder(Arc::new(store))
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
    let (relay, _events, dropped) = crash_with_a_delivery_running(SupervisorConfig {
        restart_backoff: RetryPolicy::new(Duration::from_secs(60), Duration::from_secs(60)),
        ..SupervisorConfig::default()
    })
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
    let (relay, mut events, _dropped) = crash_with_a_delivery_running(SupervisorConfig {
        max_restarts: 0,
        ..SupervisorConfig::default()
    })
    .await;
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

#[tokio::test(start_paused = true)]
async fn a_removed_lanes_restart_timer_does_not_cut_its_successors_backoff_short() {
    let mut store = FaultyStore::new(memory_store());
    store.panic_claims_of = Some("doomed".into());
    let backoff = Duration::from_secs(10);
    let doomed = || LaneConfig::new("doomed", "projector");
    let (relay, mut events) = crate::start(
        OutboxRelay::builder(Arc::new(store))
            .supervisor(SupervisorConfig {
                restart_backoff: RetryPolicy::new(backoff, backoff),
                ..SupervisorConfig::default()
            })
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_lane_can_be_added_again_as_soon_as_remove_returns() {
    let store = memory_store();
    let (relay, _events) = crate::start(OutboxRelay::builder(store.clone())).await;
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
        crate::start(OutboxRelay::builder(store.clone()).lane(lane(), TestHandler::ok())).await;
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
    let started = Instant::now();
    let again = relay.shutdown(Duration::from_secs(1)).await;
    assert!(
        matches!(again, Err(outbox_relay::relay::RelayError::Stopped)),
        "{again:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(1));
}
