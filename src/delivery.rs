//! `DeliveryHandler`: the extension point where a message meets its target, and
//! `DeliveryError`, which tells the relay whether to retry.

use std::time::Duration;

use async_trait::async_trait;

use crate::message::OutboxMessage;

/// A boxed error from a user's handler.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Hands a message to its target (a broker, a webhook, a projector).
///
/// Delivery is at least once: the same message may be handed over again after a crash or a
/// lapsed lease, so targets should use `message.outbox_id` as the idempotency key.
#[async_trait]
pub trait DeliveryHandler: Send + Sync + 'static {
    /// Delivers one message. `Ok` acks it; an error nacks it as the error says.
    async fn deliver(&self, message: &OutboxMessage) -> Result<(), DeliveryError>;
}

/// Why a delivery failed, and what the relay should do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeliveryError {
    /// A transient failure: retry after the policy's backoff.
    #[error("{0}")]
    Retryable(BoxError),
    /// The message can never be delivered: dead-letter it now.
    #[error("permanent: {0}")]
    Permanent(BoxError),
    /// The target asked to be left alone for a while: retry, no sooner than `after`.
    #[error("retry after {after:?}: {source}")]
    RetryAfter {
        /// The floor of the next backoff.
        after: Duration,
        /// What the target said.
        source: BoxError,
    },
}

impl DeliveryError {
    /// A transient failure with a message.
    pub fn retryable(error: impl Into<BoxError>) -> Self {
        DeliveryError::Retryable(error.into())
    }

    /// A permanent failure with a message.
    pub fn permanent(error: impl Into<BoxError>) -> Self {
        DeliveryError::Permanent(error.into())
    }

    /// A failure the target wants retried no sooner than `after`.
    pub fn retry_after(after: Duration, error: impl Into<BoxError>) -> Self {
        DeliveryError::RetryAfter {
            after,
            source: error.into(),
        }
    }

    /// Whether the message should be dead-lettered without further attempts.
    pub fn is_permanent(&self) -> bool {
        matches!(self, DeliveryError::Permanent(_))
    }

    /// The target's requested floor for the next delay, if any.
    pub fn retry_after_hint(&self) -> Option<Duration> {
        match self {
            DeliveryError::RetryAfter { after, .. } => Some(*after),
            _ => None,
        }
    }
}
