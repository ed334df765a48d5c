//! `LaneRelay`: one actor per (lane, target), the glue between [`LaneCore`] (the lane's
//! logic, sans-IO) and the world. It feeds the core inputs (handler reports, timers, store
//! answers, commands) and carries out the commands the core answers with.
//!
//! Why store calls run on spawned tasks ([`calls`]): an await inside `handle` would hold up
//! every other message of this actor, so a slow store would delay lease checks, drains and
//! status answers. Each call's answer comes back as an actor message; the core bounds how
//! many are in flight (up to `claims_in_flight` claims, each on its own connection where
//! the store pools them and each carrying its own acks, and one plain ack/nack flush).
//!
//! Why the bound on work lives in the core: ractor mailboxes are unbounded, so the only
//! place that can keep a lane from taking more work than it can run is the lane itself.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, SupervisionEvent};
use tokio::sync::{broadcast, oneshot};
use tokio::time::Instant;

use crate::config::LaneConfig;
use crate::delivery::DeliveryHandler;
use crate::lane::{DrainReport, LaneKey, RelayEvent};
use crate::metrics::LaneMetrics;
use crate::relay::handler::{DeliveryReport, HandlerActor, HandlerArgs, HandlerMsg};
use crate::relay::observe;
use crate::relay::status::LaneCounters;
use crate::store::hand_off::{HandOffEvent, HandOffSink, Registration};
use crate::store::Outbox;

mod calls;
pub(crate) mod core;
mod spans;
#[cfg(test)]
mod tests;

use self::core::{Command, Input, LaneCore, Slot};

pub(crate) enum LaneMsg {
    /// An input for the core: a timer or a store call's answer.
    Core(Input),
    /// A handler finished a delivery.
    Delivered(DeliveryReport),
    /// The store says new work may be claimable.
    Wake,
    /// The relay's due watcher says a message of this lane may be claimable at this time.
    Due(Instant),
    Pause,
    Resume,
    /// Stop claiming, finish or release what is running, answer, stop.
    Drain {
        timeout: Duration,
        reply: oneshot::Sender<DrainReport>,
    },
    /// A store call panicked on its task: the lane fails as if it had panicked itself, so
    /// its supervisor restarts it.
    StoreCallPanicked(String),
}

impl From<DeliveryReport> for LaneMsg {
    fn from(report: DeliveryReport) -> Self {
        LaneMsg::Delivered(report)
    }
}

impl TryFrom<LaneMsg> for DeliveryReport {
    type Error = ();

    fn try_from(message: LaneMsg) -> Result<Self, ()> {
        match message {
            LaneMsg::Delivered(report) => Ok(report),
            _ => Err(()),
        }
    }
}

pub(crate) struct LaneArgs {
    pub(crate) config: LaneConfig,
    pub(crate) store: Outbox,
    pub(crate) handler: Arc<dyn DeliveryHandler>,
    pub(crate) counters: Arc<LaneCounters>,
    /// The supervisor's handles of the lane's metrics: every incarnation records into them.
    pub(crate) metrics: LaneMetrics,
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

/// The lane actor's state: the shell around [`LaneCore`] that owns the store, the handler
/// actors and the metrics, and carries out the core's commands. (What an operator sees of a
/// lane is [`LaneState`](crate::relay::LaneState), kept by the supervisor.)
pub(crate) struct LaneShell {
    config: LaneConfig,
    core: LaneCore,
    store: Outbox,
    handler: Arc<dyn DeliveryHandler>,
    counters: Arc<LaneCounters>,
    events: broadcast::Sender<RelayEvent>,
    metrics: LaneMetrics,
    /// The handler actor in each slot that has delivered (a slot's actor starts with its
    /// first delivery), and the slot of each handler actor.
    handlers: Vec<Option<ActorRef<HandlerMsg>>>,
    slots: HashMap<ActorId, Slot>,
    /// Everyone who asked for the drain (a remove, then a shutdown): each gets the report.
    replies: Vec<oneshot::Sender<DrainReport>>,
    /// The last in-flight count published, so an unchanged one is not written again.
    published_in_flight: Option<usize>,
    /// Forwards the store's wake-ups; aborted when the state drops, which also happens
    /// when the lane crashes (ractor skips `post_stop` then).
    wake_task: Option<AbortOnDrop>,
    /// Set while a `Wake` waits in the mailbox.
    wake_queued: Arc<AtomicBool>,
    /// The lane's taker in the store's hand-off registry ([`LaneConfig::hand_off`]);
    /// dropping it (stop, crash) takes the taker out.
    hand_off: Option<Registration>,
}

fn send_at(myself: &ActorRef<LaneMsg>, at: Instant, input: Input) {
    myself.send_after(at.saturating_duration_since(Instant::now()), move || {
        LaneMsg::Core(input)
    });
}

impl LaneShell {
    fn emit(&self, event: RelayEvent) {
        observe::record(&self.metrics, &event);
        observe::count(&self.counters, &event);
        // No subscriber is fine.
        let _ = self.events.send(event);
    }

