//! [`StoreHook`]: an observer of every store call an [`Outbox`](super::Outbox) makes. Metrics,
//! the slow-call log, a benchmark's metering and a test's counters are hooks: each sees an
//! operation finish (its [`StoreOp`], how long it took, what came of it) and none has to
//! forward the whole store contract to see it.

use std::fmt;
use std::time::Duration;

use super::{ClaimBatch, Enqueued, LaneCount, StoreError, StoreOp};

/// Told about every store call an [`Outbox`](super::Outbox) made, once it finished. Runs
/// inline on the caller's task, after the call: keep it cheap (count, record, log).
pub trait StoreHook: Send + Sync + fmt::Debug {
    /// A call finished.
    fn finished(&self, call: &StoreCall<'_>);
}

/// One finished store call, as a [`StoreHook`] sees it.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct StoreCall<'a> {
    /// The operation.
    pub op: StoreOp,
    /// From the call to its answer: the backend's time, plus the `Outbox`'s own work
    /// (validation, dedupe planning, trace capture).
    pub duration: Duration,
    /// What came of it.
    pub outcome: CallOutcome<'a>,
}

/// What came of a store call.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum CallOutcome<'a> {
    /// It succeeded (an operation with no answer a hook looks into).
    Done,
    /// An enqueue succeeded: one answer per draft asked, duplicates included
    /// ([`Enqueued::duplicate`]). For a transaction the caller holds, reported once the
    /// write is made (PostgreSQL's `enqueue_in_tx`) or at commit (SQLite's `begin`).
    Enqueued(&'a [Enqueued]),
    /// A claim succeeded (`claim`, or the claim of an `ack_and_claim`): what it handed out.
    Claimed(&'a ClaimBatch),
    /// A requeue of dead letters succeeded: how many per (lane, target).
    Requeued(&'a [LaneCount]),
    /// It failed.
    Failed(&'a StoreError),
}

impl CallOutcome<'_> {
    /// Whether the call failed.
    pub fn is_err(&self) -> bool {
        matches!(self, CallOutcome::Failed(_))
    }
}

/// A shared hook, so its owner can read what it gathered.
impl<H: StoreHook + ?Sized> StoreHook for std::sync::Arc<H> {
    fn finished(&self, call: &StoreCall<'_>) {
        (**self).finished(call)
    }
}
