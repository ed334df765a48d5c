//! The store contract: every operation a relay, an admin tool or a service needs from the
//! outbox table, and the state machine every backend implements to the letter.
//!
//! # The state machine of a row
//!
//! ```text
//!             enqueue                claim (lease L)            ack (token matches)
//!   draft ─────────────▶ pending ─────────────────▶ claimed ─────────────────────▶ delivered
//!                          ▲   ▲                      │  │
//!           retry due      │   │ lease lapsed         │  │ nack, attempts < max
//!           (available_at) │   └──────────────────────┘  │ (available_at = now + delay)
//!                          └─────────────────────────────┘
//!                                                     │ nack permanent, or attempts >= max,
//!                                                     ▼ or lease lapsed with attempts >= max
//!                                                dead_letter ──(requeue, by an operator)──▶ pending
//! ```
//!
//! - **pending**: written by [`Outbox::enqueue`] (due after the draft's delay), by a
//!   retryable [`Outbox::nack`] (due after the retry delay), by
//!   [`Outbox::release`] (due now, the attempt not counted) and by
//!   [`Outbox::requeue_dead_letters`] (due now, attempts reset to zero). Left only by a
//!   claim.
//! - **claimed**: written by [`Outbox::claim`], which takes claimed rows whose lease
//!   lapsed first (in lapse order: they became claimable earliest, and their keys are
//!   blocked behind them), then pending rows that are due, by due time then enqueue
//!   sequence. It increments `attempt_count`, sets `claimed_by`, a fresh `claim_token` and
//!   `lease_expires_at`. Left by ack, nack, release (each only with the current token), by
//!   a later claim once the lease lapsed, or by that claim dead-lettering it when the lapsed
//!   claim had already used `max_attempts`.
//! - **delivered**: written by [`Outbox::ack`]; claim fields cleared, `delivered_at`
//!   set. Left only by [`Outbox::purge`].
//! - **dead_letter**: written by a permanent nack, a nack that used the last attempt, a
//!   claim that finds a lapsed lease with no attempts left (its `last_error` then says the
//!   lease lapsed), or a claim that took a row it cannot read back into a message (its
//!   `last_error` then starts with [`UNREADABLE_ROW_ERROR`]; see [`ClaimBatch::unreadable`]).
//!   Left by an operator's requeue or discard, or by purge.
//!
//! **Fencing.** ack, nack, extend_lease and release act only on a row that is `claimed` with
//! the same `claim_token`. Anything else is a lost claim: the answer says
//! [`ClaimOutcome::LostClaim`], the row is untouched, and no error is raised. A late ack from
//! a crashed or slow relay is therefore harmless.
//!
//! **Per-key order.** Within one (lane, target), a row with an ordering key is claimable only
//! while no earlier row (by enqueue sequence) of the same key is pending or claimed, and no
//! other row of the key is claimed under a lease that has not lapsed. So a key has at most
//! one claim in flight (even when an operator requeues an earlier dead letter while a later
//! message of its key is being delivered), and a retry of its head holds back only that key.
//! Under [`OrderingPolicy::Block`] an earlier dead-lettered row of the key also holds it back,
//! until an operator requeues or discards it; under [`OrderingPolicy::Skip`] it does not.
//!
//! **Key runs.** A claim with [`ClaimRequest::key_run`] `= n > 1` may hand out, with a due
//! pending head, up to `n - 1` of the messages queued right behind it: the key's next live
//! messages by sequence, each pending and already due, stopping at the first that is not
//! (or, under `Block`, at a dead letter in between). They follow their head in the answer,
//! in sequence order, share its lease and count towards the limit. The claimer must deliver
//! a run in order, each only after the one before it succeeded, and release what is left of
//! it when one fails. A lapsed claim comes alone. A store may hand out shorter runs, down
//! to none (heads only, as a store that ignores `key_run` does); the crate's stores hand
//! out exactly these, and the conformance cases (`testing/cases/runs.rs`) check it. Why runs: a key's message then costs what
//! a keyless one does (one claim write, one ack write), instead of waiting for its own claim
//! round trip behind each predecessor's ack, and of having the key's next head found and
//! marked after every ack: with many keys or a hot key that doubled a message's cost.
//!
//! **Claim order and cost.** A claim first dead-letters lapsed claims that used their last
//! attempt, then hands out lapsed claims (earliest lapse first: they became claimable before
//! any pending row still waiting, and their keys are blocked until they go), then due
//! pending rows by (due time, enqueue sequence), up to its limit. Only a key's head (its
//! first pending or claimed message) is ever a candidate. Every backend keeps the heads apart
//! from the rest of each key's queue rather than probing "is there an earlier row of this
//! key?" per candidate: with a probe, the claim's index walk still passes every row of a hot
//! key (100 000 rows of one key are 100 000 due rows to skip before the cold keys' heads),
//! so its cost would grow with the backlog. With a maintained head (a `key_head` mark kept
//! by triggers in SQLite and by the store's statements in PostgreSQL, per-key queues in
//! memory), the claim reads due heads in index order and stops at its limit; the only rows
//! it passes over are heads the rule holds back (a
//! key with another message in flight after a requeue, or under `Block` a dead head), one
//! per such key. `next_due`, the dead-lettering of lapsed last attempts and the stats read
//! the same indexes; the oldest pending age counts only messages already due.
//!
//! On PostgreSQL the mark is `key_head`, kept by enqueue, ack, nack and claim, and looked at
//! only to decide what is read: the probes (O(log n) each) decide what is handed out, so a
//! stray mark costs one skipped row, never a wrong claim. What must never happen is a key
//! with live rows and no marked head (stuck forever). The hard case is an enqueue in a
//! caller's long transaction that commits after its key's head was acked (sequence numbers
//! are taken at insert, not at commit, and the ack cannot see the uncommitted row): both
//! sides take a per-key advisory lock and only then look, in a statement of their own, so
//! whichever comes second sees what the first committed (details and the argument in
//! `src/store/postgres/schema/heads.rs`).
//!
//! **Clock.** Callers pass durations (a lease length, a retry delay), never instants; the
//! store reads its own clock, so relays on machines with skewed clocks agree.

