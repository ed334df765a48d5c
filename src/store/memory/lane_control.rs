//! The memory store's lane control: a map of pauses by (lane, target), under its own lock
//! (a pause never waits for a claim).

use std::collections::BTreeMap;
use std::sync::MutexGuard;

use super::InMemoryOutboxStore;
use crate::store::lane_control::validate_lane;
use crate::store::{LanePause, LanePauseRequest, StoreError};

impl InMemoryOutboxStore {
    fn pauses(&self) -> MutexGuard<'_, BTreeMap<(String, String), LanePause>> {
        // Every change below is one insert or remove: a panic cannot leave half of one.
        self.pauses
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(super) fn record_pause(&self, request: &LanePauseRequest) -> Result<LanePause, StoreError> {
        request.validate()?;
        let pause = LanePause {
            lane: request.lane.clone(),
            target: request.target.clone(),
            paused_by: request.paused_by.trim().to_owned(),
            reason: request.reason.clone(),
            paused_at: self.clock.now_millis(),
        };
        self.pauses().insert(
            (request.lane.clone(), request.target.clone()),
            pause.clone(),
        );
        Ok(pause)
    }

    pub(super) fn lift_pause(
        &self,
        lane: &str,
        target: &str,
    ) -> Result<Option<LanePause>, StoreError> {
        validate_lane(lane, target)?;
        Ok(self.pauses().remove(&(lane.to_owned(), target.to_owned())))
    }

    pub(super) fn all_pauses(&self) -> Vec<LanePause> {
        self.pauses().values().cloned().collect()
    }
}
