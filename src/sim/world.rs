//! The simulated world: one thread, virtual time, one seed. An event queue ordered by
//! virtual time (ties broken by a draw from the seed, so inputs that arrive at once come
//! in a seeded order), the store on a manual clock (`store.rs`), the relays, the target and
//! the faults. Every store call and delivery goes through the checker.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::Instant;

use super::check::Checker;
use super::plan::{Plan, Store, LANE, TARGET};
use super::relay::Relay;
use super::rng::Rng;
use crate::delivery::DeliveryFailure;
use crate::lane::RelayEvent;
use crate::message::ClaimRef;
use crate::message::{OutboxMessageDraft, UnixMillis};
use crate::relay::lane::core::{ClaimId, Command, Input, Slot, StoreAnswer, StoreRequest};
use crate::store::hand_off::{HandOffEvent, HandOffSink};
use crate::store::{MessageFilter, Nack, Outbox};
use crate::time::ManualClock;

mod calls;
mod faults;
mod store;
mod target;

use store::SimStore;

use faults::short;

/// The store clock's reading at virtual time zero.
const EPOCH_MS: i64 = 1_800_000_000_000;

/// Runs a memory-store call to its end. The memory store never waits (its lock is a
/// plain mutex and it awaits nothing), so one poll finishes it.
pub(crate) fn ready<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(output) => output,
        Poll::Pending => unreachable!("the memory store answered without waiting"),
    }
}

/// What a clock `ppm` parts per million fast (slow, if negative) reads after `elapsed`.
fn skewed(elapsed: Duration, ppm: i64) -> Duration {
    let nanos = elapsed.as_nanos() as i128 * (1_000_000 + ppm as i128) / 1_000_000;
    Duration::from_nanos(nanos.max(0) as u64)
}

/// What a store call meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    Answered,
    FailsBeforeCommit,
    AnswerLost,
}

/// How a delivery ends.
#[derive(Debug)]
pub(crate) enum Ending {
    Result(Result<(), DeliveryFailure>),
    Panic,
}

#[derive(Debug)]
pub(crate) enum Event {
    Enqueue(usize),
    Fault(usize),
    FaultsEnd,
    Restart(usize),
    Resume {
        relay: usize,
        epoch: u64,
    },
    Lane {
        relay: usize,
        epoch: u64,
        input: Input,
    },
    Wake {
        relay: usize,
        epoch: u64,
    },
    /// A pass of `relay`'s due watcher.
    Watch(usize),
    Store {
        relay: usize,
        epoch: u64,
        call: StoreRequest,
        fate: Fate,
    },
    Done {
        relay: usize,
        epoch: u64,
        slot: Slot,
        handler: u64,
        delivery: u64,
        outbox_id: uuid::Uuid,
        ending: Ending,
        took: Duration,
    },
}

/// Store faults in force.
#[derive(Debug, Default)]
struct StoreFaults {
    fail_before: u32,
    lose_answer: u32,
    slow_until: Duration,
    slow_extra: Duration,
    /// Per relay: cut off from the store until then, its calls meeting that fate.
    cut: Vec<Option<(Duration, Fate)>>,
    /// Per relay: its wake-ups are lost until then.
    wakeups_lost_until: Vec<Duration>,
}

/// What a run saw.
#[derive(Debug, Default, Clone)]
pub(crate) struct Tally {
    pub(crate) events: u64,
    pub(crate) store_calls: u64,
    pub(crate) faults: usize,
    pub(crate) settled_at: Option<Duration>,
    pub(crate) bound: Duration,
    /// Time the lane waited on a gate (rate limit, breaker, Retry-After hold).
    pub(crate) throttled: Duration,
    /// Time the rate limit alone held the lane back.
    pub(crate) rate_limited: Duration,
    /// Time the circuit breaker was open or half-open, and since when it is now.
    pub(crate) breaker_open: Duration,
    pub(crate) breaker_open_since: Option<Duration>,
    /// Claims sent while another claim of the same relay was out.
    pub(crate) parallel_claims: u64,
    /// Claim answers that came back before the answer of an older claim still out.
    pub(crate) reordered_answers: u64,
    /// Messages handed off to a lane (written claimed by an enqueue of its process).
    pub(crate) handed_off: u64,
    /// Deliveries that ran past their lapse beside a later delivery of their key (or of
    /// themselves), and the longest such overlap.
    pub(crate) overlaps: super::check::Overlaps,
    /// Per fault class, how often a fault of it took effect: a call it failed, slowed or
    /// cut off, a live process or lane it crashed or paused, a wake-up it lost, an enqueue
    /// it failed, an event a freeze held back, a lapse seen by a relay whose clock is
    /// skewed by 0.1 % or more.
    pub(crate) fault_effects: BTreeMap<&'static str, u64>,
}

