//! `LaneCore`: the whole logic of a lane as a plain synchronous state machine. No actors, no
//! clock reads, no I/O: the lane actor feeds it [`Input`]s with the time as a value, and
//! carries out the [`Command`]s it answers with (store calls, deliveries, timers, events).
//!
//! Why sans-IO: every decision (how much to claim, when to ack, when to sleep, what a drain
//! releases) is then a unit test that runs in microseconds without tokio, and the actor
//! never awaits a store call inside its handler, so a slow store cannot delay a lease
//! check, a drain or a status answer.
//!
//! The pipeline: up to `claims_in_flight` claims (or `ack_and_claim`s; or one `next_due`
//! and no claim) and one plain ack/nack flush are in flight at a time. A claim asks for the
//! free handler slots plus the room left in the prefetch buffer, less what the claims
//! already out may bring, and at most its share of the window, so handlers find work
//! waiting when they finish and two claims' round trips overlap. A finished delivery's ack
//! rides along with the next claim (each claim out carries the acks of what finished before
//! it went: a busy cycle costs one round trip, and with two claims out two cycles overlap),
//! or goes alone when no claim is due and nothing else is in flight.
//!
//! The quiet idle path: a poll makes one claim, whatever `claims_in_flight` says; a second
//! goes beside it only once the store has shown more (a claim came back full, or news came:
//! a wake-up, a resume, an ack that frees a key). A claim that comes back short also
//! answers `next_due` ([`ClaimBatch::next_due`]), so when the lane then holds nothing (no
//! delivery running, nothing buffered, no ack waiting) it sleeps on that answer: an idle
//! lane pays one claim and one ack per message. Anything since the claim that may make a
//! message claimable sooner (a wake-up, a nack's retry, a lease lapse, a lost or released
//! claim, an acked head that frees its key's next message) forgets that answer, and the
//! lane claims or asks `next_due` as before. `next_due` is never asked while the lane holds
//! claims, since their own leases would be the answer; the poll ceiling still applies.
//! [`ClaimLoop`] holds these decisions' state (the call out, "the store may have more",
//! the remembered `next_due`, the idle sleep) and checks their invariant in debug builds.
//!
//! Claim gates ([`gate`]): before each claim the core asks the lane's gates (rate limit,
//! circuit breaker, Retry-After hold) how much it may take, and sleeps until the time they
//! name when they say wait. A claim takes only what the rate allows, so claimed messages
//! never wait for tokens; an open breaker stops claims (no attempts spent) and hands the
//! buffered claims back unused.

use std::time::Duration;

use tokio::time::Instant;

use crate::config::LaneConfig;
use crate::lane::{LaneKey, RelayEvent};
use crate::message::{ClaimRef, OutboxMessage};
use crate::mutation::Mutation;
use crate::store::StoreError;
use crate::store::StoreOp;
use gate::{BreakerState, GateKind};

mod answers;
mod book;
mod buffer;
mod cadence;
mod claim_loop;
mod drain;
pub(crate) mod gate;
mod hand_off;
mod io;
mod lease;
mod outcomes;
mod pool;
#[cfg(test)]
mod tests;

use book::LeaseBook;
use buffer::Buffer;
use cadence::{Cadence, PrefetchBounds};
use claim_loop::{ClaimLoop, ClaimOut};
use gate::{Admit, Gates};
use hand_off::Credits;
pub(crate) use io::{ClaimId, Command, Input, StoreAnswer, StoreRequest, TimerKind};
use outcomes::Outcomes;
use pool::HandlerPool;
pub(crate) use pool::Slot;

