//! `RelaySupervisor`: owns the lane relays, restarts the ones that crash, and carries out
//! the runtime commands of a `RelayHandle`.
//!
//! Restart policy: a crashed lane is restarted after an exponential backoff; a lane that
//! crashes more than `max_restarts` times within `restart_window` is marked failed and stays
//! down, visible in status and metrics, while the other lanes go on.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use tokio::sync::{broadcast, oneshot};
use tokio::time::Instant;

use crate::config::{LaneConfig, LanePattern, SupervisorConfig};
use crate::delivery::DeliveryHandler;
use crate::lane::{DrainReport, LaneKey, LaneState, RelayEvent};
use crate::metrics::LaneMetrics;
use crate::relay::lane::{LaneArgs, LaneMsg, LaneRelay};
use crate::relay::observe;
use crate::relay::status::LaneCounters;
use crate::relay::{GateStatus, LaneStatus, RelayError, ShutdownReport};
use crate::store::{LanePause, Outbox};

mod backlog;
mod fleet;
pub(crate) mod patterns;
pub(crate) mod restarts;

pub(crate) use backlog::BacklogSample;
use patterns::{PatternEntry, PendingSample};

use restarts::{Restart, Restarts};

pub(crate) enum SupervisorMsg {
    AddLane(
        Box<LaneConfig>,
        Arc<dyn DeliveryHandler>,
        RpcReplyPort<Result<(), RelayError>>,
    ),
    RemoveLane(
        LaneKey,
        Duration,
        RpcReplyPort<Result<DrainReport, RelayError>>,
    ),
    Pause(LaneKey, RpcReplyPort<Result<(), RelayError>>),
    Resume(LaneKey, RpcReplyPort<Result<(), RelayError>>),
    Status(RpcReplyPort<Vec<LaneStatus>>),
    /// Every lane's config, for the work beside the lanes (`relay/upkeep.rs`).
    Lanes(RpcReplyPort<Vec<LaneConfig>>),
    /// Every fleet-wide pause in force, as the store has them (`lane_control.rs`).
    FleetPauses(Vec<LanePause>),
    /// The lanes the lane patterns match that hold pending messages, by the pattern
    /// watcher (`relay/upkeep.rs`): those not running are started (`supervisor/patterns.rs`).
    Pending(PendingSample),
    /// A backlog sample of every lane (`relay/upkeep.rs`): each lane's gauges are set from it.
    Backlog(BacklogSample),
    /// When lanes' next messages fall due, by the due watcher (`relay/upkeep.rs`): each
    /// time goes to its lane.
    Due(Vec<(LaneKey, Instant)>),
    Shutdown(Duration, RpcReplyPort<ShutdownReport>),
    /// A restart backoff ran out; honoured only if the lane still waits for this token.
    Restart(LaneKey, u64),
    /// A removed lane's relay (this actor) has drained and exited: forget the lane, then
    /// say so, and the removal is answered, so the caller's next command finds it gone.
    Removed(LaneKey, ActorId, oneshot::Sender<()>),
}

/// How long a removal waits for a drained lane relay to exit (it does so at once).
const LANE_EXIT_WAIT: Duration = Duration::from_secs(5);

/// The most of a shutdown's timeout kept back from the deliveries for recording their acks
/// and releasing the claims of the unfinished ones.
const MAX_RELEASE_RESERVE: Duration = Duration::from_secs(1);

/// The part of a shutdown `timeout` kept for the store round trips after the lanes' drain
/// deadline: a fifth of it, at most [`MAX_RELEASE_RESERVE`].
fn release_reserve(timeout: Duration) -> Duration {
    (timeout / 5).min(MAX_RELEASE_RESERVE)
}

pub(crate) struct SupervisorArgs {
    pub(crate) store: Outbox,
    pub(crate) config: SupervisorConfig,
    pub(crate) lanes: Vec<(LaneConfig, Arc<dyn DeliveryHandler>)>,
    /// The lane patterns, validated, and their first pass's answer (`relay/upkeep.rs`):
    /// their lanes start with the relay, before the served lanes are first recorded.
    pub(crate) patterns: Vec<(LanePattern, Arc<dyn DeliveryHandler>)>,
    pub(crate) first_pending: Option<PendingSample>,
    pub(crate) events: broadcast::Sender<RelayEvent>,
    /// The fleet-wide pauses read before the start, so a paused lane never claims.
    pub(crate) fleet_pauses: Vec<LanePause>,
}

pub(crate) struct RelaySupervisor;

