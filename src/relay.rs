//! The public face of the actor system: a builder to start a relay inside a service's tokio
//! runtime, and a handle to command it at run time.
//!
//! ```text
//! RelaySupervisor ──spawn_linked──▶ LaneRelay (one per lane/target) ──spawn_linked──▶ HandlerActor × concurrency
//! ```
//!
//! `supervisor` restarts crashed lanes with backoff and a restart-intensity limit;
//! `lane` is the lane actor, which feeds `lane::core::LaneCore` (claims, prefetch, lease
//! timers, dispatch, acks: the logic, sans-IO) and carries out its commands; `handler` runs
//! one delivery at a time under a timeout.
//!
//! The lane's words ([`LaneKey`], [`RelayEvent`], [`DrainReport`], [`LaneState`],
//! [`BreakerState`], [`GateKind`]) are defined in the crate's low `lane` module, which the
//! configuration, the metrics and the lane core import without this module; they are
//! re-exported here. `status` holds what [`RelayHandle::status`] answers ([`LaneStatus`],
//! [`GateStatus`]) and the counters behind it.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use ractor::{Actor, ActorRef};
use tokio::sync::broadcast;

use crate::config::{ConfigError, LaneConfig, LanePattern, SupervisorConfig};
use crate::delivery::{DeliveryError, DeliveryHandler};
use crate::message::OutboxMessage;
use crate::retention::DEFAULT_PURGE_INTERVAL;
use crate::store::Outbox;

pub use crate::lane::{BreakerState, DrainReport, GateKind, LaneKey, LaneState, RelayEvent};

pub(crate) mod handler;
pub(crate) mod lane;
mod lane_control;
mod observe;
mod status;
pub(crate) mod supervisor;
mod upkeep;

pub use status::{GateStatus, LaneStatus};

use supervisor::{RelaySupervisor, SupervisorArgs, SupervisorMsg};

/// How many events a slow subscriber may fall behind before it sees a lag.
pub const DEFAULT_EVENT_CAPACITY: usize = 4096;

/// What a graceful shutdown did, per lane.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ShutdownReport {
    /// Each lane's drain.
    pub lanes: BTreeMap<String, DrainReport>,
}

impl ShutdownReport {
    /// Deliveries finished during shutdown, over all lanes.
    pub fn completed(&self) -> usize {
        self.lanes.values().map(|r| r.completed).sum()
    }

    /// Claims released during shutdown, over all lanes.
    pub fn released(&self) -> usize {
        self.lanes.values().map(|r| r.released).sum()
    }

    /// Finished deliveries whose acks or nacks were not recorded, over all lanes: those
    /// messages will be delivered again.
    pub fn unrecorded(&self) -> usize {
        self.lanes.values().map(|r| r.unrecorded).sum()
    }

    /// Unfinished claims the store would not take back, over all lanes: those messages
    /// will be delivered again when their leases lapse.
    pub fn unreleased(&self) -> usize {
        self.lanes.values().map(|r| r.unreleased).sum()
    }

    /// The lanes that did not finish draining by the deadline and were stopped.
    pub fn abandoned(&self) -> impl Iterator<Item = &str> {
        self.lanes
            .iter()
            .filter(|(_, r)| r.abandoned)
            .map(|(lane, _)| lane.as_str())
    }

    /// Whether the shutdown recorded everything and handed every unfinished claim back (see
    /// [`DrainReport::is_clean`]). A shutdown that is not clean lost no message, but some
    /// will be delivered again.
    pub fn is_clean(&self) -> bool {
        self.lanes.values().all(DrainReport::is_clean)
    }
}