/// The shortest idle sleep: a guard against a store whose `next_due` keeps saying "now".
pub(crate) const MIN_IDLE_SLEEP: Duration = Duration::from_millis(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Running,
    Paused,
    Draining {
        completed: usize,
        released: usize,
        /// Claims a failed release could not hand back: they lapse with their leases.
        unreleased: usize,
        deadline_passed: bool,
    },
    Stopped,
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
    buffer: Buffer,
    outcomes: Outcomes,
    /// When to claim, ask `next_due` or sleep: the claim pipeline's call in flight and
    /// what the store's last answers said ([`ClaimLoop`] states its invariant).
    claim_loop: ClaimLoop,
    backoff: Backoff,
    /// Claims handed back by release calls in flight: still claimed in the store until
    /// the release lands (a claim's room leaves them out; a drain waits for none).
    releasing: usize,
    gates: Gates,
    /// The gate timer scheduled, if any: its generation and when it fires.
    gate_timer: Option<(u64, Instant)>,
    gate_generation: u64,
    /// Since when, and by which gate, the lane has wanted to claim and been held back.
    throttled: Option<(Instant, GateKind)>,
    /// When claims linger, and how long key runs are.
    cadence: Cadence,
    /// Whether this lane takes hand-offs ([`LaneConfig::hand_off`], and a store that
    /// offers them): set by the actor once it registered its taker.
    hand_off: bool,
    /// The hand-off credits granted to the taker ([`hand_off`]).
    credits: Credits,
    /// Whether the relay's due watcher looks after this lane while it is idle
    /// ([`LaneCore::watched`]): then an idle lane arms no poll ceiling of its own.
    watched: bool,
    /// The deliberate bug the simulation switched on, if any; always `None` in production.
    mutation: Option<Mutation>,
}

impl LaneCore {
    /// A lane with `config.concurrency` idle slots; paused lanes claim nothing until resumed.
    pub(crate) fn new(config: LaneConfig, paused: bool) -> Self {
        let gates = Gates::new(&config);
        let claim_loop = ClaimLoop::new(config.claims_in_flight_or_default());
        let cadence = Cadence::new(config.prefetch);
        Self {
            key: LaneKey::new(&config.name, &config.target),
            pool: HandlerPool::new(config.concurrency),
            config,
            mode: if paused { Mode::Paused } else { Mode::Running },
            book: LeaseBook::default(),
            buffer: Buffer::default(),
            outcomes: Outcomes::default(),
            claim_loop,
            backoff: Backoff::default(),
            releasing: 0,
            gates,
            gate_timer: None,
            gate_generation: 0,
            throttled: None,
            cadence,
            hand_off: false,
            credits: Credits::default(),
            watched: false,
            mutation: None,
        }
    }

    /// The relay's due watcher (`relay/upkeep.rs`) looks after this lane: every pass it asks
    /// the store when each lane's next message is due and hands the lane that time
    /// ([`Input::DueAt`]), so an idle lane sleeps until its own known due time, a wake-up or
    /// that poke, and never polls on its `max_poll_interval`. What the ceiling poll was
    /// there for (a lost wake-up, another process's nack, claim or lapse) the watcher sees
    /// in one statement for every lane. A lane holding claims keeps its ceiling.
    pub(crate) fn watched(mut self) -> Self {
        self.watched = true;
        self
    }

    /// Switches a deliberate bug on at the decision lines that ask for it ([`Mutation`]):
    /// the simulation's way to prove its checks catch it.
    #[cfg(test)]
    pub(crate) fn mutated_by(mut self, mutation: Option<Mutation>) -> Self {
        self.mutation = mutation;
        self.claim_loop.mutate(mutation);
        self
    }

    /// Whether `mutation` is switched on in this lane.
    fn mutated(&self, mutation: Mutation) -> bool {
        self.mutation == Some(mutation)
    }

    /// The actor registered a taker for this lane: grant it credits while idle, if the
    /// lane's config asks for hand-offs.
    pub(crate) fn enable_hand_off(&mut self) {
        self.hand_off = self.config.hand_off;
    }

    /// Deliveries running now.
    pub(crate) fn in_flight(&self) -> usize {
        self.pool.running()
    }

    /// Claimed messages waiting for a handler.
    #[cfg(any(test, feature = "simulate"))]
    pub(crate) fn buffered(&self) -> usize {
        self.buffer.len()
    }

    /// Whether the lane holds its claims back now: paused or draining, a gate holding it,
    /// a store backoff, a claim linger. (The simulation asks: a lane that goes idle after a
    /// wake-up without claiming must have one of these reasons.)
    #[cfg(any(test, feature = "simulate"))]
    pub(crate) fn claims_held_back(&self) -> bool {
        self.mode != Mode::Running
            || self.throttled.is_some()
            || self.backoff.waiting
            || self.gate_timer.is_some()
    }

    /// Hand-off credits granted and not settled (in the taker, or taken and on their way).
    /// (The simulation checks this against what the taker and the mailbox hold.)
    #[cfg(any(test, feature = "simulate"))]
    pub(crate) fn credits_unsettled(&self) -> usize {
        self.credits.outstanding()
    }

