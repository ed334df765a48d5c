//! `LaneRelay`: one actor per (lane, target). It claims no more messages than it has free
//! handler slots, hands them to its `HandlerActor`s, acks and nacks in batches, and keeps
//! the leases of its claims with timers that are its own actor messages.
//!
//! Why the bound lives here: ractor mailboxes are unbounded, so the only place that can
//! keep a lane from taking more work than it can run is the lane itself.
//!
//! Why acks are batched through a `Flush` message: a finished delivery queues its ack and,
//! if no flush is pending, sends `Flush` to the back of the mailbox. Every `DeliveryDone`
//! already queued ahead of it joins the same batch, so under load one store round trip
//! acks many messages, and when idle a single ack goes out at once.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, SupervisionEvent};
use tokio::sync::{broadcast, oneshot};
use tokio::time::Instant;
use uuid::Uuid;

use crate::config::{LaneConfig, DEFAULT_STORE_BACKOFF, DEFAULT_STORE_BACKOFF_MAX};
use crate::delivery::DeliveryHandler;
use crate::message::OutboxMessage;
use crate::metrics::{LaneMetrics, StoreOp};
use crate::relay::handler::{DeliveryFailure, HandlerActor, HandlerArgs, HandlerMsg};
use crate::relay::observe;

mod ack;
mod drain;
mod lease;
use crate::relay::{DrainReport, LaneCounters, LaneKey, RelayEvent};
use crate::store::{
    ClaimRef, ClaimRequest, MessageFilter, OrderingPolicy, OutboxStore, StoreError,
};

/// The shortest idle sleep: a guard against a store whose `next_due` keeps saying "now".
const MIN_IDLE_SLEEP: Duration = Duration::from_millis(1);

pub(crate) enum LaneMsg {
    /// Claim if there are free slots.
    Pump,
    /// An idle timer fired; honoured only if it is the latest one scheduled.
    Tick(u64),
    /// The store says new work may be claimable.
    Wake,
    /// A handler finished a delivery.
    DeliveryDone {
        handler: ActorId,
        outbox_id: Uuid,
        result: Result<(), DeliveryFailure>,
        elapsed: Duration,
    },
    /// Record the finished deliveries' acks and nacks.
    Flush,
    /// A batch's lease timer; stale if the batch or generation moved on.
    LeaseCheck {
        batch: u64,
        generation: u64,
    },
    /// Sample the store's stats for the backlog gauges.
    StatsTick,
    /// Retry after a store error's backoff.
    StoreRetry,
    Pause,
    Resume,
    /// Stop claiming, finish or release what is running, answer, stop.
    Drain {
        timeout: Duration,
        reply: oneshot::Sender<DrainReport>,
    },
    DrainDeadline,
}

pub(crate) struct LaneArgs {
    pub(crate) config: LaneConfig,
    pub(crate) store: Arc<dyn OutboxStore>,
    pub(crate) handler: Arc<dyn DeliveryHandler>,
    pub(crate) counters: Arc<LaneCounters>,
    pub(crate) events: broadcast::Sender<RelayEvent>,
    pub(crate) incarnation: u64,
    pub(crate) paused: bool,
}

pub(crate) struct LaneRelay;

/// A task that ends with its owner.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A message being delivered.
struct InFlight {
    message: OutboxMessage,
    claim: ClaimRef,
    handler: ActorId,
    batch: u64,
    started: Instant,
}

/// The claims taken by one claim statement, and its lease timer.
struct LeaseBatch {
    running: HashSet<Uuid>,
    generation: u64,
}

enum Mode {
    Running,
    Paused,
    Draining {
        /// Everyone who asked for this drain (a remove, then a shutdown): each gets the report.
        replies: Vec<oneshot::Sender<DrainReport>>,
        completed: usize,
    },
}

