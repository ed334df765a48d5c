//! Claim gates end to end: the supervised relay over the in-memory store on tokio's paused
//! clock, so minutes of outage and 30 s of rate-limited throughput run in virtual time and
//! nothing here is a timed assertion.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_relay::config::{CircuitBreakerConfig, RateLimit};
use outbox_relay::relay::BreakerState;
use outbox_relay::relay::RelayEvent;
use outbox_relay::store::MessageFilter;
use outbox_relay::{DeliveryError, LaneConfig, Outbox, OutboxRelay, RetryPolicy};
use tokio::sync::broadcast;
use tokio::time::Instant;

use crate::{draft, memory_store, TestHandler};

fn lane() -> LaneConfig {
    LaneConfig::new("canonical", "projector")
        .consumer_id("relay-a")
        .lease(Duration::from_secs(30))
}

async fn enqueue_n(store: &Outbox, n: usize) {
    let drafts = (0..n).map(|i| draft(i as i64)).collect();
    store.enqueue_many(drafts).await.expect("enqueue");
}

/// The next event, failing the test after `limit` of (virtual) time without one.
async fn next(events: &mut broadcast::Receiver<RelayEvent>, limit: Duration) -> RelayEvent {
    match tokio::time::timeout(limit, events.recv()).await {
        Ok(Ok(event)) => event,
        Ok(Err(error)) => panic!("event stream: {error}"),
        Err(_) => panic!("no event within {limit:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_five_minute_outage_spends_no_attempts_while_open_and_ends_with_everything_delivered() {
    let store = memory_store();
    enqueue_n(&store, 100).await;
    let start = Instant::now();
    let back = start + Duration::from_secs(300);
    // A target that answers 503 for five minutes, then recovers.
    let calls: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let seen = calls.clone();
    let handler = TestHandler::new(move |_| {
        let now = Instant::now();
        seen.lock().unwrap().push(now);
        async move {
            if now < back {
                Err(DeliveryError::retryable("503 Service Unavailable"))
            } else {
                Ok(())
            }
        }
    });
    let breaker = CircuitBreakerConfig::default()
        .consecutive_failures(Some(5))
        .cool_down(Duration::from_secs(10))
        .max_cool_down(Duration::from_secs(60));
    let config = lane()
        .concurrency(4)
        .circuit_breaker(Some(breaker))
        .retry(RetryPolicy::new(Duration::from_secs(1), Duration::from_secs(60)).jitter(false));
    let builder = OutboxRelay::builder(&store)
        .event_capacity(100_000)
        .lane(config, handler);
    let mut events = builder.subscribe();
    let relay = builder.start().await.expect("relay starts");

    let mut state = BreakerState::Closed;
    let mut changes = Vec::new();
    let mut delivered = 0;
    let mut first_delivery = None;
    while delivered < 100 {
        match next(&mut events, Duration::from_secs(600)).await {
            RelayEvent::BreakerChanged { state: now, .. } => {
                state = now;
                changes.push((Instant::now() - start, now));
            }
            RelayEvent::Claimed { outbox_ids, .. } => {
                assert_ne!(
                    state,
                    BreakerState::Open,
                    "claimed {outbox_ids:?} while the breaker was open ({changes:?})"
                );
                if state == BreakerState::HalfOpen {
                    assert_eq!(outbox_ids.len(), 1, "a half-open claim takes one probe");
                }
            }
            RelayEvent::Delivered { .. } => {
                delivered += 1;
                first_delivery.get_or_insert(Instant::now());
            }
            RelayEvent::Failed { outcome, .. } => assert_eq!(
                outcome,
                outbox_relay::store::NackOutcome::Requeued,
                "a failure during the outage dead-lettered a message"
            ),
            _ => {}
        }
    }
    let first = first_delivery.expect("deliveries");
    assert!(
        first >= back && first <= back + Duration::from_secs(60),
        "first delivery {:?} after the target came back; breaker changes {changes:?}",
        first.saturating_duration_since(back)
    );
    let attempts_during_outage = calls.lock().unwrap().iter().filter(|t| **t < back).count();
    eprintln!(
        "outage: {attempts_during_outage} attempts during 300 s, first delivery {:?} after \
         the return, breaker {changes:?}",
        first.saturating_duration_since(back)
    );
    assert!(
        attempts_during_outage <= 20,
        "{attempts_during_outage} attempts during the outage ({changes:?})"
    );
    assert!(
        changes.iter().any(|(_, s)| *s == BreakerState::Open),
        "{changes:?}"
    );
    let stats = store
        .stats(&MessageFilter::lane("canonical", "projector"))
        .await
        .unwrap();
    assert_eq!((stats[0].delivered, stats[0].dead_letter), (100, 0));
    let status = relay.status().await.unwrap();
    assert_eq!(status[0].gates.breaker, Some(BreakerState::Closed));
    assert!(
        status[0].gates.throttled > Duration::from_secs(200),
        "{:?}",
        status[0].gates
    );
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_rate_limited_lane_delivers_at_its_rate_within_5_percent_over_30_virtual_seconds() {
    let store = memory_store();
    enqueue_n(&store, 4_000).await;
    let config = lane()
        .concurrency(8)
        .rate_limit(Some(RateLimit::new(100, Duration::from_secs(1)).burst(10)));
    let builder = OutboxRelay::builder(&store)
        .event_capacity(100_000)
        .lane(config, TestHandler::ok());
    let mut events = builder.subscribe();
    let start = Instant::now();
    let relay = builder.start().await.expect("relay starts");
    let end = start + Duration::from_secs(30);
    let mut delivered: usize = 0;
    loop {
        let event = next(&mut events, Duration::from_secs(60)).await;
        if Instant::now() > end {
            break;
        }
        if matches!(event, RelayEvent::Delivered { .. }) {
            delivered += 1;
        }
    }
    eprintln!("delivered {delivered} in 30 virtual s at 100/s (burst 10)");
    // 100/s for 30 s, plus the burst of 10 the bucket starts with.
    assert!(
        delivered.abs_diff(3_000) <= 150,
        "delivered {delivered} in 30 virtual seconds at 100/s"
    );
    assert!(delivered <= 3_010 + 8, "over the budget: {delivered}");
    let status = relay.status().await.unwrap();
    assert_eq!(
        status[0].gates.rate_limit.as_deref(),
        Some("100/1s (burst 10)")
    );
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}
