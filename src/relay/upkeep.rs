//! The relay's store work beside its lanes, never on their paths, over the lanes the
//! supervisor runs at each turn (so lanes added or removed at run time count): the backlog
//! gauges' samples, the due watcher that lets idle lanes sleep without polling, automatic
//! retention ([`crate::retention`]), and the record of the lanes
//! it serves with the report of the lanes nobody serves ([`crate::store::served`]). Each
//! task ends when the supervisor stops, and [`RelayHandle`](super::RelayHandle) aborts it
//! at shutdown.

use std::sync::Arc;
use std::time::Duration;

use ractor::rpc::CallResult;
use ractor::ActorRef;
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};

use super::supervisor::patterns::PendingSample;
use super::supervisor::{BacklogSample, SupervisorMsg};
use crate::config::{LaneConfig, LanePattern, DEFAULT_MAX_POLL_INTERVAL, DEFAULT_STATS_INTERVAL};
use crate::lane::LaneKey;
use crate::retention::RetentionTask;
use crate::store::served::{SERVED_FOR, SERVED_RENEWAL, UNSERVED_LIMIT};
use crate::store::OrderingPolicy;
use crate::store::{Outbox, UnservedLane};

/// How long a task waits for the supervisor's list of lanes.
const LANES_TIMEOUT: Duration = Duration::from_secs(30);

/// The lanes the supervisor runs now; `None` once it stopped.
async fn lanes(supervisor: &ActorRef<SupervisorMsg>) -> Option<Vec<LaneConfig>> {
    match supervisor
        .call(SupervisorMsg::Lanes, Some(LANES_TIMEOUT))
        .await
    {
        Ok(CallResult::Success(lanes)) => Some(lanes),
        // A supervisor too busy to answer: skip this pass.
        Ok(CallResult::Timeout) => Some(Vec::new()),
        Ok(CallResult::SenderError) | Err(_) => None,
    }
}

/// Samples the backlog of every lane with one store call ([`Outbox::lanes_stats`]) now and
/// then every shortest [`LaneConfig::stats_interval`] among them; the supervisor sets each
/// lane's gauges from it.
///
/// Why once per process and not per lane: a lane's own sample every 15 s was a store call
/// per lane, most of an idle relay's store work once it runs hundreds of lanes (1,000
/// PostgreSQL lanes: 67 stats calls a second). One statement answers for them all.
pub(super) fn backlog(store: Outbox, supervisor: ActorRef<SupervisorMsg>) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let Some(lanes) = lanes(&supervisor).await else {
                return;
            };
            let every = lanes
                .iter()
                .map(|lane| lane.stats_interval)
                .min()
                .unwrap_or(DEFAULT_STATS_INTERVAL);
            if !lanes.is_empty() {
                let lanes: Vec<(String, String)> = lanes
                    .into_iter()
                    .map(|lane| (lane.name, lane.target))
                    .collect();
                let started = Instant::now();
                let stats = store.lanes_stats(&lanes).await.map_err(Arc::new);
                let sample = BacklogSample {
                    lanes,
                    stats,
                    took: started.elapsed(),
                };
                if supervisor
                    .send_message(SupervisorMsg::Backlog(sample))
                    .is_err()
                {
                    return;
                }
            }
            // After the pass, not on a fixed beat: a slow store is not asked again at once.
            tokio::time::sleep(every).await;
        }
    })
}

/// The due watcher: now and then every shortest [`LaneConfig::max_poll_interval`] among the
/// lanes, asks the store when each lane's next message is due, all lanes in one call
/// ([`Outbox::lanes_next_due`]), and hands each lane whose time falls before the next pass
/// that time (the supervisor forwards it; the lane claims then unless it already sleeps
/// less). A failed call hands every lane "now", as the poll ceiling would have.
///
/// Why once per process and not per lane: an idle lane polled the store every
/// `max_poll_interval`, to find what it cannot be told (a lost wake-up, another process's
/// nack or claim, a lease lapsing). 1,000 idle PostgreSQL lanes made ~200 claims and ~260
/// commits a second for nothing. One statement per pass sees the same for every lane, and
/// an idle lane with nothing due costs no store work at all (`LaneCore::watched`).
pub(super) fn due(store: Outbox, supervisor: ActorRef<SupervisorMsg>) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let Some(lanes) = lanes(&supervisor).await else {
                return;
            };
            let every = lanes
                .iter()
                .map(|lane| lane.max_poll_interval)
                .min()
                .unwrap_or(DEFAULT_MAX_POLL_INTERVAL);
            if !lanes.is_empty() {
                let asked: Vec<(String, String, OrderingPolicy)> = lanes
                    .into_iter()
                    .map(|lane| (lane.name, lane.target, lane.ordering))
                    .collect();
                let answer = store.lanes_next_due(&asked).await;
                let now = Instant::now();
                let keys = asked
                    .into_iter()
                    .map(|(name, target, _)| LaneKey { name, target });
                let due: Vec<(LaneKey, Instant)> = match answer {
                    Ok(due) => keys
                        .zip(due)
                        .filter_map(|(key, due)| Some((key, now.checked_add(due?)?)))
                        .filter(|(_, at)| *at <= now + every)
                        .collect(),
                    Err(error) => {
                        tracing::warn!(%error, "cannot ask when the lanes' next messages are due; every lane looks now");
                        keys.map(|key| (key, now)).collect()
                    }
                };
                if !due.is_empty() && supervisor.send_message(SupervisorMsg::Due(due)).is_err() {
                    return;
                }
            }
            // After the pass, not on a fixed beat: a slow store is not asked again at once.
            tokio::time::sleep(every).await;
        }
    })
}

