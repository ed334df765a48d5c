//! Concurrency, per-key order under concurrency, and the runtime commands: shutdown,
//! pause, resume, add, remove.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_relay::relay::{LaneState, RelayEvent};
use outbox_relay::store::MessageFilter;
use outbox_relay::{DeliveryError, LaneConfig, OutboxRelay, OutboxStatus, RetryPolicy};
use tokio::sync::Notify;
use uuid::Uuid;

use crate::{draft, enqueue, memory_store, wait_delivered, wait_for, TestHandler};

fn lane() -> LaneConfig {
    LaneConfig::new("canonical", "projector")
        .retry(RetryPolicy::new(Duration::from_millis(5), Duration::from_millis(50)).jitter(false))
}

#[tokio::test(start_paused = true)]
async fn a_thousand_messages_through_sixteen_handlers_each_delivered_once() {
    let store = memory_store();
    let drafts = (0..1000).map(draft).collect();
    let ids: HashSet<Uuid> = store
        .enqueue_many(drafts)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.message.outbox_id)
        .collect();
    let running = Arc::new(AtomicU32::new(0));
    let peak = Arc::new(AtomicU32::new(0));
    let handler = {
        let (running, peak) = (running.clone(), peak.clone());
        TestHandler::new(move |_| {
            let (running, peak) = (running.clone(), peak.clone());
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(10)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                Ok(())
            }
        })
    };
    let (relay, mut events) = crate::start(
        OutboxRelay::builder(&store)
            .lane(lane().concurrency(16), handler.clone())
            .event_capacity(100_000),
    )
    .await;
    let delivered = wait_delivered(&mut events, 1000).await;
    let unique: HashSet<Uuid> = delivered.iter().copied().collect();
    assert_eq!(unique, ids);
    assert_eq!(handler.calls().len(), 1000, "a message was delivered twice");
    assert_eq!(
        peak.load(Ordering::SeqCst),
        16,
        "deliveries did not overlap up to the concurrency"
    );
    let stats = store.stats(&MessageFilter::all()).await.unwrap();
    assert_eq!(stats[0].delivered, 1000);
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn per_key_order_holds_under_concurrency_and_failures() {
    let store = memory_store();
    let mut expected: HashMap<String, Vec<Uuid>> = HashMap::new();
    // Interleave keys so every claim batch mixes them.
    for i in 0..20 {
        for k in 0..50 {
            let key = format!("customer-{k}");
            let id = enqueue(&store, draft(i).with_ordering_key(&key)).await;
            expected.entry(key).or_default().push(id);
        }
    }
    let key_of: HashMap<Uuid, String> = expected
        .iter()
        .flat_map(|(k, ids)| ids.iter().map(move |id| (*id, k.clone())))
        .collect();
    let in_flight: Arc<Mutex<HashSet<String>>> = Arc::default();
    let delivered: Arc<Mutex<HashMap<String, Vec<Uuid>>>> = Arc::default();
    let attempts = Arc::new(AtomicU32::new(0));
    let handler = {
        let (in_flight, delivered, attempts) =
            (in_flight.clone(), delivered.clone(), attempts.clone());
        TestHandler::new(move |m| {
            let (in_flight, delivered, attempts) =
                (in_flight.clone(), delivered.clone(), attempts.clone());
            async move {
                let key = m.ordering_key.clone().unwrap();
                assert!(
                    in_flight.lock().unwrap().insert(key.clone()),
                    "two messages of {key} in flight"
                );
                tokio::time::sleep(Duration::from_millis(3)).await;
                in_flight.lock().unwrap().remove(&key);
                // Every 7th attempt fails: the head's retry must hold back only its key.
                if attempts.fetch_add(1, Ordering::SeqCst) % 7 == 3 {
                    return Err(DeliveryError::retryable("injected"));
                }
                delivered
                    .lock()
                    .unwrap()
                    .entry(key)
                    .or_default()
                    .push(m.outbox_id);
                Ok(())
            }
        })
    };
    let (relay, mut events) = crate::start(
        OutboxRelay::builder(&store)
            .lane(lane().concurrency(16), handler)
            .event_capacity(100_000),
    )
    .await;
    let order = wait_delivered(&mut events, 1000).await;
    assert_eq!(order.iter().collect::<HashSet<_>>().len(), 1000);
    assert_eq!(
        *delivered.lock().unwrap(),
        expected,
        "a key was delivered out of order"
    );
    assert!(
        attempts.load(Ordering::SeqCst) > 1000,
        "no failure was injected"
    );
    assert_eq!(key_of.len(), 1000);
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn shutdown_finishes_in_flight_and_releases_the_rest_for_another_relay() {
    let store = memory_store();
    let quick = enqueue(&store, draft(1)).await;
    let stuck = enqueue(&store, draft(2)).await;
    let started = Arc::new(Notify::new());
    let handler = {
        let started = started.clone();
        TestHandler::new(move |m| {
            let started = started.clone();
            async move {
                started.notify_one();
                if m.payload.to_value().unwrap()["value"] == 2 {
                    // A delivery that will not finish within the shutdown timeout.
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                } else {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Ok(())
            }
        })
    };
    let (relay, mut events) = crate::start(
        OutboxRelay::builder(&store).lane(
            lane()
                .concurrency(2)
                .lease(Duration::from_secs(600))
                .delivery_timeout(Duration::from_secs(7200)),
            handler,
        ),
    )
    .await;
    wait_for(
        &mut events,
        "both claimed",
        |e| matches!(e, RelayEvent::Claimed { outbox_ids, .. } if outbox_ids.len() == 2),
    )
    .await;
    let report = relay.shutdown(Duration::from_secs(1)).await.unwrap();
    assert_eq!((report.completed(), report.released()), (1, 1));
    assert_eq!(
        store.get(quick).await.unwrap().unwrap().status,
        OutboxStatus::Delivered
    );
    // Another relay claims the released message at once, not after the 600 s lease, and
    // the abandoned attempt is not counted.
    crate::claimed_at_once_by_another(&store, stuck).await;
    assert!(
        relay.status().await.is_err(),
        "the relay still answers after shutdown"
    );
}

#[tokio::test(start_paused = true)]
async fn pause_stops_claiming_while_in_flight_finish_and_resume_continues() {
    let store = memory_store();
    let first = enqueue(&store, draft(1)).await;
    let release = Arc::new(Notify::new());
    let handler = {
        let release = release.clone();
        TestHandler::new(move |m| {
            let release = release.clone();
            async move {
                if m.payload.to_value().unwrap()["value"] == 1 {
                    release.notified().await;
                }
                Ok(())
            }
        })
    };
    let (relay, mut events) =
        crate::start(OutboxRelay::builder(&store).lane(lane().concurrency(4), handler.clone()))
            .await;
    wait_for(&mut events, "the first claim", |e| {
        matches!(e, RelayEvent::Claimed { .. })
    })
    .await;
    relay.pause("canonical", "projector").await.unwrap();
    assert_eq!(relay.status().await.unwrap()[0].state, LaneState::Paused);
    let second = enqueue(&store, draft(2)).await;
    release.notify_one();
    assert_eq!(
        wait_delivered(&mut events, 1).await,
        vec![first],
        "in-flight must finish while paused"
    );
    // Let any timers run: a paused lane claims nothing.
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(
        store.get(second).await.unwrap().unwrap().status,
        OutboxStatus::Pending
    );
    assert_eq!(handler.calls(), vec![first]);
    relay.resume("canonical", "projector").await.unwrap();
    assert_eq!(wait_delivered(&mut events, 1).await, vec![second]);
    assert_eq!(relay.status().await.unwrap()[0].state, LaneState::Running);
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn lanes_are_added_and_removed_at_run_time() {
    let store = memory_store();
    let (relay, mut events) = crate::start(OutboxRelay::builder(&store)).await;
    assert!(relay.status().await.unwrap().is_empty());
    relay.add_lane(lane(), TestHandler::ok()).await.unwrap();
    let err = relay.add_lane(lane(), TestHandler::ok()).await.unwrap_err();
    assert!(err.to_string().contains("already configured"));
    let id = enqueue(&store, draft(1)).await;
    assert_eq!(wait_delivered(&mut events, 1).await, vec![id]);
    let report = relay
        .remove_lane("canonical", "projector", Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(report.released, 0);
    wait_for(&mut events, "the lane to stop", |e| {
        matches!(e, RelayEvent::LaneStopped { .. })
    })
    .await;
    assert!(relay.status().await.unwrap().is_empty());
    let err = relay.pause("canonical", "projector").await.unwrap_err();
    assert!(err.to_string().contains("no lane canonical/projector"));
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}

/// The `stats` calls through an outbox, as the virtual instants they finished at.
#[derive(Debug)]
struct StatsCalls(tokio::sync::mpsc::UnboundedSender<tokio::time::Instant>);

impl outbox_relay::store::StoreHook for StatsCalls {
    fn finished(&self, call: &outbox_relay::store::StoreCall<'_>) {
        if call.op == outbox_relay::store::StoreOp::Stats {
            let _ = self.0.send(tokio::time::Instant::now());
        }
    }
}

#[tokio::test(start_paused = true)]
async fn the_backlog_of_every_lane_is_sampled_with_one_store_call_per_interval() {
    let (calls, mut stats) = tokio::sync::mpsc::unbounded_channel();
    let store = memory_store().with_hook(Arc::new(StatsCalls(calls)));
    let every = Duration::from_secs(10);
    let mut builder = OutboxRelay::builder(&store);
    for n in 0..5 {
        builder = builder.lane(
            LaneConfig::new(format!("lane-{n}"), "projector")
                .stats_interval(every)
                .max_poll_interval(Duration::from_secs(3600)),
            TestHandler::ok(),
        );
    }
    let relay = builder.start().await.unwrap();
    let mut at = Vec::new();
    while at.len() < 3 {
        let call = tokio::time::timeout(crate::EVENT_TIMEOUT, stats.recv())
            .await
            .expect("a stats call")
            .expect("the hook lives");
        at.push(call);
    }
    let gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(
        gaps,
        [every, every],
        "one call for the five lanes per interval, at {at:?}"
    );
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}