struct LaneEntry {
    config: LaneConfig,
    handler: Arc<dyn DeliveryHandler>,
    counters: Arc<LaneCounters>,
    actor: Option<ActorRef<LaneMsg>>,
    state: LaneState,
    /// Paused in this process (`RelayHandle::pause`): survives the lane's restarts.
    paused: bool,
    /// Paused for every relay on the store (`fleet.rs`): who, when, why.
    fleet_pause: Option<LanePause>,
    /// Being removed or shut down: its end is not a crash.
    stopping: bool,
    incarnation: u64,
    /// The token of the restart this lane waits for. Tokens are unique across the
    /// supervisor, so a timer of a removed lane never restarts a re-added one.
    restart_due: Option<u64>,
    /// Its restarts, by the restart policy ([`Restarts`]).
    restarts: Restarts,
    /// When the lane was marked failed.
    failed_at: Option<Instant>,
    metrics: LaneMetrics,
    /// The lane pattern that runs it (its index), or `None` for a lane of its own.
    pattern: Option<usize>,
    /// A pattern's lane: since when it has had nothing pending and nothing in flight.
    idle_since: Option<Instant>,
}

pub(crate) struct SupervisorState {
    store: Outbox,
    config: SupervisorConfig,
    events: broadcast::Sender<RelayEvent>,
    /// Boxed: an entry is over a kilobyte, and a B-tree's nodes are often half empty, so
    /// entries inline would leave about as much again unused per lane.
    lanes: BTreeMap<LaneKey, Box<LaneEntry>>,
    by_actor: HashMap<ActorId, LaneKey>,
    shutting_down: bool,
    /// The last restart token handed out.
    restart_tokens: u64,
    /// The fleet-wide pauses last read from the store, lanes this relay runs or not (a lane
    /// added later starts paused if it is in here).
    fleet_pauses: BTreeMap<LaneKey, LanePause>,
    /// The lane patterns (`patterns.rs`).
    patterns: Vec<PatternEntry>,
    /// Pattern lanes draining to make way for a lane added explicitly: no pattern starts
    /// them again meanwhile.
    adopting: std::collections::BTreeSet<LaneKey>,
}

impl SupervisorState {
    fn emit(&self, event: RelayEvent) {
        if let Some(entry) = event_lane(&event).and_then(|key| self.lanes.get(key)) {
            observe::record(&entry.metrics, &event);
        }
        let _ = self.events.send(event);
    }

    fn set_state(&mut self, key: &LaneKey, state: LaneState) {
        if let Some(entry) = self.lanes.get_mut(key) {
            entry.state = state;
        }
        self.emit(RelayEvent::LaneStateChanged {
            lane: key.clone(),
            state,
        });
    }

    async fn start_lane(&mut self, myself: &ActorRef<SupervisorMsg>, key: &LaneKey) {
        let Some(entry) = self.lanes.get_mut(key) else {
            return;
        };
        entry.incarnation += 1;
        let args = LaneArgs {
            config: entry.config.clone(),
            store: self.store.clone(),
            handler: entry.handler.clone(),
            counters: entry.counters.clone(),
            metrics: entry.metrics.clone(),
            events: self.events.clone(),
            incarnation: entry.incarnation,
            paused: entry.is_paused(),
        };
        let state = if entry.is_paused() {
            LaneState::Paused
        } else {
            LaneState::Running
        };
        match Actor::spawn_linked(None, LaneRelay, args, myself.get_cell()).await {
            Ok((actor, _)) => {
                self.by_actor.insert(actor.get_id(), key.clone());
                if let Some(entry) = self.lanes.get_mut(key) {
                    entry.actor = Some(actor);
                }
                self.set_state(key, state);
            }
            Err(error) => {
                self.lane_crashed(myself, key, format!("could not start: {error}"));
            }
        }
    }

