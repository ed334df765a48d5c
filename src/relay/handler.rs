//! `HandlerActor`: runs one `DeliveryHandler::deliver` at a time, under a timeout.
//!
//! Each delivery runs inside the actor's `handle`, so a handler that panics fails this actor
//! and nothing else: the lane relay (its supervisor) sees the failure, nacks the message it
//! was delivering and spawns a fresh handler actor.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, DerivedActorRef};
use uuid::Uuid;

use crate::delivery::{DeliveryError, DeliveryHandler};
use crate::message::OutboxMessage;
use crate::metrics::FailureKind;

/// Why a delivery did not succeed, reduced to what the lane needs to nack it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeliveryFailure {
    pub(crate) kind: FailureKind,
    pub(crate) error: String,
    pub(crate) permanent: bool,
    pub(crate) retry_after: Option<Duration>,
}

impl DeliveryFailure {
    pub(crate) fn from_error(error: &DeliveryError) -> Self {
        Self {
            kind: FailureKind::from(error),
            error: error.to_string(),
            permanent: error.is_permanent(),
            retry_after: error.retry_after_hint(),
        }
    }

    pub(crate) fn timeout(after: Duration) -> Self {
        Self {
            kind: FailureKind::Timeout,
            error: format!("delivery timed out after {after:?}"),
            permanent: false,
            retry_after: None,
        }
    }

    pub(crate) fn panic(text: &str) -> Self {
        Self {
            kind: FailureKind::Panic,
            error: format!("handler panicked: {text}"),
            permanent: false,
            retry_after: None,
        }
    }
}

/// What a handler tells whoever gave it the message: which delivery finished, and how.
/// Its own type, so a handler does not know its lane's message type (the lane converts it).
#[derive(Debug)]
pub(crate) struct DeliveryReport {
    pub(crate) handler: ActorId,
    pub(crate) outbox_id: Uuid,
    pub(crate) result: Result<(), DeliveryFailure>,
    pub(crate) elapsed: Duration,
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
        let started = Instant::now();
        let result =
            match tokio::time::timeout(state.timeout, state.handler.deliver(&message)).await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(error)) => Err(DeliveryFailure::from_error(&error)),
                Err(_) => Err(DeliveryFailure::timeout(state.timeout)),
            };
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