    /// The circuit breaker's state, if the lane has one.
    pub(crate) fn breaker_state(&self) -> Option<BreakerState> {
        self.gates.breaker_state()
    }

    /// Messages still claimed in the store that the lane no longer runs or buffers and no
    /// claim out carries: finished deliveries whose outcomes are not recorded yet, and
    /// claims handed back by a release in flight. (The simulation counts them in what the
    /// lane holds there.)
    #[cfg(any(test, feature = "simulate"))]
    pub(crate) fn settling_apart_from_claims(&self) -> usize {
        self.outcomes.waiting_acks() + self.outcomes.apart() + self.releasing
    }

    /// The acks riding on claim `claim`.
    #[cfg(any(test, feature = "simulate"))]
    pub(crate) fn riding_on(&self, claim: ClaimId) -> usize {
        self.outcomes.riding_on(claim)
    }

    /// Claims the lane holds (running, buffered, or finished and not yet recorded).
    pub(crate) fn held(&self) -> usize {
        self.book.len() + self.outcomes.len()
    }

    /// Feeds one input at `now`; the commands to carry out, in order.
    pub(crate) fn handle(&mut self, now: Instant, input: Input) -> Vec<Command> {
        let mut out = Vec::new();
        if self.mode == Mode::Stopped {
            return out;
        }
        match input {
            Input::Start | Input::Wake => self.store_may_have_more(),
            Input::DueAt(at) => self.due_at(now, at, &mut out),
            Input::Timer { kind, generation } => self.timer(now, kind, generation, &mut out),
            Input::Pause => {
                if self.mode == Mode::Running {
                    self.mode = Mode::Paused;
                    // Only what already runs finishes: what waits in the buffer goes back
                    // unused (pending again, its attempt not counted), as a drain releases
                    // it. An operator pauses a misbehaving target now, not once the
                    // prefetch has drained into it.
                    self.release_buffer(&mut out);
                }
            }
            Input::Resume => {
                if self.mode == Mode::Paused {
                    self.mode = Mode::Running;
                    self.store_may_have_more();
                }
            }
            Input::Drain { timeout } => self.drain(now, timeout, &mut out),
            Input::DeliveryDone {
                slot,
                outbox_id,
                result,
                elapsed,
            } => self.delivery_done(now, slot, outbox_id, result, elapsed, &mut out),
            Input::HandlerDied { slot, reason } => self.handler_died(now, slot, reason, &mut out),
            Input::Store(answer) => self.store_answered(now, answer, &mut out),
            Input::HandedOff { message, sent_at } => {
                self.handed_off(now, *message, sent_at, &mut out)
            }
            Input::HandOffReturned(n) => self.credits_returned(n),
            Input::CreditsRevoked(left) => self.credits_revoked(left),
        }
        self.gate_changes(&mut out);
        self.pump(now, &mut out);
        self.gate_changes(&mut out);
        out
    }

    /// A timer fired: act on it if it is still the current one of its kind.
    fn timer(&mut self, now: Instant, kind: TimerKind, generation: u64, out: &mut Vec<Command>) {
        match kind {
            TimerKind::Poll => {
                self.claim_loop.poll_fired(generation);
            }
            TimerKind::Gate => {
                if self
                    .gate_timer
                    .is_some_and(|(current, _)| current == generation)
                {
                    self.gate_timer = None;
                }
            }
            TimerKind::StoreRetry => {
                self.backoff.waiting = false;
                self.store_may_have_more();
            }
            TimerKind::DrainDeadline => self.drain_deadline(now, out),
            TimerKind::Lease { batch } => self.lease_due(now, batch, generation, out),
        }
    }

    /// The due watcher says a message may be claimable at `at`: a lane asleep claims if that
    /// is now, and else sleeps no later than `at` ([`ClaimLoop::due_at`]). A lane that is
    /// not asleep is at work on the store already (a claim or `next_due` out, claims held
    /// under the poll ceiling, a backoff or gate timer): its own answers say as much, and
    /// the watcher's next pass says it again, so a busy lane makes no extra claim for it.
    fn due_at(&mut self, now: Instant, at: Instant, out: &mut Vec<Command>) {
        if self.mode != Mode::Running || !self.claim_loop.sleeping() {
            return; // a resume claims anyway
        }
        if at <= now {
            self.claim_loop.due_now();
        } else if let Some(generation) = self.claim_loop.due_at(at) {
            out.push(Command::timer(TimerKind::Poll, at, generation));
        }
    }