    fn publish_in_flight(&mut self) {
        let n = self.core.in_flight();
        if self.published_in_flight != Some(n) {
            self.published_in_flight = Some(n);
            self.counters.in_flight.store(n as u64, Ordering::Relaxed);
            self.metrics.in_flight(n as u64);
        }
    }

    /// Feeds the core one input and carries out what it says.
    async fn feed(
        &mut self,
        myself: &ActorRef<LaneMsg>,
        input: Input,
    ) -> Result<(), ActorProcessingErr> {
        // A revoke's answer goes back into the core before any other message: the claim it
        // holds back waits for nothing else.
        let mut inputs = vec![input];
        while let Some(input) = inputs.pop() {
            let commands = self.core.handle(Instant::now(), input);
            for command in commands {
                match command {
                    Command::RevokeCredits => {
                        let left = self.hand_off.as_ref().map_or(0, |r| r.taker().revoke());
                        inputs.push(Input::CreditsRevoked(left));
                    }
                    command => self.run(myself, command).await?,
                }
            }
        }
        self.publish_in_flight();
        Ok(())
    }

    async fn run(
        &mut self,
        myself: &ActorRef<LaneMsg>,
        command: Command,
    ) -> Result<(), ActorProcessingErr> {
        match command {
            Command::Store(call) => self.call(myself, call),
            Command::Deliver { slot, message } => {
                // A slot's handler actor starts with its first delivery, so an idle lane
                // holds none (each is a task and mailboxes: kilobytes per slot, times
                // thousands of lanes).
                if !matches!(self.handlers.get(slot), Some(Some(_))) {
                    self.spawn_handler(myself, slot).await?;
                }
                if let Some(Some(handler)) = self.handlers.get(slot) {
                    // A handler that died since is replaced by its supervision event, which
                    // also nacks this claim.
                    let _ = handler.send_message(HandlerMsg::Deliver(message));
                }
            }
            Command::ReplaceHandler(slot) => self.spawn_handler(myself, slot).await?,
            Command::KillHandler(slot) => {
                if let Some(Some(handler)) = self.handlers.get(slot) {
                    handler.kill();
                }
            }
            Command::TimerAt {
                kind,
                at,
                generation,
            } => send_at(myself, at, Input::timer(kind, generation)),
            Command::Throttled { gate, duration } => {
                self.metrics.throttled(gate, duration);
                LaneCounters::add_duration(&self.counters.throttled_micros, duration);
            }
            Command::GrantCredits(n) => {
                if let Some(registration) = &self.hand_off {
                    registration.taker().grant(n);
                }
            }
            // Answered in `feed`.
            Command::RevokeCredits => {}
            Command::EmptyClaim => self.metrics.claimed(0),
            Command::Emit(event) => self.emit(event),
            Command::Stop(report) => {
                for reply in self.replies.drain(..) {
                    let _ = reply.send(report.clone());
                }
                myself.stop(Some("drained".to_owned()));
            }
        }
        Ok(())
    }

    /// Puts a fresh handler actor in `slot`.
    async fn spawn_handler(
        &mut self,
        myself: &ActorRef<LaneMsg>,
        slot: Slot,
    ) -> Result<(), ActorProcessingErr> {
        let args = HandlerArgs {
            handler: self.handler.clone(),
            lane: myself.get_derived(),
            timeout: self.config.delivery_timeout,
        };
        let (handler, _) = Actor::spawn_linked(None, HandlerActor, args, myself.get_cell()).await?;
        if let Some(Some(old)) = self.handlers.get(slot) {
            self.slots.remove(&old.get_id());
        }
        self.slots.insert(handler.get_id(), slot);
        if slot >= self.handlers.len() {
            self.handlers.resize(slot + 1, None);
        }
        self.handlers[slot] = Some(handler);
        Ok(())
    }

