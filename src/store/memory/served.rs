//! The memory store's record of served lanes (`store::served`): until when each
//! (lane, target) is served, under its own lock (a record never waits for a claim).

use std::time::Duration;

use super::InMemoryOutboxStore;
use crate::message::OutboxStatus;
use crate::store::served::UNSERVED_COUNT_CAP;
use crate::store::UnservedLane;

impl InMemoryOutboxStore {
    pub(super) fn record_served_lanes(&self, lanes: &[(String, String)], served_for: Duration) {
        let until = self.clock.now_millis().saturating_add(served_for);
        // Every change is one insert: a panic cannot leave half of one.
        let mut served = self
            .served
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for lane in lanes {
            let entry = served.entry(lane.clone()).or_insert(until);
            *entry = (*entry).max(until);
        }
    }

    pub(super) fn unserved(&self, limit: usize) -> Vec<UnservedLane> {
        let now = self.clock.now_millis();
        let served = self
            .served
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        let rows = self.rows();
        let mut unserved: Vec<UnservedLane> = rows
            .lanes()
            .filter(|(key, _)| served.get(*key).is_none_or(|until| *until <= now))
            .map(|((lane, target), index)| UnservedLane {
                lane: lane.clone(),
                target: target.clone(),
                pending: index.count(OutboxStatus::Pending).min(UNSERVED_COUNT_CAP),
            })
            .filter(|lane| lane.pending > 0)
            .collect();
        unserved.sort_by(|a, b| (&a.lane, &a.target).cmp(&(&b.lane, &b.target)));
        unserved.truncate(limit);
        unserved
    }
}
