//! Lanes that come and go: the supervisor's side of lane patterns
//! ([`LanePattern`](crate::config::LanePattern)). The pattern watcher (`relay/upkeep.rs`)
//! asks the store once per pass which lanes the patterns match hold pending messages
//! ([`Outbox::pending_lanes`](crate::store::Outbox::pending_lanes)); each one not running
//! is added and started on the path every lane takes (`add_lane`, `start_lane`), up to its
//! pattern's `max_lanes`, and a pattern's lane idle for its `idle_stop` is removed on the
//! path `RelayHandle::remove_lane` takes (it drains first).
//!
//! A (lane, target) the relay runs already, from a `[[lanes]]` entry or `add_lane`, is
//! never a pattern's: the explicit lane wins. One added explicitly while a pattern runs it
//! takes its place once the pattern's lane drained (`SupervisorMsg::AddLane`).

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use ractor::{ActorRef, RpcReplyPort};
use tokio::time::Instant;

use super::{SupervisorMsg, SupervisorState};
use crate::config::{LaneConfig, LanePattern};
use crate::delivery::DeliveryHandler;
use crate::lane::LaneKey;
use crate::relay::{RelayError, DEFAULT_SHUTDOWN_TIMEOUT};

/// A pattern and the lanes it matched but could not start.
pub(crate) struct PatternEntry {
    pub(crate) pattern: LanePattern,
    pub(crate) handler: Arc<dyn DeliveryHandler>,
    /// Lanes with pending messages not started for the limit, as of the last pass.
    over_limit: BTreeSet<String>,
}

impl PatternEntry {
    pub(crate) fn new(pattern: LanePattern, handler: Arc<dyn DeliveryHandler>) -> Self {
        Self {
            pattern,
            handler,
            over_limit: BTreeSet::new(),
        }
    }
}

/// One pass of the pattern watcher: the pairs holding pending messages that the patterns
/// match, at most `limit` (`truncated` when the answer reached it), or `None` when the
/// store could not answer.
pub(crate) struct PendingSample {
    pub(crate) pending: Option<Vec<(String, String)>>,
    pub(crate) truncated: bool,
}

impl SupervisorState {
    /// The number of lanes pattern `index` runs.
    fn pattern_lanes(&self, index: usize) -> usize {
        self.lanes
            .values()
            .filter(|entry| entry.pattern == Some(index))
            .count()
    }

    /// Starts the lanes `sample` names that a pattern serves and the relay does not run,
    /// within each pattern's limit; reports those past it; stops the pattern lanes idle for
    /// their pattern's `idle_stop`.
    pub(super) async fn serve_patterns(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        sample: PendingSample,
    ) {
        let Some(pending) = sample.pending else {
            return;
        };
        let mut over_limit = vec![BTreeSet::new(); self.patterns.len()];
        let mut busy = HashSet::with_capacity(pending.len());
        for (name, target) in pending {
            let key = LaneKey { name, target };
            if self.lanes.contains_key(&key) || self.adopting.contains(&key) {
                busy.insert(key);
                continue;
            }
            let Some(index) = self.patterns.iter().position(|entry| {
                entry.pattern.target() == key.target && entry.pattern.matches(&key.name)
            }) else {
                continue;
            };
            let entry = &self.patterns[index];
            if self.pattern_lanes(index) >= entry.pattern.max_lanes {
                over_limit[index].insert(key.name);
                continue;
            }
            let config = entry.pattern.lane_config(&key.name);
            let pattern = entry.pattern.key();
            match self.add_lane(config, entry.handler.clone()) {
                Ok(key) => {
                    if let Some(lane) = self.lanes.get_mut(&key) {
                        lane.pattern = Some(index);
                    }
                    tracing::info!(lane = %key, %pattern, "starting a lane of a lane pattern");
                    self.start_lane(myself, &key).await;
                    busy.insert(key);
                }
                Err(error) => {
                    tracing::warn!(lane = %key, %pattern, %error, "cannot start a lane of a lane pattern");
                }
            }
        }
        for (index, names) in over_limit.into_iter().enumerate() {
            let running = self.pattern_lanes(index);
            let entry = &mut self.patterns[index];
            if names != entry.over_limit && !names.is_empty() {
                let lanes: Vec<&str> = names.iter().map(String::as_str).collect();
                tracing::warn!(
                    pattern = %entry.pattern.key(),
                    max_lanes = entry.pattern.max_lanes,
                    lanes = %lanes.join(", "),
                    "lanes matching a lane pattern hold pending messages but are not started: \
                     the pattern runs max_lanes lanes already (raise max_lanes, or give them \
                     [[lanes]] entries); they are reported as unserved"
                );
            }
            entry.over_limit = names;
            crate::metrics::record_pattern(
                entry.pattern.pattern(),
                entry.pattern.target(),
                running,
                entry.over_limit.len(),
            );
        }
        // An answer cut at its limit may have left out lanes that have pending messages.
        if !sample.truncated {
            self.stop_idle(myself, &busy);
        }
    }