pub(crate) struct LaneRelayState {
    key: LaneKey,
    config: LaneConfig,
    store: Arc<dyn OutboxStore>,
    handler: Arc<dyn DeliveryHandler>,
    counters: Arc<LaneCounters>,
    events: broadcast::Sender<RelayEvent>,
    mode: Mode,
    /// Every live handler actor, and which of them are free.
    handlers: HashMap<ActorId, ActorRef<HandlerMsg>>,
    idle: Vec<ActorId>,
    /// What each busy handler is delivering.
    busy: HashMap<ActorId, Uuid>,
    in_flight: HashMap<Uuid, InFlight>,
    batches: HashMap<u64, LeaseBatch>,
    next_batch: u64,
    acks: Vec<(InFlight, Duration)>,
    nacks: Vec<(InFlight, DeliveryFailure, Duration)>,
    flush_pending: bool,
    tick_generation: u64,
    /// The last store-error backoff, doubled on each further error, cleared on success.
    store_backoff: Option<Duration>,
    /// True while waiting out a backoff: no claims until `StoreRetry`.
    backing_off: bool,
    /// Forwards the store's wake-ups; aborted when the state drops, which also happens
    /// when the lane crashes (ractor skips `post_stop` then).
    wake_task: Option<AbortOnDrop>,
    /// Set while a `Wake` waits in the mailbox.
    wake_queued: Arc<std::sync::atomic::AtomicBool>,
    metrics: LaneMetrics,
}

impl LaneRelayState {
    fn emit(&self, event: RelayEvent) {
        observe::record(&self.metrics, &event);
        // No subscriber is fine.
        let _ = self.events.send(event);
    }

    fn publish_in_flight(&self) {
        let n = self.in_flight.len() as u64;
        self.counters
            .in_flight
            .store(n, std::sync::atomic::Ordering::Relaxed);
        self.metrics.in_flight(n);
    }

    fn store_failed(&mut self, myself: &ActorRef<LaneMsg>, op: StoreOp, error: &StoreError) {
        tracing::warn!(lane = %self.key, %op, %error, "store call failed; backing off");
        self.counters.set_last_error(format!("{op}: {error}"));
        self.emit(RelayEvent::StoreError {
            lane: self.key.clone(),
            op,
            error: error.to_string(),
            permanent: error.is_permanent(),
        });
        let backoff = self.store_backoff.map_or(DEFAULT_STORE_BACKOFF, |b| {
            (b * 2).min(DEFAULT_STORE_BACKOFF_MAX)
        });
        self.store_backoff = Some(backoff);
        if !self.backing_off {
            self.backing_off = true;
            myself.send_after(backoff, || LaneMsg::StoreRetry);
        }
    }

    fn store_ok(&mut self) {
        self.store_backoff = None;
    }

    fn claim_request(&self, limit: usize) -> ClaimRequest {
        ClaimRequest::new(
            &self.config.lane,
            &self.config.target,
            limit,
            self.config.lease,
            &self.config.consumer_id,
        )
        .with_ordering(self.config.ordering)
    }

    /// Claims as many messages as there are free handlers, dispatches them, and schedules
    /// the next look at the store if the lane is not full.
    async fn pump(&mut self, myself: &ActorRef<LaneMsg>) {
        if !matches!(self.mode, Mode::Running) || self.backing_off {
            return;
        }
        let limit = self.idle.len().min(self.config.batch_size);
        if limit == 0 {
            // A finishing delivery pumps again.
            return;
        }
        let claimed_at = Instant::now();
        let batch = match self.store.claim(&self.claim_request(limit)).await {
            Ok(batch) => batch,
            Err(error) => return self.store_failed(myself, StoreOp::Claim, &error),
        };
        self.store_ok();
        if !batch.dead_lettered.is_empty() {
            LaneCounters::add(&self.counters.dead_lettered, batch.dead_lettered.len());
            self.emit(RelayEvent::LeaseLapsedDeadLettered {
                lane: self.key.clone(),
                outbox_ids: batch.dead_lettered,
            });
        }
        let got = batch.messages.len();
        if got > 0 {
            self.dispatch(myself, batch.messages, claimed_at);
        } else {
            // Empty claims belong in the batch-size histogram too: they show idle polling.
            self.metrics.claimed(0);
        }
        if got == limit {
            // There may be more: look again once the mailbox has had its turn.
            let _ = myself.send_message(LaneMsg::Pump);
        } else {
            self.sleep_until_due(myself).await;
        }
    }