use std::time::Duration;

use uuid::Uuid;

use crate::message::{ClaimRef, OutboxMessage};
pub use admin::{
    LaneCount, LaneStats, MessageFilter, Page, PageRequest, PurgeRequest, LIST_SCAN_PAGES,
};
#[cfg(any(test, feature = "simulate"))]
pub(crate) use backend::single_batch;
pub use backend::{AckMode, Capabilities, OutboxBackend};
pub use enqueue::{DraftBatch, PreClaim};
pub use error::StoreError;
pub use hook::{CallOutcome, StoreCall, StoreHook};
pub use key_state::{BlockedKey, BlockedKeys, KeyState};
pub use lane_control::{LanePause, LanePauseRequest, LANE_CONTROL_POLL};
pub use op::StoreOp;
pub use outbox::Outbox;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub use outbox::{CallerConn, CallerConnection};
pub use served::UnservedLane;

mod admin;
mod backend;
pub(crate) mod enqueue;
mod error;
pub mod hand_off;
mod hook;
pub mod key_state;
pub mod lane_control;
pub mod memory;
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub mod mysql;
mod op;
mod outbox;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
mod periodic;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub mod postgres;
pub mod served;
pub mod slow_log;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
mod sql;
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub mod sqlite;
mod unreadable;

pub use unreadable::UNREADABLE_ROW_ERROR;

/// What a dead-lettered head does to the rest of its ordering key.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum OrderingPolicy {
    /// The key moves on to its next message (the default).
    #[default]
    Skip,
    /// The key stays blocked until an operator requeues or discards the dead letter.
    Block,
}