    /// A store call answered.
    fn store_answered(&mut self, now: Instant, answer: StoreAnswer, out: &mut Vec<Command>) {
        match answer {
            StoreAnswer::Claimed { claim, result } => {
                let call = self.claim_loop.claim_answered(claim);
                self.claimed(now, call, result, out);
            }
            StoreAnswer::AckedAndClaimed {
                claim,
                result,
                wall_ms,
            } => {
                let call = self.claim_loop.claim_answered(claim);
                match result {
                    Ok(answer) => {
                        self.acked(now, Some(claim), Ok(answer.acked), wall_ms, out);
                        self.claimed(now, call, answer.claimed, out);
                    }
                    // Neither happened: the acks go out again, the claim is made again.
                    Err(error) => {
                        if let Some(call) = call {
                            self.gates.claim_answered(call.limit, &[]);
                        }
                        self.acked(now, Some(claim), Err(error), wall_ms, out)
                    }
                }
            }
            StoreAnswer::Acked { result, wall_ms } => self.acked(now, None, result, wall_ms, out),
            StoreAnswer::Nacked(result) => self.nacked(now, result, out),
            StoreAnswer::NextDue(result) => self.next_due(now, result, out),
            StoreAnswer::Extended {
                batch,
                generation,
                claims,
                result,
            } => self.extended(now, batch, generation, claims, result, out),
            StoreAnswer::Released { sent, result } => self.released(sent, result),
        }
    }

    /// How many messages a claim may take now: free slots plus prefetch room.
    ///
    /// So the lane never holds more than `concurrency` plus the prefetch in force, at most
    /// [`LaneConfig::most_held`] claims (running, buffered or being acked: what a crash
    /// would have delivered again). A claim that also asked
    /// for what running handlers will finish while it is out would keep fast handlers
    /// busier, but would break that bound. Hand-off credits outstanding (in the taker, or
    /// taken by an enqueue and on their way) count as held.
    fn claim_limit(&self) -> usize {
        let outstanding = if self.mutated(Mutation::ClaimRoomIgnoresCredits) {
            0
        } else {
            self.credits_outstanding()
        };
        self.claim_room(self.pool.idle())
            .saturating_sub(outstanding)
    }

    /// What one claim may take with `free` handler slots: the room
    /// ([`LaneCore::room_with`]), at most its share of the window when the lane keeps
    /// several claims out ([`LaneCore::claim_share`]).
    fn claim_room(&self, free: usize) -> usize {
        self.room_with(free).min(self.claim_share())
    }

    /// The room with `free` handler slots: those plus the room left in the prefetch in force
    /// ([`Cadence::prefetch`]), less what the store may hold for the claims out and for the
    /// finished deliveries that no claim carries (so the bound, [`LaneConfig::most_held`],
    /// holds in the store with several claims out), at most `batch_size`. Hand-off credits
    /// take all of it (no claim is out then).
    ///
    /// A finished delivery's slot is free before its outcome is recorded, and until then
    /// its message is still claimed in the store. The acks waiting ride on this claim and
    /// are recorded in its transaction, so the store never holds them and its rows
    /// together; the nacks and a plain flush in flight are recorded apart.
    fn room_with(&self, free: usize) -> usize {
        let out = if self.mutated(Mutation::ClaimRoomIgnoresClaimsOut) {
            0
        } else {
            self.claims_out_at_worst()
        };
        let apart = if self.mutated(Mutation::ClaimRoomIgnoresUnrecordedOutcomes) {
            0
        } else {
            self.outcomes.apart() + self.releasing
        };
        (free + self.cadence.prefetch())
            .saturating_sub(self.buffer.len())
            .saturating_sub(out)
            .saturating_sub(apart)
            .min(self.config.batch_size)
    }

    /// What the store may hold for the claims out, at worst: each claim's limit, or the
    /// acks riding on it where they are more (recorded in the claim's own transaction:
    /// before it commits the store holds the acked rows, after it the claimed ones).
    fn claims_out_at_worst(&self) -> usize {
        self.claim_loop
            .out_limits()
            .map(|(claim, limit)| limit.max(self.outcomes.riding_on(claim)))
            .sum()
    }

