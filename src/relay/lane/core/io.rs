//! What goes into [`LaneCore`](super::LaneCore) and what comes out of it.

use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use super::gate::GateKind;
use super::Slot;
use crate::message::{OutboxMessage, UnixMillis};
use crate::relay::handler::DeliveryFailure;
use crate::relay::{DrainReport, RelayEvent};
use crate::store::{
    AckAndClaim, ClaimBatch, ClaimOutcome, ClaimRef, Nack, NackOutcome, StoreError,
};

/// What happened, as the lane actor tells it to the core.
#[derive(Debug)]
pub(crate) enum Input {
    /// The lane started: look at the store.
    Start,
    /// The store says new work may be claimable.
    Wake,
    /// An idle timer fired; honoured only if it is the latest one scheduled.
    Tick(u64),
    /// A store-error backoff is over.
    RetryDue,
    /// A gate timer fired; honoured only if it is the latest one scheduled.
    GateDue(u64),
    /// Stop claiming; deliveries running and buffered go on.
    Pause,
    /// Claim again.
    Resume,
    /// Stop claiming, release the buffer, let deliveries finish, stop.
    Drain {
        /// How long deliveries may still run.
        timeout: Duration,
    },
    /// A drain's time is up: release what still runs.
    DrainDeadline,
    /// A handler finished a delivery.
    DeliveryDone {
        slot: Slot,
        outbox_id: Uuid,
        result: Result<(), DeliveryFailure>,
        elapsed: Duration,
    },
    /// A handler actor died (a panic in `deliver`).
    HandlerDied { slot: Slot, reason: String },
    /// A batch's lease timer fired.
    LeaseDue { batch: u64, generation: u64 },
    /// The answer to [`Command::Claim`].
    Claimed(Result<ClaimBatch, StoreError>),
    /// The answer to [`Command::AckAndClaim`]; `wall_ms` is this machine's clock after it.
    AckedAndClaimed {
        result: Result<AckAndClaim, StoreError>,
        wall_ms: UnixMillis,
    },
    /// The answer to [`Command::Ack`].
    Acked {
        result: Result<Vec<ClaimOutcome>, StoreError>,
        wall_ms: UnixMillis,
    },
    /// The answer to [`Command::Nack`].
    Nacked(Result<Vec<NackOutcome>, StoreError>),
    /// The answer to [`Command::NextDue`].
    NextDue(Result<Option<Duration>, StoreError>),
    /// The answer to [`Command::Extend`].
    Extended {
        batch: u64,
        generation: u64,
        claims: Vec<ClaimRef>,
        result: Result<Vec<ClaimOutcome>, StoreError>,
    },
    /// The answer to [`Command::Release`] of `sent` claims.
    Released {
        /// How many claims the release carried.
        sent: usize,
        /// The store's answer.
        result: Result<Vec<ClaimOutcome>, StoreError>,
    },
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

/// What the lane actor must do. Store calls answer with the matching [`Input`].
#[derive(Debug)]
pub(crate) enum Command {
    /// Claim up to `limit` messages, with key runs of up to `key_run`
    /// ([`crate::store::ClaimRequest::key_run`]).
    Claim { limit: usize, key_run: usize },
    /// Ack these claims, then claim up to `limit` (key runs up to `key_run`), in one round
    /// trip where the store can.
    AckAndClaim {
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
    /// Send [`Input::LeaseDue`] at `at`.
    LeaseCheckAt {
        batch: u64,
        generation: u64,
        at: Instant,
    },
    /// Send [`Input::Tick`] at `at`.
    WakeAt { generation: u64, at: Instant },
    /// Send [`Input::GateDue`] at `at`.
    GateAt { generation: u64, at: Instant },
    /// A claim gate held the lane back for `duration` (the throttled-time counter).
    Throttled { gate: GateKind, duration: Duration },
    /// Send [`Input::RetryDue`] at `at`.
    RetryAt(Instant),
    /// Send [`Input::DrainDeadline`] at `at`.
    DrainDeadlineAt(Instant),
    /// A claim came back empty (the batch-size histogram counts those too: idle polling).
    EmptyClaim,
    /// Publish an event (metrics and counters follow from it).
    Emit(RelayEvent),
    /// The drain is done: answer every caller with this report and stop.
    Stop(DrainReport),
}
