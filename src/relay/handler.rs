//! `HandlerActor`: runs one `DeliveryHandler::deliver` at a time, under a timeout.
//!
//! Each delivery runs inside the actor's `handle`, so a handler that panics fails this actor
//! and nothing else: the lane relay (its supervisor) sees the failure, nacks the message it
//! was delivering and spawns a fresh handler actor.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, DerivedActorRef};
use uuid::Uuid;

use crate::delivery::{within_timeout, DeliveryFailure, DeliveryHandler};
use crate::message::OutboxMessage;

/// What a handler tells whoever gave it the message: which delivery finished, and how.
/// Its own type, so a handler does not know its lane's message type (the lane converts it).
#[derive(Debug)]
pub(crate) struct DeliveryReport {
    pub(crate) handler: ActorId,
    pub(crate) outbox_id: Uuid,
    pub(crate) result: Result<(), DeliveryFailure>,
    pub(crate) elapsed: Duration,
}

/// One span per delivery attempt, the handler's own spans and events inside it. Named and
/// attributed after OpenTelemetry's messaging conventions (a `process` operation of a
/// consumer: `messaging.*`, `error.type`), with the relay's own `lane`, `target`,
/// `outbox_id`, `attempt` and `outcome` (`delivered`, or the failure kind) beside them, so
/// a plain log subscriber shows them too. At INFO level, so `RUST_LOG=info` keeps it
/// for a trace exporter while the fmt subscriber prints nothing for it unless asked to
/// log span events.
fn delivery_span(message: &OutboxMessage) -> tracing::Span {
    // A root unless the message's trace context makes it a child (`trace_context::adopt`):
    // never a child of ractor's `Actor{…}` span, which lasts as long as the actor.
    tracing::info_span!(
        parent: None,
        "outbox.deliver",
        otel.name = %format_args!("process {}/{}", message.lane, message.target),
        otel.kind = "consumer",
        messaging.system = "outbox",
        messaging.operation.type = "process",
        messaging.destination.name = %format_args!("{}/{}", message.lane, message.target),
        messaging.message.id = %message.outbox_id,
        lane = %message.lane,
        target = %message.target,
        outbox_id = %message.outbox_id,
        attempt = message.attempt_count,
        outcome = tracing::field::Empty,
        error.type = tracing::field::Empty,
    )
}

pub(crate) enum HandlerMsg {
    Deliver(Box<OutboxMessage>),
}

pub(crate) struct HandlerActor;

pub(crate) struct HandlerArgs {
    pub(crate) handler: Arc<dyn DeliveryHandler>,
    pub(crate) lane: DerivedActorRef<DeliveryReport>,
    pub(crate) timeout: Duration,
}

impl Actor for HandlerActor {
    type Msg = HandlerMsg;
    type State = HandlerArgs;
    type Arguments = HandlerArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: HandlerArgs,
    ) -> Result<HandlerArgs, ActorProcessingErr> {
        Ok(args)
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: HandlerMsg,
        state: &mut HandlerArgs,
    ) -> Result<(), ActorProcessingErr> {
        let HandlerMsg::Deliver(message) = message;
        let span = delivery_span(&message);
        // With feature `otel`: a child of the context the enqueue wrote into the headers.
        crate::trace_context::adopt(&span, &message);
        let started = Instant::now();
        let answer = tokio::time::timeout(
            state.timeout,
            state.handler.deliver(&message).instrument(span.clone()),
        )
        .await
        .ok();
        let result = within_timeout(state.timeout, answer);
        span.record(
            "outcome",
            match &result {
                Ok(()) => "delivered",
                Err(failure) => failure.kind.as_str(),
            },
        );
        if let Err(failure) = &result {
            span.record("error.type", failure.kind.as_str());
        }
        drop(span);
        // The lane may have stopped meanwhile (shutdown, crash); then the claim lapses or
        // was released, and there is nobody left to tell.
        let _ = state.lane.send_message(DeliveryReport {
            handler: myself.get_id(),
            outbox_id: message.outbox_id,
            result,
            elapsed: started.elapsed(),
        });
        Ok(())
    }
}

#[cfg(all(test, feature = "cli"))]
mod tests {

    use serde_json::json;

    use crate::delivery::DeliveryError;
    use crate::lane::RelayEvent;
    use crate::{InMemoryOutboxStore, LaneConfig, Outbox, OutboxMessageDraft, OutboxRelay};

    use super::*;

    struct Refuses;

    #[async_trait::async_trait]
    impl DeliveryHandler for Refuses {
        async fn deliver(&self, message: &OutboxMessage) -> Result<(), DeliveryError> {
            tracing::info!("inside the handler");
            if message.payload.to_value().is_ok_and(|v| v["ok"] == true) {
                Ok(())
            } else {
                Err(DeliveryError::permanent(std::io::Error::other("refused")))
            }
        }
    }

    /// Current-thread: the actors run on this thread, under this thread's subscriber.
    #[tokio::test(flavor = "current_thread")]
    async fn each_delivery_runs_in_a_span_with_lane_target_id_attempt_and_outcome() {
        let (captured, _default) = crate::captured_log::capture_spans();

        let store = Outbox::new(InMemoryOutboxStore::new());
        let relay = OutboxRelay::builder(&store)
            .lane(LaneConfig::new("orders", "audit"), Refuses)
            .start()
            .await
            .expect("start");
        let mut events = relay.subscribe();
        let ok = store
            .enqueue(OutboxMessageDraft::new("orders", "audit", json!({ "ok": true })).unwrap())
            .await
            .unwrap()
            .message
            .outbox_id;
        let refused = store
            .enqueue(
                OutboxMessageDraft::new("orders", "audit", json!({ "ok": false }))
                    .unwrap()
                    .with_max_attempts(1),
            )
            .await
            .unwrap()
            .message
            .outbox_id;
        let mut settled = 0;
        tokio::time::timeout(Duration::from_secs(60), async {
            while settled < 2 {
                match events.recv().await {
                    Ok(RelayEvent::Delivered { .. } | RelayEvent::Failed { .. }) => settled += 1,
                    Ok(_) => {}
                    Err(error) => panic!("events: {error}"),
                }
            }
        })
        .await
        .expect("both deliveries settle");
        relay
            .shutdown(Duration::from_secs(10))
            .await
            .expect("shutdown");

        let text = String::from_utf8_lossy(&captured.0.lock().unwrap()).into_owned();
        let closed = |id: uuid::Uuid| {
            text.lines()
                .find(|line| line.contains(&format!("outbox_id={id}")) && line.contains("close"))
                .unwrap_or_else(|| panic!("no closed span for {id} in\n{text}"))
                .to_owned()
        };
        let line = closed(ok);
        for field in [
            "outbox.deliver{",
            "lane=orders",
            "target=audit",
            "attempt=1",
            "messaging.system=\"outbox\"",
            "outcome=\"delivered\"",
        ] {
            assert!(line.contains(field), "{field} missing from {line}");
        }
        let line = closed(refused);
        assert!(line.contains("outcome=\"permanent\""), "{line}");
        assert!(line.contains("error.type=\"permanent\""), "{line}");
        assert!(
            text.lines()
                .any(|l| l.contains("outbox.deliver{") && l.contains("inside the handler")),
            "the handler's events are inside the span:\n{text}"
        );
    }
}
