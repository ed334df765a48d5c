//! [`RelayEvent`]: what the relay reports as it runs, lane by lane. The lanes and the
//! supervisor send these; `observe.rs` turns them into metrics and counters.

use std::time::Duration;

use uuid::Uuid;

use crate::delivery::FailureKind;
use crate::store::StoreOp;
use crate::store::{NackOutcome, UnreadableRow};

use super::{BreakerState, DrainReport, LaneKey, LaneState};

/// Something that happened in the relay. Subscribe with
/// [`RelayHandle::subscribe`](super::RelayHandle::subscribe): tests wait on these instead of
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
