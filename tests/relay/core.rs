//! The seed relay's scenarios, rewritten for the actor system, and config validation.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use outbox_relay::config::SupervisorConfig;
use outbox_relay::delivery::FailureKind;
use outbox_relay::relay::{RelayError, RelayEvent};
use outbox_relay::store::{ClaimRequest, MessageFilter, NackOutcome, PageRequest};
use outbox_relay::{
    LaneConfig, Outbox, OutboxMessageDraft, OutboxRelay, OutboxStatus, RetryPolicy,
};
use serde_json::json;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::faulty_store::FaultyStore;
use crate::{draft, enqueue, memory_store, wait_delivered, wait_for, TestHandler};

fn lane() -> LaneConfig {
    LaneConfig::new("canonical", "projector")
        .consumer_id("relay-a")
        .retry(RetryPolicy::new(Duration::ZERO, Duration::ZERO).jitter(false))
        .lease(Duration::from_secs(1))
}

#[tokio::test(start_paused = true)]
async fn delivers_and_acks_claimed_messages() {
    let store = memory_store();
    let a = enqueue(&store, draft(1)).await;
    let b = enqueue(&store, draft(2)).await;
    let handler = TestHandler::ok();
    let (relay, mut events) =
        crate::start(OutboxRelay::builder(&store).lane(lane(), handler.clone())).await;
    let mut delivered = wait_delivered(&mut events, 2).await;
    delivered.sort();
    let mut expected = vec![a, b];
    expected.sort();
    assert_eq!(delivered, expected);
    assert_eq!(handler.calls().len(), 2);
    for id in [a, b] {
        let message = store.get(id).await.unwrap().unwrap();
        assert_eq!(message.status, OutboxStatus::Delivered);
        assert_eq!(message.claim_token, None);
    }
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn nacks_failures_and_dead_letters_after_max_attempts() {
    let store = memory_store();
    let id = enqueue(&store, draft(1).with_max_attempts(2)).await;
    let (relay, mut events) =
        crate::start(OutboxRelay::builder(&store).lane(lane(), TestHandler::failing())).await;
    let first = wait_for(&mut events, "first failure", |e| {
        matches!(e, RelayEvent::Failed { .. })
    })
    .await;
    assert!(matches!(
        first,
        RelayEvent::Failed {
            outcome: NackOutcome::Requeued,
            ..
        }
    ));
    let second = wait_for(&mut events, "second failure", |e| {
        matches!(e, RelayEvent::Failed { .. })
    })
    .await;
    assert!(matches!(
        second,
        RelayEvent::Failed {
            outcome: NackOutcome::DeadLettered,
            ..
        }
    ));
    let dead = store.get(id).await.unwrap().unwrap();
    assert_eq!(dead.status, OutboxStatus::DeadLetter);
    assert_eq!(dead.attempt_count, 2);
    assert!(dead.last_error.unwrap().contains("publish failed"));
    let status = relay.status().await.unwrap();
    assert_eq!(status[0].failed, 2);
    assert_eq!(status[0].dead_lettered, 1);
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn redelivers_at_the_lapse_of_a_crashed_relays_lease() {
    let store = memory_store();
    let id = enqueue(&store, draft(1)).await;
    let lease = Duration::from_secs(2);
    let crashed = store
        .claim(&ClaimRequest::new(
            "canonical",
            "projector",
            1,
            lease,
            "crashed-relay",
        ))
        .await
        .unwrap();
    assert_eq!(crashed.messages.len(), 1);
    let claimed_at = Instant::now();

    let handler = TestHandler::ok();
    let poll = Duration::from_secs(600);
    let (relay, mut events) = crate::start(
        OutboxRelay::builder(&store).lane(lane().max_poll_interval(poll), handler.clone()),
    )
    .await;
    let delivered = wait_delivered(&mut events, 1).await;
    let after = claimed_at.elapsed();
    assert_eq!(delivered, vec![id]);
    assert!(
        after >= lease,
        "redelivered before the lease lapsed ({after:?})"
    );
    assert!(
        after < lease + Duration::from_millis(100),
        "redelivered late: {after:?}, the poll was {poll:?}"
    );
    assert_eq!(store.get(id).await.unwrap().unwrap().attempt_count, 2);
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}

/// Relay a delivers well within its lease, but its ack is held up on the way to the store
/// until after the lease lapsed (extension off) and relay b took the message to deliver it
/// again: when relay a's ack arrives at last, the store finds relay a's claim gone and
/// changes nothing, and relay b's delivery goes on to its own ack. The start margin cannot
/// prevent this: the delivery ended in time.
#[tokio::test(start_paused = true)]
async fn late_ack_after_network_jitter_is_a_lost_claim() {
    let store = memory_store();
    let id = enqueue(&store, draft(1)).await;
    let jittery = Arc::new(FaultyStore::new(store.clone()));
    jittery.hold_acks.store(true, Ordering::SeqCst);
    let handler_a = TestHandler::ok();
    let (relay_a, mut events_a) = crate::start(
        OutboxRelay::builder(&Outbox::from_arc(jittery.clone())).lane(
            lane()
                .consumer_id("relay-a")
                .lease(Duration::from_secs(3))
                .lease_extend_margin(None)
                .delivery_timeout(Duration::from_secs(2)),
            handler_a.clone(),
        ),
    )
    .await;
    let claimed_at = Instant::now();
    tokio::time::timeout(crate::EVENT_TIMEOUT, jittery.ack_held.notified())
        .await
        .expect("relay a's ack goes out");
    assert_eq!(handler_a.calls(), vec![id]);
    // Relay a claims nothing more: relay b is the one to take the lapsed message.
    relay_a.pause("canonical", "projector").await.unwrap();

    // Relay b takes the lapsed message and is still delivering it when relay a's ack lands.
    let (b_started, b_release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let handler_b = crate::started_then_held(&b_started, &b_release);
    let (relay_b, mut events_b) = crate::start(
        OutboxRelay::builder(&store).lane(lane().consumer_id("relay-b"), handler_b.clone()),
    )
    .await;
    tokio::time::timeout(crate::EVENT_TIMEOUT, b_started.notified())
        .await
        .expect("relay b delivers the lapsed message");
    assert!(
        claimed_at.elapsed() >= Duration::from_secs(3),
        "relay b took the message before relay a's lease lapsed"
    );
    jittery.ack_gate.notify_one();
    wait_for(
        &mut events_a,
        "relay a's late ack",
        |e| matches!(e, RelayEvent::LostClaim { outbox_id, .. } if *outbox_id == id),
    )
    .await;
    let held = store.get(id).await.unwrap().unwrap();
    assert_eq!(
        (held.status, held.attempt_count, held.claimed_by.as_deref()),
        (OutboxStatus::Claimed, 2, Some("relay-b")),
        "relay a's late ack changed nothing: relay b still holds the message"
    );
    b_release.notify_one();
    assert_eq!(wait_delivered(&mut events_b, 1).await, vec![id]);
    assert_eq!(handler_b.calls(), vec![id]);
    let delivered = store.get(id).await.unwrap().unwrap();
    assert_eq!(
        (delivered.status, delivered.claimed_by),
        (OutboxStatus::Delivered, None)
    );
    assert_eq!(relay_a.status().await.unwrap()[0].lost_claims, 1);
    relay_a.shutdown(Duration::from_secs(1)).await.unwrap();
    relay_b.shutdown(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn respects_its_lane_and_target() {
    let store = memory_store();
    let other_lane = enqueue(
        &store,
        OutboxMessageDraft::new("other", "projector", json!({"value": 1})).unwrap(),
    )
    .await;
    let other_target = enqueue(
        &store,
        OutboxMessageDraft::new("canonical", "mailer", json!({"value": 2})).unwrap(),
    )
    .await;
    let handler = TestHandler::ok();
    let (relay, mut events) =
        crate::start(OutboxRelay::builder(&store).lane(lane(), handler.clone())).await;
    wait_for(&mut events, "the lane to go idle", |e| {
        matches!(e, RelayEvent::Idle { .. })
    })
    .await;
    assert!(handler.calls().is_empty());
    for id in [other_lane, other_target] {
        assert_eq!(
            store.get(id).await.unwrap().unwrap().status,
            OutboxStatus::Pending
        );
    }
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test]
async fn rejects_invalid_config_naming_the_field() {
    let cases = [
        (lane().batch_size(0), "batch_size"),
        (lane().lease(Duration::ZERO), "lease"),
        (lane().concurrency(0), "concurrency"),
        (
            lane().retry(
                RetryPolicy::new(Duration::from_secs(2), Duration::from_secs(1)).jitter(false),
            ),
            "retry.max",
        ),
        (LaneConfig::new(" ", "projector"), "lane"),
        (lane().delivery_timeout(Duration::ZERO), "delivery_timeout"),
    ];
    for (config, field) in cases {
        let err = OutboxRelay::builder(&memory_store())
            .lane(config, TestHandler::ok())
            .start()
            .await
            .unwrap_err();
        match err {
            RelayError::Config(err) => {
                assert!(err.field.ends_with(field), "{err} should name {field}")
            }
            other => panic!("expected a config error naming {field}, got {other}"),
        }
    }
    let duplicate = OutboxRelay::builder(&memory_store())
        .lane(lane(), TestHandler::ok())
        .lane(lane(), TestHandler::ok())
        .start()
        .await
        .unwrap_err();
    assert!(matches!(duplicate, RelayError::DuplicateLane(_)));
    let bad_window = OutboxRelay::builder(&memory_store())
        .supervisor(SupervisorConfig::default().restart_window(Duration::ZERO))
        .start()
        .await
        .unwrap_err();
    assert!(bad_window.to_string().contains("restart_window"));
}

/// A handler that gives up on a delivery after 15 s of its own, as the Kafka sink's
/// `message_timeout` does.
struct GivesUpAfter15s;

#[async_trait::async_trait]
impl outbox_relay::DeliveryHandler for GivesUpAfter15s {
    async fn deliver(
        &self,
        _message: &outbox_relay::OutboxMessage,
    ) -> Result<(), outbox_relay::DeliveryError> {
        Ok(())
    }

    fn own_timeout(&self) -> Option<(&'static str, Duration)> {
        Some(("message_timeout", Duration::from_secs(15)))
    }
}

#[tokio::test]
async fn a_handler_timeout_not_below_delivery_timeout_is_refused_naming_both() {
    let too_short = lane().delivery_timeout(Duration::from_secs(15));
    let refused = OutboxRelay::builder(&memory_store())
        .lane(too_short.clone(), GivesUpAfter15s)
        .start()
        .await
        .unwrap_err();
    let text = refused.to_string();
    assert!(
        matches!(&refused, RelayError::Config(err) if err.field == "delivery_timeout")
            && text.contains("message_timeout")
            && text.contains("15s"),
        "{text}"
    );
    let relay = OutboxRelay::builder(&memory_store())
        .lane(
            lane().delivery_timeout(Duration::from_secs(16)),
            GivesUpAfter15s,
        )
        .start()
        .await
        .expect("a delivery_timeout above the handler's own starts");
    // The same check when a lane is added at run time.
    let mut other = too_short;
    other.target = "other".to_owned();
    let added = relay.add_lane(other, GivesUpAfter15s).await.unwrap_err();
    assert!(added.to_string().contains("message_timeout"), "{added}");
    relay.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[test]
fn backoff_doubles_and_caps() {
    let policy =
        RetryPolicy::new(Duration::from_millis(5), Duration::from_millis(20)).jitter(false);
    assert_eq!(policy.delay(1, None), Duration::from_millis(5));
    assert_eq!(policy.delay(2, None), Duration::from_millis(10));
    assert_eq!(policy.delay(4, None), Duration::from_millis(20));
}

#[tokio::test(start_paused = true)]
async fn retry_waits_for_the_backoff_and_a_retry_after_floor() {
    let store = memory_store();
    let id = enqueue(&store, draft(1)).await;
    let attempts = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let handler = {
        let attempts = attempts.clone();
        TestHandler::new(move |_| {
            let n = attempts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move {
                match n {
                    0 => Err(outbox_relay::DeliveryError::retryable("first")),
                    1 => Err(outbox_relay::DeliveryError::retry_after(
                        Duration::from_secs(30),
                        "busy",
                    )),
                    _ => Ok(()),
                }
            }
        })
    };
    let start = Instant::now();
    let (relay, mut events) =
        crate::start(OutboxRelay::builder(&store).lane(
            lane().retry(
                RetryPolicy::new(Duration::from_secs(1), Duration::from_secs(10)).jitter(false),
            ),
            handler,
        ))
        .await;
    wait_delivered(&mut events, 1).await;
    let took = start.elapsed();
    // 1 s backoff after the first failure, then the target's 30 s floor over the 2 s backoff.
    assert!(took >= Duration::from_secs(31), "{took:?}");
    assert!(took < Duration::from_secs(32), "{took:?}");
    let message = store.get(id).await.unwrap().unwrap();
    assert_eq!(message.attempt_count, 3);
    assert_eq!(message.last_error.as_deref(), Some("retry after 30s: busy"));
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn permanent_failure_dead_letters_at_once() {
    let store = memory_store();
    let id = enqueue(&store, draft(1)).await;
    let (relay, mut events) = crate::start(OutboxRelay::builder(&store).lane(
        lane(),
        TestHandler::new(|_| async {
            Err(outbox_relay::DeliveryError::permanent("schema rejected"))
        }),
    ))
    .await;
    let failed = wait_for(&mut events, "failure", |e| {
        matches!(e, RelayEvent::Failed { .. })
    })
    .await;
    assert!(matches!(
        failed,
        RelayEvent::Failed {
            outcome: NackOutcome::DeadLettered,
            kind: FailureKind::Permanent,
            ..
        }
    ));
    let dead = store.get(id).await.unwrap().unwrap();
    assert_eq!(dead.attempt_count, 1);
    assert_eq!(dead.status, OutboxStatus::DeadLetter);
    let listed = store
        .list(
            &MessageFilter::all().with_status(OutboxStatus::DeadLetter),
            PageRequest {
                after: None,
                limit: 10,
            },
        )
        .await
        .unwrap();
    assert_eq!(listed.messages.len(), 1);
    // An operator's requeue sends it round again.
    assert_eq!(
        store
            .requeue_dead_letters(&MessageFilter::all().with_ids([id]))
            .await
            .unwrap(),
        1
    );
    wait_for(
        &mut events,
        "the retry",
        |e| matches!(e, RelayEvent::Failed { outbox_id, .. } if *outbox_id == id),
    )
    .await;
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}

/// A lane that deletes on ack needs a store that can: the relay refuses to start it,
/// naming the field, rather than fail every ack.
#[tokio::test(start_paused = true)]
async fn a_lane_that_keeps_no_history_is_refused_on_a_store_that_cannot_delete_on_ack() {
    let store = Outbox::new(crate::faulty_store::FaultyStore::new(memory_store()));
    assert!(!store.capabilities().delete_on_ack);
    let error = OutboxRelay::builder(&store)
        .lane(lane().keep_delivered(false), TestHandler::ok())
        .start()
        .await
        .expect_err("refused");
    let text = error.to_string();
    assert!(
        text.contains("lanes[canonical/projector].keep_delivered")
            && text.contains("cannot delete a row at its ack"),
        "{text}"
    );
}