/// Refuses `config` when `handler` has a limit of its own
/// ([`DeliveryHandler::own_timeout`]) that the lane's `delivery_timeout` does not outlast;
/// the error names both settings.
fn check_own_timeout(
    config: &LaneConfig,
    handler: &dyn DeliveryHandler,
) -> Result<(), ConfigError> {
    match handler.own_timeout() {
        Some((setting, own)) if own >= config.delivery_timeout => {
            Err(ConfigError::new(
                "delivery_timeout",
                format!(
                    "lane {}/{}: delivery_timeout ({}) must be longer than the handler's {setting} ({}), so the relay never gives up on a delivery before the handler knows its outcome",
                    config.name,
                    config.target,
                    crate::config::duration::format_duration(config.delivery_timeout),
                    crate::config::duration::format_duration(own)
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// What can go wrong commanding the relay.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RelayError {
    /// A lane's or the supervisor's config is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// No lane with this name is configured.
    #[error("no lane {0} is configured")]
    UnknownLane(LaneKey),
    /// A lane with this name is already configured.
    #[error("lane {0} is already configured")]
    DuplicateLane(LaneKey),
    /// The relay has stopped (or its supervisor died) and takes no more commands.
    #[error("the relay has stopped")]
    Stopped,
    /// An actor could not be spawned.
    #[error("could not start an actor: {0}")]
    Spawn(String),
    /// A lane has been failed for longer than the supervisor's
    /// [`fail_liveness_after`](SupervisorConfig::fail_liveness_after): it stays down until
    /// the process restarts ([`RelayHandle::liveness`]).
    #[error(
        "lanes failed for longer than {}: {}; restart the process to start them again",
        crate::config::duration::format_duration(*after),
        lanes.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
    )]
    LanesFailed {
        /// The lanes, in name order.
        lanes: Vec<LaneKey>,
        /// How long a lane may stay failed.
        after: Duration,
    },
    /// A command did not get its answer in time.
    #[error("the relay did not answer {command} within {timeout:?}")]
    Timeout {
        /// The command.
        command: &'static str,
        /// How long we waited.
        timeout: Duration,
    },
}

/// Starts relays. See [`OutboxRelay::builder`].
#[derive(Debug)]
pub struct OutboxRelay;

impl OutboxRelay {
    /// A builder for a relay over `store`: the outbox the service enqueues through (the
    /// relay keeps a clone), so its lanes take what is enqueued without a claim and its
    /// store calls are counted by the same metrics. Every [`Outbox`] records the store
    /// metrics unless built without them, so a relay never runs on one that lost them.
    ///
    /// ```no_run
    /// # use outbox_relay::{OutboxRelay, LaneConfig, InMemoryOutboxStore, DeliveryHandler, DeliveryError, OutboxMessage, Outbox};
    /// # struct Billing;
    /// # #[async_trait::async_trait]
    /// # impl DeliveryHandler for Billing {
    /// #     async fn deliver(&self, _m: &OutboxMessage) -> Result<(), DeliveryError> { Ok(()) }
    /// # }
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = Outbox::new(InMemoryOutboxStore::new());
    /// let relay = OutboxRelay::builder(&store)
    ///     .lane(LaneConfig::new("orders", "billing").concurrency(16), Billing)
    ///     .start()
    ///     .await?;
    /// // ... serve requests ...
    /// let report = relay.shutdown(std::time::Duration::from_secs(10)).await?;
    /// println!("released {} claims", report.released());
    /// # Ok(()) }
    /// ```
    pub fn builder(store: &Outbox) -> RelayBuilder {
        RelayBuilder {
            store: store.clone(),
            lanes: Vec::new(),
            patterns: Vec::new(),
            supervisor: SupervisorConfig::default(),
            events: broadcast::channel(DEFAULT_EVENT_CAPACITY).0,
            retention: Some(DEFAULT_PURGE_INTERVAL),
        }
    }
}

/// Collects lanes and settings, then starts the supervisor.
pub struct RelayBuilder {
    store: Outbox,
    lanes: Vec<(LaneConfig, Arc<dyn DeliveryHandler>)>,
    patterns: Vec<(LanePattern, Arc<dyn DeliveryHandler>)>,
    supervisor: SupervisorConfig,
    events: broadcast::Sender<RelayEvent>,
    /// How often retention purges; `None`: off.
    retention: Option<Duration>,
}

impl fmt::Debug for RelayBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RelayBuilder")
            .field("store", &self.store)
            .field(
                "lanes",
                &self
                    .lanes
                    .iter()
                    .map(|(c, _)| c.key().to_string())
                    .collect::<Vec<_>>(),
            )
            .field(
                "patterns",
                &self
                    .patterns
                    .iter()
                    .map(|(p, _)| p.key().to_string())
                    .collect::<Vec<_>>(),
            )
            .field("supervisor", &self.supervisor)
            .field("retention", &self.retention)
            .finish()
    }
}

impl RelayBuilder {
    /// Adds a lane delivered by `handler`.
    pub fn lane(mut self, config: LaneConfig, handler: impl DeliveryHandler) -> Self {
        self.lanes.push((config, Arc::new(handler)));
        self
    }

    /// Adds a lane delivered by a shared handler.
    pub fn lane_shared(mut self, config: LaneConfig, handler: Arc<dyn DeliveryHandler>) -> Self {
        self.lanes.push((config, handler));
        self
    }

    /// Adds a lane pattern: every lane whose name matches it, toward its target, is relayed
    /// by `handler` (one, shared by the pattern's lanes) with the pattern's settings,
    /// started within its `max_poll_interval` of its first pending message, up to its
    /// `max_lanes` ([`LanePattern`]). A lane added with [`lane`](Self::lane) or
    /// [`RelayHandle::add_lane`] wins over a pattern that matches it.
    ///
    /// ```no_run
    /// # use outbox_relay::{OutboxRelay, LaneConfig, InMemoryOutboxStore, DeliveryHandler, DeliveryError, OutboxMessage, Outbox};
    /// # use outbox_relay::config::LanePattern;
    /// # struct Billing;
    /// # #[async_trait::async_trait]
    /// # impl DeliveryHandler for Billing {
    /// #     async fn deliver(&self, _m: &OutboxMessage) -> Result<(), DeliveryError> { Ok(()) }
    /// # }
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = Outbox::new(InMemoryOutboxStore::new());
    /// let tenants = LanePattern::new(LaneConfig::new("tenant-*", "billing").concurrency(2))
    ///     .max_lanes(1_000);
    /// let relay = OutboxRelay::builder(&store)
    ///     .lane_pattern(tenants, Billing)
    ///     .start()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn lane_pattern(mut self, pattern: LanePattern, handler: impl DeliveryHandler) -> Self {
        self.patterns.push((pattern, Arc::new(handler)));
        self
    }

    /// Adds a lane pattern delivered by a shared handler (see
    /// [`lane_pattern`](Self::lane_pattern)).
    pub fn lane_pattern_shared(
        mut self,
        pattern: LanePattern,
        handler: Arc<dyn DeliveryHandler>,
    ) -> Self {
        self.patterns.push((pattern, handler));
        self
    }

    /// Sets the restart policy.
    pub fn supervisor(mut self, config: SupervisorConfig) -> Self {
        self.supervisor = config;
        self
    }

    /// Sets how often automatic retention purges every lane's finished messages by the lane's
    /// [`LaneConfig::retention`] (default [`DEFAULT_PURGE_INTERVAL`], the first pass at
    /// start); `None` turns it off for this relay. It runs beside the lanes, never on their
    /// paths, and stops with the relay ([`crate::retention`]).
    pub fn retention(mut self, every: Option<Duration>) -> Self {
        self.retention = every;
        self
    }

    /// Sets how far an event subscriber may fall behind. Call it before
    /// [`RelayBuilder::subscribe`]: it starts a new channel.
    pub fn event_capacity(mut self, capacity: usize) -> Self {
        self.events = broadcast::channel(capacity.max(1)).0;
        self
    }

    /// Subscribes to the relay's events before it starts, so not even the first claim or
    /// `LaneStarted` is missed ([`RelayHandle::subscribe`] sees only what comes after it).
    pub fn subscribe(&self) -> broadcast::Receiver<RelayEvent> {
        self.events.subscribe()
    }

    /// The most store connections the lanes may hold at once: per lane, its claims in
    /// flight ([`LaneConfig::claims_in_flight`], else the store's default) and one more for
    /// the lease extensions, nacks and stats that go beside them. A store whose pool holds
    /// fewer ([`OutboxBackend::max_connections`](crate::store::OutboxBackend::max_connections))
    /// makes claims wait for connections: [`start`](Self::start) warns, with both numbers.
    /// (PostgreSQL's wake-up listener holds one connection more, outside the pool.)
    pub fn connections_needed(&self) -> usize {
        let store_default = self.store.capabilities().claims_in_flight;
        self.lanes
            .iter()
            .map(|(lane, _)| lane.claims_in_flight_or(store_default) + 1)
            .sum()
    }

    /// Validates every lane, then starts the supervisor and its lanes.
    pub async fn start(self) -> Result<RelayHandle, RelayError> {
        self.supervisor.validate()?;
        let mut seen = std::collections::HashSet::new();
        let capabilities = self.store.capabilities();
        for (config, handler) in &self.lanes {
            config.validate()?;
            config.validate_for(capabilities)?;
            check_own_timeout(config, handler.as_ref())?;
            let key = LaneKey::new(&config.name, &config.target);
            if !seen.insert(key.clone()) {
                return Err(RelayError::DuplicateLane(key));
            }
        }
        for (pattern, handler) in &self.patterns {
            pattern.validate()?;
            pattern.lane.validate_for(capabilities)?;
            check_own_timeout(&pattern.lane, handler.as_ref())?;
        }
        let patterns: Vec<LanePattern> = self.patterns.iter().map(|(p, _)| p.clone()).collect();
        crate::config::check_overlap(&patterns)?;
        if let Some(pool) = self.store.as_backend().max_connections() {
            let needed = self.connections_needed();
            if (pool as usize) < needed {
                // A warning, not a refusal: lanes that share their claims need fewer.
                tracing::warn!(
                    pool,
                    needed,
                    lanes = self.lanes.len(),
                    "the store's pool holds {pool} connections, fewer than the {needed} its \
                     {} lanes may hold at once (their claims in flight, and one each for lease \
                     extensions): claims will wait for connections; raise the pool's \
                     max_connections to {needed}",
                    self.lanes.len()
                );
            }
        }
        let events = self.events;
        // Read before the lanes start, so a lane paused fleet-wide never claims.
        let fleet_pauses = lane_control::initial(&self.store).await;
        let store = self.store.clone();
        let first_pending = upkeep::first_pending(&store, &patterns).await;
        let args = SupervisorArgs {
            store: self.store,
            config: self.supervisor,
            lanes: self.lanes,
            patterns: self.patterns,
            first_pending,
            events: events.clone(),
            fleet_pauses: fleet_pauses.clone().unwrap_or_default(),
        };
        let fail_liveness_after = self.supervisor.fail_liveness_after;
        let (supervisor, join) = Actor::spawn(None, RelaySupervisor, args)
            .await
            .map_err(|e| RelayError::Spawn(e.to_string()))?;
        let mut upkeep = vec![
            upkeep::backlog(store.clone(), supervisor.clone()).abort_handle(),
            upkeep::due(store.clone(), supervisor.clone()).abort_handle(),
        ];
        if !patterns.is_empty() {
            upkeep.push(
                upkeep::patterns(store.clone(), supervisor.clone(), &patterns).abort_handle(),
            );
        }
        if let Some(known) = fleet_pauses {
            upkeep
                .push(lane_control::watch(store.clone(), supervisor.clone(), known).abort_handle());
        }
        if let Some(every) = self.retention {
            upkeep.push(upkeep::retention(store.clone(), supervisor.clone(), every).abort_handle());
        }
        if store.capabilities().served_lanes {
            upkeep.push(upkeep::served(store, supervisor.clone()).abort_handle());
        }
        Ok(RelayHandle {
            supervisor,
            events,
            join: Mutex::new(Some(join)),
            upkeep,
            stopping: AtomicBool::new(false),
            fail_liveness_after,
        })
    }
}

