//! A schedule the simulation draws (`outbox_relay::testing::simulation`), played for real:
//! several production relays (`OutboxRelay`, its supervisor, lane and handler actors) serve
//! one lane of a real store at once, on tokio's real clock, and the simulation's checker
//! judges what they did: nothing lost, per-key order, one delivery of a key at a time while
//! its claims are current, fencing, the overlap past a lapse within the start margin's
//! bound. Shared by the SQL stores' tests; each opens its store (in a schema or database of
//! its own) on the run's [`ManualClock`] and hands it over.
//!
//! How the run sees what happened: each relay process reaches the store through a
//! [`Recording`] backend, which injects the schedule's store faults and feeds every call to
//! the checker with the rows it touched, read back after it; each relay's handler feeds
//! every delivery's start and end. The relays, their timers, leases and deliveries run at
//! once; their store calls reach the database one at a time, in the order they arrive
//! (a lock around each call and its read-back), so the checker judges each call against
//! the rows as the call left them. The contention of simultaneous statements inside the
//! database (`SKIP LOCKED` between two claims) is the conformance suite's
//! `concurrent_claimers_*` cases. The store's clock is the run's `ManualClock`, set to
//! the real time since the start (plus the schedule's clock jumps) as each call goes in,
//! so the checker knows the exact instant every statement ran at.
//!
//! The schedule's times are halved (the lane's durations with them), its faults applied as
//! a real deployment meets them: calls that fail before they commit or commit and lose
//! their answer, a slow store, a relay cut off, a relay process that dies (its calls and
//! deliveries never come back; a new process with a new consumer id starts after the
//! downtime), a lane whose store call panics (the supervisor restarts it), lost wake-ups,
//! failing enqueues, clock jumps of the store and pauses. A frozen process is the one fault
//! left out: nothing stops a tokio runtime from outside and lets it run on later.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use outbox_relay::message::DraftLimits;
use outbox_relay::store::{
    AckAndClaim, AckMode, Capabilities, ClaimBatch, ClaimOutcome, ClaimRef, ClaimRequest,
    DraftBatch, Enqueued, LaneCount, LanePause, LanePauseRequest, LaneStats, ManualClock,
    MessageFilter, Nack, NackOutcome, OrderingPolicy, OutboxBackend, Page, PageRequest,
    PurgeRequest, StoreError, StoreOp, UnservedLane, WakeUp,
};
use outbox_relay::testing::simulation::{
    overlap_bound, settle_bound, Call, Checker, Fault, Plan, Size, LANE, TARGET,
};
use outbox_relay::time::UnixMillis;
use outbox_relay::{
    DeliveryError, DeliveryHandler, Outbox, OutboxMessage, OutboxMessageDraft, OutboxRelay,
    RelayHandle,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::{broadcast, Notify};
use uuid::Uuid;

/// The store clock's reading when a run starts.
pub const START_MILLIS: i64 = 1_800_000_000_000;

/// How big a schedule each seed draws: the simulation's seeds have 200 messages; these run
/// in real time.
pub const SIZE: Size = Size {
    messages: 40,
    faults: 6,
};

fn env(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

/// The seeds a run plays: 0 to 3, or `OUTBOX_DRAWN_PLAN_SEEDS` of them from
/// `OUTBOX_DRAWN_PLAN_FIRST` (`OUTBOX_DRAWN_PLAN_TRACE=1` prints every call and delivery).
pub fn seeds() -> std::ops::Range<u64> {
    let first = env("OUTBOX_DRAWN_PLAN_FIRST").unwrap_or(0);
    first..first + env("OUTBOX_DRAWN_PLAN_SEEDS").unwrap_or(4)
}

fn trace() -> bool {
    std::env::var_os("OUTBOX_DRAWN_PLAN_TRACE").is_some()
}

/// The schedule's durations are divided by this.
const SLOWER: u32 = 2;

/// What a run saw.
#[derive(Debug)]
pub struct Played {
    pub messages: usize,
    pub deliveries: u64,
    pub store_calls: u64,
    pub faults: usize,
    pub took: Duration,
}

/// The store faults in force, and the checker.
#[derive(Debug)]
struct State {
    checker: Checker,
    fail_before: u32,
    lose_answer: u32,
    fail_enqueues: u32,
    slow_until: Duration,
    slow_extra: Duration,
    /// Per relay: cut off until then, its calls committing and losing their answers or not.
    cut: Vec<Option<(Duration, bool)>>,
    wakeups_lost_until: Vec<Duration>,
    /// Per relay: its next store call panics (its lane crashes).
    panic_next: Vec<bool>,
    offset_ms: i64,
    store_calls: u64,
    rng: StdRng,
}

/// What the relays and the run share.
#[derive(Debug)]
struct Shared {
    inner: Arc<dyn OutboxBackend>,
    clock: ManualClock,
    started: tokio::time::Instant,
    /// Store calls go in one at a time, each with its read-back.
    turn: tokio::sync::Mutex<()>,
    state: Mutex<State>,
    /// Signalled after every store call the checker saw.
    changed: Notify,
    /// Whether the target answers every delivery with success (the faults stopped).
    recovered: AtomicBool,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// The store's clock now: the real time since the start, moved by the clock jumps.
    fn store_now(&self, state: &State) -> UnixMillis {
        UnixMillis::from_millis(START_MILLIS + self.elapsed().as_millis() as i64 + state.offset_ms)
    }
}

fn outage(op: StoreOp, why: &'static str) -> StoreError {
    StoreError::unavailable(op, std::io::Error::other(why))
}

/// One relay process's way to the store: the schedule's faults, and every call fed to the
/// checker.
#[derive(Debug)]
struct Recording {
    shared: Arc<Shared>,
    /// `None`: a process without a relay (it only enqueues).
    relay: Option<usize>,
    /// The process died: its calls never come back.
    dead: Arc<AtomicBool>,
}

/// What a call meets on its way.
enum Fate {
    Answered,
    FailsBeforeCommit,
    AnswerLost,
}

/// A call's turn at the store: others wait until it is dropped.
struct Turn<'a> {
    _guard: tokio::sync::MutexGuard<'a, ()>,
    fate: Fate,
    /// The store's clock as the call went in, and the time since the start then.
    now: UnixMillis,
    at: Duration,
    /// A slow store: the answer takes this much longer to come back.
    answer_delay: Duration,
}

impl Turn<'_> {
    /// Lets the next call in, and hands the answer back (late, from a slow store; as an
    /// error, when it was lost).
    async fn leave<T>(self, op: StoreOp, answer: Result<T, StoreError>) -> Result<T, StoreError> {
        let Turn {
            _guard,
            fate,
            answer_delay,
            ..
        } = self;
        drop(_guard);
        if !answer_delay.is_zero() {
            tokio::time::sleep(answer_delay).await;
        }
        match fate {
            Fate::AnswerLost => Err(outage(op, "the connection dropped before the answer came")),
            _ => answer,
        }
    }
}

