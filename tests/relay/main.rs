//! The supervised relay, black-box through the public API.
//!
//! Time-based scenarios run on tokio's paused clock with the in-memory store on a
//! `TokioClock`, so leases, backoffs and polls are exact and instant. Tests wait on the
//! relay's own events, never on sleeps.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use outbox_relay::relay::RelayEvent;
use outbox_relay::time::TokioClock;
use outbox_relay::{
    DeliveryError, DeliveryHandler, InMemoryOutboxStore, Outbox, OutboxMessage, OutboxMessageDraft,
};
use serde_json::json;
use tokio::sync::broadcast;
use uuid::Uuid;

mod core;
mod edges;
mod faults;
#[path = "../support/faulty_store.rs"]
mod faulty_store;
mod gates;
mod idle;
mod lifecycle;
#[cfg(feature = "mysql")]
#[path = "../support/mysql.rs"]
mod mysql_support;
mod patterns;
mod pipeline;
mod runs;
mod shutdown;
mod stores;
// Rows written by hand with SQL: only the SQL stores can hold one.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod unreadable;

/// How long a test waits for an event before failing. On the paused clock this is virtual
/// time, so it only has to exceed the longest timer a scenario expects to fire.
pub const EVENT_TIMEOUT: Duration = Duration::from_secs(120);

pub type DeliverFn = dyn Fn(OutboxMessage) -> Pin<Box<dyn Future<Output = Result<(), DeliveryError>> + Send>>
    + Send
    + Sync;

/// A handler built from a closure, recording every call.
#[derive(Clone)]
pub struct TestHandler {
    deliver: Arc<DeliverFn>,
    pub calls: Arc<Mutex<Vec<Uuid>>>,
}

impl TestHandler {
    pub fn new<F, Fut>(deliver: F) -> Self
    where
        F: Fn(OutboxMessage) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), DeliveryError>> + Send + 'static,
    {
        Self {
            deliver: Arc::new(move |m| Box::pin(deliver(m))),
            calls: Arc::default(),
        }
    }

    /// Succeeds at once.
    pub fn ok() -> Self {
        Self::new(|_| async { Ok(()) })
    }

    /// Always fails with a retryable error.
    pub fn failing() -> Self {
        Self::new(|_| async { Err(DeliveryError::retryable("publish failed")) })
    }

    pub fn calls(&self) -> Vec<Uuid> {
        self.calls.lock().unwrap().clone()
    }
}

#[async_trait]
impl DeliveryHandler for TestHandler {
    async fn deliver(&self, message: &OutboxMessage) -> Result<(), DeliveryError> {
        self.calls.lock().unwrap().push(message.outbox_id);
        (self.deliver)(message.clone()).await
    }
}

/// A handler that finishes each delivery when `release` is notified.
pub fn held(release: &Arc<tokio::sync::Notify>) -> TestHandler {
    let release = release.clone();
    TestHandler::new(move |_| {
        let release = release.clone();
        async move {
            release.notified().await;
            Ok(())
        }
    })
}

/// A handler that signals `started` as each delivery starts, and finishes it when
/// `release` is notified.
pub fn started_then_held(
    started: &Arc<tokio::sync::Notify>,
    release: &Arc<tokio::sync::Notify>,
) -> TestHandler {
    let (started, release) = (started.clone(), release.clone());
    TestHandler::new(move |_| {
        let (started, release) = (started.clone(), release.clone());
        async move {
            started.notify_one();
            release.notified().await;
            Ok(())
        }
    })
}

/// An in-memory store on tokio's clock.
pub fn memory_store() -> Outbox {
    Outbox::new(InMemoryOutboxStore::with_clock(Arc::new(TokioClock::new())))
}

pub fn draft(value: i64) -> OutboxMessageDraft {
    OutboxMessageDraft::new("canonical", "projector", json!({ "value": value })).unwrap()
}

pub async fn enqueue(store: &Outbox, draft: OutboxMessageDraft) -> Uuid {
    store.enqueue(draft).await.unwrap().message.outbox_id
}

/// Asserts that another consumer ("relay-b") claims `id` at once, on its first attempt
/// still: a claim handed back (released), not one left to wait out its lease.
pub async fn claimed_at_once_by_another(store: &Outbox, id: Uuid) {
    let again = store
        .claim(&outbox_relay::store::ClaimRequest::new(
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
}

/// Waits for the first event that `pred` accepts.
pub async fn wait_for(
    events: &mut broadcast::Receiver<RelayEvent>,
    what: &str,
    mut pred: impl FnMut(&RelayEvent) -> bool,
) -> RelayEvent {
    let found = tokio::time::timeout(EVENT_TIMEOUT, async {
        loop {
            match events.recv().await {
                Ok(event) if pred(&event) => return event,
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    panic!("event subscriber lagged by {n}; raise event_capacity")
                }
                Err(broadcast::error::RecvError::Closed) => panic!("relay stopped"),
            }
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// Waits until `n` messages were delivered; returns their ids in delivery order.
pub async fn wait_delivered(events: &mut broadcast::Receiver<RelayEvent>, n: usize) -> Vec<Uuid> {
    let mut ids = Vec::new();
    while ids.len() < n {
        if let RelayEvent::Delivered { outbox_id, .. } = wait_for(events, "deliveries", |e| {
            matches!(e, RelayEvent::Delivered { .. })
        })
        .await
        {
            ids.push(outbox_id);
        }
    }
    ids
}

/// Starts a relay with its event subscription taken before the start, so a test never
/// misses an event that happened while `start()` returned.
pub async fn start(
    builder: outbox_relay::relay::RelayBuilder,
) -> (outbox_relay::RelayHandle, broadcast::Receiver<RelayEvent>) {
    let events = builder.subscribe();
    let relay = builder.start().await.expect("relay starts");
    (relay, events)
}