    /// The most one claim takes: the whole window (`concurrency` plus the prefetch in force,
    /// at most `batch_size`) with one claim in flight; with N, an Nth of it (rounded up).
    /// Else the first claim of a drain would take the whole window and the others would
    /// find no room: the round trips overlap only when each claim takes a part.
    fn claim_share(&self) -> usize {
        let window =
            (self.config.concurrency + self.cadence.prefetch()).min(self.config.batch_size);
        window.div_ceil(self.claim_loop.max_claims())
    }

    /// Whether another claim may go out beside those already out. A breaker that is not
    /// closed admits one probe, with no other claim out: a claim sent while it was closed
    /// must not be taken for the probe's answer.
    fn may_claim_now(&self) -> bool {
        self.claim_loop.may_claim()
            && (!self.claim_loop.is_claiming()
                || self
                    .gates
                    .breaker_state()
                    .is_none_or(|state| state == BreakerState::Closed))
    }

    fn emit(&self, out: &mut Vec<Command>, event: RelayEvent) {
        out.push(Command::Emit(event));
    }

    /// Moves the lane along after every input: start buffered work, flush outcomes, claim,
    /// or go to sleep; and end a drain that has nothing left to wait for.
    fn pump(&mut self, now: Instant, out: &mut Vec<Command>) {
        // In claim order, passing a message whose key has a delivery running: the rest of
        // a key run waits for the message before it (which is running, or ahead of it here).
        for key in self.pool.freed_keys() {
            self.buffer.key_freed(key);
        }
        while self.pool.idle() > 0 {
            let pool = &self.pool;
            let key_next_early = self.mutated(Mutation::KeyNextBeforeOutcome);
            let pool_running = |key: &str| !key_next_early && pool.key_running(key);
            let Some(message) = self.buffer.next(pool_running) else {
                break;
            };
            let lapsed_starts = self.mutated(Mutation::LapsedClaimStarts);
            if self.book.may_have_lapsed(message.outbox_id, now) && !lapsed_starts {
                // Never started past its lease: another claimer may hold it by now, or be
                // delivering its key's message before it again.
                self.drop_lapsed(&message, out);
                continue;
            }
            let margin = if self.mutated(Mutation::NoStartMargin) {
                Duration::ZERO
            } else {
                self.start_margin()
            };
            if self.book.may_have_lapsed(message.outbox_id, now + margin) && !lapsed_starts {
                // Its lease holds, but not for the start margin: handed back unused, so
                // it cannot run past its lapse beside the next claimer's delivery.
                self.release_unstarted(&message, out);
                continue;
            }
            if let Some(slot) = self.pool.start(&message, now) {
                out.push(Command::Deliver {
                    slot,
                    message: Box::new(message),
                });
            }
        }
        // Hand-off credits go back before anything but sleep: a claim waits for the answer.
        self.revoke_credits_if_busy(now, out);
        let store_open = !self.backoff.waiting;
        let claiming = self.mode == Mode::Running && self.claim_loop.store_has_more();
        // The lane's last claims are being recorded and it does not know when the next
        // message is due (its short claim did not say): the flush asks by claiming, which
        // answers `next_due` when it comes back empty, instead of a `next_due` call after.
        let going_idle = self.mode == Mode::Running
            && self.book.len() == 0
            && !self.claim_loop.is_claiming()
            && !self.claim_loop.knows_due()
            && !self.claim_loop.sleeping()
            && self.outcomes.acks_ready();
        let limit = if store_open
            && (claiming || going_idle)
            && self.may_claim_now()
            && self.credits_settled()
        {
            self.admitted(now, out)
        } else {
            self.throttle_end(now, out);
            0
        };
        let store_open = store_open && !(limit > 0 && self.linger(now, limit, out));
        // The claim carries the acks waiting; with none, it goes on its own.
        let rode = store_open && self.flush(now, (limit > 0).then_some(limit), out);
        if store_open && !rode && self.mode == Mode::Running {
            if claiming && limit > 0 {
                self.send_claim(now, limit, out);
            } else if self.claim_loop.is_idle()
                && !self.claim_loop.store_has_more()
                && !self.claim_loop.sleeping()
                && self.held() == 0
            {
                match self.claim_loop.take_known_due() {
                    // The short claim already said: no store call to sleep on it.
                    Some(due) => {
                        let wait = due.map(|at| at.saturating_duration_since(now));
                        self.sleep_until_due(now, wait, out);
                    }
                    None => {
                        self.claim_loop.asking_due();
                        out.push(Command::Store(StoreRequest::NextDue));
                    }
                }
            }
        }
        if store_open && self.mode == Mode::Running {
            self.claim_beside(now, out);
        }
        self.grant_credits_if_idle(now, out);
        self.finish_drain_if_done(out);
    }