impl Recording {
    /// The way in for a lane's call: dies with the process, panics for a lane crash, waits
    /// out a slow store, then takes its turn; the fate is drawn in the turn.
    async fn enter(&self) -> Turn<'_> {
        self.enter_as(true).await
    }

    /// The way in (`lane`: a call of the lane, which a lane crash panics).
    async fn enter_as(&self, lane: bool) -> Turn<'_> {
        if self.dead.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        let (delay, answer_delay) = {
            let mut state = self.shared.state();
            let panics = lane
                && self
                    .relay
                    .is_some_and(|relay| std::mem::take(&mut state.panic_next[relay]));
            if panics {
                drop(state);
                panic!("a store call panicked (an injected lane crash)");
            }
            let now = self.shared.elapsed();
            if now < state.slow_until {
                let extra = state.slow_extra.as_micros() as u64;
                (
                    Duration::from_micros(state.rng.random_range(0..=extra)),
                    Duration::from_micros(state.rng.random_range(0..=extra)),
                )
            } else {
                (Duration::ZERO, Duration::ZERO)
            }
        };
        if !delay.is_zero() {
            // A slow store: the request takes this much longer to arrive.
            tokio::time::sleep(delay).await;
        }
        let guard = self.shared.turn.lock().await;
        if self.dead.load(Ordering::SeqCst) {
            drop(guard);
            return std::future::pending().await;
        }
        let mut state = self.shared.state();
        let now = self.shared.elapsed();
        // The schedule's store faults strike the lanes' calls, as in the simulation.
        let fate = match self.relay.and_then(|relay| state.cut[relay]) {
            _ if !lane => Fate::Answered,
            Some((until, lost)) if now < until => {
                if lost {
                    Fate::AnswerLost
                } else {
                    Fate::FailsBeforeCommit
                }
            }
            _ if state.fail_before > 0 => {
                state.fail_before -= 1;
                Fate::FailsBeforeCommit
            }
            _ if state.lose_answer > 0 => {
                state.lose_answer -= 1;
                Fate::AnswerLost
            }
            _ => Fate::Answered,
        };
        state.store_calls += 1;
        let store_now = self.shared.store_now(&state);
        self.shared.clock.set(store_now);
        Turn {
            _guard: guard,
            fate,
            now: store_now,
            at: now,
            answer_delay,
        }
    }

    /// The rows these ids name, as the store holds them now.
    async fn rows(&self, ids: Vec<Uuid>) -> HashMap<Uuid, OutboxMessage> {
        let mut rows = HashMap::new();
        for id in ids {
            match self.shared.inner.get(id).await {
                Ok(Some(row)) => {
                    rows.insert(id, row);
                }
                Ok(None) => {}
                Err(error) => panic!("reading back {id}: {error}"),
            }
        }
        rows
    }

    /// The checker takes a call's effect.
    fn observe(&self, call: Call<'_>, turn: &Turn<'_>, after: &HashMap<Uuid, OutboxMessage>) {
        let now = turn.now;
        if trace() {
            let rows: Vec<_> = after
                .values()
                .map(|r| (r.outbox_id, r.status, r.claim_token, r.lease_expires_at))
                .collect();
            eprintln!(
                "{:?} relay {:?} at {now}: {call:?} -> {rows:?}",
                turn.at, self.relay
            );
        }
        let mut state = self.shared.state();
        state.checker.set_now(turn.at);
        state.checker.observe(call, now, after);
        drop(state);
        self.shared.changed.notify_waiters();
    }

    /// A claim's answer to the checker: the rows it handed out are in it, the ones it
    /// dead-lettered are read back.
    async fn observe_claim(&self, batch: &ClaimBatch, turn: &Turn<'_>) {
        let mut after = self.rows(batch.dead_lettered.clone()).await;
        after.extend(batch.messages.iter().map(|m| (m.outbox_id, m.clone())));
        self.observe(
            Call::Claim {
                claimed: &batch.messages,
                dead: &batch.dead_lettered,
            },
            turn,
            &after,
        );
    }
}