    fn dispatch(
        &mut self,
        myself: &ActorRef<LaneMsg>,
        messages: Vec<OutboxMessage>,
        claimed_at: Instant,
    ) {
        self.next_batch += 1;
        let batch_id = self.next_batch;
        let mut running = HashSet::new();
        let mut ids = Vec::with_capacity(messages.len());
        let mut redeliveries = 0;
        for message in messages {
            if let (Some(flight), Some(claim)) =
                (self.in_flight.get_mut(&message.outbox_id), message.claim())
            {
                // Our own delivery outlived its lease and we claimed the message again. One
                // delivery is enough: the running one adopts the fresh claim, so its ack
                // lands with the current token.
                if let Some(old) = self.batches.get_mut(&flight.batch) {
                    old.running.remove(&message.outbox_id);
                    if old.running.is_empty() {
                        // Its timer would otherwise extend nothing, forever.
                        self.batches.remove(&flight.batch);
                    }
                }
                flight.claim = claim;
                flight.batch = batch_id;
                running.insert(message.outbox_id);
                ids.push(message.outbox_id);
                continue;
            }
            // Never more messages than idle handlers: the claim limit saw to that.
            let (Some(claim), Some(handler_id)) = (message.claim(), self.idle.pop()) else {
                continue;
            };
            if message.attempt_count > 1 {
                redeliveries += 1;
            }
            ids.push(message.outbox_id);
            running.insert(message.outbox_id);
            self.busy.insert(handler_id, message.outbox_id);
            if let Some(handler) = self.handlers.get(&handler_id) {
                // A handler that died since is replaced by its supervision event, which
                // also nacks this claim.
                let _ = handler.send_message(HandlerMsg::Deliver(Box::new(message.clone())));
            }
            self.in_flight.insert(
                message.outbox_id,
                InFlight {
                    claim,
                    handler: handler_id,
                    batch: batch_id,
                    started: Instant::now(),
                    message,
                },
            );
        }
        LaneCounters::add(&self.counters.claimed, ids.len());
        self.publish_in_flight();
        self.emit(RelayEvent::Claimed {
            lane: self.key.clone(),
            outbox_ids: ids,
            redeliveries,
        });
        self.batches.insert(
            batch_id,
            LeaseBatch {
                running,
                generation: 0,
            },
        );
        // The lease began no later than `claimed_at`, so time the check from there.
        let check_in = self
            .lease_check_delay()
            .saturating_sub(claimed_at.elapsed());
        myself.send_after(check_in, move || LaneMsg::LeaseCheck {
            batch: batch_id,
            generation: 0,
        });
    }

    /// Sleeps until the store's next due time or the poll ceiling, whichever is first;
    /// a wake-up or a finished delivery may end the sleep sooner.
    async fn sleep_until_due(&mut self, myself: &ActorRef<LaneMsg>) {
        let due = match self
            .store
            .next_due(&self.config.lane, &self.config.target, self.config.ordering)
            .await
        {
            Ok(due) => due,
            Err(error) => return self.store_failed(myself, StoreOp::NextDue, &error),
        };
        let sleep = due
            .unwrap_or(self.config.max_poll_interval)
            .clamp(MIN_IDLE_SLEEP, self.config.max_poll_interval);
        self.tick_generation += 1;
        let generation = self.tick_generation;
        myself.send_after(sleep, move || LaneMsg::Tick(generation));
        self.emit(RelayEvent::Idle {
            lane: self.key.clone(),
            sleep,
        });
    }

    /// Takes a finished (or failed) delivery off the books and frees its handler.
    fn take_in_flight(&mut self, outbox_id: Uuid) -> Option<InFlight> {
        let flight = self.in_flight.remove(&outbox_id)?;
        self.busy.remove(&flight.handler);
        if let Some(batch) = self.batches.get_mut(&flight.batch) {
            batch.running.remove(&outbox_id);
            if batch.running.is_empty() {
                self.batches.remove(&flight.batch);
            }
        }
        self.publish_in_flight();
        if let Mode::Draining { completed, .. } = &mut self.mode {
            *completed += 1;
        }
        Some(flight)
    }

