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

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use outbox_relay::store::{MessageFilter, OutboxBackend};
use outbox_relay::testing::simulation::{
    overlap_bound, settle_bound, Checker, Fault, Plan, Size, LANE, TARGET,
};
use outbox_relay::time::ManualClock;
use outbox_relay::time::UnixMillis;
use outbox_relay::{Outbox, OutboxMessageDraft, OutboxRelay, RelayHandle};
use rand::rngs::StdRng;
use rand::SeedableRng;
use tokio::sync::Notify;

#[path = "drawn_plan/recording.rs"]
mod recording;
#[path = "drawn_plan/target.rs"]
mod target;

use recording::Recording;
use target::Target;

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