#[async_trait]
impl OutboxBackend for Recording {
    fn capabilities(&self) -> Capabilities {
        self.shared.inner.capabilities()
    }

    fn draft_limits(&self) -> DraftLimits {
        self.shared.inner.draft_limits()
    }

    async fn write_drafts(&self, drafts: DraftBatch) -> Result<Vec<Enqueued>, StoreError> {
        let turn = self.enter_as(false).await;
        let failing = {
            let mut state = self.shared.state();
            let failing = state.fail_enqueues > 0;
            state.fail_enqueues = state.fail_enqueues.saturating_sub(1);
            failing
        };
        if failing {
            let failed = Err(outage(
                StoreOp::Enqueue,
                "the write failed before it committed",
            ));
            return turn.leave(StoreOp::Enqueue, failed).await;
        }
        let answers = self.shared.inner.write_drafts(drafts).await;
        if let Ok(answers) = &answers {
            let mut state = self.shared.state();
            state.checker.set_now(turn.at);
            for answer in answers {
                state.checker.enqueued(&answer.message, answer.duplicate);
            }
        }
        turn.leave(StoreOp::Enqueue, answers).await
    }

    async fn claim(&self, requests: &[ClaimRequest]) -> Result<Vec<ClaimBatch>, StoreError> {
        let turn = self.enter().await;
        if let Fate::FailsBeforeCommit = turn.fate {
            return turn
                .leave(StoreOp::Claim, Err(outage(StoreOp::Claim, "dropped")))
                .await;
        }
        let batches = self.shared.inner.claim(requests).await;
        if let Ok(batches) = &batches {
            for batch in batches {
                self.observe_claim(batch, &turn).await;
            }
        }
        turn.leave(StoreOp::Claim, batches).await
    }

    async fn ack(
        &self,
        claims: &[ClaimRef],
        mode: AckMode,
    ) -> Result<Vec<ClaimOutcome>, StoreError> {
        let turn = self.enter().await;
        if let Fate::FailsBeforeCommit = turn.fate {
            return turn
                .leave(StoreOp::Ack, Err(outage(StoreOp::Ack, "dropped")))
                .await;
        }
        let outcomes = self.shared.inner.ack(claims, mode).await;
        if outcomes.is_ok() {
            let after = self
                .rows(claims.iter().map(|c| c.outbox_id).collect())
                .await;
            self.observe(Call::Ack(claims), &turn, &after);
        }
        turn.leave(StoreOp::Ack, outcomes).await
    }

