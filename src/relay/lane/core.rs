//! `LaneCore`: the whole logic of a lane as a plain synchronous state machine. No actors, no
//! clock reads, no I/O: the lane actor feeds it [`Input`]s with the time as a value, and
//! carries out the [`Command`]s it answers with (store calls, deliveries, timers, events).
//!
//! Why sans-IO: every decision (how much to claim, when to ack, when to sleep, what a drain
//! releases) is then a unit test that runs in microseconds without tokio, and the actor
//! never awaits a store call inside its handler, so a slow store cannot delay a lease
//! check, a drain or a status answer.
//!
//! The pipeline: at most one claim (or `ack_and_claim`, or `next_due`) and one ack/nack
//! flush are in flight at a time. A claim asks for the free handler slots plus the room
//! left in the prefetch buffer, so handlers find work waiting when they finish. A finished
//! delivery's ack goes out with the next flush (at once if none is in flight), and rides
//! along with the claim when one is due anyway: a busy cycle costs one round trip.
//!
//! The quiet idle path: a wake-up makes one claim. `next_due` is asked only when the lane
//! holds nothing (no delivery running, nothing buffered, no ack waiting), since while it
//! holds claims their own leases would be the answer; the poll ceiling still applies.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use crate::config::LaneConfig;
use crate::message::{OutboxMessage, UnixMillis};
use crate::metrics::StoreOp;
use crate::relay::handler::DeliveryFailure;
use crate::relay::{DrainReport, LaneKey, RelayEvent};
use crate::store::{
    AckAndClaim, ClaimBatch, ClaimOutcome, ClaimRef, Nack, NackDisposition, NackOutcome, StoreError,
};

mod book;
mod pool;
#[cfg(test)]
mod tests;

use book::LeaseBook;
pub(crate) use pool::Slot;
use pool::{HandlerPool, Running};

/// The shortest idle sleep: a guard against a store whose `next_due` keeps saying "now".
pub(crate) const MIN_IDLE_SLEEP: Duration = Duration::from_millis(1);

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
    /// The answer to [`Command::Release`].
    Released(Result<Vec<ClaimOutcome>, StoreError>),
}

/// What the lane actor must do. Store calls answer with the matching [`Input`].
#[derive(Debug)]
pub(crate) enum Command {
    /// Claim up to `limit` messages.
    Claim { limit: usize },
    /// Ack these claims, then claim up to `limit`, in one round trip where the store can.
    AckAndClaim { acks: Vec<ClaimRef>, limit: usize },
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Running,
    Paused,
    Draining {
        completed: usize,
        released: usize,
        deadline_passed: bool,
    },
    Stopped,
}

/// The one store call of the claim pipeline in flight, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClaimCall {
    Idle,
    Claiming { issued_at: Instant, limit: usize },
    AskingDue,
}

/// A finished delivery waiting for its ack to be recorded.
#[derive(Debug)]
struct Delivered {
    running: Running,
    claim: ClaimRef,
    elapsed: Duration,
}

/// A failed delivery waiting for its nack to be recorded.
#[derive(Debug)]
struct Failed {
    running: Running,
    claim: ClaimRef,
    failure: DeliveryFailure,
    ran: Duration,
}

/// Acks and nacks waiting for a flush, and those of the flush in flight (kept to pair with
/// the store's answers, and put back if the flush fails).
#[derive(Debug, Default)]
struct Outcomes {
    acks: Vec<Delivered>,
    nacks: Vec<Failed>,
    acking: Vec<Delivered>,
    nacking: Vec<Failed>,
}

impl Outcomes {
    fn flushing(&self) -> bool {
        !self.acking.is_empty() || !self.nacking.is_empty()
    }

    fn is_empty(&self) -> bool {
        self.acks.is_empty() && self.nacks.is_empty() && !self.flushing()
    }
}

/// Store-error backoff, by the lane's `store_backoff` policy.
#[derive(Debug, Default)]
struct Backoff {
    failures: u32,
    waiting: bool,
}

