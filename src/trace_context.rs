//! W3C trace context carried in a message's headers (`traceparent`, `tracestate`), so a
//! delivery shows up in the trace of the request that enqueued it.
//!
//! With feature `otel`, every store's enqueue opens a short `outbox.create` span (an
//! OpenTelemetry messaging `create` operation, kind producer) as a child of the caller's
//! current span, and writes that span's context into the draft's headers. The lane's
//! `outbox.deliver` span then takes it as its **parent**, so enqueue and delivery are one
//! trace, with the create span between them. A parent rather than a link: a message has
//! exactly one producer and is delivered on its behalf, which is the case the messaging
//! conventions draw as a parent; a link is for a batch serving many producers, which is
//! what the lane's claim and ack spans are, and why those have none.
//!
//! A draft that already carries a `traceparent` keeps it (the caller set the context on
//! purpose). Without a tracing subscriber that has an OpenTelemetry layer there is no valid
//! context and no header is written. Sinks forward every message header, so the target
//! receives the same `traceparent` (webhook header, NATS header, AMQP header).
//!
//! Without feature `otel` these functions do nothing.
//!
//! Dedupe ignores both headers ([`OutboxMessageDraft::matches`]): enqueuing the same draft
//! again from another trace is the harmless retry it always was, not a conflict.

use crate::message::{OutboxMessage, OutboxMessageDraft};

pub use crate::message::{TRACEPARENT, TRACESTATE};

/// Writes the current trace context, through an `outbox.create` span, into each draft's
/// headers. Called by every store's enqueue after the drafts were validated (so the two
/// headers never count against a caller's header limit).
pub(crate) fn capture(drafts: &mut [OutboxMessageDraft]) {
    #[cfg(feature = "otel")]
    for draft in drafts {
        otel::capture(draft);
    }
    #[cfg(not(feature = "otel"))]
    let _ = drafts;
}

/// Makes `span` (a delivery span, not yet entered) a child of the context in `message`'s
/// headers, if it has one.
pub(crate) fn adopt(span: &tracing::Span, message: &OutboxMessage) {
    #[cfg(feature = "otel")]
    otel::adopt(span, message);
    #[cfg(not(feature = "otel"))]
    let _ = (span, message);
}

#[cfg(feature = "otel")]
mod otel {
    use std::collections::BTreeMap;

    use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
    use opentelemetry::trace::TraceContextExt;
    use opentelemetry_sdk::propagation::TraceContextPropagator;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    use super::TRACEPARENT;
    use crate::message::is_trace_header;
    use crate::message::{OutboxMessage, OutboxMessageDraft};

    struct Headers<'a>(&'a mut BTreeMap<String, String>);

    impl Injector for Headers<'_> {
        fn set(&mut self, key: &str, value: String) {
            self.0.insert(key.to_owned(), value);
        }
    }

    struct ReadHeaders<'a>(&'a BTreeMap<String, String>);

    impl Extractor for ReadHeaders<'_> {
        fn get(&self, key: &str) -> Option<&str> {
            self.0
                .iter()
                .find(|(name, _)| name.eq_ignore_ascii_case(key))
                .map(|(_, value)| value.as_str())
        }

        fn keys(&self) -> Vec<&str> {
            self.0
                .keys()
                .filter(|name| is_trace_header(name))
                .map(String::as_str)
                .collect()
        }
    }

    pub(super) fn capture(draft: &mut OutboxMessageDraft) {
        if draft
            .headers
            .keys()
            .any(|name| name.eq_ignore_ascii_case(TRACEPARENT))
        {
            return;
        }
        let span = tracing::info_span!(
            "outbox.create",
            otel.name = %format_args!("create {}/{}", draft.lane, draft.target),
            otel.kind = "producer",
            messaging.system = "outbox",
            messaging.operation.type = "create",
            messaging.destination.name = %format_args!("{}/{}", draft.lane, draft.target),
            lane = %draft.lane,
            target = %draft.target,
        );
        let context = span.context();
        if !context.span().span_context().is_valid() {
            return;
        }
        TraceContextPropagator::new().inject_context(&context, &mut Headers(&mut draft.headers));
    }

    pub(super) fn adopt(span: &tracing::Span, message: &OutboxMessage) {
        let parent = TraceContextPropagator::new().extract(&ReadHeaders(&message.headers));
        if parent.span().span_context().is_valid() {
            // Fails only for a span already entered or disabled; then there is nothing to
            // parent.
            let _ = span.set_parent(parent);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::{InMemoryOutboxStore, Outbox};

    fn draft() -> OutboxMessageDraft {
        OutboxMessageDraft::new("orders", "audit", json!({ "id": 1 }))
            .unwrap()
            .with_dedupe_key("order-1")
            .with_header("x-tenant", "acme")
    }

    /// The same draft enqueued again from another trace is a duplicate, not a conflict;
    /// another header still makes it a conflict.
    #[tokio::test]
    async fn dedupe_ignores_the_trace_context_headers_only() {
        let store = Outbox::new(InMemoryOutboxStore::new());
        let first = store
            .enqueue(draft().with_header(
                TRACEPARENT,
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            ))
            .await
            .expect("first");
        let again = store
            .enqueue(
                draft()
                    .with_header(
                        TRACEPARENT,
                        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                    )
                    .with_header(TRACESTATE, "vendor=1"),
            )
            .await
            .expect("a duplicate");
        assert!(again.duplicate);
        assert_eq!(again.message.outbox_id, first.message.outbox_id);
        let conflict = store
            .enqueue(draft().with_header("x-tenant", "other"))
            .await;
        assert!(conflict.is_err(), "{conflict:?}");
    }

    /// Without an OpenTelemetry layer there is no context: no header is written.
    #[tokio::test]
    async fn without_a_trace_no_header_is_written() {
        let store = Outbox::new(InMemoryOutboxStore::new());
        let enqueued = store.enqueue(draft()).await.expect("enqueue");
        assert!(!enqueued.message.headers.contains_key(TRACEPARENT));
    }
}