/// The pattern watcher: every shortest `max_poll_interval` among the lane patterns, asks
/// the store which lanes they match hold pending messages, all patterns in one call
/// ([`Outbox::pending_lanes`]); the supervisor starts those it does not run and stops its
/// idle ones (`supervisor/patterns.rs`). The first pass is made before the relay starts
/// ([`first_pending`]), so this one begins after an interval.
pub(super) fn patterns(
    store: Outbox,
    supervisor: ActorRef<SupervisorMsg>,
    patterns: &[LanePattern],
) -> JoinHandle<()> {
    let every = patterns
        .iter()
        .map(|pattern| pattern.lane.max_poll_interval)
        .min()
        .unwrap_or(DEFAULT_MAX_POLL_INTERVAL);
    let asked = PatternQuestion::of(patterns);
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            let sample = asked.ask(&store).await;
            if supervisor
                .send_message(SupervisorMsg::Pending(sample))
                .is_err()
            {
                return;
            }
        }
    })
}

/// The pattern watcher's first pass, made before the supervisor starts; `None` without
/// patterns.
pub(super) async fn first_pending(
    store: &Outbox,
    patterns: &[LanePattern],
) -> Option<PendingSample> {
    if patterns.is_empty() {
        return None;
    }
    Some(PatternQuestion::of(patterns).ask(store).await)
}

/// What the pattern watcher asks the store each pass.
struct PatternQuestion {
    /// (prefix, target) of each pattern.
    prefixes: Vec<(String, String)>,
    /// Every pattern's limit, and [`UNSERVED_LIMIT`] more, so the lanes past a limit are
    /// seen (and named) too.
    limit: usize,
}

impl PatternQuestion {
    fn of(patterns: &[LanePattern]) -> Self {
        Self {
            prefixes: patterns
                .iter()
                .map(|p| (p.prefix().to_owned(), p.target().to_owned()))
                .collect(),
            limit: patterns
                .iter()
                .map(|p| p.max_lanes)
                .fold(UNSERVED_LIMIT, usize::saturating_add),
        }
    }

    async fn ask(&self, store: &Outbox) -> PendingSample {
        match store.pending_lanes(&self.prefixes, self.limit).await {
            Ok(pending) => PendingSample {
                truncated: pending.len() >= self.limit,
                pending: Some(pending),
            },
            Err(error) => {
                tracing::warn!(%error, "cannot ask which lanes the lane patterns match; will try again");
                PendingSample {
                    pending: None,
                    truncated: true,
                }
            }
        }
    }
}

/// Purges every lane by its [`LaneConfig::retention`] now and then every `every`.
pub(super) fn retention(
    store: Outbox,
    supervisor: ActorRef<SupervisorMsg>,
    every: Duration,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        // A slow pass must not be followed by a burst of catch-up passes.
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let Some(lanes) = lanes(&supervisor).await else {
                return;
            };
            let lanes = lanes
                .iter()
                .map(|lane| (lane.key(), lane.retention_in_force()))
                .collect();
            RetentionTask::new(store.clone(), lanes).purge_once().await;
        }
    })
}

/// Every [`SERVED_RENEWAL`]: records the lanes the supervisor runs as served for
/// [`SERVED_FOR`], then reports the lanes nobody serves (`store::served`) in
/// `outbox_unserved_lanes` and `outbox_unserved_pending`, naming them in the log when the
/// set changes. Ends, saying why, on a store that keeps no such record.
pub(super) fn served(store: Outbox, supervisor: ActorRef<SupervisorMsg>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(SERVED_RENEWAL);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut known: Option<Vec<UnservedLane>> = None;
        loop {
            ticks.tick().await;
            let Some(lanes) = lanes(&supervisor).await else {
                return;
            };
            let lanes: Vec<(String, String)> = lanes
                .into_iter()
                .map(|lane| (lane.name, lane.target))
                .collect();
            let report = match store.record_served(&lanes, SERVED_FOR).await {
                Ok(()) => store.unserved_lanes(UNSERVED_LIMIT).await,
                Err(error) => Err(error),
            };
            match report {
                Ok(unserved) => {
                    crate::metrics::record_unserved(&unserved);
                    if known.as_ref() != Some(&unserved) {
                        log_unserved(&unserved);
                        known = Some(unserved);
                    }
                }
                Err(error) if error.is_permanent() => {
                    tracing::info!(%error, "lanes nobody serves are not reported on this store");
                    return;
                }
                Err(error) => {
                    tracing::warn!(%error, "cannot report the lanes nobody serves; will try again");
                }
            }
        }
    })
}

fn log_unserved(unserved: &[UnservedLane]) {
    if unserved.is_empty() {
        tracing::info!("every lane with pending messages is served by a running relay");
        return;
    }
    let lanes: Vec<String> = unserved
        .iter()
        .map(|lane| format!("{}/{} ({} pending)", lane.lane, lane.target, lane.pending))
        .collect();
    tracing::warn!(
        lanes = %lanes.join(", "),
        "messages wait in lanes that no running relay serves (a lane name mistyped by a \
         producer, or a lane no relay's config has): they are not delivered"
    );
}