/// The lane's state and logic. See the module docs.
#[derive(Debug)]
pub(crate) struct LaneCore {
    key: LaneKey,
    config: LaneConfig,
    mode: Mode,
    pool: HandlerPool,
    book: LeaseBook,
    /// Claimed messages waiting for a free handler, in claim order.
    buffer: VecDeque<OutboxMessage>,
    outcomes: Outcomes,
    claim: ClaimCall,
    /// Whether the store may hold claimable work: the last claim filled its limit, or a
    /// wake-up, tick, resume or retry came since. A short claim clears it.
    store_has_more: bool,
    /// Whether an idle sleep from `next_due` is scheduled and still meaningful.
    idle_timer_set: bool,
    tick_generation: u64,
    backoff: Backoff,
    /// Release calls in flight (a drain waits for their count).
    releasing: usize,
}

impl LaneCore {
    /// A lane with `config.concurrency` idle slots; paused lanes claim nothing until resumed.
    pub(crate) fn new(config: LaneConfig, paused: bool) -> Self {
        Self {
            key: LaneKey::new(&config.lane, &config.target),
            pool: HandlerPool::new(config.concurrency),
            config,
            mode: if paused { Mode::Paused } else { Mode::Running },
            book: LeaseBook::default(),
            buffer: VecDeque::new(),
            outcomes: Outcomes::default(),
            claim: ClaimCall::Idle,
            store_has_more: false,
            idle_timer_set: false,
            tick_generation: 0,
            backoff: Backoff::default(),
            releasing: 0,
        }
    }

    /// Deliveries running now.
    pub(crate) fn in_flight(&self) -> usize {
        self.pool.running()
    }

    /// Claimed messages waiting for a handler.
    #[cfg(test)]
    pub(crate) fn buffered(&self) -> usize {
        self.buffer.len()
    }

    /// Claims the lane holds (running, buffered, or finished and not yet recorded).
    pub(crate) fn held(&self) -> usize {
        self.book.len()
            + self.outcomes.acks.len()
            + self.outcomes.nacks.len()
            + self.outcomes.acking.len()
            + self.outcomes.nacking.len()
    }

    /// Feeds one input at `now`; the commands to carry out, in order.
    pub(crate) fn handle(&mut self, now: Instant, input: Input) -> Vec<Command> {
        let mut out = Vec::new();
        if self.mode == Mode::Stopped {
            return out;
        }
        match input {
            Input::Start | Input::Wake => self.store_has_more = true,
            Input::Tick(generation) => {
                if generation == self.tick_generation {
                    self.store_has_more = true;
                    self.idle_timer_set = false;
                }
            }
            Input::RetryDue => {
                self.backoff.waiting = false;
                self.store_has_more = true;
            }
            Input::Pause => {
                if self.mode == Mode::Running {
                    self.mode = Mode::Paused;
                }
            }
            Input::Resume => {
                if self.mode == Mode::Paused {
                    self.mode = Mode::Running;
                    self.store_has_more = true;
                }
            }
            Input::Drain { timeout } => self.drain(now, timeout, &mut out),
            Input::DrainDeadline => self.drain_deadline(&mut out),
            Input::DeliveryDone {
                slot,
                outbox_id,
                result,
                elapsed,
            } => self.delivery_done(slot, outbox_id, result, elapsed),
            Input::HandlerDied { slot, reason } => self.handler_died(now, slot, reason, &mut out),
            Input::LeaseDue { batch, generation } => self.lease_due(batch, generation, &mut out),
            Input::Claimed(result) => {
                let call = std::mem::replace(&mut self.claim, ClaimCall::Idle);
                self.claimed(now, call, result, &mut out);
            }
            Input::AckedAndClaimed { result, wall_ms } => {
                let call = std::mem::replace(&mut self.claim, ClaimCall::Idle);
                match result {
                    Ok(answer) => {
                        self.acked(now, Ok(answer.acked), wall_ms, &mut out);
                        self.claimed(now, call, answer.claimed, &mut out);
                    }
                    // Neither happened: the acks go out again, the claim is made again.
                    Err(error) => self.acked(now, Err(error), wall_ms, &mut out),
                }
            }
            Input::Acked { result, wall_ms } => self.acked(now, result, wall_ms, &mut out),
            Input::Nacked(result) => self.nacked(now, result, &mut out),
            Input::NextDue(result) => self.next_due(now, result, &mut out),
            Input::Extended {
                batch,
                generation,
                claims,
                result,
            } => self.extended(now, batch, generation, claims, result, &mut out),
            Input::Released(result) => self.released(result),
        }
        self.pump(now, &mut out);
        out
    }