impl Tally {
    /// A fault of `class` took effect.
    pub(crate) fn mattered(&mut self, class: &'static str) {
        *self.fault_effects.entry(class).or_default() += 1;
    }
}

pub(crate) struct World<'p> {
    pub(crate) plan: &'p Plan,
    rng: Rng,
    pub(crate) now: Duration,
    base: Instant,
    clock: ManualClock,
    offset_ms: i64,
    pub(crate) store: SimStore,
    queue: BTreeMap<(Duration, u64), Event>,
    pub(crate) relays: Vec<Relay>,
    pub(crate) check: Checker,
    faults: StoreFaults,
    target_recovered: bool,
    handler_generation: u64,
    pub(crate) tally: Tally,
    /// Prints every event (`OUTBOX_SIM_TRACE=1`), to read a replayed seed.
    trace: bool,
    /// Every event in full, when asked for (`sim::run_recorded`): two runs of a seed
    /// compare theirs.
    pub(crate) record: Option<Vec<String>>,
    /// Each relay process's store object: its own hand-off registry over the shared store.
    outboxes: Vec<Outbox>,
    /// What the takers' sinks were handed during an enqueue, by relay and epoch, for the
    /// world to carry to the lanes.
    handed: Arc<Mutex<Vec<(usize, u64, HandOffEvent)>>>,
    /// Per relay: its process is frozen until then.
    frozen_until: Vec<Duration>,
    /// Events in a row at the same virtual instant.
    same_instant: u64,
}

impl<'p> World<'p> {
    pub(crate) fn new(plan: &'p Plan) -> Self {
        let clock = ManualClock::new(UnixMillis::from_millis(EPOCH_MS));
        let store = match plan.store {
            Store::Memory => SimStore::memory(&clock),
            #[cfg(all(test, feature = "sqlite"))]
            Store::Sqlite => SimStore::sqlite(&clock),
        };
        let outboxes = (0..plan.relays).map(|_| store.outbox()).collect();
        let mut world = Self {
            plan,
            rng: Rng::new(plan.seed).fork(6),
            now: Duration::ZERO,
            base: Instant::now(),
            clock,
            offset_ms: 0,
            store,
            queue: BTreeMap::new(),
            relays: (0..plan.relays)
                .map(|_| Relay::new(plan.config.clone(), plan.watched))
                .collect(),
            check: Checker::new(plan.config.ordering, super::overlap_bound(&plan.config)),
            faults: StoreFaults::default(),
            target_recovered: false,
            handler_generation: 0,
            tally: Tally::default(),
            trace: std::env::var_os("OUTBOX_SIM_TRACE").is_some(),
            record: None,
            outboxes,
            handed: Arc::default(),
            frozen_until: vec![Duration::ZERO; plan.relays],
            same_instant: 0,
        };
        world.faults.cut = vec![None; plan.relays];
        world.faults.wakeups_lost_until = vec![Duration::ZERO; plan.relays];
        for (i, message) in plan.messages.iter().enumerate() {
            world.at(message.at, Event::Enqueue(i));
        }
        for (i, (at, _)) in plan.faults.iter().enumerate() {
            world.at(*at, Event::Fault(i));
        }
        world.at(plan.faults_end, Event::FaultsEnd);
        for relay in 0..plan.relays {
            world.start(relay);
            if plan.watched {
                world.at(Duration::ZERO, Event::Watch(relay));
            }
        }
        world
    }

    pub(crate) fn at(&mut self, at: Duration, event: Event) {
        let mut tie = self.rng.next_u64();
        while self.queue.contains_key(&(at, tie)) {
            tie = tie.wrapping_add(1);
        }
        self.queue.insert((at.max(self.now), tie), event);
    }