    fn schedule_flush(&mut self, myself: &ActorRef<LaneMsg>) {
        if !self.flush_pending {
            self.flush_pending = true;
            let _ = myself.send_message(LaneMsg::Flush);
        }
    }

    async fn sample_stats(&mut self, myself: &ActorRef<LaneMsg>) {
        let filter = MessageFilter::lane(&self.config.lane, &self.config.target);
        match self.store.stats(&filter).await {
            Ok(stats) => {
                let mut stats = stats.into_iter().next().unwrap_or_default();
                if self.config.ordering == OrderingPolicy::Skip {
                    // The store counts the keys Block would hold; a Skip lane holds none.
                    stats.blocked_keys = 0;
                }
                self.metrics.backlog(&stats);
            }
            Err(error) => self.emit(RelayEvent::StoreError {
                lane: self.key.clone(),
                op: StoreOp::Stats,
                error: error.to_string(),
                permanent: error.is_permanent(),
            }),
        }
        myself.send_after(self.config.stats_interval, || LaneMsg::StatsTick);
    }

    async fn spawn_handler(
        &mut self,
        myself: &ActorRef<LaneMsg>,
    ) -> Result<(), ActorProcessingErr> {
        let args = HandlerArgs {
            handler: self.handler.clone(),
            lane: myself.clone(),
            timeout: self.config.delivery_timeout,
        };
        let (handler, _) = Actor::spawn_linked(None, HandlerActor, args, myself.get_cell()).await?;
        self.idle.push(handler.get_id());
        self.handlers.insert(handler.get_id(), handler);
        Ok(())
    }

    /// A handler actor died (a panic in `deliver`): nack what it was delivering, replace it.
    async fn handler_died(
        &mut self,
        myself: &ActorRef<LaneMsg>,
        id: ActorId,
        reason: String,
    ) -> Result<(), ActorProcessingErr> {
        if self.handlers.remove(&id).is_none() {
            return Ok(());
        }
        self.idle.retain(|idle| *idle != id);
        if let Some(outbox_id) = self.busy.get(&id).copied() {
            if let Some(flight) = self.take_in_flight(outbox_id) {
                tracing::warn!(lane = %self.key, %outbox_id, %reason, "handler panicked");
                let ran = flight.started.elapsed();
                self.nacks
                    .push((flight, DeliveryFailure::panic(&reason), ran));
                self.schedule_flush(myself);
            }
        }
        if !matches!(self.mode, Mode::Draining { .. }) {
            self.spawn_handler(myself).await?;
            let _ = myself.send_message(LaneMsg::Pump);
        }
        Ok(())
    }
}