    async fn ack_and_claim(
        &self,
        acks: &[ClaimRef],
        requests: &[ClaimRequest],
        mode: AckMode,
    ) -> Result<AckAndClaim<Vec<ClaimBatch>>, StoreError> {
        let op = StoreOp::AckAndClaim;
        let turn = self.enter().await;
        if let Fate::FailsBeforeCommit = turn.fate {
            return turn.leave(op, Err(outage(op, "dropped"))).await;
        }
        let answer = self.shared.inner.ack_and_claim(acks, requests, mode).await;
        if let Ok(answer) = &answer {
            let mut after = self.rows(acks.iter().map(|c| c.outbox_id).collect()).await;
            // A row the same statement claimed again was not the ack's to change (an ack
            // that changed it left it delivered, for no claim to take): for the ack, it is
            // as the checker last saw it; the claim's check judges the claim.
            {
                let state = self.shared.state();
                let claimed = answer.claimed.iter().flatten().flat_map(|b| &b.messages);
                for message in claimed {
                    if let (Some(row), Some(before)) = (
                        after.get_mut(&message.outbox_id),
                        state.checker.row(message.outbox_id),
                    ) {
                        *row = before.clone();
                    }
                }
            }
            self.observe(Call::Ack(acks), &turn, &after);
            if let Ok(batches) = &answer.claimed {
                for batch in batches {
                    self.observe_claim(batch, &turn).await;
                }
            }
        }
        turn.leave(op, answer).await
    }

    async fn nack(&self, nacks: &[Nack]) -> Result<Vec<NackOutcome>, StoreError> {
        let turn = self.enter().await;
        if let Fate::FailsBeforeCommit = turn.fate {
            return turn
                .leave(StoreOp::Nack, Err(outage(StoreOp::Nack, "dropped")))
                .await;
        }
        let outcomes = self.shared.inner.nack(nacks).await;
        if outcomes.is_ok() {
            let after = self
                .rows(nacks.iter().map(|n| n.claim.outbox_id).collect())
                .await;
            self.observe(Call::Nack(nacks), &turn, &after);
        }
        turn.leave(StoreOp::Nack, outcomes).await
    }

    async fn extend_lease(
        &self,
        claims: &[ClaimRef],
        lease: Duration,
    ) -> Result<Vec<ClaimOutcome>, StoreError> {
        let op = StoreOp::ExtendLease;
        let turn = self.enter().await;
        if let Fate::FailsBeforeCommit = turn.fate {
            return turn.leave(op, Err(outage(op, "dropped"))).await;
        }
        let outcomes = self.shared.inner.extend_lease(claims, lease).await;
        if outcomes.is_ok() {
            let after = self
                .rows(claims.iter().map(|c| c.outbox_id).collect())
                .await;
            self.observe(Call::Extend(claims, lease), &turn, &after);
        }
        turn.leave(op, outcomes).await
    }

    async fn release(&self, claims: &[ClaimRef]) -> Result<Vec<ClaimOutcome>, StoreError> {
        let op = StoreOp::Release;
        let turn = self.enter().await;
        if let Fate::FailsBeforeCommit = turn.fate {
            return turn.leave(op, Err(outage(op, "dropped"))).await;
        }
        let outcomes = self.shared.inner.release(claims).await;
        if outcomes.is_ok() {
            let after = self
                .rows(claims.iter().map(|c| c.outbox_id).collect())
                .await;
            self.observe(Call::Release(claims), &turn, &after);
        }
        turn.leave(op, outcomes).await
    }

    async fn next_due(
        &self,
        lane: &str,
        target: &str,
        ordering: OrderingPolicy,
    ) -> Result<Option<Duration>, StoreError> {
        let op = StoreOp::NextDue;
        let turn = self.enter().await;
        if let Fate::FailsBeforeCommit = turn.fate {
            return turn.leave(op, Err(outage(op, "dropped"))).await;
        }
        let due = self.shared.inner.next_due(lane, target, ordering).await;
        turn.leave(op, due).await
    }

    async fn stats(&self, filter: &MessageFilter) -> Result<Vec<LaneStats>, StoreError> {
        let _turn = self.enter_as(false).await;
        self.shared.inner.stats(filter).await
    }

    async fn list(&self, filter: &MessageFilter, page: PageRequest) -> Result<Page, StoreError> {
        let _turn = self.enter_as(false).await;
        self.shared.inner.list(filter, page).await
    }

    async fn get(&self, outbox_id: Uuid) -> Result<Option<OutboxMessage>, StoreError> {
        let _turn = self.enter_as(false).await;
        self.shared.inner.get(outbox_id).await
    }