    /// Further claims beside those out, while the store has shown it may have more
    /// ([`ClaimLoop::may_claim_beside`]: an idle poll asks with one claim), the lane may keep
    /// more out ([`LaneConfig::claims_in_flight`]) and has room for them: each carries the
    /// acks waiting when it goes, so two claims' store cycles overlap with their acks.
    fn claim_beside(&mut self, now: Instant, out: &mut Vec<Command>) {
        while self.claim_loop.is_claiming()
            && self.claim_loop.may_claim_beside()
            && self.may_claim_now()
            && self.credits_settled()
        {
            let limit = self.admitted(now, out);
            if limit == 0 || self.linger(now, limit, out) {
                return;
            }
            self.send_claim(now, limit, out);
        }
    }

    /// Whether a claim of `limit`, and the flush it would ride on, waits a moment for the
    /// running handlers to finish ([`Cadence::linger`]); if so, a timer ends the wait.
    fn linger(&mut self, now: Instant, limit: usize, out: &mut Vec<Command>) -> bool {
        let room = self.claim_room(self.pool.idle() + self.pool.running());
        match self
            .cadence
            .linger(now, limit, room, self.config.claim_linger)
        {
            Some(at) => {
                // Set again after any other timer fired, so the wait always ends.
                self.gate_timer_at(at, out);
                true
            }
            None => false,
        }
    }

    /// The longest key run a claim of `limit` asks for ([`Cadence::key_run`]).
    pub(crate) fn key_run(&self, limit: usize) -> usize {
        self.cadence.key_run(limit, self.config.key_run)
    }

    /// Adds a finished delivery's run time to the moving average; the prefetch shrinks
    /// with deliveries that slow down.
    pub(super) fn note_delivery_time(&mut self, took: Duration) {
        self.cadence.note_delivery(took);
        self.cadence.adjust_prefetch(self.prefetch_bounds(), false);
    }

    /// Adds a claim's round trip to the moving average; the prefetch grows (at most
    /// twofold) while deliveries are quicker than claims ([`Cadence::adjust_prefetch`]).
    pub(super) fn note_claim_time(&mut self, took: Duration) {
        self.cadence.note_claim(took);
        self.cadence.adjust_prefetch(self.prefetch_bounds(), true);
    }

    /// What the prefetch may be, by the lane's config ([`LaneConfig::prefetch_max`]).
    fn prefetch_bounds(&self) -> PrefetchBounds {
        PrefetchBounds {
            floor: self.config.prefetch,
            ceiling: self.config.prefetch_ceiling(),
            concurrency: self.config.concurrency,
            max_wait: self.config.lease / crate::config::PREFETCH_LEASE_SHARE,
        }
    }

    /// How many claimed messages the lane keeps ahead of its handlers now.
    #[cfg(test)]
    pub(crate) fn prefetch_in_force(&self) -> usize {
        self.cadence.prefetch()
    }

    /// How many messages a claim may take now, by the free room and the gates; when a gate
    /// holds the lane back, counts the throttled time and sets a timer for when it lets go.
    fn admitted(&mut self, now: Instant, out: &mut Vec<Command>) -> usize {
        let want = self.claim_limit();
        if want == 0 {
            self.throttle_end(now, out);
            return 0;
        }
        match self.gates.admit(now, want) {
            Admit::UpTo(limit) => limit,
            Admit::Wait { gate, until } => {
                match self.throttled {
                    Some((_, held_by)) if held_by == gate => {}
                    _ => {
                        self.throttle_end(now, out);
                        self.throttled = Some((now, gate));
                    }
                }
                if let Some(at) = until {
                    self.gate_timer_at(at, out);
                }
                0
            }
        }
    }

