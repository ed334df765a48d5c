//! The lane's spans around its store calls: one `outbox.claim` per claim and one
//! `outbox.ack` per ack, each with the rows it moved and how long it took.
//!
//! Named and attributed after OpenTelemetry's messaging conventions where they fit: a claim
//! is a consumer's `receive` (`messaging.operation.type = "receive"`), an ack a `settle`;
//! `messaging.batch.message_count` carries the rows. The relay's own `lane`, `target`,
//! `rows` and `duration_ms` sit beside them so a plain log subscriber shows them too. At
//! INFO level, like the delivery span: a trace exporter keeps them at `RUST_LOG=info`,
//! while the fmt subscriber prints nothing for them unless asked to log span events.
//!
//! Why `duration_ms` as a field although a span has a duration: a log line of the closed
//! span (and a JSON log pipeline) then carries it without a span-timing layer.
//!
//! Both are roots (`parent: None`): a claim or an ack serves many messages of many traces,
//! and the actor's own span (ractor's `Actor{id=…}`) is no parent a reader wants.
//!
//! An `ack_and_claim` is one round trip that does both, so it opens both spans over the
//! same call, side by side (neither is the other's parent); each says `combined = true`.

use std::time::Instant;

use tracing::field::Empty;
use tracing::Span;

use crate::store::{AckAndClaim, ClaimBatch, ClaimOutcome, StoreError};

/// The claim span for `limit` rows of `lane`/`target`.
pub(crate) fn claim(lane: &str, target: &str, limit: usize, combined: bool) -> Span {
    tracing::info_span!(
        parent: None,
        "outbox.claim",
        otel.name = %format_args!("receive {lane}/{target}"),
        otel.kind = "consumer",
        messaging.system = "outbox",
        messaging.operation.type = "receive",
        messaging.operation.name = "claim",
        messaging.destination.name = %format_args!("{lane}/{target}"),
        messaging.batch.message_count = Empty,
        lane = %lane,
        target = %target,
        limit = limit as u64,
        combined,
        rows = Empty,
        dead_lettered = Empty,
        duration_ms = Empty,
        outcome = Empty,
        error.type = Empty,
    )
}

/// The ack span for `rows` claims of `lane`/`target`.
pub(crate) fn ack(lane: &str, target: &str, rows: usize, combined: bool) -> Span {
    tracing::info_span!(
        parent: None,
        "outbox.ack",
        otel.name = %format_args!("settle {lane}/{target}"),
        otel.kind = "consumer",
        messaging.system = "outbox",
        messaging.operation.type = "settle",
        messaging.operation.name = "ack",
        messaging.destination.name = %format_args!("{lane}/{target}"),
        messaging.batch.message_count = rows as u64,
        lane = %lane,
        target = %target,
        combined,
        rows = rows as u64,
        applied = Empty,
        lost = Empty,
        duration_ms = Empty,
        outcome = Empty,
        error.type = Empty,
    )
}

fn record_duration(span: &Span, started: Instant) {
    span.record("duration_ms", started.elapsed().as_secs_f64() * 1000.0);
}

fn record_error(span: &Span, error: &StoreError) {
    span.record("outcome", "error");
    span.record(
        "error.type",
        if error.is_permanent() {
            "permanent"
        } else {
            "transient"
        },
    );
}

/// Records a claim's answer on its span.
pub(crate) fn claimed(span: &Span, started: Instant, result: &Result<ClaimBatch, StoreError>) {
    record_duration(span, started);
    match result {
        Ok(batch) => {
            let rows = batch.messages.len() as u64;
            span.record("rows", rows);
            span.record("messaging.batch.message_count", rows);
            span.record("dead_lettered", batch.dead_lettered.len() as u64);
            span.record("outcome", if rows == 0 { "empty" } else { "claimed" });
        }
        Err(error) => record_error(span, error),
    }
}

/// Records an ack's answer on its span.
pub(crate) fn acked(span: &Span, started: Instant, result: &Result<Vec<ClaimOutcome>, StoreError>) {
    record_duration(span, started);
    match result {
        Ok(outcomes) => record_ack_outcomes(span, outcomes),
        Err(error) => record_error(span, error),
    }
}

