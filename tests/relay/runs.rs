//! Key runs end to end: a lane whose deliveries are quick against its claim round trip asks
//! for a key's head with the messages queued behind it, and still delivers each key in
//! order, one message after another, through failures and retries.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_relay::relay::RelayEvent;
use outbox_relay::store::MessageFilter;
use outbox_relay::{DeliveryError, LaneConfig, OutboxRelay, RetryPolicy};
use uuid::Uuid;

use crate::faulty_store::FaultyStore;
use crate::{draft, memory_store, wait_for, TestHandler};
use outbox_relay::Outbox;

const KEYS: usize = 10;
const PER_KEY: usize = 20;
const TOTAL: usize = KEYS * PER_KEY;

/// One delivery attempt, as the handler saw it.
#[derive(Debug, Clone)]
struct Attempt {
    key: String,
    /// The message's place in its key's queue.
    index: usize,
    ok: bool,
}

#[tokio::test(start_paused = true)]
async fn key_runs_keep_each_key_in_order_through_failures() {
    let store = Arc::new(FaultyStore::new(memory_store()));
    // A store 3 ms away and instant deliveries: a run of 16 fits in one claim round trip,
    // and claims of up to 32 (8 slots + 24 prefetch) leave each key an eighth: runs of 4.
    store.claim_delay_ms.store(3, Ordering::SeqCst);
    let mut index_of: HashMap<Uuid, (String, usize)> = HashMap::new();
    let drafts: Vec<_> = (0..PER_KEY)
        .flat_map(|i| (0..KEYS).map(move |k| (i, k)))
        .map(|(i, k)| draft((i * KEYS + k) as i64).with_ordering_key(format!("key-{k}")))
        .collect();
    for answer in store.inner.enqueue_many(drafts).await.unwrap() {
        let key = answer.message.ordering_key.clone().unwrap();
        let index = index_of.values().filter(|(k, _)| *k == key).count();
        index_of.insert(answer.message.outbox_id, (key, index));
    }
    let index_of = Arc::new(index_of);

    // Every message whose value is 2 mod 7 fails its first attempt.
    let attempts: Arc<Mutex<Vec<Attempt>>> = Arc::default();
    let handler = {
        let (attempts, index_of) = (attempts.clone(), index_of.clone());
        TestHandler::new(move |m| {
            let (attempts, index_of) = (attempts.clone(), index_of.clone());
            async move {
                let (key, index) = index_of[&m.outbox_id].clone();
                let value = m.payload.to_value().unwrap()["value"].as_i64().unwrap();
                let ok = !(value % 7 == 2 && m.attempt_count == 1);
                attempts.lock().unwrap().push(Attempt { key, index, ok });
                if ok {
                    Ok(())
                } else {
                    Err(DeliveryError::retryable("first attempt fails"))
                }
            }
        })
    };
    let lane = LaneConfig::new("canonical", "projector")
        .concurrency(8)
        .prefetch(24)
        .key_run(16)
        .lease(Duration::from_secs(30))
        .retry(
            RetryPolicy::new(Duration::from_millis(10), Duration::from_millis(10)).jitter(false),
        );
    let (relay, mut events) = crate::start(
        OutboxRelay::builder(&Outbox::from_arc(store.clone()))
            .lane(lane, handler)
            .event_capacity(100_000),
    )
    .await;

    let mut longest_run = 0;
    let mut delivered = 0;
    while delivered < TOTAL {
        let event = wait_for(&mut events, "claims and deliveries", |e| {
            matches!(e, RelayEvent::Claimed { .. } | RelayEvent::Delivered { .. })
        })
        .await;
        match event {
            RelayEvent::Claimed { outbox_ids, .. } => {
                let keys: Vec<&String> = outbox_ids.iter().map(|id| &index_of[id].0).collect();
                let mut run = 1;
                for pair in keys.windows(2) {
                    run = if pair[0] == pair[1] { run + 1 } else { 1 };
                    longest_run = longest_run.max(run);
                }
            }
            _ => delivered += 1,
        }
    }

    // Per key: an attempt at message i only after every message before it succeeded.
    let attempts = attempts.lock().unwrap().clone();
    let mut next: HashMap<&str, usize> = HashMap::new();
    for attempt in &attempts {
        let expected = next.entry(&attempt.key).or_default();
        if attempt.index != *expected {
            let of_key: Vec<_> = attempts
                .iter()
                .filter(|a| a.key == attempt.key)
                .map(|a| (a.index, a.ok))
                .collect();
            panic!(
                "{} attempted out of order ((index, ok) in attempt order): {of_key:?}",
                attempt.key
            );
        }
        if attempt.ok {
            *expected += 1;
        }
    }
    assert!(next.values().all(|n| *n == PER_KEY), "{next:?}");
    let failures = attempts.iter().filter(|a| !a.ok).count();
    assert_eq!(failures, (0..TOTAL).filter(|v| v % 7 == 2).count());
    assert!(
        longest_run >= 4,
        "claims should have carried key runs, the longest had {longest_run} of one key"
    );
    let stats = store
        .inner
        .stats(&MessageFilter::lane("canonical", "projector"))
        .await
        .unwrap();
    assert_eq!(stats[0].delivered as usize, TOTAL, "{stats:?}");
    relay.shutdown(Duration::from_secs(5)).await.unwrap();
}
