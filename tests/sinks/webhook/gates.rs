//! Claim gates against a real HTTP target: a receiver that answers 503 for a while trips
//! the breaker, which probes and closes; a 429's Retry-After holds the whole lane. Real
//! time (the receiver is real): the assertions are on what the receiver saw, and the only
//! times checked are lower bounds (a timer never fires early).

use std::time::Duration;

use outbox_relay::config::CircuitBreakerConfig;
use outbox_relay::relay::BreakerState;
use outbox_relay::relay::RelayEvent;
use outbox_relay::store::MessageFilter;
use outbox_relay::{InMemoryOutboxStore, Outbox, OutboxRelay, RetryPolicy};
use tokio::sync::broadcast;

use super::{Answer, Receiver};
use crate::{draft, fast_lane, EVENT_TIMEOUT};

async fn next(events: &mut broadcast::Receiver<RelayEvent>, seen: &[String]) -> RelayEvent {
    match tokio::time::timeout(EVENT_TIMEOUT, events.recv()).await {
        Ok(Ok(event)) => event,
        Ok(Err(error)) => panic!("event stream: {error}"),
        Err(_) => panic!("no event within {EVENT_TIMEOUT:?}; breaker so far: {seen:?}"),
    }
}

#[tokio::test]
async fn a_failing_target_opens_the_breaker_then_one_probe_at_a_time_until_it_recovers() {
    // Three 503s open the breaker; the first probe gets a 503 too; then 200s.
    let receiver = Receiver::start(vec![Answer::status(503); 4]).await;
    let sink = receiver.sink().await;
    let cool_down = Duration::from_millis(300);
    let lane = fast_lane().concurrency(1).circuit_breaker(Some(
        CircuitBreakerConfig::default()
            .consecutive_failures(Some(3))
            .cool_down(cool_down)
            .max_cool_down(Duration::from_secs(5)),
    ));
    let store = Outbox::new(InMemoryOutboxStore::new());
    let builder = OutboxRelay::builder(&store).lane_shared(lane, sink);
    let mut events = builder.subscribe();
    let relay = builder.start().await.expect("relay starts");
    for _ in 0..10 {
        store.enqueue(draft()).await.unwrap();
    }

    let mut breaker = Vec::new();
    let mut delivered = 0;
    while delivered < 10 {
        match next(&mut events, &breaker).await {
            RelayEvent::BreakerChanged { state, .. } => breaker.push(state.to_string()),
            RelayEvent::Delivered { .. } => delivered += 1,
            RelayEvent::Failed { outcome, .. } => assert_eq!(
                outcome,
                outbox_relay::store::NackOutcome::Requeued,
                "{breaker:?}"
            ),
            _ => {}
        }
    }
    assert_eq!(
        breaker,
        ["open", "half_open", "open", "half_open", "closed"],
        "the breaker's story"
    );
    // The target saw 4 failures and 10 deliveries, nothing more: no request while open.
    let requests = receiver.requests();
    assert_eq!(requests.len(), 14, "{} requests", requests.len());
    // The probe came no sooner than the cool-down after the opening failure, the second
    // probe no sooner than twice that after the first.
    let gap = |a: usize, b: usize| requests[b].received.duration_since(requests[a].answered);
    assert!(gap(2, 3) >= cool_down, "first probe after {:?}", gap(2, 3));
    assert!(
        gap(3, 4) >= cool_down * 2,
        "second probe after {:?}",
        gap(3, 4)
    );
    let stats = store
        .stats(&MessageFilter::lane("orders", "billing"))
        .await
        .unwrap();
    assert_eq!((stats[0].delivered, stats[0].dead_letter), (10, 0));
    let status = relay.status().await.unwrap();
    assert_eq!(status[0].gates.breaker, Some(BreakerState::Closed));
    relay.shutdown(Duration::from_secs(10)).await.unwrap();
}

#[tokio::test]
async fn a_429s_retry_after_holds_the_whole_lane_when_configured() {
    let receiver = Receiver::start(vec![Answer {
        headers: vec![("retry-after", "1".to_owned())],
        ..Answer::status(429)
    }])
    .await;
    let sink = receiver.sink().await;
    // The hold is capped at the retry policy's max: 5 s here, above the 1 s asked for.
    let lane = fast_lane()
        .concurrency(1)
        .retry(RetryPolicy::new(Duration::from_millis(50), Duration::from_secs(5)).jitter(false))
        .retry_after_holds_lane(true);
    let store = Outbox::new(InMemoryOutboxStore::new());
    for _ in 0..3 {
        store.enqueue(draft()).await.unwrap();
    }
    let builder = OutboxRelay::builder(&store).lane_shared(lane, sink);
    let mut events = builder.subscribe();
    let relay = builder.start().await.expect("relay starts");
    let mut delivered = 0;
    while delivered < 3 {
        if let RelayEvent::Delivered { .. } = next(&mut events, &[]).await {
            delivered += 1;
        }
    }
    let requests = receiver.requests();
    assert_eq!(requests.len(), 4, "one 429, then three deliveries");
    // Without the hold the other messages would have gone at once; with it, nothing for
    // the second the target asked for.
    let gap = requests[1].received.duration_since(requests[0].answered);
    assert!(gap >= Duration::from_secs(1), "next request after {gap:?}");
    relay.shutdown(Duration::from_secs(10)).await.unwrap();
}
