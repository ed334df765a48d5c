//! The lane actor with its handler actors: a slot's handler starts with its first delivery.

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorRef};
use tokio::sync::broadcast;

use super::{LaneArgs, LaneMsg, LaneRelay};
use crate::delivery::handler_fn;
use crate::lane::RelayEvent;
use crate::metrics::LaneMetrics;
use crate::{InMemoryOutboxStore, LaneConfig, Outbox, OutboxMessageDraft};

/// Waits for the first event `wanted` accepts.
async fn next(events: &mut broadcast::Receiver<RelayEvent>, wanted: fn(&RelayEvent) -> bool) {
    let seen = async {
        loop {
            match events.recv().await {
                Ok(event) if wanted(&event) => return,
                Ok(_) => {}
                Err(error) => panic!("relay events: {error}"),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), seen)
        .await
        .expect("the event within 10 s");
}

fn lane(store: &Outbox, events: &broadcast::Sender<RelayEvent>) -> LaneArgs {
    let config = LaneConfig::new("orders", "billing").concurrency(8);
    LaneArgs {
        metrics: LaneMetrics::of(&config),
        config,
        store: store.clone(),
        handler: Arc::new(handler_fn(|_| async { Ok(()) })),
        counters: Arc::default(),
        events: events.clone(),
        incarnation: 1,
        paused: false,
    }
}

#[tokio::test]
async fn an_idle_lane_holds_no_handler_actors_and_a_delivery_starts_one() {
    // Under a subscriber of its own: `tracing` caches a callsite's interest for the whole
    // process, and a claim span this test reached first with no subscriber on its thread
    // could be cached as of interest to nobody while the `spans` tests capture it on theirs
    // (seen: 9 of 40 runs of `relay::` lost every claim span there).
    let (_log, _default) = crate::captured_log::capture_spans();
    let store = Outbox::new(InMemoryOutboxStore::new());
    let (events, mut seen) = broadcast::channel(64);
    let (relay, join): (ActorRef<LaneMsg>, _) =
        Actor::spawn(None, LaneRelay, lane(&store, &events))
            .await
            .expect("the lane starts");
    next(&mut seen, |e| matches!(e, RelayEvent::Idle { .. })).await;
    assert!(relay.get_children().is_empty(), "an idle lane of 8 slots");

    let draft =
        OutboxMessageDraft::new("orders", "billing", serde_json::json!({"n": 1})).expect("a draft");
    store.enqueue(draft).await.expect("enqueued");
    next(&mut seen, |e| matches!(e, RelayEvent::Delivered { .. })).await;
    assert_eq!(
        relay.get_children().len(),
        1,
        "one delivery, one handler actor"
    );

    relay.stop(None);
    join.await.expect("the lane stops");
}