    /// When to look at a batch's lease: before it lapses if extension is on, at the lapse if not.
    fn lease_check_delay(&self) -> Duration {
        match self.config.lease_extend_margin {
            Some(margin) => self.config.lease.saturating_sub(margin),
            None => self.config.lease,
        }
    }

    /// How many messages a claim may take now: free slots plus prefetch room.
    fn claim_limit(&self) -> usize {
        (self.pool.idle() + self.config.prefetch)
            .saturating_sub(self.buffer.len())
            .min(self.config.batch_size)
    }

    fn emit(&self, out: &mut Vec<Command>, event: RelayEvent) {
        out.push(Command::Emit(event));
    }

    /// Moves the lane along after every input: start buffered work, flush outcomes, claim,
    /// or go to sleep; and end a drain that has nothing left to wait for.
    fn pump(&mut self, now: Instant, out: &mut Vec<Command>) {
        while self.pool.idle() > 0 {
            let Some(message) = self.buffer.pop_front() else {
                break;
            };
            match self.pool.start(message.clone(), now) {
                Ok(slot) => out.push(Command::Deliver {
                    slot,
                    message: Box::new(message),
                }),
                Err(message) => {
                    self.buffer.push_front(message);
                    break;
                }
            }
        }
        let store_open = !self.backoff.waiting;
        let claiming = self.mode == Mode::Running && self.store_has_more;
        if store_open && !self.outcomes.flushing() {
            if !self.outcomes.acks.is_empty() {
                let acks: Vec<ClaimRef> = self.outcomes.acks.iter().map(|d| d.claim).collect();
                self.outcomes.acking = std::mem::take(&mut self.outcomes.acks);
                let limit = self.claim_limit();
                if claiming && self.claim == ClaimCall::Idle && limit > 0 {
                    self.claim = ClaimCall::Claiming {
                        issued_at: now,
                        limit,
                    };
                    self.idle_timer_set = false;
                    out.push(Command::AckAndClaim { acks, limit });
                } else {
                    out.push(Command::Ack(acks));
                }
            } else if !self.outcomes.nacks.is_empty() {
                self.outcomes.nacking = std::mem::take(&mut self.outcomes.nacks);
                let nacks = self
                    .outcomes
                    .nacking
                    .iter()
                    .map(|f| self.nack_of(f))
                    .collect();
                out.push(Command::Nack(nacks));
            }
        }
        if store_open && self.claim == ClaimCall::Idle && self.mode == Mode::Running {
            let limit = self.claim_limit();
            if claiming && limit > 0 {
                self.claim = ClaimCall::Claiming {
                    issued_at: now,
                    limit,
                };
                self.idle_timer_set = false;
                out.push(Command::Claim { limit });
            } else if !self.store_has_more && !self.idle_timer_set && self.held() == 0 {
                self.claim = ClaimCall::AskingDue;
                out.push(Command::NextDue);
            }
        }
        self.finish_drain_if_done(out);
    }

    fn nack_of(&self, failed: &Failed) -> Nack {
        Nack {
            claim: failed.claim,
            error: failed.failure.error.clone(),
            disposition: if failed.failure.permanent {
                NackDisposition::Permanent
            } else {
                NackDisposition::Retry(self.config.retry.delay(
                    failed.running.message.attempt_count,
                    failed.failure.retry_after,
                ))
            },
        }
    }