/// The answer to an enqueue.
#[derive(Debug, Clone, PartialEq)]
pub struct Enqueued {
    /// The stored message: the new one, or the first one written with the same dedupe key.
    pub message: OutboxMessage,
    /// True when the dedupe key matched an existing message and nothing new was written.
    pub duplicate: bool,
}

/// A claim request for one (lane, target).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRequest {
    /// The lane to claim from.
    pub lane: String,
    /// The target to claim for.
    pub target: String,
    /// At most this many messages.
    pub limit: usize,
    /// How long the claim holds before another claimer may take the messages.
    pub lease: Duration,
    /// Who claims (written to `claimed_by`).
    pub consumer_id: String,
    /// What a dead-lettered head does to its key.
    pub ordering: OrderingPolicy,
    /// The longest key run to hand out: a due pending head and up to `key_run - 1` of the
    /// messages queued right behind it (see "Key runs" in the [module docs](self)). `1`
    /// (the default) claims heads only; `0` is taken as `1`.
    pub key_run: usize,
}

impl ClaimRequest {
    /// A request with the default ordering policy.
    pub fn new(
        lane: impl Into<String>,
        target: impl Into<String>,
        limit: usize,
        lease: Duration,
        consumer_id: impl Into<String>,
    ) -> Self {
        Self {
            lane: lane.into(),
            target: target.into(),
            limit,
            lease,
            consumer_id: consumer_id.into(),
            ordering: OrderingPolicy::Skip,
            key_run: 1,
        }
    }

    /// Sets the ordering policy.
    pub fn with_ordering(mut self, ordering: OrderingPolicy) -> Self {
        self.ordering = ordering;
        self
    }

    /// Sets the longest key run (see [`ClaimRequest::key_run`]).
    pub fn with_key_run(mut self, key_run: usize) -> Self {
        self.key_run = key_run;
        self
    }

    /// How many messages a key may bring in this claim: `key_run`, at least 1.
    pub fn run_len(&self) -> usize {
        self.key_run.max(1)
    }
}

/// The answer to a claim.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClaimBatch {
    /// The claimed messages, in claim order, each with its fresh `claim_token`.
    pub messages: Vec<OutboxMessage>,
    /// Messages whose lapsed lease had used their last attempt: dead-lettered by this claim
    /// instead of being handed out again.
    pub dead_lettered: Vec<Uuid>,
    /// Rows this claim took but could not read back into a message (`headers` that are not
    /// a JSON object of strings, a count past its type, in SQLite a payload that is not
    /// JSON: rows written by hand or by a bug): each dead-lettered alone, fenced on the claim's own
    /// token, with a `last_error` naming the column ([`UNREADABLE_ROW_ERROR`]), while the
    /// rows read beside it are handed out. Under [`OrderingPolicy::Block`] the messages of
    /// its key claimed behind it are released instead, as its dead letter holds the key.
    /// Always empty for the in-memory store, whose rows are typed messages.
    pub unreadable: Vec<UnreadableRow>,
    /// When the claim returned fewer messages than its limit: what [`Outbox::next_due`]
    /// answers right after it (the leases it just handed out count, as running leases do),
    /// read in the same call. An idle lane that then acks what it got can sleep on this
    /// answer instead of asking `next_due` again, so a picked-up message costs one claim and
    /// one ack. A claim that came back empty should always answer it; one that got messages
    /// may leave it [`NextDue::Unknown`] (PostgreSQL does, so its claim stays one
    /// statement), and the relay then rides a claim on the ack of its last message.
    pub next_due: NextDue,
}

/// A claimed row that could not be read back into a message, and was dead-lettered by the
/// claim that found it (see [`ClaimBatch::unreadable`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnreadableRow {
    /// Its id, when that much could be read (a hand-written SQLite row may hold an id that
    /// is not a UUID).
    pub outbox_id: Option<Uuid>,
    /// Its enqueue sequence.
    pub seq: i64,
    /// Why it cannot be read, as written to its `last_error`: [`UNREADABLE_ROW_ERROR`], the
    /// column, and what is wrong with it.
    pub error: String,
}