    async fn handler_died(
        &mut self,
        myself: &ActorRef<LaneMsg>,
        id: ActorId,
        reason: String,
    ) -> Result<(), ActorProcessingErr> {
        let Some(slot) = self.slots.remove(&id) else {
            return Ok(());
        };
        self.feed(myself, Input::HandlerDied { slot, reason }).await
    }
}

impl Actor for LaneRelay {
    type Msg = LaneMsg;
    type State = LaneShell;
    type Arguments = LaneArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<LaneMsg>,
        args: LaneArgs,
    ) -> Result<LaneShell, ActorProcessingErr> {
        let key = LaneKey::new(&args.config.name, &args.config.target);
        let mut config = args.config;
        // Unset in the config: the store's default (what its connections can overlap).
        config.claims_in_flight =
            Some(config.claims_in_flight_or(args.store.capabilities().claims_in_flight));
        let mut state = LaneShell {
            // Every relay runs the due watcher (`relay/upkeep.rs`): its idle lanes do not poll.
            core: LaneCore::new(config.clone(), args.paused).watched(),
            store: args.store,
            handler: args.handler,
            counters: args.counters,
            events: args.events,
            metrics: args.metrics,
            handlers: Vec::new(),
            slots: HashMap::new(),
            replies: Vec::new(),
            published_in_flight: None,
            wake_task: None,
            wake_queued: Arc::default(),
            hand_off: None,
            config,
        };
        if state.config.hand_off {
            if let Some(registry) = state.store.hand_off() {
                let me = myself.clone();
                let sink: HandOffSink = Arc::new(move |event| {
                    let input = match event {
                        HandOffEvent::Message { message, sent_at } => {
                            Input::HandedOff { message, sent_at }
                        }
                        HandOffEvent::Returned(n) => Input::HandOffReturned(n),
                    };
                    // A lane gone meanwhile: the row's lease lapses and it is claimed again.
                    let _ = me.send_message(LaneMsg::Core(input));
                });
                state.hand_off = Some(registry.register(
                    &state.config.name,
                    &state.config.target,
                    &state.config.consumer_id,
                    state.config.lease,
                    sink,
                ));
                state.core.enable_hand_off();
            }
        }
        let mut wakeups = state.store.subscribe();
        let (lane, target) = (state.config.name.clone(), state.config.target.clone());
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
                    && !queued.swap(true, Ordering::AcqRel)
                    && me.send_message(LaneMsg::Wake).is_err()
                {
                    return;
                }
            }
        })));
        state.publish_in_flight();
        // A new incarnation starts with its breaker closed; a lane without one shows closed.
        let breaker = state.core.breaker_state();
        state
            .metrics
            .breaker_state(breaker.unwrap_or(crate::relay::BreakerState::Closed));
        state.counters.set_breaker(breaker);
        state.emit(RelayEvent::LaneStarted {
            lane: key,
            incarnation: args.incarnation,
        });
        // A new incarnation after a crash finds the old one's claims still leased: the first
        // claim takes what else is due, and its `next_due` sleep ends when those leases lapse.
        let _ = myself.send_message(LaneMsg::Core(Input::Start));
        Ok(state)
    }

    async fn post_stop(
        &self,
        myself: ActorRef<LaneMsg>,
        state: &mut LaneShell,
    ) -> Result<(), ActorProcessingErr> {
        state.wake_task = None;
        state.hand_off = None;
        myself.stop_children(None);
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<LaneMsg>,
        message: LaneMsg,
        state: &mut LaneShell,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            LaneMsg::Core(input) => state.feed(&myself, input).await?,
            LaneMsg::Delivered(report) => {
                let Some(slot) = state.slots.get(&report.handler).copied() else {
                    return Ok(());
                };
                let input = Input::DeliveryDone {
                    slot,
                    outbox_id: report.outbox_id,
                    result: report.result,
                    elapsed: report.elapsed,
                };
                state.feed(&myself, input).await?
            }
            LaneMsg::Wake => {
                state.wake_queued.store(false, Ordering::Release);
                state.feed(&myself, Input::Wake).await?
            }
            LaneMsg::Due(at) => state.feed(&myself, Input::DueAt(at)).await?,
            LaneMsg::Pause => state.feed(&myself, Input::Pause).await?,
            LaneMsg::Resume => state.feed(&myself, Input::Resume).await?,
            LaneMsg::Drain { timeout, reply } => {
                state.replies.push(reply);
                state.feed(&myself, Input::Drain { timeout }).await?
            }
            LaneMsg::StoreCallPanicked(text) => return Err(text.into()),
        }
        Ok(())
    }

    // Ractor's default stops the parent when a child ends; a lane outlives its handlers.
    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<LaneMsg>,
        event: SupervisionEvent,
        state: &mut LaneShell,
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