/// Commands a running relay. Dropping it stops the relay as [`RelayHandle::shutdown`]
/// would, with [`DEFAULT_SHUTDOWN_TIMEOUT`], without waiting for it (nobody is left to read
/// the report); keep the handle for as long as the relay should run, and call `shutdown`
/// to wait for the drain and read what it did.
#[must_use = "dropping a RelayHandle stops the relay: keep it for as long as the relay should run"]
pub struct RelayHandle {
    supervisor: ActorRef<SupervisorMsg>,
    events: broadcast::Sender<RelayEvent>,
    join: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The tasks beside the supervisor (`relay/lane_control.rs`'s watcher; the backlog
    /// samples, retention and the served lanes: `relay/upkeep.rs`), stopped with the relay.
    upkeep: Vec<tokio::task::AbortHandle>,
    /// A shutdown was asked (by [`RelayHandle::shutdown`]): a drop asks no second one.
    stopping: AtomicBool,
    /// [`SupervisorConfig::fail_liveness_after`].
    fail_liveness_after: Option<Duration>,
}

impl fmt::Debug for RelayHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RelayHandle")
            .field("supervisor", &self.supervisor.get_id())
            .finish()
    }
}

/// How long a dropped [`RelayHandle`]'s shutdown lets deliveries finish before releasing
/// their claims (the daemon's `shutdown_timeout` unless configured).
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