    /// A gate lets go at `at`: be woken then (unless an earlier timer is set, which asks
    /// the gates again when it fires).
    fn gate_timer_at(&mut self, at: Instant, out: &mut Vec<Command>) {
        if self.gate_timer.is_some_and(|(_, set)| set <= at) {
            return;
        }
        self.gate_generation += 1;
        self.gate_timer = Some((self.gate_generation, at));
        out.push(Command::timer(TimerKind::Gate, at, self.gate_generation));
    }

    /// The lane no longer waits on a gate: the throttled time is counted.
    fn throttle_end(&mut self, now: Instant, out: &mut Vec<Command>) {
        if let Some((since, gate)) = self.throttled.take() {
            let duration = now.saturating_duration_since(since);
            if !duration.is_zero() {
                out.push(Command::Throttled { gate, duration });
            }
        }
    }

    /// Turns the breaker's changes into events. An opening, or a Retry-After hold, hands
    /// the buffered claims back unused (their attempts not counted): delivering them now
    /// would only fail, or go against what the target asked.
    fn gate_changes(&mut self, out: &mut Vec<Command>) {
        if self.gates.take_hold_began() {
            self.release_buffer(out);
        }
        for change in self.gates.take_changes() {
            if change.state == BreakerState::Open {
                self.release_buffer(out);
            }
            tracing::warn!(lane = %self.key, state = %change.state, reason = %change.reason, "circuit breaker");
            self.emit(
                out,
                RelayEvent::BreakerChanged {
                    lane: self.key.clone(),
                    state: change.state,
                    reason: change.reason,
                },
            );
        }
    }

    /// Hands the buffered claims back unused, while running or paused (a drain has
    /// already). A paused lane holds no buffer: a pause releases it, and claims or
    /// hand-offs that arrive while paused go straight back.
    fn release_buffer(&mut self, out: &mut Vec<Command>) {
        if !matches!(self.mode, Mode::Running | Mode::Paused) {
            return;
        }
        self.release_buffered(|_| true, out);
    }

    /// A delivery of `key` failed: the rest of its key run goes back unused (each message
    /// of a run goes out only after the one before it succeeded; the store hands the key
    /// out again once the failed one is retried or dead).
    pub(super) fn release_key(&mut self, key: &str, out: &mut Vec<Command>) {
        self.release_buffered(|m| m.ordering_key.as_deref() == Some(key), out);
    }

    /// Hands `claims` back to the store, in one release call (none for no claims).
    pub(super) fn release(&mut self, claims: Vec<ClaimRef>, out: &mut Vec<Command>) {
        if claims.is_empty() {
            return;
        }
        self.releasing += claims.len();
        out.push(Command::Store(StoreRequest::Release(claims)));
    }

    /// Hands back the buffered claims `which` picks, in one release.
    fn release_buffered(&mut self, which: impl Fn(&OutboxMessage) -> bool, out: &mut Vec<Command>) {
        let back = self.buffer.take_where(which);
        let mut claims = Vec::with_capacity(back.len());
        for message in back {
            // A buffered probe that goes back is no probe: the next claim is.
            self.gates.forget(message.outbox_id);
            claims.extend(self.book.close(message.outbox_id));
        }
        self.release(claims, out);
    }

    /// A claim of up to `limit` goes out now: its id.
    fn claim_sent(&mut self, now: Instant, limit: usize, out: &mut Vec<Command>) -> ClaimId {
        self.throttle_end(now, out);
        self.gates.claim_sent(now, limit);
        self.claim_loop.claim_sent(now, limit)
    }

    /// The store may hold claimable work now (a wake-up, a tick, a resume, a retry, an
    /// acked head): see [`ClaimLoop::may_have_more`].
    pub(super) fn store_may_have_more(&mut self) {
        self.claim_loop.may_have_more();
    }

    /// Something may have become claimable sooner than the last `next_due` answer said: an
    /// idle lane asks again instead of sleeping on it.
    fn forget_due(&mut self) {
        self.claim_loop.forget_due();
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
                permanent: error.is_permanent(),
            },
        );
        self.backoff.failures = self.backoff.failures.saturating_add(1);
        if !self.backoff.waiting {
            self.backoff.waiting = true;
            let delay = self.config.store_backoff.backoff(self.backoff.failures);
            out.push(Command::timer(TimerKind::StoreRetry, now + delay, 0));
        }
    }

    fn store_ok(&mut self) {
        self.backoff.failures = 0;
    }
}