/// What a claim that came back short knows about the lane's next claimable message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum NextDue {
    /// The store did not say: the claim filled its limit (more may be claimable now), or
    /// the store does not compute it. A caller that needs it asks [`Outbox::next_due`].
    #[default]
    Unknown,
    /// The [`Outbox::next_due`] answer as of the end of the claim: `Some(ZERO)` when a
    /// message is claimable now, `None` when there is nothing to wait for.
    Known(Option<Duration>),
}

/// What became of an ack, extend_lease or release of one claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClaimOutcome {
    /// The row was claimed with this token, and the operation took effect.
    Applied,
    /// The row is no longer claimed with this token (lease lapsed and re-claimed, already
    /// acked, requeued, purged): nothing changed.
    LostClaim,
}

/// How a failed delivery should be recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NackDisposition {
    /// Try again after this delay, if attempts remain; otherwise dead-letter.
    Retry(Duration),
    /// Dead-letter now.
    Permanent,
}

/// A failed delivery to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nack {
    /// The claim that failed.
    pub claim: ClaimRef,
    /// What went wrong (kept as `last_error`).
    pub error: String,
    /// Retry or give up.
    pub disposition: NackDisposition,
}

/// What became of one nack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NackOutcome {
    /// Back to pending, due after the retry delay.
    Requeued,
    /// Out of attempts, or permanent: dead-lettered.
    DeadLettered,
    /// The claim was no longer held: nothing changed.
    LostClaim,
}

/// The answer to an ack with a claim after it: what became of the acks, and the claim.
/// `C` is what the claim answers: one [`ClaimBatch`] from [`Outbox::ack_and_claim`], one
/// per request (`Vec<ClaimBatch>`) from [`OutboxBackend::ack_and_claim`].
#[derive(Debug)]
pub struct AckAndClaim<C = ClaimBatch> {
    /// One answer per ack, in order (as [`Outbox::ack`] gives them).
    pub acked: Vec<ClaimOutcome>,
    /// The claim. An error here means the acks were recorded but the claim was not made: a
    /// caller must not ack them again, only claim again later.
    pub claimed: Result<C, StoreError>,
}

/// A nudge that new work may be claimable, so an idle relay need not wait for its poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WakeUp {
    /// Something was enqueued or made due in this (lane, target).
    Lane {
        /// The lane.
        lane: String,
        /// The target.
        target: String,
    },
    /// Notifications may have been missed (a listener reconnected): every lane should look.
    All,
    /// A fleet-wide lane pause was recorded or lifted: the relay's lane-control watcher
    /// reads the pauses now rather than at its next poll. No lane's claim is concerned.
    LaneControl,
}

impl WakeUp {
    /// Whether this wake-up concerns the relay of `lane` and `target`.
    pub fn concerns(&self, lane: &str, target: &str) -> bool {
        match self {
            WakeUp::Lane { lane: l, target: t } => l == lane && t == target,
            WakeUp::All => true,
            WakeUp::LaneControl => false,
        }
    }

    /// Whether the lane pauses should be read again: a pause changed, or wake-ups may have
    /// been missed.
    pub fn concerns_lane_control(&self) -> bool {
        matches!(self, WakeUp::LaneControl | WakeUp::All)
    }
}

/// How many wake-ups a subscriber may fall behind before it sees a lag (treated as `All`).
pub const WAKEUP_CHANNEL_CAPACITY: usize = 1024;

/// The error a claim writes when it dead-letters a message whose lease lapsed on its last
/// attempt. Part of the contract: every backend uses the same words.
pub const LEASE_LAPSED_ERROR: &str = "lease lapsed on the last attempt";
