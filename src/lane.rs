//! The lane's words: which lane ([`LaneKey`]), what its relay is doing ([`LaneState`]),
//! its circuit breaker's state ([`BreakerState`]), the claim gate that holds it back
//! ([`GateKind`]), what it reports as it runs ([`RelayEvent`]) and what draining it did
//! ([`DrainReport`]). The configuration names lanes with them, the relay's lane core,
//! actors and status speak them, and the metrics label with them; they live here, below
//! all of those, so that none of them needs `relay`'s public face or actors for its words.
//! Reached as `outbox_relay::relay::{LaneKey, RelayEvent, ...}` and
//! `outbox_relay::RelayEvent`.

use std::fmt;
use std::time::Duration;

use uuid::Uuid;

use crate::delivery::FailureKind;
use crate::store::{NackOutcome, StoreOp, UnreadableRow};

crate::named::label_values! {
    /// What a lane relay is doing: the value of [`LABEL_STATE`](crate::metrics::LABEL_STATE) on
    /// [`LANE_STATE`](crate::metrics::LANE_STATE).
    #[derive(serde::Serialize)]
    #[serde(rename_all = "snake_case")]
    pub enum LaneState {
        /// Claiming and delivering.
        Running => "running",
        /// Paused by a command: claims nothing, keeps its configuration.
        Paused => "paused",
        /// Being removed: claims nothing new, finishes what it holds.
        Draining => "draining",
        /// Crashed; the supervisor restarts it after a backoff.
        Restarting => "restarting",
        /// Restarted too often within the window: stays down until an operator acts.
        Failed => "failed",
        /// Stopped on purpose (shutdown or removal).
        Stopped => "stopped",
    }
}

crate::named::label_values! {
    /// A circuit breaker's state: the value of the `state` label on
    /// `outbox_breaker_state` ([`crate::metrics::BREAKER_STATE`]).
    #[derive(serde::Serialize)]
    #[serde(rename_all = "snake_case")]
    pub enum BreakerState {
        /// The target answers: claims go on.
        Closed => "closed",
        /// The target kept failing: no claims until the cool-down ends.
        Open => "open",
        /// The cool-down ended: one probe message is out; its outcome closes or re-opens.
        HalfOpen => "half_open",
    }
}

crate::named::label_values! {
    /// The claim gate that held a lane back: the value of the `gate` label on
    /// `outbox_throttled_seconds` ([`crate::metrics::THROTTLED_SECONDS`]).
    #[derive(serde::Serialize)]
    #[serde(rename_all = "snake_case")]
    pub enum GateKind {
        /// The rate limit's tokens ran out.
        RateLimit => "rate_limit",
        /// The circuit breaker is open or waits for its probe.
        Breaker => "breaker",
        /// A target's Retry-After holds the lane.
        RetryAfter => "retry_after",
    }
}

/// Names one lane: a lane is always a (name, target) pair, relayed by its own lane relay
/// with its own [`LaneConfig`](crate::LaneConfig). Displayed as `name/target`.
///
/// Its `name` is the `lane` its messages are written with (the draft's and the store's
/// field); a name with two targets is two lanes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct LaneKey {
    /// The lane's name: the `lane` of its messages. (Serialized as `lane`, its name in the
    /// status JSON and the metrics labels.)
    #[serde(rename = "lane")]
    pub name: String,
    /// The target.
    pub target: String,
}

impl LaneKey {
    /// The lane of messages written with lane name `name`, delivered to `target`.
    pub fn new(name: impl Into<String>, target: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            target: target.into(),
        }
    }
}

impl fmt::Display for LaneKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.name, self.target)
    }
}

/// What draining a lane did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct DrainReport {
    /// Deliveries that finished while draining.
    pub completed: usize,
    /// Claims handed back to the store unfinished (deliveries abandoned at the timeout):
    /// due at once for any relay, the attempt not counted.
    pub released: usize,
    /// Finished deliveries whose ack or nack the store did not record by the deadline
    /// (it was down or too slow). Their claims lapse with their leases and the messages are
    /// delivered again.
    pub unrecorded: usize,
    /// Unfinished deliveries whose claims the store would not take back at the deadline.
    /// They lapse with their leases and the messages are delivered again then.
    pub unreleased: usize,
    /// The lane did not finish draining by the deadline (a store call hung, or the lane
    /// crashed while draining) and was stopped. What it still held lapses with its leases
    /// and is delivered again; how much is unknown.
    pub abandoned: bool,
}

