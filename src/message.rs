//! The outbox message: the draft a service writes, the row a store keeps, and the rules a
//! draft must pass before anything is written (those in `message/validation.rs`).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

mod payload;
#[cfg(test)]
mod tests;
mod validation;

pub use payload::Payload;
pub(crate) use validation::validate_name;
pub use validation::{DraftLimits, ValidationError};

pub use crate::time::UnixMillis;

/// How many attempts a draft gets when it does not say.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;
/// The largest payload a store accepts unless configured otherwise (1 MiB of JSON text).
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 1024 * 1024;
/// The longest lane or target name. They become metric labels, so they stay short.
pub const MAX_NAME_LEN: usize = 64;
/// The longest ordering or dedupe key.
pub const MAX_KEY_LEN: usize = 256;
/// The longest header name.
pub const MAX_HEADER_NAME_LEN: usize = 128;
/// The longest header value, in bytes (headers also count toward the message size limit).
pub const MAX_HEADER_VALUE_LEN: usize = 8 * 1024;
/// The most headers a message may carry.
pub const MAX_HEADERS: usize = 64;

/// A message a service wants delivered: written in the same transaction as its business rows.
///
/// Fields are public so a draft can be adjusted in place; every store validates the whole
/// draft again on enqueue, so a draft made invalid after [`OutboxMessageDraft::new`] is still
/// refused before anything is written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutboxMessageDraft {
    /// The lane: a stream of messages with its own relay (e.g. `orders`).
    pub lane: String,
    /// Who hears about it (e.g. `billing`). A lane's messages are relayed per (lane, target).
    pub target: String,
    /// The message body, as the exact JSON text that is stored and delivered.
    pub payload: Payload,
    /// Headers handed to the target with the payload.
    pub headers: BTreeMap<String, String>,
    /// Messages with the same key (within a lane and target) are delivered one at a time,
    /// in enqueue order.
    pub ordering_key: Option<String>,
    /// Enqueuing a draft with a key already used in its (lane, target) returns the first
    /// message instead of writing a second, for as long as the first message's row exists:
    /// once it is gone (deleted at its ack on a lane with `keep_delivered = false`, purged
    /// by retention, discarded) the key is forgotten, and the same draft enqueued again is
    /// a second message with a new `outbox_id`, delivered again.
    pub dedupe_key: Option<String>,
    /// Deliver no sooner than this long after enqueue.
    pub delay: Duration,
    /// After this many failed attempts the message is dead-lettered.
    pub max_attempts: u32,
}

impl OutboxMessageDraft {
    /// A draft for `lane` and `target` with a `serde_json::Value` payload (stored in its
    /// compact form), default attempts and no keys. To keep bytes exactly as they are (big
    /// integers, key order, duplicate keys), use [`OutboxMessageDraft::from_json`].
    ///
    /// ```
    /// use outbox_relay::OutboxMessageDraft;
    /// let draft = OutboxMessageDraft::new("orders", "billing", serde_json::json!({"id": 7}))?
    ///     .with_ordering_key("customer-42")
    ///     .with_header("content-type", "application/json");
    /// assert_eq!(draft.max_attempts, 5);
    /// # Ok::<(), outbox_relay::message::ValidationError>(())
    /// ```
    pub fn new(
        lane: impl Into<String>,
        target: impl Into<String>,
        payload: serde_json::Value,
    ) -> Result<Self, ValidationError> {
        Self::from_payload(lane, target, Payload::from_value(&payload)?)
    }

    /// A draft whose payload is the JSON text `json`, delivered byte for byte. The text must
    /// be one well-formed JSON value; if not, the error names `payload`.
    ///
    /// ```
    /// use outbox_relay::OutboxMessageDraft;
    /// let draft = OutboxMessageDraft::from_json("orders", "billing", r#"{"id":18446744073709551616}"#)?;
    /// assert_eq!(draft.payload.as_str(), r#"{"id":18446744073709551616}"#);
    /// # Ok::<(), outbox_relay::message::ValidationError>(())
    /// ```
    pub fn from_json(
        lane: impl Into<String>,
        target: impl Into<String>,
        json: impl Into<String>,
    ) -> Result<Self, ValidationError> {
        Self::from_payload(lane, target, Payload::from_json(json)?)
    }

    /// A draft whose payload is `value` serialised with `serde_json`.
    pub fn from_serialize<T: Serialize + ?Sized>(
        lane: impl Into<String>,
        target: impl Into<String>,
        value: &T,
    ) -> Result<Self, ValidationError> {
        Self::from_payload(lane, target, Payload::from_serialize(value)?)
    }

    /// A draft carrying `payload` as it is.
    pub fn from_payload(
        lane: impl Into<String>,
        target: impl Into<String>,
        payload: Payload,
    ) -> Result<Self, ValidationError> {
        let draft = Self {
            lane: lane.into(),
            target: target.into(),
            payload,
            headers: BTreeMap::new(),
            ordering_key: None,
            dedupe_key: None,
            delay: Duration::ZERO,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
        };
        validate_name("lane", &draft.lane)?;
        validate_name("target", &draft.target)?;
        Ok(draft)
    }

    /// Adds a header.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }

    /// Sets the ordering key.
    pub fn with_ordering_key(mut self, key: impl Into<String>) -> Self {
        self.ordering_key = Some(key.into());
        self
    }

    /// Sets the dedupe key: one message per key and (lane, target) while that message's
    /// row exists (see [`OutboxMessageDraft::dedupe_key`]).
    pub fn with_dedupe_key(mut self, key: impl Into<String>) -> Self {
        self.dedupe_key = Some(key.into());
        self
    }

