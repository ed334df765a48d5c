//! Feature `otel`: a message enqueued inside a traced request is delivered inside the same
//! trace, and its target receives the `traceparent`. Spans are collected with
//! OpenTelemetry's in-memory exporter; the target is a real HTTP server on port 0 behind
//! the webhook sink.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry::trace::{SpanId, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use outbox_relay::relay::RelayEvent;
use outbox_relay::sinks::webhook::{WebhookSink, WebhookSinkConfig};
use outbox_relay::trace_context::TRACEPARENT;
use outbox_relay::{InMemoryOutboxStore, LaneConfig, Outbox, OutboxMessageDraft, OutboxRelay};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

const WAIT: Duration = Duration::from_secs(30);

/// An HTTP server that answers 200 to every request and keeps each request's headers.
async fn receiver() -> (String, Arc<Mutex<Vec<HashMap<String, String>>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/in", listener.local_addr().expect("address"));
    let seen: Arc<Mutex<Vec<HashMap<String, String>>>> = Arc::default();
    let keep = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let keep = keep.clone();
            tokio::spawn(async move {
                let mut stream = BufReader::new(stream);
                let mut headers = HashMap::new();
                let mut line = String::new();
                stream.read_line(&mut line).await.ok()?;
                loop {
                    line.clear();
                    stream.read_line(&mut line).await.ok()?;
                    let Some((name, value)) = line.trim_end().split_once(':') else {
                        break;
                    };
                    headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
                }
                let length: usize = headers
                    .get("content-length")
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                let mut body = vec![0; length];
                stream.read_exact(&mut body).await.ok()?;
                keep.lock().unwrap().push(headers);
                stream
                    .get_mut()
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .await
                    .ok()
            });
        }
    });
    (url, seen)
}

fn named<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    spans
        .iter()
        .find(|span| span.name == name)
        .unwrap_or_else(|| {
            let names: Vec<_> = spans.iter().map(|span| span.name.to_string()).collect();
            panic!("no span {name} among {names:?}")
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_and_delivery_are_one_trace_and_the_target_gets_traceparent() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("otel-test")));
    // Global: the relay's actors run on the runtime's worker threads.
    tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");

    let (url, received) = receiver().await;
    let sink = WebhookSink::build(
        &WebhookSinkConfig::new(url.parse().expect("a url template")),
        "sink",
    )
    .expect("a webhook sink");
    let store = Outbox::new(InMemoryOutboxStore::new());
    let relay = OutboxRelay::builder(&store)
        .lane(LaneConfig::new("orders", "hook"), sink)
        .start()
        .await
        .expect("start");
    let mut events = relay.subscribe();

    // The service's request, traced; the enqueue happens inside it.
    let request = tracing::info_span!("place order");
    let enqueued = store
        .enqueue(OutboxMessageDraft::new("orders", "hook", serde_json::json!({"id": 1})).unwrap())
        .instrument(request.clone())
        .await
        .expect("enqueue");
    drop(request);
    let stored_traceparent = enqueued
        .message
        .headers
        .get(TRACEPARENT)
        .cloned()
        .expect("enqueue wrote a traceparent header");

    tokio::time::timeout(WAIT, async {
        loop {
            match events.recv().await {
                Ok(RelayEvent::Delivered { .. }) => return,
                Ok(RelayEvent::Failed { error, .. }) => panic!("delivery failed: {error}"),
                Ok(_) => {}
                Err(error) => panic!("events: {error}"),
            }
        }
    })
    .await
    .expect("delivered within 30 s");
    relay
        .shutdown(Duration::from_secs(10))
        .await
        .expect("shutdown");

    let spans = exporter.get_finished_spans().expect("the exported spans");
    let request = named(&spans, "place order");
    let create = named(&spans, "create orders/hook");
    let deliver = named(&spans, "process orders/hook");
    let trace = request.span_context.trace_id();
    assert_eq!(
        create.span_context.trace_id(),
        trace,
        "create is in the request's trace"
    );
    assert_eq!(create.parent_span_id, request.span_context.span_id());
    assert_eq!(
        deliver.span_context.trace_id(),
        trace,
        "delivery is in the request's trace"
    );
    assert_eq!(
        deliver.parent_span_id,
        create.span_context.span_id(),
        "the delivery span's parent is the create span"
    );
    assert_ne!(deliver.parent_span_id, SpanId::INVALID);
    assert_eq!(
        stored_traceparent,
        format!("00-{}-{}-01", trace, create.span_context.span_id())
    );
    let claim = named(&spans, "receive orders/hook");
    assert_ne!(
        claim.span_context.trace_id(),
        trace,
        "a claim span is a root of its own"
    );

    let received = received.lock().unwrap().clone();
    assert_eq!(received.len(), 1, "{received:?}");
    assert_eq!(
        received[0].get(TRACEPARENT),
        Some(&stored_traceparent),
        "the target received the traceparent: {:?}",
        received[0]
    );

    // A batch that repeats a draft, enqueued inside a trace: each draft written gets a
    // create span (and so a traceparent) of its own, which must not turn the repeat into a
    // conflict with its first. One message is written; the repeat is its duplicate.
    let repeated = OutboxMessageDraft::new("orders", "hook", serde_json::json!({"id": 2}))
        .unwrap()
        .with_dedupe_key("order-2");
    let answers = store
        .enqueue_many(vec![repeated.clone(), repeated])
        .instrument(tracing::info_span!("place another order"))
        .await
        .expect("a repeat within one batch is no conflict");
    assert!(!answers[0].duplicate && answers[1].duplicate);
    assert_eq!(answers[0].message.outbox_id, answers[1].message.outbox_id);
    assert!(answers[0].message.headers.contains_key(TRACEPARENT));
}