    fn store_failed(
        &mut self,
        now: Instant,
        op: StoreOp,
        error: &StoreError,
        out: &mut Vec<Command>,
    ) {
        tracing::warn!(lane = %self.key, %op, %error, "store call failed; backing off");
        self.emit(
            out,
            RelayEvent::StoreError {
                lane: self.key.clone(),
                op,
                error: error.to_string(),
            },
        );
        self.backoff.failures = self.backoff.failures.saturating_add(1);
        if !self.backoff.waiting {
            self.backoff.waiting = true;
            let delay = self.config.store_backoff.backoff(self.backoff.failures);
            out.push(Command::RetryAt(now + delay));
        }
    }

    fn store_ok(&mut self) {
        self.backoff.failures = 0;
    }

    fn claimed(
        &mut self,
        now: Instant,
        call: ClaimCall,
        result: Result<ClaimBatch, StoreError>,
        out: &mut Vec<Command>,
    ) {
        let ClaimCall::Claiming { issued_at, limit } = call else {
            return;
        };
        let batch = match result {
            Ok(batch) => batch,
            Err(error) => return self.store_failed(now, StoreOp::Claim, &error, out),
        };
        self.store_ok();
        if !batch.dead_lettered.is_empty() {
            self.emit(
                out,
                RelayEvent::LeaseLapsedDeadLettered {
                    lane: self.key.clone(),
                    outbox_ids: batch.dead_lettered,
                },
            );
        }
        let got = batch.messages.len();
        if got < limit {
            self.store_has_more = false;
        }
        if got == 0 {
            out.push(Command::EmptyClaim);
            return;
        }
        let claims: Vec<ClaimRef> = batch.messages.iter().filter_map(|m| m.claim()).collect();
        if matches!(self.mode, Mode::Draining { .. } | Mode::Stopped) {
            // Claimed just as the drain began: hand them straight back.
            self.releasing += 1;
            out.push(Command::Release(claims));
            return;
        }
        let mut ids = Vec::with_capacity(got);
        let mut redeliveries = 0;
        for message in batch.messages {
            ids.push(message.outbox_id);
            if self.book.holds(message.outbox_id) {
                // Our own delivery (or buffered claim) outlived its lease and we claimed it
                // again. One delivery is enough: it adopts the fresh claim (the book moves
                // it to this batch), so its ack lands with the current token.
                continue;
            }
            if message.attempt_count > 1 {
                redeliveries += 1;
            }
            self.buffer.push_back(message);
        }
        if let Some(batch) = self.book.open(claims) {
            // The lease began no later than the claim was sent, so time the check from there.
            out.push(Command::LeaseCheckAt {
                batch,
                generation: 0,
                at: issued_at + self.lease_check_delay(),
            });
        }
        self.emit(
            out,
            RelayEvent::Claimed {
                lane: self.key.clone(),
                outbox_ids: ids,
                redeliveries,
            },
        );
        if got < limit {
            // No `next_due` while we hold claims (their own leases would answer it), but
            // the poll ceiling still holds.
            self.tick_generation += 1;
            out.push(Command::WakeAt {
                generation: self.tick_generation,
                at: now + self.config.max_poll_interval,
            });
        }
    }

    fn next_due(
        &mut self,
        now: Instant,
        result: Result<Option<Duration>, StoreError>,
        out: &mut Vec<Command>,
    ) {
        self.claim = ClaimCall::Idle;
        let due = match result {
            Ok(due) => due,
            Err(error) => return self.store_failed(now, StoreOp::NextDue, &error, out),
        };
        self.store_ok();
        let sleep = due
            .unwrap_or(self.config.max_poll_interval)
            .clamp(MIN_IDLE_SLEEP, self.config.max_poll_interval);
        self.tick_generation += 1;
        self.idle_timer_set = true;
        out.push(Command::WakeAt {
            generation: self.tick_generation,
            at: now + sleep,
        });
        self.emit(
            out,
            RelayEvent::Idle {
                lane: self.key.clone(),
                sleep,
            },
        );
    }

