//! Keys under contention: an ordering key never has two messages in flight (two processes
//! claiming at once; a requeued dead letter behind its in-flight successor, on both
//! stores), and sixteen concurrent enqueues of one dedupe key write one row.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_relay::message::ClaimRef;
use outbox_relay::store::{ClaimOutcome, ClaimRequest, MessageFilter, Nack, NackDisposition};
use outbox_relay::time::ManualClock;
use outbox_relay::time::UnixMillis;
use outbox_relay::{InMemoryOutboxStore, Outbox};

use crate::{count_rows, draft, open, SchemaGuard};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_processes_never_hold_two_messages_of_one_key() {
    const KEYS: i64 = 8;
    const PER_KEY: i64 = 25;
    let schema = SchemaGuard::new();
    let processes = [open(schema.config()).await, open(schema.config()).await];
    let drafts = (0..KEYS * PER_KEY)
        .map(|i| draft("keyed", i).with_ordering_key(format!("k{}", i % KEYS)))
        .collect();
    processes[0].enqueue_many(drafts).await.unwrap();

    // Who holds each key right now, and what each key delivered, in order.
    let held: Arc<Mutex<HashMap<String, String>>> = Arc::default();
    let delivered: Arc<Mutex<HashMap<String, Vec<i64>>>> = Arc::default();
    let mut workers = Vec::new();
    for (p, store) in processes.iter().enumerate() {
        for w in 0..4 {
            let (store, held, delivered) = (store.clone(), held.clone(), delivered.clone());
            let me = format!("p{p}-w{w}");
            workers.push(tokio::spawn(async move {
                let mut idle = 0;
                while idle < 20 {
                    let request =
                        ClaimRequest::new("keyed", "sink", 3, Duration::from_secs(60), &me);
                    let batch = store.claim(&request).await.unwrap();
                    if batch.messages.is_empty() {
                        idle += 1;
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        continue;
                    }
                    idle = 0;
                    for m in &batch.messages {
                        let key = m.ordering_key.clone().unwrap();
                        if let Some(other) = held.lock().unwrap().insert(key.clone(), me.clone()) {
                            panic!("{me} claimed key {key} while {other} holds it");
                        }
                    }
                    tokio::task::yield_now().await;
                    for m in &batch.messages {
                        let key = m.ordering_key.clone().unwrap();
                        delivered
                            .lock()
                            .unwrap()
                            .entry(key.clone())
                            .or_default()
                            .push(m.payload.to_value().unwrap()["value"].as_i64().unwrap());
                        // Let go before the ack commits: a gap can hide a violation but
                        // never invent one.
                        held.lock().unwrap().remove(&key);
                    }
                    let claims: Vec<ClaimRef> =
                        batch.messages.iter().filter_map(|m| m.claim()).collect();
                    let outcomes = store.ack(&claims).await.unwrap();
                    assert!(outcomes.iter().all(|o| *o == ClaimOutcome::Applied));
                }
            }));
        }
    }
    for worker in workers {
        worker.await.unwrap();
    }
    let delivered = std::mem::take(&mut *delivered.lock().unwrap());
    for k in 0..KEYS {
        let expected: Vec<i64> = (0..PER_KEY).map(|i| i * KEYS + k).collect();
        assert_eq!(delivered[&format!("k{k}")], expected, "key k{k}");
    }
    schema.drop().await;
}

/// A dead letter requeued while its key's next message is in flight waits for that claim
/// to end: a key never has two messages in flight. Checked on both stores.
#[tokio::test]
async fn a_requeued_dead_letter_waits_for_its_in_flight_successor() {
    let schema = SchemaGuard::new();
    let clock = ManualClock::new(UnixMillis::from_millis(1_700_000_000_000));
    let stores: [Outbox; 2] = [
        Outbox::new(InMemoryOutboxStore::with_clock(Arc::new(clock.clone()))),
        open(schema.config().clock(Arc::new(clock.clone()))).await,
    ];
    for store in &stores {
        let keyed = |v| draft("l", v).with_ordering_key("k").with_max_attempts(1);
        let first = store.enqueue(keyed(1)).await.unwrap().message;
        let second = store.enqueue(keyed(2)).await.unwrap().message;
        let request = ClaimRequest::new("l", "sink", 10, Duration::from_secs(1), "r");

        let batch = store.claim(&request).await.unwrap();
        assert_eq!(batch.messages.len(), 1);
        let nack = Nack {
            claim: batch.messages[0].claim().unwrap(),
            error: "no".into(),
            disposition: NackDisposition::Permanent,
        };
        store.nack(&[nack]).await.unwrap();
        let batch = store.claim(&request).await.unwrap();
        assert_eq!(batch.messages[0].outbox_id, second.outbox_id);
        let in_flight = batch.messages[0].claim().unwrap();

        let requeue = MessageFilter::all().with_ids([first.outbox_id]);
        assert_eq!(store.requeue_dead_letters(&requeue).await.unwrap(), 1);
        let batch = store.claim(&request).await.unwrap();
        assert!(batch.messages.is_empty(), "{store:?}: two in flight");

        store.ack(&[in_flight]).await.unwrap();
        let batch = store.claim(&request).await.unwrap();
        assert_eq!(batch.messages[0].outbox_id, first.outbox_id);
    }
    schema.drop().await;
}

/// Sixteen enqueues of one dedupe key at once, from two pools: one row, no errors, every
/// answer the same message, all but one of them duplicates.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_enqueues_of_one_dedupe_key_write_one_row() {
    let schema = SchemaGuard::new();
    let stores = [open(schema.config()).await, open(schema.config()).await];
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let store = stores[i % 2].clone();
            tokio::spawn(async move {
                store
                    .enqueue(draft("l", 1).with_dedupe_key("once"))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    assert_eq!(count_rows(&stores[0]).await, 1);
    let id = answers[0].message.outbox_id;
    assert!(answers.iter().all(|a| a.message.outbox_id == id));
    assert_eq!(answers.iter().filter(|a| !a.duplicate).count(), 1);
    schema.drop().await;
}
