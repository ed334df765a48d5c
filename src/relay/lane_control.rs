//! The relay's side of fleet-wide lane control (`store::lane_control`): a task that reads
//! the store's lane pauses when the store's wake-ups say they changed, and at least every
//! [`LANE_CONTROL_POLL`], and hands any change to the
//! supervisor, which pauses or resumes the lanes through the same path as
//! [`RelayHandle::pause`](super::RelayHandle::pause), kept apart from it.

use ractor::ActorRef;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

use super::supervisor::SupervisorMsg;
use crate::store::{LanePause, Outbox, LANE_CONTROL_POLL};

/// The pauses in force when the relay starts: `None` when the store keeps no lane control
/// (then no watcher runs). A store that cannot be reached now is asked again by the watcher.
pub(super) async fn initial(store: &Outbox) -> Option<Vec<LanePause>> {
    match store.lane_pauses().await {
        Ok(pauses) => {
            for pause in &pauses {
                tracing::info!(
                    lane = %format_args!("{}/{}", pause.lane, pause.target),
                    paused_by = %pause.paused_by,
                    paused_at = %pause.paused_at,
                    reason = pause.reason.as_deref().unwrap_or(""),
                    "lane paused fleet-wide: it starts paused"
                );
            }
            Some(pauses)
        }
        Err(error) if error.is_permanent() => {
            tracing::info!(%error, "fleet-wide lane control is off for this store");
            None
        }
        Err(error) => {
            tracing::warn!(%error, "cannot read the fleet-wide lane pauses yet: lanes start as this process says, and follow the store once it answers");
            Some(Vec::new())
        }
    }
}

/// Reads the pauses every [`LANE_CONTROL_POLL`] and tells `supervisor` of each change,
/// starting from `known`. Ends when the supervisor stops or the store refuses for good.
pub(super) fn watch(
    store: Outbox,
    supervisor: ActorRef<SupervisorMsg>,
    mut known: Vec<LanePause>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut poll = tokio::time::interval(LANE_CONTROL_POLL);
        poll.set_missed_tick_behavior(MissedTickBehavior::Delay);
        // The first tick is now: `known` was read a moment ago.
        poll.tick().await;
        // A pause or resume recorded in a store that notifies (PostgreSQL's NOTIFY on the
        // outbox channel) wakes the watcher at once; the poll catches the rest (SQLite and
        // memory stores, a missed notification).
        let mut wakeups = Some(store.subscribe());
        let mut failing = false;
        loop {
            let woken = async {
                match wakeups.as_mut() {
                    Some(receiver) => receiver.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = poll.tick() => {}
                woken = woken => match woken {
                    Ok(wakeup) if wakeup.concerns_lane_control() => poll.reset(),
                    Ok(_) => continue,
                    Err(broadcast::error::RecvError::Lagged(_)) => poll.reset(),
                    Err(broadcast::error::RecvError::Closed) => {
                        // No more wake-ups: the poll alone from here.
                        wakeups = None;
                        continue;
                    }
                },
            }
            match store.lane_pauses().await {
                Ok(pauses) => {
                    if failing {
                        tracing::info!("the fleet-wide lane pauses can be read again");
                        failing = false;
                    }
                    if pauses != known {
                        known = pauses.clone();
                        if supervisor
                            .send_message(SupervisorMsg::FleetPauses(pauses))
                            .is_err()
                        {
                            return;
                        }
                    }
                }
                Err(error) if error.is_permanent() => {
                    tracing::warn!(%error, "fleet-wide lane control stopped: the store refuses to read the lane pauses");
                    return;
                }
                Err(error) => {
                    if !failing {
                        tracing::warn!(%error, "cannot read the fleet-wide lane pauses: lanes keep their last known pauses");
                        failing = true;
                    }
                }
            }
            if supervisor.get_status() == ractor::ActorStatus::Stopped {
                return;
            }
        }
    })
}