    fn delivery_done(
        &mut self,
        slot: Slot,
        outbox_id: Uuid,
        result: Result<(), DeliveryFailure>,
        elapsed: Duration,
    ) {
        let Some(running) = self.pool.finish(slot, outbox_id) else {
            return;
        };
        self.count_completed();
        let Some(claim) = self.book.close(outbox_id) else {
            return;
        };
        match result {
            Ok(()) => self.outcomes.acks.push(Delivered {
                running,
                claim,
                elapsed,
            }),
            Err(failure) => self.outcomes.nacks.push(Failed {
                running,
                claim,
                failure,
                ran: elapsed,
            }),
        }
    }

    fn count_completed(&mut self) {
        if let Mode::Draining { completed, .. } = &mut self.mode {
            *completed += 1;
        }
    }

    fn handler_died(&mut self, now: Instant, slot: Slot, reason: String, out: &mut Vec<Command>) {
        let replace = matches!(self.mode, Mode::Running | Mode::Paused);
        let Some(running) = self.pool.died(slot, replace) else {
            return;
        };
        if replace {
            out.push(Command::ReplaceHandler(slot));
        }
        let Some(running) = running else {
            return;
        };
        let outbox_id = running.message.outbox_id;
        tracing::warn!(lane = %self.key, %outbox_id, %reason, "handler panicked");
        self.count_completed();
        if let Some(claim) = self.book.close(outbox_id) {
            let ran = running.ran(now);
            self.outcomes.nacks.push(Failed {
                running,
                claim,
                failure: DeliveryFailure::panic(&reason),
                ran,
            });
        }
    }

    fn acked(
        &mut self,
        now: Instant,
        result: Result<Vec<ClaimOutcome>, StoreError>,
        wall_ms: UnixMillis,
        out: &mut Vec<Command>,
    ) {
        let acking = std::mem::take(&mut self.outcomes.acking);
        let outcomes = match result {
            Ok(outcomes) => outcomes,
            Err(error) => {
                // Recorded later, in the order they finished.
                let later = std::mem::replace(&mut self.outcomes.acks, acking);
                self.outcomes.acks.extend(later);
                return self.store_failed(now, StoreOp::Ack, &error, out);
            }
        };
        self.store_ok();
        for (delivered, outcome) in acking.into_iter().zip(outcomes) {
            let message = &delivered.running.message;
            let outbox_id = message.outbox_id;
            if message.ordering_key.is_some() {
                // The ack frees the key's next message: it is claimable now.
                self.store_has_more = true;
            }
            match outcome {
                ClaimOutcome::Applied => {
                    let end_to_end = Duration::from_millis(
                        u64::try_from(wall_ms.saturating_sub(message.created_at)).unwrap_or(0),
                    );
                    tracing::debug!(lane = %self.key, %outbox_id, "delivered");
                    self.emit(
                        out,
                        RelayEvent::Delivered {
                            lane: self.key.clone(),
                            outbox_id,
                            attempt: message.attempt_count,
                            duration: delivered.elapsed,
                            end_to_end,
                        },
                    );
                }
                ClaimOutcome::LostClaim => {
                    tracing::info!(lane = %self.key, %outbox_id, "ack found the claim lost");
                    self.emit(
                        out,
                        RelayEvent::LostClaim {
                            lane: self.key.clone(),
                            outbox_id,
                        },
                    );
                }
            }
        }
    }

