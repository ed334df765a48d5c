//! A relay as the simulation runs it: the lane actor's shell around a real [`LaneCore`]
//! (`src/relay/lane.rs`), carrying out the same commands the same way, with the world's
//! events where the actor has tokio tasks, timers and handler actors:
//!
//! - a store call is two legs of latency around its execution, its answer a mailbox input;
//! - a handler slot holds one handler at a time, by generation: a report from a handler
//!   since replaced or killed is dropped, as the actor drops a report from an unknown
//!   `ActorId`; a panic reaches the core as `HandlerDied`, after which it asks for a fresh
//!   handler (`ReplaceHandler`);
//! - `KillHandler` ends the delivery, and its supervision event comes back as `HandlerDied`;
//! - wake-ups are the store's broadcast, coalesced into one `Wake` in the mailbox;
//! - a crash drops everything (the epoch moves on, so the dead incarnation's timers and
//!   answers are ignored), and a restart is a new `LaneCore` with a new consumer id;
//! - a lane crash in a living process is restarted when the supervisor's restart policy
//!   says (`relay::supervisor::restarts`, the production type);
//! - the due watcher (`relay/upkeep.rs`), in the plans that run it, is the world's
//!   `Event::Watch`: a pass every `max_poll_interval` that asks the store and pokes the lane.

use std::collections::{HashMap, HashSet};

use tokio::sync::broadcast;
use uuid::Uuid;

use crate::config::LaneConfig;
use crate::relay::lane::core::{ClaimId, LaneCore, Slot};
use crate::relay::supervisor::restarts::Restarts;
use crate::store::hand_off::Registration;
use crate::store::WakeUp;

/// One relay process of the simulation.
#[derive(Debug)]
pub(crate) struct Relay {
    /// Moves on at each crash: events of an older epoch are for a dead process.
    pub(crate) epoch: u64,
    pub(crate) incarnation: u32,
    pub(crate) config: LaneConfig,
    /// `None` while the process is down.
    pub(crate) core: Option<LaneCore>,
    /// The handler generation in each slot.
    pub(crate) handlers: Vec<u64>,
    /// Per slot, the delivery it runs (the checker's number) and its handler's generation.
    pub(crate) running: HashMap<Slot, (u64, u64)>,
    pub(crate) wakeups: Option<broadcast::Receiver<WakeUp>>,
    pub(crate) wake_queued: bool,
    /// The latest claim token the lane was handed for each message.
    pub(crate) tokens: HashMap<Uuid, Uuid>,
    /// Claims whose lapse the lane announced (`LeaseExpired`).
    pub(crate) lapsed: HashSet<(Uuid, Uuid)>,
    pub(crate) paused: bool,
    /// A wake-up came and no claim was sent since: the lane owes the store a look.
    pub(crate) owes_claim: bool,
    /// The lane went to sleep (`Idle`) while handling the current input.
    pub(crate) went_idle: bool,
    /// The claims the lane sent and has not heard back from, oldest first, with their
    /// limits: the checker's own count, apart from the core's.
    pub(crate) claims_out: Vec<(ClaimId, usize)>,
    /// The lane's taker in its process's hand-off registry, while it takes hand-offs;
    /// dropped with the process.
    pub(crate) registration: Option<Registration>,
    /// Handed-off messages on their way to the lane (written claimed for it, not yet in
    /// its mailbox): held, for the bound `LaneConfig::most_held`.
    pub(crate) in_transit: usize,
    /// Hand-off credits taken and not used, on their way back to the lane.
    pub(crate) returning: usize,
    /// The process's supervisor's restarts of the lane (kept across lane crashes, new with
    /// the process).
    pub(crate) restarts: Restarts,
    /// Whether the process runs the due watcher ([`Plan::watched`](crate::sim::Plan)).
    pub(crate) watched: bool,
}

impl Relay {
    pub(crate) fn new(config: LaneConfig, watched: bool) -> Self {
        Self {
            epoch: 0,
            incarnation: 0,
            config,
            core: None,
            handlers: Vec::new(),
            running: HashMap::new(),
            wakeups: None,
            wake_queued: false,
            tokens: HashMap::new(),
            lapsed: HashSet::new(),
            paused: false,
            owes_claim: false,
            went_idle: false,
            claims_out: Vec::new(),
            registration: None,
            in_transit: 0,
            returning: 0,
            restarts: Restarts::default(),
            watched,
        }
    }

    pub(crate) fn alive(&self) -> bool {
        self.core.is_some()
    }

    /// The deliveries that die with the process.
    pub(crate) fn crash(&mut self) -> Vec<u64> {
        self.epoch += 1;
        self.core = None;
        self.wakeups = None;
        self.wake_queued = false;
        self.tokens.clear();
        self.lapsed.clear();
        self.paused = false;
        self.owes_claim = false;
        self.claims_out.clear();
        self.registration = None;
        self.in_transit = 0;
        self.returning = 0;
        self.running
            .drain()
            .map(|(_, (delivery, _))| delivery)
            .collect()
    }

    /// A fresh incarnation: new consumer id, new core, fresh handlers.
    pub(crate) fn start(
        &mut self,
        index: usize,
        receiver: broadcast::Receiver<WakeUp>,
        generation: &mut u64,
    ) {
        self.incarnation += 1;
        self.config.consumer_id = format!("relay{index}.{}", self.incarnation);
        let core = LaneCore::new(self.config.clone(), false);
        let core = if self.watched { core.watched() } else { core };
        #[cfg(test)]
        let core = core.mutated_by(super::mutation::current());
        self.core = Some(core);
        self.handlers = (0..self.config.concurrency)
            .map(|_| {
                *generation += 1;
                *generation
            })
            .collect();
        self.wakeups = Some(receiver);
    }

    /// Whether the store's broadcast since the last look has a wake-up for this lane.
    pub(crate) fn woken(&mut self) -> bool {
        let Some(receiver) = self.wakeups.as_mut() else {
            return false;
        };
        let mut woken = false;
        loop {
            match receiver.try_recv() {
                Ok(wake) => woken |= wake.concerns(&self.config.name, &self.config.target),
                Err(broadcast::error::TryRecvError::Lagged(_)) => woken = true,
                Err(_) => return woken,
            }
        }
    }
}
