//! What goes into [`LaneCore`](super::LaneCore) and what comes out of it.
//!
//! Three mechanisms carry most of it, each one command and one input: a store call
//! ([`Command::Store`], answered by [`Input::Store`]), a timer ([`Command::TimerAt`],
//! answered by [`Input::Timer`] at its time), and a delivery ([`Command::Deliver`],
//! answered by [`Input::DeliveryDone`] or [`Input::HandlerDied`]).

use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

pub(crate) use super::claim_loop::ClaimId;
use super::gate::GateKind;
use super::Slot;
use crate::delivery::DeliveryFailure;
use crate::lane::{DrainReport, RelayEvent};
use crate::message::ClaimRef;
use crate::message::{OutboxMessage, UnixMillis};
use crate::store::{AckAndClaim, ClaimBatch, ClaimOutcome, Nack, NackOutcome, StoreError};

/// What happened, as the lane actor tells it to the core.
#[derive(Debug)]
pub(crate) enum Input {
    /// The lane started: look at the store.
    Start,
    /// The store says new work may be claimable.
    Wake,
    /// The relay's due watcher says a message of this lane may be claimable at this time
    /// (a retry falling due, a lease lapsing, a message a wake-up did not announce).
    DueAt(Instant),
    /// A timer of [`Command::TimerAt`] fired; honoured only if its generation is still the
    /// current one for its kind.
    Timer { kind: TimerKind, generation: u64 },
    /// Stop claiming; deliveries running and buffered go on.
    Pause,
    /// Claim again.
    Resume,
    /// Stop claiming, release the buffer, let deliveries finish, stop.
    Drain {
        /// How long deliveries may still run.
        timeout: Duration,
    },
    /// A handler finished a delivery.
    DeliveryDone {
        slot: Slot,
        outbox_id: Uuid,
        result: Result<(), DeliveryFailure>,
        elapsed: Duration,
    },
    /// A handler actor died (a panic in `deliver`).
    HandlerDied { slot: Slot, reason: String },
    /// The answer to a [`Command::Store`] call.
    Store(StoreAnswer),
    /// An enqueue of this process wrote a message claimed for this lane and committed it
    /// (`store::hand_off`); `sent_at`: when its statement went out, before the lease began.
    HandedOff {
        message: Box<OutboxMessage>,
        sent_at: Instant,
    },
    /// Hand-off credits taken and not used came back.
    HandOffReturned(usize),
    /// The answer to [`Command::RevokeCredits`]: the credits the taker had left.
    CreditsRevoked(usize),
}

/// Which of the lane's timers fired. Each kind keeps its own generation: a timer whose
/// generation is no longer the current one of its kind was overtaken and is ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TimerKind {
    /// An idle sleep or the poll ceiling: look at the store again
    /// ([`ClaimLoop`](super::claim_loop::ClaimLoop) owns its generation).
    Poll,
    /// A claim gate lets go, or a claim linger ends: ask the gates again.
    Gate,
    /// A store-error backoff is over.
    StoreRetry,
    /// A drain's time is up: release what still runs.
    DrainDeadline,
    /// A claimed batch's lease needs a look (extend it, or declare it lapsed); the
    /// generation is the batch's extension round.
    Lease { batch: u64 },
}

/// What the lane asks of its store (claims, acks, nacks, lease extensions, releases): run
/// off the mailbox, answered with the matching [`StoreAnswer`]. (Not the store's own
/// [`StoreCall`](crate::store::StoreCall), a finished call as a hook sees it.)
#[derive(Debug)]
pub(crate) enum StoreRequest {
    /// Claim up to `limit` messages, with key runs of up to `key_run`
    /// ([`crate::store::ClaimRequest::key_run`]); `claim` names it in the answer.
    Claim {
        claim: ClaimId,
        limit: usize,
        key_run: usize,
    },
    /// Ack these claims, then claim up to `limit` (key runs up to `key_run`), in one round
    /// trip where the store can; `claim` names it in the answer.
    AckAndClaim {
        claim: ClaimId,
        acks: Vec<ClaimRef>,
        limit: usize,
        key_run: usize,
    },
    /// Ack these claims.
    Ack(Vec<ClaimRef>),
    /// Record these failed deliveries.
    Nack(Vec<Nack>),
    /// Ask the store when the next message becomes claimable.
    NextDue,
    /// Extend these leases (a batch's timer, now at `generation`).
    Extend {
        batch: u64,
        generation: u64,
        claims: Vec<ClaimRef>,
    },
    /// Hand these claims back unused.
    Release(Vec<ClaimRef>),
}