impl DrainReport {
    /// Whether every finished delivery was recorded and every unfinished claim handed back:
    /// nothing of this lane will be delivered again because of the shutdown.
    pub fn is_clean(&self) -> bool {
        self.unrecorded == 0 && self.unreleased == 0 && !self.abandoned
    }
}

/// Something that happened in the relay. Subscribe with
/// [`RelayHandle::subscribe`](crate::relay::RelayHandle::subscribe): tests wait on these instead of
/// sleeping, and services may log or count them.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RelayEvent {
    /// A lane relay incarnation started.
    LaneStarted {
        /// The lane.
        lane: LaneKey,
        /// 1 for the first start, +1 for each restart.
        incarnation: u64,
    },
    /// A claim returned messages.
    Claimed {
        /// The lane.
        lane: LaneKey,
        /// The messages claimed.
        outbox_ids: Vec<Uuid>,
        /// How many of them had been claimed before (redeliveries).
        redeliveries: usize,
    },
    /// A claim found lapsed leases with no attempts left and dead-lettered them.
    LeaseLapsedDeadLettered {
        /// The lane.
        lane: LaneKey,
        /// The dead-lettered messages.
        outbox_ids: Vec<Uuid>,
    },
    /// A claim took rows it could not read back into messages and dead-lettered each alone
    /// (see [`ClaimBatch::unreadable`](crate::store::ClaimBatch::unreadable)); the rows
    /// read beside them were handed out as usual.
    UnreadableDeadLettered {
        /// The lane.
        lane: LaneKey,
        /// The dead-lettered rows, each with why it cannot be read.
        rows: Vec<UnreadableRow>,
    },
    /// A delivery succeeded and its ack was recorded.
    Delivered {
        /// The lane.
        lane: LaneKey,
        /// The message.
        outbox_id: Uuid,
        /// Which attempt delivered it.
        attempt: u32,
        /// How long the handler took.
        duration: Duration,
        /// From enqueue to ack, by the store's timestamps and this machine's clock.
        end_to_end: Duration,
    },
    /// A delivery failed and its nack was recorded.
    Failed {
        /// The lane.
        lane: LaneKey,
        /// The message.
        outbox_id: Uuid,
        /// Why it failed.
        kind: FailureKind,
        /// How long the attempt ran.
        duration: Duration,
        /// Requeued or dead-lettered.
        outcome: NackOutcome,
        /// The error text stored as `last_error`.
        error: String,
    },
    /// A target asked for a `Retry-After` longer than the lane's
    /// [`retry_after_max`](crate::LaneConfig::retry_after_max): the message is retried at
    /// the ceiling instead, so one answer cannot park it (and its ordering key) for longer.
    RetryAfterClamped {
        /// The lane.
        lane: LaneKey,
        /// The message.
        outbox_id: Uuid,
        /// What the target asked for.
        asked: Duration,
        /// What the lane honoured: its `retry_after_max`.
        ceiling: Duration,
    },
    /// An ack or nack found the claim gone: another relay holds the message now.
    LostClaim {
        /// The lane.
        lane: LaneKey,
        /// The message.
        outbox_id: Uuid,
    },
    /// Leases of deliveries still running were extended.
    LeaseExtended {
        /// The lane.
        lane: LaneKey,
        /// How many claims.
        count: usize,
    },
    /// Leases of deliveries still running lapsed (extension off, or it failed).
    LeaseExpired {
        /// The lane.
        lane: LaneKey,
        /// The messages whose claims lapsed.
        outbox_ids: Vec<Uuid>,
    },
    /// A store call failed; the lane backs off and retries.
    StoreError {
        /// The lane.
        lane: LaneKey,
        /// The operation.
        op: StoreOp,
        /// The error.
        error: String,
        /// The store refuses for good ([`StoreError::is_permanent`](crate::StoreError::is_permanent)):
        /// permissions, a read-only database, a missing schema. Retrying cannot help.
        permanent: bool,
    },
    /// The lane found nothing to claim and sleeps until the store's next due time, a
    /// wake-up, or its poll ceiling.
    Idle {
        /// The lane.
        lane: LaneKey,
        /// How long it will sleep at most.
        sleep: Duration,
    },
    /// A lane relay crashed.
    LaneCrashed {
        /// The lane.
        lane: LaneKey,
        /// Why.
        error: String,
    },
    /// The supervisor will restart a crashed lane after a backoff.
    LaneRestarting {
        /// The lane.
        lane: LaneKey,
        /// Restarts within the current window, this one included.
        restarts: u32,
        /// The backoff before the restart.
        after: Duration,
    },
    /// A lane crashed too often and stays down.
    LaneFailed {
        /// The lane.
        lane: LaneKey,
        /// The last crash.
        error: String,
    },
    /// A lane changed state.
    LaneStateChanged {
        /// The lane.
        lane: LaneKey,
        /// Its new state.
        state: LaneState,
    },
    /// A lane's circuit breaker changed state: it opened (no claims for a cool-down),
    /// went half-open (one probe message), or closed (the probe was delivered).
    BreakerChanged {
        /// The lane.
        lane: LaneKey,
        /// Its new state.
        state: BreakerState,
        /// Why, for operators.
        reason: String,
    },
    /// A lane finished draining and stopped.
    LaneStopped {
        /// The lane.
        lane: LaneKey,
        /// What draining did.
        report: DrainReport,
    },
}