impl Drop for RelayHandle {
    fn drop(&mut self) {
        for task in &self.upkeep {
            task.abort();
        }
        if self.stopping.swap(true, Ordering::AcqRel) {
            return;
        }
        // The same drain as `shutdown`; its report goes to a receiver already dropped. A
        // supervisor that stopped already takes no message, which is as well.
        let (reply, _report) = ractor::concurrency::oneshot();
        let _ = self.supervisor.send_message(SupervisorMsg::Shutdown(
            DEFAULT_SHUTDOWN_TIMEOUT,
            reply.into(),
        ));
    }
}

/// How long a command waits for the supervisor's answer.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a shutdown waits, after the report, for the supervisor actor to exit.
const SHUTDOWN_JOIN_WAIT: Duration = Duration::from_secs(1);

impl RelayHandle {
    /// Subscribes to the relay's events.
    pub fn subscribe(&self) -> broadcast::Receiver<RelayEvent> {
        self.events.subscribe()
    }

    async fn ask<T: Send + 'static>(
        &self,
        command: &'static str,
        timeout: Duration,
        make: impl FnOnce(ractor::RpcReplyPort<T>) -> SupervisorMsg,
    ) -> Result<T, RelayError> {
        match self.supervisor.call(make, Some(timeout)).await {
            Ok(ractor::rpc::CallResult::Success(answer)) => Ok(answer),
            Ok(ractor::rpc::CallResult::Timeout) => Err(RelayError::Timeout { command, timeout }),
            Ok(ractor::rpc::CallResult::SenderError) | Err(_) => Err(RelayError::Stopped),
        }
    }

    /// Adds and starts a lane.
    pub async fn add_lane(
        &self,
        config: LaneConfig,
        handler: impl DeliveryHandler,
    ) -> Result<(), RelayError> {
        config.validate()?;
        check_own_timeout(&config, &handler)?;
        let handler: Arc<dyn DeliveryHandler> = Arc::new(handler);
        self.ask("add_lane", COMMAND_TIMEOUT, |reply| {
            SupervisorMsg::AddLane(Box::new(config), handler, reply)
        })
        .await?
    }

    /// Stops claiming on the lane `name`/`target`, lets its deliveries finish (releasing
    /// what is still running after `timeout`), then removes it.
    pub async fn remove_lane(
        &self,
        name: &str,
        target: &str,
        timeout: Duration,
    ) -> Result<DrainReport, RelayError> {
        let key = LaneKey::new(name, target);
        self.ask("remove_lane", timeout + COMMAND_TIMEOUT, |reply| {
            SupervisorMsg::RemoveLane(key, timeout, reply)
        })
        .await?
    }

    /// Stops claiming on the lane `name`/`target` in this process; deliveries in flight
    /// finish. Kept apart from the fleet-wide pause ([`Outbox::pause_lane`]): resuming
    /// here does not lift that one, nor does it lift this one.
    pub async fn pause(&self, name: &str, target: &str) -> Result<(), RelayError> {
        let key = LaneKey::new(name, target);
        self.ask("pause", COMMAND_TIMEOUT, |reply| {
            SupervisorMsg::Pause(key, reply)
        })
        .await?
    }

    /// Resumes the paused lane `name`/`target`.
    pub async fn resume(&self, name: &str, target: &str) -> Result<(), RelayError> {
        let key = LaneKey::new(name, target);
        self.ask("resume", COMMAND_TIMEOUT, |reply| {
            SupervisorMsg::Resume(key, reply)
        })
        .await?
    }

    /// Every lane's status.
    pub async fn status(&self) -> Result<Vec<LaneStatus>, RelayError> {
        self.ask("status", COMMAND_TIMEOUT, SupervisorMsg::Status)
            .await
    }

    /// Whether the process should go on running: `Err` with [`RelayError::LanesFailed`] once
    /// a lane has been [failed](LaneState::Failed) for longer than the supervisor's
    /// [`fail_liveness_after`](SupervisorConfig::fail_liveness_after) (a failed lane stays
    /// down until the process restarts), or [`RelayError::Stopped`] once the relay stopped.
    /// A liveness probe asks it (`http::health::RelayLiveness`, `/healthz`); a service
    /// without probes can exit on it, as the daemon does.
    pub async fn liveness(&self) -> Result<(), RelayError> {
        let lanes = self.status().await?;
        let Some(after) = self.fail_liveness_after else {
            return Ok(());
        };
        let dead: Vec<LaneKey> = lanes
            .into_iter()
            .filter(|lane| lane.failed_for.is_some_and(|failed| failed > after))
            .map(|lane| lane.lane)
            .collect();
        if dead.is_empty() {
            Ok(())
        } else {
            Err(RelayError::LanesFailed { lanes: dead, after })
        }
    }

    /// Stops claiming everywhere, lets running deliveries finish, releases the claims of
    /// those that did not, and stops every actor, all within `timeout` whatever the store
    /// does: a lane whose store calls hang is stopped at the deadline and reported
    /// [`abandoned`](DrainReport::abandoned). Check [`ShutdownReport::is_clean`]: acks the
    /// store did not record mean those messages will be delivered again.
    pub async fn shutdown(&self, timeout: Duration) -> Result<ShutdownReport, RelayError> {
        for task in &self.upkeep {
            task.abort();
        }
        self.stopping.store(true, Ordering::Release);
        let report = self
            .ask("shutdown", timeout + COMMAND_TIMEOUT, |reply| {
                SupervisorMsg::Shutdown(timeout, reply)
            })
            .await?;
        let join = self
            .join
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        if let Some(join) = join {
            // The supervisor stops itself right after answering, its lanes already stopped.
            let _ = tokio::time::timeout(SHUTDOWN_JOIN_WAIT, join).await;
        }
        Ok(report)
    }
}

/// Lets a shared handler (`Arc<H>`) be passed where a handler is expected, so a test or
/// service can keep its own reference.
#[async_trait]
impl<H: DeliveryHandler + ?Sized> DeliveryHandler for Arc<H> {
    async fn deliver(&self, message: &OutboxMessage) -> Result<(), DeliveryError> {
        (**self).deliver(message).await
    }

    fn own_timeout(&self) -> Option<(&'static str, Duration)> {
        (**self).own_timeout()
    }
}