    async fn requeue_dead_letters_per_lane(
        &self,
        filter: &MessageFilter,
    ) -> Result<Vec<LaneCount>, StoreError> {
        let _turn = self.enter_as(false).await;
        self.shared
            .inner
            .requeue_dead_letters_per_lane(filter)
            .await
    }

    async fn discard_dead_letters(&self, filter: &MessageFilter) -> Result<u64, StoreError> {
        let _turn = self.enter_as(false).await;
        self.shared.inner.discard_dead_letters(filter).await
    }

    async fn purge(&self, request: &PurgeRequest) -> Result<u64, StoreError> {
        let _turn = self.enter_as(false).await;
        self.shared.inner.purge(request).await
    }

    /// The store's wake-ups, less those the schedule loses for this relay.
    fn subscribe(&self) -> broadcast::Receiver<WakeUp> {
        let mut from_store = self.shared.inner.subscribe();
        let (sender, receiver) = broadcast::channel(64);
        let (shared, relay) = (self.shared.clone(), self.relay);
        tokio::spawn(async move {
            loop {
                let wake = match from_store.recv().await {
                    Ok(wake) => wake,
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return,
                };
                let lost = relay.is_some_and(|relay| {
                    shared.elapsed() < shared.state().wakeups_lost_until[relay]
                });
                if !lost && sender.send(wake).is_err() {
                    return;
                }
            }
        });
        receiver
    }

    fn max_connections(&self) -> Option<u32> {
        self.shared.inner.max_connections()
    }

    async fn pause_lane(&self, request: &LanePauseRequest) -> Result<LanePause, StoreError> {
        let _turn = self.enter_as(false).await;
        self.shared.inner.pause_lane(request).await
    }

    async fn resume_lane(&self, lane: &str, target: &str) -> Result<Option<LanePause>, StoreError> {
        let _turn = self.enter_as(false).await;
        self.shared.inner.resume_lane(lane, target).await
    }

    async fn lane_pauses(&self) -> Result<Vec<LanePause>, StoreError> {
        let _turn = self.enter_as(false).await;
        self.shared.inner.lane_pauses().await
    }

    async fn record_served(
        &self,
        lanes: &[(String, String)],
        served_for: Duration,
    ) -> Result<(), StoreError> {
        let _turn = self.enter_as(false).await;
        self.shared.inner.record_served(lanes, served_for).await
    }

    async fn unserved_lanes(&self, limit: usize) -> Result<Vec<UnservedLane>, StoreError> {
        let _turn = self.enter_as(false).await;
        self.shared.inner.unserved_lanes(limit).await
    }
}

/// The target, as the schedule draws it: each delivery's outcome and duration, fed to the
/// checker as it starts and ends.
#[derive(Debug)]
struct Target {
    shared: Arc<Shared>,
    plan: Arc<Plan>,
    dead: Arc<AtomicBool>,
    died: Arc<Notify>,
}

/// Ends a delivery for the checker however its future ends: answered, cut by the handler's
/// timeout, unwound by a panic, or dropped with a dead process.
struct Running {
    shared: Arc<Shared>,
    delivery: u64,
    ok: bool,
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut state = self.shared.state();
        let elapsed = self.shared.elapsed();
        state.checker.set_now(elapsed);
        state.checker.ended(self.delivery, self.ok);
    }
}

enum Answer {
    Ok,
    Fails(DeliveryError),
    Panics,
}

