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
//! - **pending**: written by [`OutboxStore::enqueue`] (due after the draft's delay), by a
//!   retryable [`OutboxStore::nack`] (due after the retry delay), by
//!   [`OutboxStore::release`] (due now, the attempt not counted) and by
//!   [`OutboxStore::requeue_dead_letters`] (due now, attempts reset to zero). Left only by a
//!   claim.
//! - **claimed**: written by [`OutboxStore::claim`], which takes claimed rows whose lease
//!   lapsed first (in lapse order: they became claimable earliest, and their keys are
//!   blocked behind them), then pending rows that are due, by due time then enqueue
//!   sequence. It increments `attempt_count`, sets `claimed_by`, a fresh `claim_token` and
//!   `lease_expires_at`. Left by ack, nack, release (each only with the current token), by
//!   a later claim once the lease lapsed, or by that claim dead-lettering it when the lapsed
//!   claim had already used `max_attempts`.
//! - **delivered**: written by [`OutboxStore::ack`]; claim fields cleared, `delivered_at`
//!   set. Left only by [`OutboxStore::purge`].
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

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use uuid::Uuid;

pub use admin::{LaneCount, LaneStats, MessageFilter, Page, PageRequest, PurgeRequest};
pub use enqueue::DraftBatch;
pub use error::StoreError;
pub use lane_control::{LanePause, LanePauseRequest, LANE_CONTROL_POLL};
// A claim's reference lives with the message, the clocks and millisecond helpers in `time`;
// their old paths stay.
pub use crate::message::ClaimRef;
use crate::message::{DraftLimits, OutboxMessage, OutboxMessageDraft};
pub use crate::time::{duration_millis, Clock, ManualClock, SystemClock, TokioClock};

mod admin;
pub(crate) mod enqueue;
mod error;
pub mod hand_off;
pub mod lane_control;
pub mod memory;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
mod periodic;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub mod postgres;
pub mod slow_log;
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
    /// When the claim returned fewer messages than its limit: what [`OutboxStore::next_due`]
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
    /// the store does not compute it. A caller that needs it asks [`OutboxStore::next_due`].
    #[default]
    Unknown,
    /// The [`OutboxStore::next_due`] answer as of the end of the claim: `Some(ZERO)` when a
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

/// The answer to [`OutboxStore::ack_and_claim`]: what became of the acks, and the claim
/// that followed them.
#[derive(Debug)]
pub struct AckAndClaim {
    /// One answer per ack, in order (as [`OutboxStore::ack`] gives them).
    pub acked: Vec<ClaimOutcome>,
    /// The claim. An error here means the acks were recorded but the claim was not made: a
    /// caller must not ack them again, only claim again later.
    pub claimed: Result<ClaimBatch, StoreError>,
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
}

impl WakeUp {
    /// Whether this wake-up concerns the relay of `lane` and `target`.
    pub fn concerns(&self, lane: &str, target: &str) -> bool {
        match self {
            WakeUp::Lane { lane: l, target: t } => l == lane && t == target,
            WakeUp::All => true,
        }
    }
}

/// How many wake-ups a subscriber may fall behind before it sees a lag (treated as `All`).
pub const WAKEUP_CHANNEL_CAPACITY: usize = 1024;

/// The outbox table, as every backend offers it. Object-safe: relays hold an
/// `Arc<dyn OutboxStore>`. Every batch operation is one round trip to the database.
///
/// **What a backend implements, and what the trait does for it.** A backend implements
/// the required methods. The provided ones carry the duties every backend shares, so one
/// written outside the crate gets them too: [`enqueue_many`](Self::enqueue_many)
/// validates the drafts, resolves repeats of a dedupe key within the batch and captures the
/// trace context before calling [`write_drafts`](Self::write_drafts), and records
/// `outbox_enqueued_total` after it; [`requeue_dead_letters`](Self::requeue_dead_letters)
/// records `outbox_requeued_total` after
/// [`requeue_dead_letters_per_lane`](Self::requeue_dead_letters_per_lane). A backend
/// records no metrics itself and should not override those two; a wrapper that does (to
/// time or count calls) delegates them to the inner store's, which then records once.
#[async_trait]
pub trait OutboxStore: Send + Sync + fmt::Debug {
    /// Writes one message (validated first). A repeated dedupe key returns the first message
    /// with `duplicate: true`, or [`StoreError::Conflict`] if the content differs.
    ///
    /// Provided: a backend implements [`write_drafts`](Self::write_drafts) instead.
    async fn enqueue(&self, draft: OutboxMessageDraft) -> Result<Enqueued, StoreError> {
        single(self.enqueue_many(vec![draft]).await?)
    }