    /// A lane relay died unasked: restart it after a backoff, or mark it failed.
    fn lane_crashed(&mut self, myself: &ActorRef<SupervisorMsg>, key: &LaneKey, error: String) {
        self.restart_tokens += 1;
        let token = self.restart_tokens;
        let Some(entry) = self.lanes.get_mut(key) else {
            return;
        };
        entry.actor = None;
        entry.counters.set_last_error(error.clone());
        let now = Instant::now();
        let restart = entry.restarts.crashed(now, &self.config);
        tracing::error!(lane = %key, %error, "lane relay crashed");
        self.emit(RelayEvent::LaneCrashed {
            lane: key.clone(),
            error: error.clone(),
        });
        let Some(entry) = self.lanes.get_mut(key) else {
            return;
        };
        let (after, restarts) = match restart {
            Restart::After { after, restarts } => (after, restarts),
            Restart::GiveUp => {
                entry.failed_at = Some(now);
                let (max_restarts, window) = (self.config.max_restarts, self.config.restart_window);
                tracing::error!(lane = %key, max_restarts, ?window, "lane crashed too often; marking it failed");
                self.set_state(key, LaneState::Failed);
                self.emit(RelayEvent::LaneFailed {
                    lane: key.clone(),
                    error,
                });
                return;
            }
        };
        entry.restart_due = Some(token);
        self.set_state(key, LaneState::Restarting);
        self.emit(RelayEvent::LaneRestarting {
            lane: key.clone(),
            restarts,
            after,
        });
        let key = key.clone();
        myself.send_after(after, move || SupervisorMsg::Restart(key, token));
    }

    fn status(&self) -> Vec<LaneStatus> {
        use std::sync::atomic::Ordering::Relaxed;
        self.lanes
            .iter()
            .map(|(key, entry)| LaneStatus {
                lane: key.clone(),
                state: entry.state,
                in_flight: entry.counters.in_flight.load(Relaxed),
                restarts: entry.restarts.total(),
                last_error: entry.counters.last_error(),
                claimed: entry.counters.claimed.load(Relaxed),
                delivered: entry.counters.delivered.load(Relaxed),
                failed: entry.counters.failed.load(Relaxed),
                dead_lettered: entry.counters.dead_lettered.load(Relaxed),
                lost_claims: entry.counters.lost_claims.load(Relaxed),
                gates: GateStatus {
                    rate_limit: entry.config.rate_limit.map(|limit| limit.to_string()),
                    breaker: entry.counters.breaker(),
                    retry_after_holds_lane: entry.config.retry_after_holds_lane,
                    throttled: Duration::from_micros(entry.counters.throttled_micros.load(Relaxed)),
                },
                paused_here: entry.paused,
                fleet_pause: entry.fleet_pause.clone(),
                failed_for: entry.failed_at.map(|at| at.elapsed()),
            })
            .collect()
    }

    /// Asks a lane to drain; the answer arrives on the returned channel, and the lane relay
    /// stops right after sending it. A lane that is down (restarting or failed) has nothing
    /// to drain.
    fn drain(
        &mut self,
        key: &LaneKey,
        timeout: Duration,
    ) -> Option<(oneshot::Receiver<DrainReport>, ActorRef<LaneMsg>)> {
        let entry = self.lanes.get_mut(key)?;
        entry.stopping = true;
        let actor = entry.actor.clone()?;
        let (reply, answer) = oneshot::channel();
        if actor
            .send_message(LaneMsg::Drain { timeout, reply })
            .is_err()
        {
            return None;
        }
        self.set_state(key, LaneState::Draining);
        Some((answer, actor))
    }

    fn forget(&mut self, key: &LaneKey) {
        if let Some(entry) = self.lanes.remove(key) {
            entry.metrics.lane_state(LaneState::Stopped);
            if let Some(actor) = entry.actor {
                self.by_actor.remove(&actor.get_id());
            }
        }
    }

    fn entry_mut(&mut self, key: &LaneKey) -> Result<&mut LaneEntry, RelayError> {
        self.lanes
            .get_mut(key)
            .map(|entry| &mut **entry)
            .ok_or_else(|| RelayError::UnknownLane(key.clone()))
    }

    fn add_lane(
        &mut self,
        config: LaneConfig,
        handler: Arc<dyn DeliveryHandler>,
    ) -> Result<LaneKey, RelayError> {
        config.validate()?;
        config.validate_for(self.store.capabilities())?;
        let key = LaneKey::new(&config.name, &config.target);
        if self.lanes.contains_key(&key) {
            return Err(RelayError::DuplicateLane(key));
        }
        self.adopting.remove(&key);
        self.lanes.insert(
            key.clone(),
            Box::new(LaneEntry {
                metrics: LaneMetrics::of(&config),
                config,
                handler,
                counters: Arc::default(),
                actor: None,
                state: LaneState::Running,
                paused: false,
                fleet_pause: self.fleet_pauses.get(&key).cloned(),
                stopping: false,
                incarnation: 0,
                restart_due: None,
                restarts: Restarts::default(),
                failed_at: None,
                pattern: None,
                idle_since: None,
            }),
        );
        Ok(key)
    }
}