    fn nacked(
        &mut self,
        now: Instant,
        result: Result<Vec<NackOutcome>, StoreError>,
        out: &mut Vec<Command>,
    ) {
        let nacking = std::mem::take(&mut self.outcomes.nacking);
        let outcomes = match result {
            Ok(outcomes) => outcomes,
            Err(error) => {
                let later = std::mem::replace(&mut self.outcomes.nacks, nacking);
                self.outcomes.nacks.extend(later);
                return self.store_failed(now, StoreOp::Nack, &error, out);
            }
        };
        self.store_ok();
        // A retry is now due at some later time: the idle sleep must be asked again.
        self.idle_timer_set = false;
        for (failed, outcome) in nacking.into_iter().zip(outcomes) {
            let outbox_id = failed.running.message.outbox_id;
            tracing::info!(lane = %self.key, %outbox_id, kind = %failed.failure.kind, ?outcome, error = %failed.failure.error, "delivery failed");
            self.emit(
                out,
                RelayEvent::Failed {
                    lane: self.key.clone(),
                    outbox_id,
                    kind: failed.failure.kind,
                    duration: failed.ran,
                    outcome,
                    error: failed.failure.error,
                },
            );
        }
    }

    fn lease_due(&mut self, batch: u64, generation: u64, out: &mut Vec<Command>) {
        let Some(claims) = self.book.due(batch, generation) else {
            return; // every claim of the batch was settled: a stale timer
        };
        if self.config.lease_extend_margin.is_none() {
            // No extension: the lease lapses now. Running deliveries go on (their late acks
            // are fenced by the store if another claimer took them); buffered ones are
            // dropped, since starting them now would race the next claimer.
            let ids: Vec<Uuid> = claims.iter().map(|c| c.outbox_id).collect();
            self.lapse(&ids);
            self.emit(
                out,
                RelayEvent::LeaseExpired {
                    lane: self.key.clone(),
                    outbox_ids: ids,
                },
            );
            return;
        }
        if let Some(generation) = self.book.bump(batch) {
            out.push(Command::Extend {
                batch,
                generation,
                claims,
            });
        }
    }

    /// These claims' leases lapsed for good: stop extending them, drop buffered ones.
    fn lapse(&mut self, outbox_ids: &[Uuid]) {
        self.book.lapse(outbox_ids);
        let (dropped, kept) = std::mem::take(&mut self.buffer)
            .into_iter()
            .partition::<Vec<_>, _>(|m| outbox_ids.contains(&m.outbox_id));
        self.buffer = kept.into();
        for message in dropped {
            self.book.close(message.outbox_id);
        }
        // Lapsed rows are claimable again, by anyone.
        self.idle_timer_set = false;
    }

    fn extended(
        &mut self,
        now: Instant,
        batch: u64,
        generation: u64,
        claims: Vec<ClaimRef>,
        result: Result<Vec<ClaimOutcome>, StoreError>,
        out: &mut Vec<Command>,
    ) {
        let next_check = match result {
            Ok(outcomes) => {
                self.store_ok();
                let extended = outcomes
                    .iter()
                    .filter(|o| **o == ClaimOutcome::Applied)
                    .count();
                let lapsed: Vec<Uuid> = claims
                    .iter()
                    .zip(&outcomes)
                    // Settled meanwhile (acked, released) is not a lapse.
                    .filter(|(c, o)| **o == ClaimOutcome::LostClaim && self.book.holds(c.outbox_id))
                    .map(|(c, _)| c.outbox_id)
                    .collect();
                if extended > 0 {
                    self.emit(
                        out,
                        RelayEvent::LeaseExtended {
                            lane: self.key.clone(),
                            count: extended,
                        },
                    );
                }
                if !lapsed.is_empty() {
                    // Lost for good: each lapse is reported once, then no longer extended.
                    self.lapse(&lapsed);
                    self.emit(
                        out,
                        RelayEvent::LeaseExpired {
                            lane: self.key.clone(),
                            outbox_ids: lapsed,
                        },
                    );
                }
                self.lease_check_delay()
            }
            Err(error) => {
                self.store_failed(now, StoreOp::ExtendLease, &error, out);
                // Try again well before the margin is used up.
                self.config.lease_extend_margin.unwrap_or(self.config.lease) / 4
            }
        };
        if self.book.is_current(batch, generation) {
            out.push(Command::LeaseCheckAt {
                batch,
                generation,
                at: now + next_check,
            });
        }
    }

