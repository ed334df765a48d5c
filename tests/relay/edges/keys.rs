//! Ordering keys under failure: a dead head under `Block` holds only its own key until an
//! operator requeues it, and a retrying head does not starve another key at concurrency
//! one.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use outbox_relay::store::{MessageFilter, OrderingPolicy};
use outbox_relay::{DeliveryError, OutboxRelay, OutboxStatus, RetryPolicy};
use tokio::time::Instant;

use super::lane;
use crate::{draft, enqueue, memory_store, wait_delivered, TestHandler};

#[tokio::test(start_paused = true)]
async fn block_lane_holds_a_dead_heads_key_lets_others_flow_and_requeue_resumes_in_order() {
    let store = memory_store();
    let a1 = enqueue(&store, draft(1).with_ordering_key("a")).await;
    let a2 = enqueue(&store, draft(2).with_ordering_key("a")).await;
    let b1 = enqueue(&store, draft(3).with_ordering_key("b")).await;
    let b2 = enqueue(&store, draft(4).with_ordering_key("b")).await;
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
        OutboxRelay::builder(&store).lane(
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
async fn a_retrying_head_does_not_starve_another_key_at_concurrency_one() {
    let store = memory_store();
    let a1 = enqueue(&store, draft(1).with_ordering_key("a")).await;
    let mut b = Vec::new();
    for i in 0..5 {
        b.push(enqueue(&store, draft(10 + i).with_ordering_key("b")).await);
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
    let (relay, mut events) = crate::start(OutboxRelay::builder(&store).lane(
        lane().concurrency(1).retry(
            RetryPolicy::new(Duration::from_secs(10), Duration::from_secs(10)).jitter(false),
        ),
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