    fn after(&mut self, delay: Duration, event: Event) {
        self.at(self.now + delay, event);
    }

    /// The store's clock now.
    pub(crate) fn store_now(&self) -> UnixMillis {
        UnixMillis::from_millis(EPOCH_MS + self.now.as_millis() as i64 + self.offset_ms)
    }

    /// What `relay`'s clock reads now: its monotonic clock runs fast or slow against the
    /// store's by the plan's skew.
    fn instant(&self, relay: usize) -> Instant {
        self.base + skewed(self.now, self.plan.clock_skew_ppm(relay))
    }

    /// When, in virtual time, `relay`'s clock reads `at`.
    fn virtual_at(&self, relay: usize, at: Instant) -> Duration {
        let read = at.saturating_duration_since(self.base);
        let ppm = self.plan.clock_skew_ppm(relay);
        // The inverse of `instant`, rounded up to the nanosecond: a timer never fires
        // before the relay's clock reads its instant (else a gate asked again would wait
        // again, at once, for ever).
        let scale = 1_000_000 + ppm as i128;
        let nanos = (read.as_nanos() as i128 * 1_000_000 + scale - 1) / scale;
        Duration::from_nanos(nanos.max(0) as u64)
    }

    /// One leg of a store round trip: the usual latency, and more while the store is slow.
    fn leg(&mut self) -> Duration {
        let mut leg =
            Duration::from_micros(self.rng.below(self.plan.latency.as_micros() as u64 + 1));
        if self.now < self.faults.slow_until {
            let extra = self
                .rng
                .below(self.faults.slow_extra.as_micros() as u64 + 1);
            if extra > 0 {
                self.tally.mattered("slow store");
            }
            leg += Duration::from_micros(extra);
        }
        leg
    }

    /// Takes the next event, unless none is due by `until`.
    pub(crate) fn step(&mut self, until: Duration) -> bool {
        let Some(entry) = self.queue.first_entry() else {
            return false;
        };
        if entry.key().0 > until {
            return false;
        }
        let ((at, _), event) = entry.remove_entry();
        if let Some(until) = self.frozen_for(&event).filter(|until| *until > at) {
            // Its process is frozen: it sees this when it runs again.
            self.tally.mattered("frozen process");
            self.at(until, event);
            return true;
        }
        // A livelock (a timer that sets itself again for the same instant) stops the run
        // with a failure to replay, instead of running for ever.
        self.same_instant = if at == self.now {
            self.same_instant + 1
        } else {
            0
        };
        if self.same_instant > 100_000 {
            self.check.fail(format!(
                "livelock: over 100,000 events at {at:?}, e.g. {}",
                short(&event)
            ));
        }
        self.now = at;
        self.check.now = at;
        self.tally.events += 1;
        if self.trace {
            eprintln!("{at:?} {}", short(&event));
        }
        if let Some(record) = &mut self.record {
            record.push(format!("{at:?} {event:?}"));
        }
        self.handle(event);
        true
    }