    fn drain(&mut self, now: Instant, timeout: Duration, out: &mut Vec<Command>) {
        // Joining a drain under way: this caller's own deadline applies too, so the
        // shorter one wins.
        out.push(Command::DrainDeadlineAt(now + timeout));
        if matches!(self.mode, Mode::Draining { .. }) {
            return;
        }
        self.mode = Mode::Draining {
            completed: 0,
            released: 0,
            deadline_passed: false,
        };
        let claims: Vec<ClaimRef> = std::mem::take(&mut self.buffer)
            .into_iter()
            .filter_map(|m| self.book.close(m.outbox_id))
            .collect();
        if !claims.is_empty() {
            self.releasing += 1;
            out.push(Command::Release(claims));
        }
    }

    fn drain_deadline(&mut self, out: &mut Vec<Command>) {
        let Mode::Draining {
            deadline_passed, ..
        } = &mut self.mode
        else {
            return;
        };
        if *deadline_passed {
            return;
        }
        *deadline_passed = true;
        // One last try at what finished; the deadline does not wait for it. What the store
        // would not take lapses and is redelivered then.
        if !self.outcomes.flushing() {
            if !self.outcomes.acks.is_empty() {
                let acks = self.outcomes.acks.iter().map(|d| d.claim).collect();
                self.outcomes.acking = std::mem::take(&mut self.outcomes.acks);
                out.push(Command::Ack(acks));
            } else if !self.outcomes.nacks.is_empty() {
                self.outcomes.nacking = std::mem::take(&mut self.outcomes.nacks);
                let nacks = self
                    .outcomes
                    .nacking
                    .iter()
                    .map(|f| self.nack_of(f))
                    .collect();
                out.push(Command::Nack(nacks));
            }
        }
        let mut claims = Vec::new();
        for running in self.pool.abandon() {
            out.push(Command::KillHandler(running.slot));
            if let Some(claim) = self.book.close(running.message.outbox_id) {
                claims.push(claim);
            }
        }
        if !claims.is_empty() {
            self.releasing += 1;
            out.push(Command::Release(claims));
        }
    }

    fn released(&mut self, result: Result<Vec<ClaimOutcome>, StoreError>) {
        self.releasing = self.releasing.saturating_sub(1);
        let applied = match result {
            Ok(outcomes) => outcomes
                .iter()
                .filter(|o| **o == ClaimOutcome::Applied)
                .count(),
            Err(error) => {
                // The leases lapse on their own; the messages are redelivered then.
                tracing::warn!(lane = %self.key, %error, "could not release claims");
                0
            }
        };
        if let Mode::Draining { released, .. } = &mut self.mode {
            *released += applied;
        }
    }

    fn finish_drain_if_done(&mut self, out: &mut Vec<Command>) {
        let Mode::Draining {
            completed,
            released,
            deadline_passed,
        } = self.mode
        else {
            return;
        };
        let done = if deadline_passed {
            self.releasing == 0
        } else {
            self.pool.running() == 0
                && self.outcomes.is_empty()
                && self.releasing == 0
                && !matches!(self.claim, ClaimCall::Claiming { .. })
        };
        if !done {
            return;
        }
        if deadline_passed && !self.outcomes.is_empty() {
            let unrecorded = self.held();
            tracing::warn!(lane = %self.key, unrecorded, "drain deadline: acks and nacks not recorded");
        }
        self.mode = Mode::Stopped;
        let report = DrainReport {
            completed,
            released,
        };
        self.emit(
            out,
            RelayEvent::LaneStopped {
                lane: self.key.clone(),
                report: report.clone(),
            },
        );
        out.push(Command::Stop(report));
    }
}