impl Actor for RelaySupervisor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = SupervisorArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<SupervisorMsg>,
        args: SupervisorArgs,
    ) -> Result<SupervisorState, ActorProcessingErr> {
        let mut state = SupervisorState {
            store: args.store,
            config: args.config,
            events: args.events,
            lanes: BTreeMap::new(),
            by_actor: HashMap::new(),
            shutting_down: false,
            restart_tokens: 0,
            fleet_pauses: fleet::by_lane(args.fleet_pauses),
            patterns: args
                .patterns
                .into_iter()
                .map(|(pattern, handler)| PatternEntry::new(pattern, handler))
                .collect(),
            adopting: std::collections::BTreeSet::new(),
        };
        for (config, handler) in args.lanes {
            let key = state.add_lane(config, handler)?;
            state.start_lane(&myself, &key).await;
        }
        if let Some(first) = args.first_pending {
            state.serve_patterns(&myself, first).await;
        }
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<SupervisorMsg>,
        message: SupervisorMsg,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            SupervisorMsg::AddLane(config, handler, reply)
                if !state.shutting_down && state.is_pattern_lane(&config.key()) =>
            {
                state.adopt(&myself, config, handler, reply);
            }
            SupervisorMsg::AddLane(config, handler, reply) => {
                let answer = if state.shutting_down {
                    Err(RelayError::Stopped)
                } else {
                    match state.add_lane(*config, handler) {
                        Ok(key) => {
                            state.start_lane(&myself, &key).await;
                            Ok(())
                        }
                        Err(error) => Err(error),
                    }
                };
                let _ = reply.send(answer);
            }
            SupervisorMsg::RemoveLane(key, timeout, reply) => {
                if !state.lanes.contains_key(&key) {
                    let _ = reply.send(Err(RelayError::UnknownLane(key)));
                    return Ok(());
                }
                match state.drain(&key, timeout) {
                    Some((answer, actor)) => {
                        // Wait off the supervisor's mailbox: supervision events keep flowing.
                        let me = myself.clone();
                        tokio::spawn(async move {
                            let report = answer.await.unwrap_or_default();
                            // Answer only once the relay has exited and the lane is forgotten
                            // (`Removed`), so an add of the same lane right after the answer
                            // is not refused. The relay's exit event may reach this mailbox
                            // after the wait returns (it did, 1 removal in a few hundred),
                            // so the supervisor forgets the lane on `Removed` itself.
                            let _ = actor.get_cell().wait(Some(LANE_EXIT_WAIT)).await;
                            let (done, forgotten) = oneshot::channel();
                            let removed = SupervisorMsg::Removed(key, actor.get_id(), done);
                            if me.send_message(removed).is_ok() {
                                // Forgotten, or the supervisor stopped (a shutdown) and the
                                // lane with it.
                                let _ = forgotten.await;
                            }
                            let _ = reply.send(Ok(report));
                        });
                    }
                    None => {
                        state.forget(&key);
                        let _ = reply.send(Ok(DrainReport::default()));
                    }
                }
            }
            SupervisorMsg::Pause(key, reply) => {
                let answer = state
                    .entry_mut(&key)
                    .map(|entry| entry.paused = true)
                    .map(|()| state.apply_pause(&key));
                let _ = reply.send(answer);
            }
            SupervisorMsg::Resume(key, reply) => {
                let answer = state
                    .entry_mut(&key)
                    .map(|entry| entry.paused = false)
                    .map(|()| state.apply_pause(&key));
                let _ = reply.send(answer);
            }
            SupervisorMsg::FleetPauses(pauses) => state.set_fleet_pauses(pauses),
            SupervisorMsg::Backlog(sample) => state.hand_out_backlog(sample),
            SupervisorMsg::Pending(sample) => {
                if !state.shutting_down {
                    state.serve_patterns(&myself, sample).await;
                }
            }
            SupervisorMsg::Due(due) => {
                for (key, at) in due {
                    if let Some(actor) = state.lanes.get(&key).and_then(|e| e.actor.as_ref()) {
                        let _ = actor.send_message(LaneMsg::Due(at));
                    }
                }
            }
            SupervisorMsg::Status(reply) => {
                let _ = reply.send(state.status());
            }
            SupervisorMsg::Lanes(reply) => {
                let _ = reply.send(state.lanes.values().map(|e| e.config.clone()).collect());
            }
            SupervisorMsg::Shutdown(timeout, reply) => {
                state.shutting_down = true;
                // `timeout` is a bound whatever the store does. A lane's own drain deadline
                // comes a little earlier, leaving it time to record acks and release claims;
                // a lane still not done at `timeout` is stuck in a store call (a silent
                // connection) and is stopped where it stands: its claims lapse with their
                // leases.
                let deadline = Instant::now() + timeout;
                let lane_timeout = timeout.saturating_sub(release_reserve(timeout));
                let keys: Vec<LaneKey> = state.lanes.keys().cloned().collect();
                let mut waits = Vec::new();
                for key in keys {
                    if let Some((answer, actor)) = state.drain(&key, lane_timeout) {
                        waits.push((key, answer, actor));
                    }
                }
                let me = myself.clone();
                tokio::spawn(async move {
                    let mut report = ShutdownReport::default();
                    for (key, answer, actor) in waits {
                        let drained = match tokio::time::timeout_at(deadline, answer).await {
                            Ok(Ok(drained)) => drained,
                            Ok(Err(_)) | Err(_) => {
                                tracing::warn!(lane = %key, "lane did not finish draining by the shutdown deadline: stopped; its claims lapse and are redelivered");
                                actor.kill();
                                DrainReport {
                                    abandoned: true,
                                    ..DrainReport::default()
                                }
                            }
                        };
                        report.lanes.insert(key.to_string(), drained);
                    }
                    let _ = reply.send(report);
                    me.stop(Some("shutdown".to_owned()));
                });
            }
            SupervisorMsg::Removed(key, actor, done) => {
                // Only the removed incarnation: its exit event may have forgotten it already,
                // and a lane added again since is not stopping.
                let same = state.lanes.get(&key).is_some_and(|entry| {
                    entry.stopping && entry.actor.as_ref().is_some_and(|a| a.get_id() == actor)
                });
                if same {
                    state.forget(&key);
                }
                let _ = done.send(());
            }
            SupervisorMsg::Restart(key, token) => {
                let due = state.lanes.get_mut(&key).is_some_and(|entry| {
                    let due = entry.restart_due == Some(token)
                        && entry.state == LaneState::Restarting
                        && !entry.stopping;
                    if due {
                        entry.restart_due = None;
                    }
                    due
                });
                if due && !state.shutting_down {
                    state.start_lane(&myself, &key).await;
                }
            }
        }
        Ok(())
    }

    // Ractor's default stops the parent when a child ends: here one lane's end must never
    // take the others down.
    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<SupervisorMsg>,
        event: SupervisionEvent,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        let (cell, error) = match event {
            SupervisionEvent::ActorFailed(cell, error) => (cell, Some(error.to_string())),
            SupervisionEvent::ActorTerminated(cell, _, _) => (cell, None),
            _ => return Ok(()),
        };
        let Some(key) = state.by_actor.remove(&cell.get_id()) else {
            return Ok(());
        };
        // Ractor killed the dead relay's handlers with it: nothing of its runs any more,
        // whatever it last published.
        if let Some(entry) = state.lanes.get(&key) {
            entry
                .counters
                .in_flight
                .store(0, std::sync::atomic::Ordering::Relaxed);
            entry.metrics.in_flight(0);
        }
        let stopping = state.lanes.get(&key).is_none_or(|e| e.stopping);
        if stopping || state.shutting_down {
            state.forget(&key);
            return Ok(());
        }
        // The dead incarnation's handlers are gone already: ractor's exit of an actor
        // kills its whole subtree (and detaches it, so `cell.get_children()` is empty here)
        // before the supervisor hears of it. Their claims lapse and are redelivered.
        // `edges::handlers_of_a_crashed_incarnation_are_stopped_with_it` holds ractor to it.
        let error = error.unwrap_or_else(|| "lane relay stopped unexpectedly".to_owned());
        state.lane_crashed(&myself, &key, error);
        Ok(())
    }

    async fn post_stop(
        &self,
        myself: ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        for entry in state.lanes.values() {
            entry.metrics.lane_state(LaneState::Stopped);
        }
        myself.stop_children(None);
        Ok(())
    }
}

/// The lane an event is about, for the events the supervisor emits.
fn event_lane(event: &RelayEvent) -> Option<&LaneKey> {
    match event {
        RelayEvent::LaneCrashed { lane, .. }
        | RelayEvent::LaneRestarting { lane, .. }
        | RelayEvent::LaneFailed { lane, .. }
        | RelayEvent::LaneStateChanged { lane, .. } => Some(lane),
        _ => None,
    }
}