    /// Until when the relay process an event is for is frozen, if it is one's.
    fn frozen_for(&self, event: &Event) -> Option<Duration> {
        let relay = match event {
            Event::Enqueue(i) => self.plan.messages[*i].via?,
            Event::Restart(relay)
            | Event::Resume { relay, .. }
            | Event::Lane { relay, .. }
            | Event::Wake { relay, .. }
            | Event::Watch(relay)
            | Event::Done { relay, .. } => *relay,
            Event::Fault(_) | Event::FaultsEnd | Event::Store { .. } => return None,
        };
        self.frozen_until.get(relay).copied()
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Enqueue(i) => self.enqueue(i),
            Event::Fault(i) => self.fault(self.plan.faults[i].1),
            Event::FaultsEnd => {
                self.faults = StoreFaults::default();
                self.target_recovered = true;
                for relay in 0..self.relays.len() {
                    if self.relays[relay].paused {
                        self.relays[relay].paused = false;
                        self.feed(relay, Input::Resume);
                    }
                }
            }
            Event::Restart(relay) => {
                if !self.relays[relay].alive() {
                    self.start(relay);
                }
            }
            Event::Resume { relay, epoch } => {
                if self.relays[relay].epoch == epoch && self.relays[relay].paused {
                    self.relays[relay].paused = false;
                    self.feed(relay, Input::Resume);
                }
            }
            Event::Lane {
                relay,
                epoch,
                input,
            } => {
                if self.relays[relay].epoch == epoch {
                    self.feed(relay, input);
                }
            }
            Event::Wake { relay, epoch } => {
                if self.relays[relay].epoch == epoch {
                    self.relays[relay].wake_queued = false;
                    self.feed(relay, Input::Wake);
                }
            }
            Event::Watch(relay) => self.watch(relay),
            Event::Store {
                relay,
                epoch,
                call,
                fate,
            } => self.execute(relay, epoch, call, fate),
            Event::Done {
                relay,
                epoch,
                slot,
                handler,
                delivery,
                outbox_id,
                ending,
                took,
            } => {
                let r = &mut self.relays[relay];
                if r.epoch != epoch || r.handlers.get(slot) != Some(&handler) {
                    return; // the handler was killed or its process died: ended already
                }
                r.running.remove(&slot);
                let ok = matches!(ending, Ending::Result(Ok(())));
                self.check.ended(delivery, ok);
                let input = match ending {
                    Ending::Result(result) => Input::DeliveryDone {
                        slot,
                        outbox_id,
                        result,
                        elapsed: took,
                    },
                    Ending::Panic => Input::HandlerDied {
                        slot,
                        reason: "the target handler panicked".to_owned(),
                    },
                };
                self.feed(relay, input);
            }
        }
    }

    fn enqueue(&mut self, i: usize) {
        let planned = &self.plan.messages[i];
        let payload = serde_json::json!({ "n": i, "dedupe": planned.dedupe });
        let mut draft = match OutboxMessageDraft::new(LANE, TARGET, payload) {
            Ok(draft) => draft.with_max_attempts(planned.max_attempts),
            Err(error) => unreachable!("a planned draft is valid: {error}"),
        };
        if let Some(key) = &planned.key {
            draft = draft.with_ordering_key(key.clone());
        }
        if let Some(delay) = planned.delay {
            draft = draft.with_delay(delay);
        }
        if let Some(dedupe) = &planned.dedupe {
            draft = draft.with_dedupe_key(dedupe.clone());
        }
        self.clock.set(self.store_now());
        // Through the store object of the process that enqueues: an idle lane of that
        // process with credits takes a keyless, undelayed draft, written claimed for it.
        let outbox = match planned.via {
            Some(relay) => self.outboxes[relay].clone(),
            None => self.store.outbox(),
        };
        // A dedupe key reused with another payload is a conflict: nothing is written,
        // which the checker's row count sees.
        match self.store.run(outbox.enqueue(draft)) {
            Ok(enqueued) => self.check.enqueued(&enqueued.message, enqueued.duplicate),
            Err(crate::store::StoreError::Conflict { .. }) => {}
            Err(_) => self.tally.mattered("failing enqueues"),
        }
        self.forward_hand_offs();
        self.look_for_wakeups();
    }

    /// Carries what the takers were handed to their lanes' mailboxes, as the sink of
    /// `src/relay/lane.rs` does: a handed-off message (its lease timed from the enqueue's
    /// statement, now), or credits that came back unused. A process that died meanwhile
    /// never hears them: the row's lease lapses and it is claimed again.
    fn forward_hand_offs(&mut self) {
        let handed =
            std::mem::take(&mut *self.handed.lock().unwrap_or_else(PoisonError::into_inner));
        for (relay, epoch, event) in handed {
            let input = match event {
                HandOffEvent::Message { message, .. } => {
                    self.relays[relay].in_transit += 1;
                    Input::HandedOff {
                        message,
                        sent_at: self.instant(relay),
                    }
                }
                HandOffEvent::Returned(n) => {
                    self.relays[relay].returning += n;
                    Input::HandOffReturned(n)
                }
            };
            self.send_to_lane_after_a_leg(relay, epoch, input);
        }
    }

    /// `input` reaches the mailbox of `relay`'s incarnation `epoch` one latency leg from
    /// now (ignored if that incarnation died meanwhile).
    pub(super) fn send_to_lane_after_a_leg(&mut self, relay: usize, epoch: u64, input: Input) {
        let leg = self.leg();
        self.after(
            leg,
            Event::Lane {
                relay,
                epoch,
                input,
            },
        );
    }

    fn start(&mut self, relay: usize) {
        let receiver = self.store.backend().subscribe();
        self.relays[relay].start(relay, receiver, &mut self.handler_generation);
        self.register_taker(relay);
        self.feed(relay, Input::Start);
    }

    /// A lane that takes hand-offs registers its taker in its process's registry, as the
    /// lane actor does at start.
    fn register_taker(&mut self, relay: usize) {
        let r = &self.relays[relay];
        if !r.config.hand_off {
            return;
        }
        let Some(registry) = self.outboxes[relay].hand_off() else {
            return;
        };
        let (handed, epoch) = (self.handed.clone(), r.epoch);
        let sink: HandOffSink = Arc::new(move |event| {
            handed
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((relay, epoch, event));
        });
        let registration =
            registry.register(LANE, TARGET, &r.config.consumer_id, r.config.lease, sink);
        let r = &mut self.relays[relay];
        r.registration = Some(registration);
        if let Some(core) = r.core.as_mut() {
            core.enable_hand_off();
        }
    }

    /// Feeds one input to a relay's core and carries out its commands, as the lane actor's
    /// `feed` does.
    pub(crate) fn feed(&mut self, relay: usize, input: Input) {
        let Some(mut core) = self.relays[relay].core.take() else {
            return;
        };
        if matches!(input, Input::Wake) {
            self.relays[relay].owes_claim = true;
        }
        self.relays[relay].went_idle = false;
        if let Input::Store(
            StoreAnswer::Claimed { claim, .. } | StoreAnswer::AckedAndClaimed { claim, .. },
        ) = &input
        {
            self.claim_answered(relay, *claim);
        }
        let mut inputs = vec![input];
        while let Some(input) = inputs.pop() {
            // The shell records the tokens it is handed, to know later which one lapsed.
            let claimed = match &input {
                Input::Store(StoreAnswer::Claimed {
                    result: Ok(batch), ..
                }) => Some(&batch.messages),
                Input::Store(StoreAnswer::AckedAndClaimed {
                    result: Ok(answer), ..
                }) => answer.claimed.as_ref().ok().map(|b| &b.messages),
                _ => None,
            };
            let handed = match &input {
                Input::HandedOff { message, .. } => Some(message.as_ref()),
                _ => None,
            };
            let r = &mut self.relays[relay];
            match &input {
                Input::HandedOff { .. } => {
                    r.in_transit = r.in_transit.saturating_sub(1);
                    self.tally.handed_off += 1;
                }
                Input::HandOffReturned(n) => r.returning = r.returning.saturating_sub(*n),
                _ => {}
            }
            for message in claimed.into_iter().flatten().chain(handed) {
                if let Some(token) = message.claim_token {
                    self.relays[relay].tokens.insert(message.outbox_id, token);
                }
            }
            for command in core.handle(self.instant(relay), input) {
                if let Command::RevokeCredits = command {
                    // Answered at once, before any other input, as the actor does.
                    let left = self.relays[relay]
                        .registration
                        .as_ref()
                        .map_or(0, |r| r.taker().revoke());
                    inputs.push(Input::CreditsRevoked(left));
                } else {
                    self.carry_out(relay, command);
                }
            }
        }
        self.relays[relay].core = Some(core);
        self.check_claim_room(relay);
        self.check_credits(relay);
        // A wake-up is answered by a claim sent after it, before the lane sleeps: else a
        // message enqueued while its claim was out waits for the poll ceiling.
        let r = &self.relays[relay];
        let held_back = r.core.as_ref().is_some_and(|core| core.claims_held_back());
        if r.went_idle && r.owes_claim && !held_back {
            self.check.fail(format!(
                "relay {relay} went idle at {:?} without a claim after a wake-up",
                self.now
            ));
        }
    }

    fn lane_at(&mut self, relay: usize, at: Instant, input: Input) {
        let epoch = self.relays[relay].epoch;
        let at = self.virtual_at(relay, at);
        self.at(
            at,
            Event::Lane {
                relay,
                epoch,
                input,
            },
        );
    }

    /// A claim's answer reaches the lane: it is no longer out.
    fn claim_answered(&mut self, relay: usize, claim: ClaimId) {
        let r = &mut self.relays[relay];
        match r.claims_out.iter().position(|(id, _)| *id == claim) {
            Some(at) => {
                if at > 0 {
                    self.tally.reordered_answers += 1;
                }
                r.claims_out.remove(at);
            }
            None => self.check.fail(format!(
                "relay {relay} answered claim {claim:?}, which is not out"
            )),
        }
    }

    /// A relay keeps at most its `claims_in_flight` claims out, and what they may bring,
    /// with what runs and waits in its buffer, stays within
    /// [`LaneConfig::most_held`](crate::LaneConfig::most_held): the bound on what a crash
    /// delivers again.
    fn check_claim_room(&mut self, relay: usize) {
        let r = &self.relays[relay];
        let Some(core) = r.core.as_ref() else {
            return;
        };
        let max = r.config.claims_in_flight_or_default();
        if r.claims_out.len() > max {
            let out = r.claims_out.len();
            return self.check.fail(format!(
                "relay {relay} has {out} claims out, over its claims_in_flight {max}"
            ));
        }
        // Each claim out leaves the store holding its limit or the acks riding on it,
        // whichever is more (one transaction records both).
        let promised: usize = r
            .claims_out
            .iter()
            .map(|(claim, limit)| (*limit).max(core.riding_on(*claim)))
            .sum();
        let held =
            core.in_flight() + core.buffered() + r.in_transit + core.settling_apart_from_claims();
        let window = r.config.most_held();
        if promised + held > window {
            self.check.fail(format!(
                "relay {relay} holds {held} in the store (running, buffered, handed off on the \
                 way, finished or released and not recorded) with claims of {promised} out: over \
                 concurrency + max(prefetch, prefetch_max) = {window}"
            ));
        }
    }

    /// The lane's count of hand-off credits not settled is what its taker holds plus what
    /// is on its way to the mailbox (messages and returned credits): a credit the lane
    /// counts and nobody holds would shrink every claim's room for good.
    fn check_credits(&mut self, relay: usize) {
        let r = &self.relays[relay];
        let Some(core) = r.core.as_ref() else {
            return;
        };
        let in_taker = r.registration.as_ref().map_or(0, |r| r.taker().credits());
        let held = in_taker + r.in_transit + r.returning;
        let counted = core.credits_unsettled();
        if counted != held {
            self.check.fail(format!(
                "relay {relay} counts {counted} hand-off credits unsettled; its taker holds \
                 {in_taker}, {} messages and {} returned credits are on their way",
                r.in_transit, r.returning
            ));
        }
    }

    fn carry_out(&mut self, relay: usize, command: Command) {
        if let Command::Store(
            StoreRequest::Claim { claim, limit, .. }
            | StoreRequest::AckAndClaim { claim, limit, .. },
        ) = &command
        {
            let r = &mut self.relays[relay];
            r.owes_claim = false;
            if !r.claims_out.is_empty() {
                self.tally.parallel_claims += 1;
            }
            r.claims_out.push((*claim, *limit));
        }
        let call = match command {
            Command::Store(call) => call,
            Command::Deliver { slot, message } => return self.deliver(relay, slot, *message),
            Command::ReplaceHandler(slot) => {
                self.handler_generation += 1;
                self.relays[relay].handlers[slot] = self.handler_generation;
                return;
            }
            Command::KillHandler(slot) => {
                let r = &mut self.relays[relay];
                if let Some((delivery, _)) = r.running.remove(&slot) {
                    self.check.ended(delivery, false);
                }
                self.handler_generation += 1;
                r.handlers[slot] = self.handler_generation;
                let input = Input::HandlerDied {
                    slot,
                    reason: "handler stopped".to_owned(),
                };
                let at = self.instant(relay);
                return self.lane_at(relay, at, input);
            }
            Command::TimerAt {
                kind,
                at,
                generation,
            } => return self.lane_at(relay, at, Input::timer(kind, generation)),
            Command::Emit(RelayEvent::LeaseExpired { outbox_ids, .. }) => {
                if self.plan.clock_skew_ppm(relay).abs() >= 1_000 {
                    self.tally.mattered("relay clock skew");
                }
                let r = &mut self.relays[relay];
                for id in outbox_ids {
                    if let Some(token) = r.tokens.get(&id) {
                        r.lapsed.insert((id, *token));
                    }
                }
                return;
            }
            Command::Throttled { gate, duration } => {
                self.tally.throttled += duration;
                if matches!(gate, crate::relay::GateKind::RateLimit) {
                    self.tally.rate_limited += duration;
                }
                return;
            }
            Command::Emit(RelayEvent::BreakerChanged { state, .. }) => {
                let since = self.tally.breaker_open_since;
                match (state, since) {
                    (crate::relay::BreakerState::Closed, Some(since)) => {
                        self.tally.breaker_open += self.now.saturating_sub(since);
                        self.tally.breaker_open_since = None;
                    }
                    (crate::relay::BreakerState::Closed, None) => {}
                    (_, None) => self.tally.breaker_open_since = Some(self.now),
                    (_, Some(_)) => {}
                }
                return;
            }
            Command::Emit(RelayEvent::Idle { .. }) => {
                self.relays[relay].went_idle = true;
                return;
            }
            Command::GrantCredits(n) => {
                if let Some(registration) = &self.relays[relay].registration {
                    registration.taker().grant(n);
                }
                return;
            }
            Command::RevokeCredits | Command::EmptyClaim | Command::Emit(_) | Command::Stop(_) => {
                return
            }
        };
        let cut = self.faults.cut.get(relay).copied().flatten();
        let fate = if let Some((_, fate)) = cut.filter(|(until, _)| self.now < *until) {
            self.tally.mattered("cut-off relay");
            fate
        } else if self.faults.fail_before > 0 {
            self.faults.fail_before -= 1;
            self.tally.mattered("store call fails before commit");
            Fate::FailsBeforeCommit
        } else if self.faults.lose_answer > 0 {
            self.faults.lose_answer -= 1;
            self.tally.mattered("store answer lost");
            Fate::AnswerLost
        } else {
            Fate::Answered
        };
        let epoch = self.relays[relay].epoch;
        let leg = self.leg();
        self.after(
            leg,
            Event::Store {
                relay,
                epoch,
                call,
                fate,
            },
        );
    }

    /// Forwards the store's wake-ups to every live relay's mailbox, one queued at a time.
    pub(crate) fn look_for_wakeups(&mut self) {
        for relay in 0..self.relays.len() {
            let lost = self
                .faults
                .wakeups_lost_until
                .get(relay)
                .is_some_and(|until| self.now < *until);
            let woken = self.relays[relay].woken();
            if woken && lost {
                self.tally.mattered("lost wake-ups");
            }
            if woken && !lost && !self.relays[relay].wake_queued {
                self.relays[relay].wake_queued = true;
                let epoch = self.relays[relay].epoch;
                let leg = self.leg();
                self.after(leg, Event::Wake { relay, epoch });
            }
        }
    }

    /// The store's stats against the checker's rows.
    pub(crate) fn check_stats(&mut self) {
        self.clock.set(self.store_now());
        let filter = MessageFilter::lane(LANE, TARGET);
        if let Ok(stats) = self.store.run(self.store.backend().stats(&filter)) {
            let stats = stats.into_iter().next().unwrap_or_default();
            self.check.stats(&stats);
        }
    }

    /// Every row in the store against the checker's.
    pub(crate) fn check_all_rows(&mut self) {
        let ids = self.check.ids();
        let rows: Vec<_> = ids
            .into_iter()
            .filter_map(|id| self.store.run(self.store.backend().get(id)).ok().flatten())
            .collect();
        self.check.all_rows(&rows);
        self.check_stats();
    }

    pub(crate) fn claim_refs(claims: &[ClaimRef]) -> Vec<uuid::Uuid> {
        claims.iter().map(|c| c.outbox_id).collect()
    }

    pub(crate) fn nack_refs(nacks: &[Nack]) -> Vec<uuid::Uuid> {
        nacks.iter().map(|n| n.claim.outbox_id).collect()
    }
}
