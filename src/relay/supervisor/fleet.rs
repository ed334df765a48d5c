//! The supervisor's two pauses of a lane: its own (`RelayHandle::pause`, this process) and
//! the fleet's (kept in the store, read by the relay's lane-control watcher). A lane claims
//! only while neither holds it; each is reported apart in `LaneStatus`.

use std::collections::BTreeMap;

use super::{LaneEntry, SupervisorState};
use crate::lane::{LaneKey, LaneState};
use crate::relay::lane::LaneMsg;
use crate::store::LanePause;

/// The pauses by the lane they hold.
pub(super) fn by_lane(pauses: Vec<LanePause>) -> BTreeMap<LaneKey, LanePause> {
    pauses
        .into_iter()
        .map(|pause| (LaneKey::new(&pause.lane, &pause.target), pause))
        .collect()
}

impl LaneEntry {
    /// Whether either pause holds the lane.
    pub(super) fn is_paused(&self) -> bool {
        self.paused || self.fleet_pause.is_some()
    }
}

impl SupervisorState {
    /// Brings the lane relay and the lane's reported state in line with its pauses: the
    /// lane relay is told only when the two together change its answer, and a lane that
    /// is down (restarting, failed, draining) keeps its state; it starts as its pauses say.
    pub(super) fn apply_pause(&mut self, key: &LaneKey) {
        let Some(entry) = self.lanes.get(key) else {
            return;
        };
        let paused = entry.is_paused();
        let next = match (entry.state, paused) {
            (LaneState::Running, true) => LaneState::Paused,
            (LaneState::Paused, false) => LaneState::Running,
            _ => return,
        };
        if let Some(actor) = &entry.actor {
            let message = if paused {
                LaneMsg::Pause
            } else {
                LaneMsg::Resume
            };
            // A lane relay that is gone is restarted with `is_paused()`.
            let _ = actor.send_message(message);
        }
        self.set_state(key, next);
    }

    /// Takes the store's pauses as they are now, and applies each lane's change.
    pub(super) fn set_fleet_pauses(&mut self, pauses: Vec<LanePause>) {
        self.fleet_pauses = by_lane(pauses);
        let keys: Vec<LaneKey> = self.lanes.keys().cloned().collect();
        for key in keys {
            let pause = self.fleet_pauses.get(&key).cloned();
            let Some(entry) = self.lanes.get_mut(&key) else {
                continue;
            };
            if entry.fleet_pause != pause {
                let (before, after) = (entry.fleet_pause.is_some(), pause.is_some());
                entry.fleet_pause = pause;
                if before != after {
                    tracing::info!(
                        lane = %key,
                        paused = after,
                        "fleet-wide lane control applied"
                    );
                }
                self.apply_pause(&key);
            }
        }
    }
}
