//! Backlog gauges: one store call's stats of every lane (`relay/upkeep.rs`), handed out to
//! the lanes' metrics by the supervisor.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::SupervisorState;
use crate::lane::{LaneKey, RelayEvent};
use crate::store::{LaneStats, OrderingPolicy, StoreError, StoreOp};

/// One store call's stats of every lane the supervisor ran when it was made.
pub(crate) struct BacklogSample {
    /// The lanes asked for: a lane added since waits for the next sample.
    pub(crate) lanes: Vec<(String, String)>,
    /// The lanes asked for that have messages (one absent has none), or why the call failed.
    pub(crate) stats: Result<Vec<LaneStats>, Arc<StoreError>>,
    /// How long the call took: each lane records it as its `stats` store call.
    pub(crate) took: Duration,
}

impl SupervisorState {
    /// Sets each lane's backlog gauges from `sample`, and records the call as each lane's
    /// `stats` call; a failed call leaves the gauges as they were and counts as each lane's
    /// store error (not its last error, nor a backoff: its claims go on).
    pub(super) fn hand_out_backlog(&self, sample: BacklogSample) {
        let asked = sample
            .lanes
            .into_iter()
            .map(|(name, target)| LaneKey { name, target });
        let stats = match sample.stats {
            Ok(stats) => stats,
            Err(error) => {
                for lane in asked.filter(|key| self.lanes.contains_key(key)) {
                    self.emit(RelayEvent::StoreError {
                        lane,
                        op: StoreOp::Stats,
                        error: error.to_string(),
                        permanent: error.is_permanent(),
                    });
                }
                return;
            }
        };
        let mut stats: HashMap<LaneKey, LaneStats> = stats
            .into_iter()
            .map(|s| (LaneKey::new(&s.lane, &s.target), s))
            .collect();
        for key in asked {
            let Some(entry) = self.lanes.get(&key) else {
                continue; // removed since
            };
            let mut lane = stats.remove(&key).unwrap_or_default();
            if entry.config.ordering == OrderingPolicy::Skip {
                // The store counts the keys Block would hold; a Skip lane holds none.
                lane.blocked_keys = 0;
            }
            entry.metrics.backlog(&lane);
            entry
                .metrics
                .store_call_timer()
                .record(StoreOp::Stats, sample.took);
        }
    }
}