/// The answer to a [`StoreRequest`].
#[derive(Debug)]
pub(crate) enum StoreAnswer {
    /// The answer to [`StoreRequest::Claim`] `claim`.
    Claimed {
        claim: ClaimId,
        result: Result<ClaimBatch, StoreError>,
    },
    /// The answer to [`StoreRequest::AckAndClaim`] `claim`; `wall_ms` is this machine's clock
    /// after it.
    AckedAndClaimed {
        claim: ClaimId,
        result: Result<AckAndClaim, StoreError>,
        wall_ms: UnixMillis,
    },
    /// The answer to [`StoreRequest::Ack`].
    Acked {
        result: Result<Vec<ClaimOutcome>, StoreError>,
        wall_ms: UnixMillis,
    },
    /// The answer to [`StoreRequest::Nack`].
    Nacked(Result<Vec<NackOutcome>, StoreError>),
    /// The answer to [`StoreRequest::NextDue`].
    NextDue(Result<Option<Duration>, StoreError>),
    /// The answer to [`StoreRequest::Extend`].
    Extended {
        batch: u64,
        generation: u64,
        claims: Vec<ClaimRef>,
        result: Result<Vec<ClaimOutcome>, StoreError>,
    },
    /// The answer to [`StoreRequest::Release`] of `sent` claims.
    Released {
        /// How many claims the release carried.
        sent: usize,
        /// The store's answer.
        result: Result<Vec<ClaimOutcome>, StoreError>,
    },
}

/// What the lane actor must do.
#[derive(Debug)]
pub(crate) enum Command {
    /// Run this store call off the mailbox; answer with [`Input::Store`].
    Store(StoreRequest),
    /// Add this many hand-off credits to the lane's taker.
    GrantCredits(usize),
    /// Take every credit the taker has left, answering [`Input::CreditsRevoked`] before
    /// anything else.
    RevokeCredits,
    /// Hand `message` to the handler in `slot`.
    Deliver {
        slot: Slot,
        message: Box<OutboxMessage>,
    },
    /// The handler in `slot` died: put a fresh one there.
    ReplaceHandler(Slot),
    /// Stop the handler in `slot` (its delivery was abandoned).
    KillHandler(Slot),
    /// Send [`Input::Timer`] with this kind and generation at `at`.
    TimerAt {
        kind: TimerKind,
        at: Instant,
        generation: u64,
    },
    /// A claim gate held the lane back for `duration` (the throttled-time counter).
    Throttled { gate: GateKind, duration: Duration },
    /// A claim came back empty (the batch-size histogram counts those too: idle polling).
    EmptyClaim,
    /// Publish an event (metrics and counters follow from it).
    Emit(RelayEvent),
    /// The drain is done: answer every caller with this report and stop.
    Stop(DrainReport),
}

impl Command {
    /// A timer of `kind` at `at`, at `generation`.
    pub(crate) fn timer(kind: TimerKind, at: Instant, generation: u64) -> Self {
        Command::TimerAt {
            kind,
            at,
            generation,
        }
    }
}

impl Input {
    /// The input a [`Command::TimerAt`] sends when it fires.
    pub(crate) fn timer(kind: TimerKind, generation: u64) -> Self {
        Input::Timer { kind, generation }
    }
}