#[cfg(test)]
mod tests {
    /// `relay` records through `metrics`; `metrics` must not need `relay` back, or the two
    /// grow into one knot again.
    #[test]
    fn metrics_imports_nothing_of_relay() {
        for (file, text) in [
            ("metrics.rs", include_str!("metrics.rs")),
            ("metrics/lane.rs", include_str!("metrics/lane.rs")),
            ("metrics/process.rs", include_str!("metrics/process.rs")),
            (
                "metrics/prometheus.rs",
                include_str!("metrics/prometheus.rs"),
            ),
        ] {
            for (n, line) in text.lines().enumerate() {
                assert!(
                    !line.contains("crate::relay") && !line.contains("outbox_relay::relay"),
                    "src/{file}:{}: {line}",
                    n + 1
                );
            }
        }
    }

    /// The relay's public face and actors import the configuration, `delivery` and the pure
    /// lane core; none of those may import `relay` back for a word (they take it from here),
    /// or the relay, its configuration and its core grow into one circle again.
    #[test]
    fn config_delivery_and_lane_core_import_nothing_of_relay() {
        for (file, text) in [
            ("config.rs", include_str!("config.rs")),
            ("delivery.rs", include_str!("delivery.rs")),
            ("relay/lane/core.rs", include_str!("relay/lane/core.rs")),
            (
                "relay/lane/core/answers.rs",
                include_str!("relay/lane/core/answers.rs"),
            ),
            (
                "relay/lane/core/book.rs",
                include_str!("relay/lane/core/book.rs"),
            ),
            (
                "relay/lane/core/buffer.rs",
                include_str!("relay/lane/core/buffer.rs"),
            ),
            (
                "relay/lane/core/cadence.rs",
                include_str!("relay/lane/core/cadence.rs"),
            ),
            (
                "relay/lane/core/claim_loop.rs",
                include_str!("relay/lane/core/claim_loop.rs"),
            ),
            (
                "relay/lane/core/drain.rs",
                include_str!("relay/lane/core/drain.rs"),
            ),
            (
                "relay/lane/core/gate.rs",
                include_str!("relay/lane/core/gate.rs"),
            ),
            (
                "relay/lane/core/hand_off.rs",
                include_str!("relay/lane/core/hand_off.rs"),
            ),
            (
                "relay/lane/core/io.rs",
                include_str!("relay/lane/core/io.rs"),
            ),
            (
                "relay/lane/core/lease.rs",
                include_str!("relay/lane/core/lease.rs"),
            ),
            (
                "relay/lane/core/outcomes.rs",
                include_str!("relay/lane/core/outcomes.rs"),
            ),
            (
                "relay/lane/core/pool.rs",
                include_str!("relay/lane/core/pool.rs"),
            ),
            (
                "relay/lane/core/gate/breaker.rs",
                include_str!("relay/lane/core/gate/breaker.rs"),
            ),
            (
                "relay/lane/core/gate/rate.rs",
                include_str!("relay/lane/core/gate/rate.rs"),
            ),
        ] {
            for (n, line) in text.lines().enumerate() {
                assert!(
                    !(line.trim_start().starts_with("use ") && line.contains("crate::relay")),
                    "src/{file}:{}: {line}",
                    n + 1
                );
            }
        }
    }
}