    /// Writes many messages atomically: all are validated first, and either all are
    /// written (or found as duplicates) or none is. Counts the messages written in
    /// `outbox_enqueued_total`.
    ///
    /// Provided, and a backend should not override it: it validates the drafts against
    /// [`draft_limits`](Self::draft_limits), resolves repeats of a dedupe key within the
    /// batch, hands the rest to [`write_drafts`](Self::write_drafts), and records the
    /// metrics, so every backend does these the same way and exactly once. (A wrapper that
    /// overrides it to add something of its own delegates to the inner store's
    /// `enqueue_many`, which records.)
    async fn enqueue_many(
        &self,
        drafts: Vec<OutboxMessageDraft>,
    ) -> Result<Vec<Enqueued>, StoreError> {
        let (batch, plan) = enqueue::plan(drafts, &self.draft_limits())?;
        let written = if batch.is_empty() {
            Vec::new()
        } else {
            self.write_drafts(batch).await?
        };
        let answers = plan.answers(written)?;
        crate::metrics::record_enqueued(&answers);
        Ok(answers)
    }

    /// The limits [`enqueue_many`](Self::enqueue_many) validates drafts against before
    /// they reach [`write_drafts`](Self::write_drafts). A wrapper answers its inner store's.
    fn draft_limits(&self) -> DraftLimits;

    /// The backend's half of [`enqueue_many`](Self::enqueue_many): writes the batch
    /// atomically, answering one [`Enqueued`] per draft, in order. The drafts are valid and
    /// no two share a dedupe key in one (lane, target); what is left to the backend is a
    /// key already held by a stored message: answer that message with `duplicate: true`
    /// when [`OutboxMessageDraft::matches`] it, else fail the whole batch with
    /// [`StoreError::Conflict`].
    ///
    /// Records no metrics: `enqueue_many` does, after this returns. Callers use
    /// `enqueue`/`enqueue_many`; only they can make a [`DraftBatch`].
    async fn write_drafts(&self, drafts: DraftBatch) -> Result<Vec<Enqueued>, StoreError>;

    /// Claims up to `limit` claimable messages of one (lane, target). See the module docs.
    ///
    /// A claim that returns no message should also answer [`ClaimBatch::next_due`] (the
    /// built-in stores do, in the same call), and one that returns fewer than `limit` may
    /// (memory and SQLite do; PostgreSQL does not: its claim is one statement). A store that
    /// leaves it [`NextDue::Unknown`] only costs an idle relay a `next_due` call.
    async fn claim(&self, request: &ClaimRequest) -> Result<ClaimBatch, StoreError>;

    /// Marks claims delivered. One answer per claim, in order.
    async fn ack(&self, claims: &[ClaimRef]) -> Result<Vec<ClaimOutcome>, StoreError>;

    /// Acks finished deliveries, then claims the next messages: one round trip where the
    /// store can (PostgreSQL and SQLite do both in one transaction), so a busy lane pays one
    /// store call per cycle. The provided method makes two calls, which is what the memory
    /// store, the reference, needs.
    ///
    /// An `Err` means nothing is known to be recorded: the acks may be tried again. Once the
    /// acks are recorded, a failed claim comes back in [`AckAndClaim::claimed`].
    async fn ack_and_claim(
        &self,
        acks: &[ClaimRef],
        request: &ClaimRequest,
    ) -> Result<AckAndClaim, StoreError> {
        let acked = if acks.is_empty() {
            Vec::new()
        } else {
            self.ack(acks).await?
        };
        let claimed = self.claim(request).await;
        Ok(AckAndClaim { acked, claimed })
    }

    /// Records failed deliveries. One answer per nack, in order.
    async fn nack(&self, nacks: &[Nack]) -> Result<Vec<NackOutcome>, StoreError>;

    /// Extends the leases of claims still held, to `lease` from now.
    async fn extend_lease(
        &self,
        claims: &[ClaimRef],
        lease: Duration,
    ) -> Result<Vec<ClaimOutcome>, StoreError>;

    /// Returns claims unused: pending, due now, the attempt not counted.
    async fn release(&self, claims: &[ClaimRef]) -> Result<Vec<ClaimOutcome>, StoreError>;

    /// How long until the next message of (lane, target) may be claimable: the earliest due
    /// pending message or the earliest lease expiry. `Some(ZERO)` when one is claimable now,
    /// `None` when there is nothing to wait for.
    ///
    /// A message its ordering key holds back (per-key order under `ordering`, as in a claim)
    /// is not counted: its key's head is (its retry, or its lease's lapse), so a relay that
    /// sleeps until `next_due` never spins on empty claims while a head is in flight or, under
    /// [`OrderingPolicy::Block`], dead.
    async fn next_due(
        &self,
        lane: &str,
        target: &str,
        ordering: OrderingPolicy,
    ) -> Result<Option<Duration>, StoreError>;