#[async_trait]
impl DeliveryHandler for Target {
    async fn deliver(&self, message: &OutboxMessage) -> Result<(), DeliveryError> {
        if self.dead.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        let target = self.plan.target;
        let timeout = self.plan.config.delivery_timeout;
        let (answer, took, running) = {
            let mut state = self.shared.state();
            let rng = &mut state.rng;
            let mut took = Duration::from_micros(
                rng.random_range(0..=target.slowest.as_micros() as u64) / u64::from(SLOWER),
            );
            let answer = if self.shared.recovered.load(Ordering::SeqCst) {
                Answer::Ok
            } else {
                let draw = rng.random_range(0..100u64);
                let mut cut = 0;
                let mut next = |percent: u64| {
                    cut += percent;
                    draw < cut
                };
                if next(target.retryable) {
                    Answer::Fails(DeliveryError::retryable("target busy"))
                } else if next(target.permanent) {
                    Answer::Fails(DeliveryError::permanent("target refused"))
                } else if next(target.retry_after) {
                    let after = rng.random_range(1..=target.longest_retry_after.as_millis() as u64);
                    Answer::Fails(DeliveryError::retry_after(
                        Duration::from_millis(after) / SLOWER,
                        "target throttled",
                    ))
                } else if next(target.panic) {
                    Answer::Panics
                } else {
                    if next(target.hang) {
                        took = timeout * 2;
                    }
                    Answer::Ok
                }
            };
            let now = self.shared.store_now(&state);
            let elapsed = self.shared.elapsed();
            state.checker.set_now(elapsed);
            if trace() {
                eprintln!(
                    "{elapsed:?} delivery of {} starts at {now} (token {:?}, by {:?})",
                    message.outbox_id, message.claim_token, message.claimed_by
                );
            }
            let delivery = state.checker.started(message, now, false);
            let running = Running {
                shared: self.shared.clone(),
                delivery,
                ok: false,
            };
            (answer, took, running)
        };
        let mut running = running;
        tokio::select! {
            () = tokio::time::sleep(took) => {}
            () = self.died.notified() => {
                // The process died mid-delivery: its delivery ends here, and its future
                // never answers.
                drop(running);
                std::future::pending::<()>().await;
                unreachable!("a dead process's delivery never answers");
            }
        }
        match answer {
            Answer::Ok => {
                running.ok = true;
                Ok(())
            }
            Answer::Fails(error) => Err(error),
            Answer::Panics => panic!("the target handler panicked (injected)"),
        }
    }
}

/// One relay process: its handle, and the flag its death sets.
struct Process {
    relay: RelayHandle,
    outbox: Outbox,
    dead: Arc<AtomicBool>,
    died: Arc<Notify>,
}

/// `plan`'s durations divided by [`SLOWER`].
fn quicker(mut plan: Plan) -> Plan {
    let d = |d: Duration| d / SLOWER;
    let c = plan.config.clone();
    let (retry, backoff) = (c.retry, c.store_backoff);
    plan.config = c
        .clone()
        .lease(d(c.lease))
        .lease_extend_margin(c.lease_extend_margin.map(d))
        .delivery_timeout(d(c.delivery_timeout))
        .claim_linger(d(c.claim_linger))
        .max_poll_interval(d(c.max_poll_interval))
        .retry(outbox_relay::RetryPolicy::new(d(retry.base), d(retry.max)).jitter(false))
        .store_backoff(
            outbox_relay::RetryPolicy::new(d(backoff.base), d(backoff.max)).jitter(false),
        );
    for message in &mut plan.messages {
        message.at = d(message.at);
        message.delay = message.delay.map(d);
    }
    for (at, fault) in &mut plan.faults {
        *at = d(*at);
        *fault = match *fault {
            Fault::Slow { for_, extra } => Fault::Slow {
                for_: d(for_),
                extra: d(extra),
            },
            Fault::Crash { relay, down } => Fault::Crash {
                relay,
                down: d(down),
            },
            Fault::ClockJump(ms) => Fault::ClockJump(ms / i64::from(SLOWER)),
            Fault::Pause { relay, for_ } => Fault::Pause {
                relay,
                for_: d(for_),
            },
            Fault::Cut {
                relay,
                for_,
                answers_lost,
            } => Fault::Cut {
                relay,
                for_: d(for_),
                answers_lost,
            },
            Fault::LoseWakeUps { relay, for_ } => Fault::LoseWakeUps {
                relay,
                for_: d(for_),
            },
            Fault::Freeze { relay, for_ } => Fault::Freeze {
                relay,
                for_: d(for_),
            },
            other => other,
        };
    }
    plan.faults_end = d(plan.faults_end);
    plan.latency = d(plan.latency);
    plan.target.slowest = d(plan.target.slowest);
    plan
}

/// Starts relay process `relay`'s incarnation `incarnation`.
async fn start(shared: &Arc<Shared>, plan: &Arc<Plan>, relay: usize, incarnation: u32) -> Process {
    let dead = Arc::new(AtomicBool::new(false));
    let died = Arc::new(Notify::new());
    let outbox = Outbox::from_arc(Arc::new(Recording {
        shared: shared.clone(),
        relay: Some(relay),
        dead: dead.clone(),
    }));
    let target = Target {
        shared: shared.clone(),
        plan: plan.clone(),
        dead: dead.clone(),
        died: died.clone(),
    };
    let config = plan
        .config
        .clone()
        .consumer_id(format!("relay{relay}.{incarnation}"));
    let relay = OutboxRelay::builder(&outbox)
        .lane(config, target)
        // Retention would delete delivered rows the checker holds.
        .retention(None)
        .start()
        .await
        .unwrap_or_else(|error| panic!("relay {relay} starts: {error}"));
    Process {
        relay,
        outbox,
        dead,
        died,
    }
}

