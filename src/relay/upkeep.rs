//! The relay's store work beside its lanes, never on their paths: automatic retention
//! ([`crate::retention`]) over the lanes the supervisor runs at each pass, so lanes added or
//! removed at run time are purged by their own settings. Each task ends when the supervisor
//! stops, and [`RelayHandle`](super::RelayHandle) aborts it at shutdown.

use std::time::Duration;

use ractor::rpc::CallResult;
use ractor::ActorRef;
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

use super::supervisor::SupervisorMsg;
use crate::config::LaneConfig;
use crate::retention::RetentionTask;
use crate::store::Outbox;

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