impl Actor for LaneRelay {
    type Msg = LaneMsg;
    type State = LaneRelayState;
    type Arguments = LaneArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<LaneMsg>,
        args: LaneArgs,
    ) -> Result<LaneRelayState, ActorProcessingErr> {
        let key = LaneKey::new(&args.config.lane, &args.config.target);
        let mut state = LaneRelayState {
            key: key.clone(),
            store: args.store,
            handler: args.handler,
            counters: args.counters,
            events: args.events,
            mode: if args.paused {
                Mode::Paused
            } else {
                Mode::Running
            },
            handlers: HashMap::new(),
            idle: Vec::new(),
            busy: HashMap::new(),
            in_flight: HashMap::new(),
            batches: HashMap::new(),
            next_batch: 0,
            acks: Vec::new(),
            nacks: Vec::new(),
            flush_pending: false,
            tick_generation: 0,
            store_backoff: None,
            backing_off: false,
            wake_task: None,
            wake_queued: Arc::default(),
            metrics: LaneMetrics::new(&args.config.lane, &args.config.target),
            config: args.config,
        };
        for _ in 0..state.config.concurrency {
            state.spawn_handler(&myself).await?;
        }
        let mut wakeups = state.store.subscribe();
        let (lane, target) = (state.config.lane.clone(), state.config.target.clone());
        let me = myself.clone();
        let queued = state.wake_queued.clone();
        state.wake_task = Some(AbortOnDrop(tokio::spawn(async move {
            loop {
                let wake = match wakeups.recv().await {
                    Ok(wake) => wake.concerns(&lane, &target),
                    Err(broadcast::error::RecvError::Lagged(_)) => true,
                    Err(broadcast::error::RecvError::Closed) => return,
                };
                // A burst of enqueues becomes one Wake in the mailbox, so one claim.
                if wake
                    && !queued.swap(true, std::sync::atomic::Ordering::AcqRel)
                    && me.send_message(LaneMsg::Wake).is_err()
                {
                    return;
                }
            }
        })));
        state.publish_in_flight();
        state.emit(RelayEvent::LaneStarted {
            lane: key,
            incarnation: args.incarnation,
        });
        // A new incarnation after a crash finds the old one's claims still leased: the first
        // pump claims what else is due, and its `next_due` sleep ends when those leases lapse.
        let _ = myself.send_message(LaneMsg::Pump);
        let _ = myself.send_message(LaneMsg::StatsTick);
        Ok(state)
    }

    async fn post_stop(
        &self,
        myself: ActorRef<LaneMsg>,
        state: &mut LaneRelayState,
    ) -> Result<(), ActorProcessingErr> {
        state.wake_task = None;
        myself.stop_children(None);
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<LaneMsg>,
        message: LaneMsg,
        state: &mut LaneRelayState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            LaneMsg::Pump => state.pump(&myself).await,
            LaneMsg::Wake => {
                state
                    .wake_queued
                    .store(false, std::sync::atomic::Ordering::Release);
                state.pump(&myself).await
            }
            LaneMsg::Tick(generation) => {
                if generation == state.tick_generation {
                    state.pump(&myself).await;
                }
            }
            LaneMsg::DeliveryDone {
                handler,
                outbox_id,
                result,
                elapsed,
            } => {
                if let Some(flight) = state.take_in_flight(outbox_id) {
                    if let Some(handler_id) =
                        state.handlers.contains_key(&handler).then_some(handler)
                    {
                        state.idle.push(handler_id);
                    }
                    match result {
                        Ok(()) => state.acks.push((flight, elapsed)),
                        Err(failure) => state.nacks.push((flight, failure, elapsed)),
                    }
                    state.schedule_flush(&myself);
                }
            }
            LaneMsg::Flush => state.flush(&myself).await,
            LaneMsg::LeaseCheck { batch, generation } => {
                state.lease_check(&myself, batch, generation).await
            }
            LaneMsg::StatsTick => state.sample_stats(&myself).await,
            LaneMsg::StoreRetry => {
                state.backing_off = false;
                if state.acks.is_empty() && state.nacks.is_empty() {
                    state.pump(&myself).await;
                } else {
                    state.flush(&myself).await;
                }
            }
            LaneMsg::Pause => {
                if matches!(state.mode, Mode::Running) {
                    state.mode = Mode::Paused;
                }
            }
            LaneMsg::Resume => {
                if matches!(state.mode, Mode::Paused) {
                    state.mode = Mode::Running;
                    state.pump(&myself).await;
                }
            }
            LaneMsg::Drain { timeout, reply } => state.drain(&myself, timeout, reply).await,
            LaneMsg::DrainDeadline => state.drain_deadline(&myself).await,
        }
        Ok(())
    }

    // Ractor's default stops the parent when a child ends; a lane outlives its handlers.
    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<LaneMsg>,
        event: SupervisionEvent,
        state: &mut LaneRelayState,
    ) -> Result<(), ActorProcessingErr> {
        match event {
            SupervisionEvent::ActorFailed(cell, error) => {
                state
                    .handler_died(&myself, cell.get_id(), error.to_string())
                    .await?
            }
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                let reason = reason.unwrap_or_else(|| "handler stopped".to_owned());
                state.handler_died(&myself, cell.get_id(), reason).await?
            }
            _ => {}
        }
        Ok(())
    }
}