    /// Removes the pattern lanes with nothing pending (not in `busy`) and nothing in
    /// flight for their pattern's `idle_stop`, through `RemoveLane`: each drains first.
    fn stop_idle(&mut self, myself: &ActorRef<SupervisorMsg>, busy: &HashSet<LaneKey>) {
        let now = Instant::now();
        let mut idle = Vec::new();
        for (key, entry) in &mut self.lanes {
            let Some(after) = entry
                .pattern
                .and_then(|index| self.patterns.get(index))
                .and_then(|p| p.pattern.idle_stop)
            else {
                continue;
            };
            let in_flight = entry
                .counters
                .in_flight
                .load(std::sync::atomic::Ordering::Relaxed);
            if busy.contains(key) || in_flight > 0 || entry.stopping {
                entry.idle_since = None;
                continue;
            }
            let since = *entry.idle_since.get_or_insert(now);
            if now.duration_since(since) >= after {
                idle.push(key.clone());
            }
        }
        for key in idle {
            tracing::info!(lane = %key, "stopping an idle lane of a lane pattern");
            // Nobody waits for the drain's report.
            let (reply, _report) = ractor::concurrency::oneshot();
            let remove = SupervisorMsg::RemoveLane(key, DEFAULT_SHUTDOWN_TIMEOUT, reply.into());
            let _ = myself.send_message(remove);
        }
    }

    /// Whether a pattern runs lane `key` (not an explicit lane).
    pub(super) fn is_pattern_lane(&self, key: &LaneKey) -> bool {
        self.lanes
            .get(key)
            .is_some_and(|entry| entry.pattern.is_some())
    }

    /// Adds lane `config`, which a pattern runs now, as a lane of its own (it wins over the
    /// pattern): the pattern's lane drains first (`RemoveLane`), then the lane is added and
    /// `reply` answered; meanwhile no pattern starts it again.
    pub(super) fn adopt(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        config: Box<LaneConfig>,
        handler: Arc<dyn DeliveryHandler>,
        reply: RpcReplyPort<Result<(), RelayError>>,
    ) {
        let key = config.key();
        self.adopting.insert(key.clone());
        let me = myself.clone();
        tokio::spawn(async move {
            let removed = me
                .call(
                    |reply| SupervisorMsg::RemoveLane(key, DEFAULT_SHUTDOWN_TIMEOUT, reply),
                    None,
                )
                .await;
            let answer = match removed {
                Ok(ractor::rpc::CallResult::Success(_)) => me
                    .call(|reply| SupervisorMsg::AddLane(config, handler, reply), None)
                    .await
                    .map_err(|_| RelayError::Stopped)
                    .and_then(|added| match added {
                        ractor::rpc::CallResult::Success(answer) => answer,
                        _ => Err(RelayError::Stopped),
                    }),
                _ => Err(RelayError::Stopped),
            };
            let _ = reply.send(answer);
        });
    }
}