/// Plays seed `seed`'s schedule (at [`SIZE`]) against `store`, whose clock is `clock`:
/// panics, naming the seed, when an invariant breaks or a message is not settled in time.
pub async fn play(seed: u64, store: Arc<dyn OutboxBackend>, clock: ManualClock) -> Played {
    let plan = Arc::new(quicker(Plan::draw(seed, SIZE)));
    if trace() {
        eprintln!(
            "{} relays, {:?}\nfaults {:?}",
            plan.relays, plan.config, plan.faults
        );
    }
    // The real clock is coarser than virtual time: timers fire late on a loaded machine, so
    // an overlap past a lapse may run past the bound by that much.
    let slack = plan.config.lease / 10;
    let shared = Arc::new(Shared {
        inner: store,
        clock,
        started: tokio::time::Instant::now(),
        turn: tokio::sync::Mutex::new(()),
        state: Mutex::new(State {
            checker: Checker::new(plan.config.ordering, overlap_bound(&plan.config) + slack),
            fail_before: 0,
            lose_answer: 0,
            fail_enqueues: 0,
            slow_until: Duration::ZERO,
            slow_extra: Duration::ZERO,
            cut: vec![None; plan.relays],
            wakeups_lost_until: vec![Duration::ZERO; plan.relays],
            panic_next: vec![false; plan.relays],
            offset_ms: 0,
            store_calls: 0,
            rng: StdRng::seed_from_u64(seed),
        }),
        changed: Notify::new(),
        recovered: AtomicBool::new(false),
    });
    shared.clock.set(UnixMillis::from_millis(START_MILLIS));
    let mut processes = Vec::new();
    let mut incarnations = vec![1u32; plan.relays];
    for relay in 0..plan.relays {
        processes.push(start(&shared, &plan, relay, 1).await);
    }
    // What happens when: enqueues, faults, restarts and resumes, in time order.
    enum Step {
        Enqueue(usize),
        Fault(Fault),
        Restart(usize),
        Resume(usize, u32),
        FaultsEnd,
    }
    let mut steps: Vec<(Duration, Step)> = plan
        .messages
        .iter()
        .enumerate()
        .map(|(i, m)| (m.at, Step::Enqueue(i)))
        .chain(plan.faults.iter().map(|(at, f)| (*at, Step::Fault(*f))))
        .chain([(plan.faults_end, Step::FaultsEnd)])
        .collect();
    let mut crashed: Vec<Process> = Vec::new();
    let mut faults = 0;
    while !steps.is_empty() {
        steps.sort_by_key(|(at, _)| *at);
        let (at, step) = steps.remove(0);
        tokio::time::sleep_until(shared.started + at).await;
        match step {
            Step::Enqueue(i) => {
                let planned = &plan.messages[i];
                let payload = serde_json::json!({ "n": i, "dedupe": planned.dedupe });
                let mut draft = OutboxMessageDraft::new(LANE, TARGET, payload)
                    .expect("a planned draft is valid")
                    .with_max_attempts(planned.max_attempts);
                if let Some(key) = &planned.key {
                    draft = draft.with_ordering_key(key.clone());
                }
                if let Some(delay) = planned.delay {
                    draft = draft.with_delay(delay);
                }
                if let Some(dedupe) = &planned.dedupe {
                    draft = draft.with_dedupe_key(dedupe.clone());
                }
                // Through the store object of the process that enqueues (an idle lane of it
                // may take the message as a hand-off), or of one without a relay.
                let outbox = match planned.via {
                    Some(relay) if !processes[relay].dead.load(Ordering::SeqCst) => {
                        processes[relay].outbox.clone()
                    }
                    _ => Outbox::from_arc(Arc::new(Recording {
                        shared: shared.clone(),
                        relay: None,
                        dead: Arc::new(AtomicBool::new(false)),
                    })),
                };
                // A failed enqueue (an injected fault, or a connection lost) writes nothing
                // the checker was told of; the run goes on without it.
                let _ = outbox.enqueue(draft).await;
            }
            Step::Fault(fault) => {
                faults += 1;
                // A clock jump falls between two calls.
                let _turn = match fault {
                    Fault::ClockJump(_) => Some(shared.turn.lock().await),
                    _ => None,
                };
                let now = shared.elapsed();
                let mut state = shared.state();
                match fault {
                    Fault::FailBeforeCommit(n) => state.fail_before += n,
                    Fault::LoseAnswer(n) => state.lose_answer += n,
                    Fault::FailEnqueues(n) => state.fail_enqueues += n,
                    Fault::Slow { for_, extra } => {
                        state.slow_until = state.slow_until.max(now + for_);
                        state.slow_extra = state.slow_extra.max(extra);
                    }
                    Fault::Cut {
                        relay,
                        for_,
                        answers_lost,
                    } => state.cut[relay] = Some((now + for_, answers_lost)),
                    Fault::LoseWakeUps { relay, for_ } => {
                        let until = &mut state.wakeups_lost_until[relay];
                        *until = (*until).max(now + for_);
                    }
                    Fault::LaneCrash { relay } => state.panic_next[relay] = true,
                    Fault::ClockJump(ms) => {
                        state.offset_ms += ms;
                        if ms > 0 {
                            state.checker.set_now(now);
                            state.checker.clock_jumped_forward();
                        }
                    }
                    Fault::Crash { relay, down } => {
                        drop(state);
                        let process = &processes[relay];
                        if !process.dead.swap(true, Ordering::SeqCst) {
                            process.died.notify_waiters();
                            steps.push((now + down, Step::Restart(relay)));
                        }
                    }
                    Fault::Pause { relay, for_ } => {
                        drop(state);
                        if processes[relay].relay.pause(LANE, TARGET).await.is_ok() {
                            steps.push((now + for_, Step::Resume(relay, incarnations[relay])));
                        }
                    }
                    // A process frozen and let run on: nothing stops a tokio runtime from
                    // outside, so this run leaves it out.
                    Fault::Freeze { .. } => {}
                }
            }
            Step::Restart(relay) => {
                incarnations[relay] += 1;
                let fresh = start(&shared, &plan, relay, incarnations[relay]).await;
                crashed.push(std::mem::replace(&mut processes[relay], fresh));
            }
            Step::Resume(relay, incarnation) => {
                if incarnations[relay] == incarnation {
                    let _ = processes[relay].relay.resume(LANE, TARGET).await;
                }
            }
            Step::FaultsEnd => {
                {
                    let mut state = shared.state();
                    state.fail_before = 0;
                    state.lose_answer = 0;
                    state.fail_enqueues = 0;
                    state.slow_until = Duration::ZERO;
                    state.cut.iter_mut().for_each(|cut| *cut = None);
                    state
                        .wakeups_lost_until
                        .iter_mut()
                        .for_each(|t| *t = Duration::ZERO);
                    state.panic_next.iter_mut().for_each(|p| *p = false);
                }
                shared.recovered.store(true, Ordering::SeqCst);
                for process in &processes {
                    let _ = process.relay.resume(LANE, TARGET).await;
                }
            }
        }
    }
    // Every message settles by the simulation's bound (from when the faults stopped), with
    // the real clock's slack.
    let deadline = shared.started + settle_bound(&plan) + Duration::from_secs(10);
    loop {
        let changed = shared.changed.notified();
        let (left, violation) = {
            let mut state = shared.state();
            (state.checker.unsettled(), state.checker.take_violation())
        };
        if let Some(what) = violation {
            panic!("seed {seed}: {what}");
        }
        if left.is_empty() {
            break;
        }
        if tokio::time::timeout_at(deadline, changed).await.is_err() {
            panic!(
                "seed {seed}: liveness: {} messages neither delivered nor dead-lettered {:?} \
                 after the start (faults ended at {:?}), e.g. {:?}",
                left.len(),
                shared.elapsed(),
                plan.faults_end,
                left.first()
            );
        }
    }
    for process in &processes {
        let _ = process.relay.shutdown(Duration::from_secs(5)).await;
    }
    // Dead processes' relays never get an answer: dropped with the run.
    drop(crashed);
    let _turn = shared.turn.lock().await;
    let ids = shared.state().checker.ids();
    let mut rows = Vec::new();
    for id in ids {
        if let Some(row) = shared.inner.get(id).await.expect("reading a row back") {
            rows.push(row);
        }
    }
    let stats = shared
        .inner
        .stats(&MessageFilter::lane(LANE, TARGET))
        .await
        .expect("stats");
    let mut state = shared.state();
    state.checker.all_rows(&rows);
    state
        .checker
        .stats(&stats.into_iter().next().unwrap_or_default());
    if let Some(what) = state.checker.take_violation() {
        panic!("seed {seed} (at its end): {what}");
    }
    Played {
        messages: state.checker.messages(),
        deliveries: state.checker.deliveries(),
        store_calls: state.store_calls,
        faults,
        took: shared.elapsed(),
    }
}