fn record_ack_outcomes(span: &Span, outcomes: &[ClaimOutcome]) {
    let lost = outcomes
        .iter()
        .filter(|outcome| **outcome == ClaimOutcome::LostClaim)
        .count() as u64;
    span.record("applied", outcomes.len() as u64 - lost);
    span.record("lost", lost);
    span.record("outcome", "acked");
}

/// Records an `ack_and_claim`'s answer on both its spans.
pub(crate) fn acked_and_claimed(
    ack: &Span,
    claim: &Span,
    started: Instant,
    result: &Result<AckAndClaim, StoreError>,
) {
    record_duration(ack, started);
    match result {
        Ok(answer) => {
            record_ack_outcomes(ack, &answer.acked);
            claimed(claim, started, &answer.claimed);
        }
        Err(error) => {
            record_error(ack, error);
            record_duration(claim, started);
            record_error(claim, error);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use crate::delivery::{DeliveryError, DeliveryHandler};
    use crate::lane::RelayEvent;
    use crate::Outbox;
    use crate::{InMemoryOutboxStore, LaneConfig, OutboxMessage, OutboxMessageDraft, OutboxRelay};

    struct Accepts;

    #[async_trait::async_trait]
    impl DeliveryHandler for Accepts {
        async fn deliver(&self, _message: &OutboxMessage) -> Result<(), DeliveryError> {
            Ok(())
        }
    }

    /// Current-thread: the actors and their store-call tasks run on this thread, under
    /// this thread's subscriber.
    #[tokio::test(flavor = "current_thread")]
    async fn each_claim_and_each_ack_has_a_span_with_its_rows_and_duration() {
        let (captured, _default) = crate::captured_log::capture_spans();

        let store = Outbox::new(InMemoryOutboxStore::new());
        for n in 0..3 {
            store
                .enqueue(OutboxMessageDraft::new("orders", "audit", json!({ "n": n })).unwrap())
                .await
                .unwrap();
        }
        let relay = OutboxRelay::builder(&store)
            .lane(LaneConfig::new("orders", "audit"), Accepts)
            .start()
            .await
            .expect("start");
        let mut events = relay.subscribe();
        let mut delivered = 0;
        tokio::time::timeout(Duration::from_secs(30), async {
            while delivered < 3 {
                match events.recv().await {
                    Ok(RelayEvent::Delivered { .. }) => delivered += 1,
                    Ok(_) => {}
                    Err(error) => panic!("events: {error}"),
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("3 deliveries within 30 s; saw {delivered}"));
        relay
            .shutdown(Duration::from_secs(10))
            .await
            .expect("shutdown");

        let text = String::from_utf8_lossy(&captured.0.lock().unwrap()).into_owned();
        let closed = |name: &str| -> Vec<String> {
            text.lines()
                .filter(|line| line.contains(&format!("{name}{{")) && line.contains("close"))
                .map(str::to_owned)
                .collect()
        };
        let number = |line: &str, field: &str| -> u64 {
            line.split(&format!("{field}="))
                .nth(1)
                .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("no {field} in {line}"))
        };
        let claims = closed("outbox.claim");
        let claimed: u64 = claims.iter().map(|line| number(line, "rows")).sum();
        assert_eq!(claimed, 3, "the claim spans' rows add up:\n{text}");
        for line in &claims {
            for field in [
                "lane=orders",
                "target=audit",
                "messaging.system=\"outbox\"",
                "messaging.operation.type=\"receive\"",
                "duration_ms=",
                "outcome=",
            ] {
                assert!(line.contains(field), "{field} missing from {line}");
            }
        }
        let acks = closed("outbox.ack");
        let acked: u64 = acks.iter().map(|line| number(line, "applied")).sum();
        assert_eq!(acked, 3, "the ack spans' applied rows add up:\n{text}");
        for line in &acks {
            assert_eq!(number(line, "rows"), number(line, "applied"), "{line}");
            for field in [
                "messaging.operation.type=\"settle\"",
                "lost=0",
                "duration_ms=",
                "outcome=\"acked\"",
            ] {
                assert!(line.contains(field), "{field} missing from {line}");
            }
        }
    }
}