    /// Delays the first delivery.
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Sets how many attempts the message gets.
    pub fn with_max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    /// Whether `message` was written from a draft with the same content: the test dedupe
    /// uses to tell a harmless retry of an enqueue from a conflicting reuse of a key. The
    /// payloads must match byte for byte, since those bytes are what gets delivered.
    /// The trace context headers (`traceparent`, `tracestate`) are not compared: the same
    /// draft enqueued again from another trace is still the same message.
    pub fn matches(&self, message: &OutboxMessage) -> bool {
        self.lane == message.lane
            && self.target == message.target
            && self.payload == message.payload
            && same_headers(&self.headers, &message.headers)
            && self.ordering_key == message.ordering_key
            && self.dedupe_key == message.dedupe_key
            && self.max_attempts == message.max_attempts
    }
}

/// The W3C `traceparent` header ([`crate::trace_context`] writes it into drafts).
pub const TRACEPARENT: &str = "traceparent";
/// The W3C `tracestate` header.
pub const TRACESTATE: &str = "tracestate";

/// Whether `name` is one of the trace context headers.
pub(crate) fn is_trace_header(name: &str) -> bool {
    name.eq_ignore_ascii_case(TRACEPARENT) || name.eq_ignore_ascii_case(TRACESTATE)
}

/// Headers equal but for the trace context ones.
fn same_headers(a: &BTreeMap<String, String>, b: &BTreeMap<String, String>) -> bool {
    let outside = |headers: &'_ BTreeMap<String, String>| {
        headers
            .iter()
            .filter(|(name, _)| !is_trace_header(name))
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect::<Vec<_>>()
    };
    outside(a) == outside(b)
}

/// Where a message is in its life. See [`crate::store`] for who moves it and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutboxStatus {
    /// Waiting to be claimed once due.
    Pending,
    /// Held by a relay under a lease.
    Claimed,
    /// Acked by the relay that held it: done.
    Delivered,
    /// Gave up: a permanent failure, or out of attempts. An operator may requeue it.
    DeadLetter,
}

impl OutboxStatus {
    /// Every status, in life order.
    pub const ALL: [OutboxStatus; 4] = [
        OutboxStatus::Pending,
        OutboxStatus::Claimed,
        OutboxStatus::Delivered,
        OutboxStatus::DeadLetter,
    ];

    /// The snake_case word stored in the database and printed by the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            OutboxStatus::Pending => "pending",
            OutboxStatus::Claimed => "claimed",
            OutboxStatus::Delivered => "delivered",
            OutboxStatus::DeadLetter => "dead_letter",
        }
    }
}

impl fmt::Display for OutboxStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for OutboxStatus {
    type Err = ValidationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        OutboxStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| {
                ValidationError::new(
                    "status",
                    format!("{s:?} is not one of pending, claimed, delivered, dead_letter"),
                )
            })
    }
}

/// One claim: the message and the fencing token that proves the claim is still held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClaimRef {
    /// The message.
    pub outbox_id: Uuid,
    /// The token handed out by the claim.
    pub claim_token: Uuid,
}

/// A message as the store keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutboxMessage {
    /// The message's id (UUID v7). Targets use it as the idempotency key.
    pub outbox_id: Uuid,
    /// The enqueue sequence: a strict total order of messages in one store.
    pub seq: i64,
    /// The lane.
    pub lane: String,
    /// The target.
    pub target: String,
    /// The message body, as the exact JSON text that is stored and delivered.
    pub payload: Payload,
    /// Headers handed to the target.
    pub headers: BTreeMap<String, String>,
    /// The ordering key, if any.
    pub ordering_key: Option<String>,
    /// The dedupe key, if any.
    pub dedupe_key: Option<String>,
    /// Where the message is in its life.
    pub status: OutboxStatus,
    /// How many times it has been claimed (released claims are not counted).
    pub attempt_count: u32,
    /// After this many attempts it is dead-lettered.
    pub max_attempts: u32,
    /// When it is (or was) due for its next claim. In JSON, RFC 3339 (as every timestamp
    /// here: see [`UnixMillis`]).
    pub available_at: UnixMillis,
    /// The consumer holding the claim, while claimed.
    pub claimed_by: Option<String>,
    /// The fencing token of the current claim, while claimed.
    pub claim_token: Option<Uuid>,
    /// When the current claim's lease lapses, while claimed.
    #[serde(default)]
    pub lease_expires_at: Option<UnixMillis>,
    /// The last failure, kept after retries and in the dead letter.
    pub last_error: Option<String>,
    /// When it was enqueued.
    pub created_at: UnixMillis,
    /// When it last changed.
    pub updated_at: UnixMillis,
    /// When it was acked.
    #[serde(default)]
    pub delivered_at: Option<UnixMillis>,
}

impl OutboxMessage {
    /// The row a store writes for `draft`: pending, due after the draft's delay from `now`.
    pub fn pending(draft: OutboxMessageDraft, outbox_id: Uuid, seq: i64, now: UnixMillis) -> Self {
        Self {
            outbox_id,
            seq,
            available_at: now.saturating_add(draft.delay),
            lane: draft.lane,
            target: draft.target,
            payload: draft.payload,
            headers: draft.headers,
            ordering_key: draft.ordering_key,
            dedupe_key: draft.dedupe_key,
            status: OutboxStatus::Pending,
            attempt_count: 0,
            max_attempts: draft.max_attempts,
            claimed_by: None,
            claim_token: None,
            lease_expires_at: None,
            last_error: None,
            created_at: now,
            updated_at: now,
            delivered_at: None,
        }
    }

    /// The (id, token) pair that acks, nacks, extends or releases this claim, if claimed.
    pub fn claim(&self) -> Option<ClaimRef> {
        self.claim_token.map(|token| ClaimRef {
            outbox_id: self.outbox_id,
            claim_token: token,
        })
    }
}
