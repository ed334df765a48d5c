//! `DeliveryHandler`: the extension point where a message meets its target, and
//! `DeliveryError`, which tells the relay whether to retry. [`handler_fn`] makes a handler
//! of a closure; [`DeliveryResultExt`] turns any error into a `DeliveryError` with `?`.

use std::fmt;
use std::future::Future;
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

    /// The handler's own limit on one delivery and the setting that sets it (the Kafka
    /// sink's `("message_timeout", 15 s)`): the relay refuses a lane whose
    /// `delivery_timeout` is not longer, since it would give up on a call before the
    /// handler learns its outcome. `None` (the default): no limit of its own.
    fn own_timeout(&self) -> Option<(&'static str, Duration)> {
        None
    }
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

crate::named::label_values! {
    /// Why a delivery attempt failed: the value of [`crate::metrics::LABEL_KIND`].
    pub enum FailureKind {
        /// The handler returned `DeliveryError::Retryable`.
        Retryable => "retryable",
        /// The handler returned `DeliveryError::Permanent`.
        Permanent => "permanent",
        /// The handler returned `DeliveryError::RetryAfter`.
        RetryAfter => "retry_after",
        /// The handler did not finish within the delivery timeout.
        Timeout => "timeout",
        /// The handler panicked.
        Panic => "panic",
    }
}

impl From<&DeliveryError> for FailureKind {
    fn from(error: &DeliveryError) -> Self {
        match error {
            DeliveryError::Retryable(_) => FailureKind::Retryable,
            DeliveryError::Permanent(_) => FailureKind::Permanent,
            DeliveryError::RetryAfter { .. } => FailureKind::RetryAfter,
        }
    }
}

/// A boxed error is a retryable failure, so `?` works on `Result<_, BoxError>` in a handler.
impl From<BoxError> for DeliveryError {
    fn from(error: BoxError) -> Self {
        DeliveryError::Retryable(error)
    }
}

/// Says how any failed `Result` should be retried, so a handler can use `?` on it.
///
/// A blanket `impl<E: Error> From<E> for DeliveryError` cannot exist (`DeliveryError` is an
/// error itself, and it would overlap `From<T> for T`), so the choice is spelled at the
/// call: `.retryable()?` for what may pass (a timeout, a refused connection),
/// `.permanent()?` for what never will (a payload the target rejects).
///
/// ```
/// use outbox_relay::delivery::{DeliveryError, DeliveryResultExt};
/// use outbox_relay::OutboxMessage;
///
/// #[derive(serde::Deserialize)]
/// struct Order {
///     id: u64,
/// }
///
/// async fn deliver(message: &OutboxMessage) -> Result<(), DeliveryError> {
///     let order: Order = message.payload.deserialize().permanent()?;
///     let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
///     let _socket = tokio::net::TcpStream::connect(addr).await.retryable()?;
///     # let _ = order.id;
///     Ok(())
/// }
/// ```
pub trait DeliveryResultExt<T> {
    /// An error becomes [`DeliveryError::Retryable`].
    fn retryable(self) -> Result<T, DeliveryError>;
    /// An error becomes [`DeliveryError::Permanent`].
    fn permanent(self) -> Result<T, DeliveryError>;
}

impl<T, E: Into<BoxError>> DeliveryResultExt<T> for Result<T, E> {
    fn retryable(self) -> Result<T, DeliveryError> {
        self.map_err(DeliveryError::retryable)
    }

    fn permanent(self) -> Result<T, DeliveryError> {
        self.map_err(DeliveryError::permanent)
    }
}

/// A [`DeliveryHandler`] made of a closure; see [`handler_fn`].
pub struct HandlerFn<F> {
    deliver: F,
}

impl<F> fmt::Debug for HandlerFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerFn").finish_non_exhaustive()
    }
}

/// A handler from an async closure that takes the message by value (each delivery gets its
/// own clone, so the future borrows nothing and may be spawned).
///
/// ```
/// use outbox_relay::delivery::{handler_fn, DeliveryResultExt};
/// use outbox_relay::LaneConfig;
/// # fn demo(builder: outbox_relay::relay::RelayBuilder) -> outbox_relay::relay::RelayBuilder {
/// let http = std::sync::Arc::new(String::from("a client shared by every delivery"));
/// builder.lane(
///     LaneConfig::new("orders", "billing"),
///     handler_fn(move |message| {
///         let http = http.clone();
///         async move {
///             let order: serde_json::Value = message.payload.deserialize().permanent()?;
///             println!("{http}: {order}");
///             Ok(())
///         }
///     }),
/// )
/// # }
/// ```
pub fn handler_fn<F, Fut>(deliver: F) -> HandlerFn<F>
where
    F: Fn(OutboxMessage) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), DeliveryError>> + Send + 'static,
{
    HandlerFn { deliver }
}

#[async_trait]
impl<F, Fut> DeliveryHandler for HandlerFn<F>
where
    F: Fn(OutboxMessage) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), DeliveryError>> + Send + 'static,
{
    async fn deliver(&self, message: &OutboxMessage) -> Result<(), DeliveryError> {
        (self.deliver)(message.clone()).await
    }
}

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

/// How a delivery ends under the handler's `timeout`: the handler's answer when it came
/// within it (`answer`), else (`None`: the deadline passed first, and the delivery's future
/// was dropped) a retryable timeout failure, so the message is retried. The handler actor
/// and the simulation (`sim::world::target`) both end deliveries through this.
pub(crate) fn within_timeout(
    timeout: Duration,
    answer: Option<Result<(), DeliveryError>>,
) -> Result<(), DeliveryFailure> {
    match answer {
        Some(Ok(())) => Ok(()),
        Some(Err(error)) => Err(DeliveryFailure::from_error(&error)),
        None => Err(DeliveryFailure::timeout(timeout)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::UnixMillis;
    use crate::OutboxMessageDraft;

    fn message() -> OutboxMessage {
        let draft = OutboxMessageDraft::from_json("orders", "billing", r#"{"order":42}"#)
            .expect("a valid draft");
        OutboxMessage::pending(draft, uuid::Uuid::now_v7(), 1, UnixMillis::EPOCH)
    }

    #[tokio::test]
    async fn a_closure_handler_sees_the_message_and_its_answer_is_the_handlers() {
        let handler = handler_fn(|message: OutboxMessage| async move {
            match message.payload.as_str() {
                r#"{"order":42}"# => Err(DeliveryError::permanent("order 42 is refused")),
                other => Err(DeliveryError::retryable(format!("unexpected {other}"))),
            }
        });
        let answer = handler.deliver(&message()).await;
        assert!(
            matches!(&answer, Err(e) if e.is_permanent() && e.to_string().contains("order 42")),
            "{answer:?}"
        );
    }

    #[test]
    fn the_extension_trait_says_retryable_or_permanent() {
        let io = || -> Result<(), std::io::Error> { Err(std::io::ErrorKind::TimedOut.into()) };
        let retryable = io().retryable().unwrap_err();
        assert!(
            matches!(retryable, DeliveryError::Retryable(_)),
            "{retryable:?}"
        );
        let permanent = io().permanent().unwrap_err();
        assert!(permanent.is_permanent(), "{permanent:?}");
        assert_eq!(
            io().retryable().map_err(|e| e.to_string()),
            Err("timed out".into())
        );

        let boxed: BoxError = "refused".into();
        let from_box = DeliveryError::from(boxed);
        assert!(
            matches!(from_box, DeliveryError::Retryable(_)),
            "{from_box:?}"
        );
    }
}
