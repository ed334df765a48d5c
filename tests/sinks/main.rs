//! The sinks against the real servers: a webhook receiver the test starts on loopback, NATS
//! with JetStream at 127.0.0.1:4222, RabbitMQ at 127.0.0.1:5672 (guest/guest), Redis at
//! 127.0.0.1:6379 (`.ci/run` starts any that is down), and a private tansu Kafka broker per
//! Kafka test (`.ci/run` installs it). Each test isolates itself: its own
//! port, stream and subject, exchange and queue, or key. Each reads back with the server's
//! own client and checks the payload bytes, headers and ids exactly.
//!
//! Sinks are built the way the binary builds them: from a `sink = { kind = … }` table of a
//! config file, through `SinkConfig::build`. Relay scenarios run the real relay over the
//! in-memory store and wait on its events (real time: the servers are real).

use std::sync::Arc;
use std::time::Duration;

use outbox_relay::config::file::FileConfig;
use outbox_relay::relay::RelayEvent;
use outbox_relay::sinks::SinkConfig;
use outbox_relay::{
    DeliveryHandler, InMemoryOutboxStore, LaneConfig, Outbox, OutboxMessage, OutboxMessageDraft,
    OutboxRelay, RetryPolicy,
};
use tokio::sync::broadcast;
use uuid::Uuid;

#[path = "../support/certificates.rs"]
mod certificates;
mod kafka;
mod nats;
mod rabbitmq;
mod redis_streams;
#[path = "../support/tcp_proxy.rs"]
#[allow(dead_code)] // shared with tests/chaos.rs, which uses all of it
mod tcp_proxy;
mod webhook;

/// How long a test waits for an event before failing: generous, the machine is shared.
pub const EVENT_TIMEOUT: Duration = Duration::from_secs(120);

/// A name no other test (or run) uses: `prefix` and a fresh UUID's simple form.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}_{}", Uuid::new_v4().simple())
}

/// The sink a config file's `sink = { … }` line describes, parsed and validated as the
/// binary does.
pub fn sink_from_toml(sink_line: &str) -> SinkConfig {
    let text = format!(
        "database_url = \"sqlite:never-opened.db\"\n[[lanes]]\nlane = \"orders\"\ntarget = \"billing\"\n{sink_line}\n"
    );
    let config = FileConfig::from_toml_str("test", &text)
        .unwrap_or_else(|error| panic!("config does not parse: {error}\n{text}"));
    config.lanes().expect("lanes")[0].1.clone()
}

/// Builds the sink `sink_line` describes, as the binary does.
pub async fn build(sink_line: &str) -> Arc<dyn DeliveryHandler> {
    sink_from_toml(sink_line)
        .build("lanes[orders/billing].sink")
        .await
        .unwrap_or_else(|error| panic!("sink does not build: {error}"))
}

/// A draft of lane `orders`, target `billing`, with a payload and headers to read back.
pub fn draft() -> OutboxMessageDraft {
    OutboxMessageDraft::new(
        "orders",
        "billing",
        serde_json::json!({"order": 42, "total": "19.90", "note": "ünïcode ✓"}),
    )
    .unwrap()
    .with_header(
        "traceparent",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    )
    .with_header("x-tenant", "acme")
}

/// The JSON bytes of `message`'s payload, as every sink sends them.
pub fn payload_bytes(message: &OutboxMessage) -> Vec<u8> {
    serde_json::to_vec(&message.payload).unwrap()
}

/// A stored, claimed message from `draft`, ready to hand to a sink directly.
pub async fn claimed(draft: OutboxMessageDraft) -> OutboxMessage {
    use outbox_relay::store::ClaimRequest;
    let store = Outbox::new(InMemoryOutboxStore::new());
    let lane = draft.lane.clone();
    let target = draft.target.clone();
    store.enqueue(draft).await.unwrap();
    let request = ClaimRequest::new(&lane, &target, 1, Duration::from_secs(60), "test");
    store.claim(&request).await.unwrap().messages.remove(0)
}

/// A lane of `orders/billing` that retries fast (no jitter, 50 ms), so a test's time goes
/// to what the target asks for (a `Retry-After`), not to the relay's backoff.
pub fn fast_lane() -> LaneConfig {
    LaneConfig::new("orders", "billing")
        .consumer_id("sink-test")
        .retry(RetryPolicy::new(Duration::from_millis(50), Duration::from_millis(50)).jitter(false))
        .delivery_timeout(Duration::from_secs(30))
        .max_poll_interval(Duration::from_millis(200))
}

/// A relay over a fresh in-memory store delivering `orders/billing` with `handler`; its
/// event subscription is taken before the start, so no event is missed.
pub async fn start_relay(
    handler: Arc<dyn DeliveryHandler>,
) -> (
    Outbox,
    outbox_relay::RelayHandle,
    broadcast::Receiver<RelayEvent>,
) {
    let store = Outbox::new(InMemoryOutboxStore::new());
    let builder = OutboxRelay::builder(&store).lane_shared(fast_lane(), handler);
    let events = builder.subscribe();
    let relay = builder.start().await.expect("relay starts");
    (store, relay, events)
}

/// Waits for the first event about `outbox_id` that `pred` accepts, collecting every event
/// about it on the way (in order), so a test can assert the whole story.
pub async fn wait_for(
    events: &mut broadcast::Receiver<RelayEvent>,
    outbox_id: Uuid,
    what: &str,
    mut pred: impl FnMut(&RelayEvent) -> bool,
) -> Vec<RelayEvent> {
    let mut seen = Vec::new();
    let found = tokio::time::timeout(EVENT_TIMEOUT, async {
        loop {
            match events.recv().await {
                Ok(event) => {
                    if about(&event) != Some(outbox_id) {
                        continue;
                    }
                    let done = pred(&event);
                    seen.push(event);
                    if done {
                        return;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(n)) => panic!("events lagged by {n}"),
                Err(broadcast::error::RecvError::Closed) => panic!("relay stopped"),
            }
        }
    })
    .await;
    if found.is_err() {
        panic!("timed out waiting for {what}; events so far: {seen:#?}");
    }
    seen
}

fn about(event: &RelayEvent) -> Option<Uuid> {
    match event {
        RelayEvent::Delivered { outbox_id, .. }
        | RelayEvent::Failed { outbox_id, .. }
        | RelayEvent::RetryAfterClamped { outbox_id, .. } => Some(*outbox_id),
        _ => None,
    }
}

/// Enqueues `draft` in `store`; its id.
pub async fn enqueue(store: &Outbox, draft: OutboxMessageDraft) -> Uuid {
    store.enqueue(draft).await.unwrap().message.outbox_id
}