    /// Counts per (lane, target) among the messages the filter selects (its status is
    /// ignored). Lanes with no messages are absent.
    async fn stats(&self, filter: &MessageFilter) -> Result<Vec<LaneStats>, StoreError>;

    /// Lists messages in enqueue order, a page at a time.
    async fn list(&self, filter: &MessageFilter, page: PageRequest) -> Result<Page, StoreError>;

    /// One message by id.
    async fn get(&self, outbox_id: Uuid) -> Result<Option<OutboxMessage>, StoreError>;

    /// Moves the dead letters the filter selects back to pending, due now, with attempts
    /// reset to zero (`last_error` is kept). Returns how many, and counts them in
    /// `outbox_requeued_total`.
    ///
    /// Provided, and a backend should not override it: the backend implements
    /// [`requeue_dead_letters_per_lane`](Self::requeue_dead_letters_per_lane), and this
    /// records the metrics once that returned.
    async fn requeue_dead_letters(&self, filter: &MessageFilter) -> Result<u64, StoreError> {
        let requeued = self.requeue_dead_letters_per_lane(filter).await?;
        crate::metrics::record_requeued(requeued.iter().flat_map(|lane| {
            let n = usize::try_from(lane.count).unwrap_or(usize::MAX);
            std::iter::repeat_n((lane.lane.as_str(), lane.target.as_str()), n)
        }));
        Ok(requeued.iter().map(|lane| lane.count).sum())
    }

    /// The backend's half of [`requeue_dead_letters`](Self::requeue_dead_letters): moves
    /// the dead letters back (committed when it returns) and answers how many per
    /// (lane, target), lanes with none left out. Records no metrics; callers use
    /// `requeue_dead_letters`.
    async fn requeue_dead_letters_per_lane(
        &self,
        filter: &MessageFilter,
    ) -> Result<Vec<LaneCount>, StoreError>;

    /// Deletes the dead letters the filter selects. Returns how many.
    async fn discard_dead_letters(&self, filter: &MessageFilter) -> Result<u64, StoreError>;

    /// Deletes the delivered and dead-lettered messages the request selects (each status
    /// by its own age, since last changed; optionally one lane), in statements of at most
    /// `batch_size` rows, so no statement holds locks for long. Pending and claimed
    /// messages are never purged, however old. Returns how many (with
    /// [`dry_run`](PurgeRequest::dry_run), how many would go; nothing is deleted).
    async fn purge(&self, request: &PurgeRequest) -> Result<u64, StoreError>;

    /// Subscribes to wake-ups: enqueues and requeues of this store, from any process for
    /// PostgreSQL. A lagging receiver should treat the lag as [`WakeUp::All`].
    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<WakeUp>;

    /// The registry through which a relay's lanes take what this store object enqueues,
    /// without a claim ([`hand_off`] module docs), if the backend supports it (PostgreSQL
    /// does). The default, `None`, leaves every message to claims. A wrapper forwards its
    /// inner store's.
    fn hand_off(&self) -> Option<std::sync::Arc<hand_off::HandOff>> {
        None
    }

    // ---- Lane control: the fleet-wide pause of a (lane, target) -----------------------
    // One block, so it moves as a unit. Each backend implements it in a file of its own
    // (`store/<backend>/lane_control.rs`); the provided methods are what a store without
    // lane control answers: refused for good (a relay then stops asking, saying why once).

    /// Pauses (lane, target) for every relay on this store, until
    /// [`resume_lane`](Self::resume_lane); committed when it returns. Pausing a paused lane
    /// replaces who, why and when. Returns the pause as recorded (its time is the store's).
    async fn pause_lane(&self, request: &LanePauseRequest) -> Result<LanePause, StoreError> {
        let _ = request;
        Err(lane_control::unsupported("pause_lane"))
    }

    /// Lifts the fleet-wide pause of (lane, target): the pause it lifted, `None` when the
    /// lane was not paused.
    async fn resume_lane(&self, lane: &str, target: &str) -> Result<Option<LanePause>, StoreError> {
        let _ = (lane, target);
        Err(lane_control::unsupported("resume_lane"))
    }

    /// Every fleet-wide pause in force, by (lane, target).
    async fn lane_pauses(&self) -> Result<Vec<LanePause>, StoreError> {
        Err(lane_control::unsupported("lane_pauses"))
    }
}

/// The error a claim writes when it dead-letters a message whose lease lapsed on its last
/// attempt. Part of the contract: every backend uses the same words.
pub const LEASE_LAPSED_ERROR: &str = "lease lapsed on the last attempt";

/// The one answer of a one-draft `enqueue_many`.
pub(crate) fn single(mut answers: Vec<Enqueued>) -> Result<Enqueued, StoreError> {
    answers
        .pop()
        .ok_or_else(|| StoreError::database("enqueue", "wrote nothing"))
}
