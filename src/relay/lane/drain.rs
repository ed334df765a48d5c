//! Draining a lane for remove and shutdown: stop claiming, let deliveries finish, release
//! what still runs at the deadline, answer every caller, stop.

use std::time::Duration;

use ractor::ActorRef;
use tokio::sync::oneshot;

use crate::relay::{DrainReport, RelayEvent};
use crate::store::{ClaimOutcome, ClaimRef};

use super::{LaneMsg, LaneRelayState, Mode};

impl LaneRelayState {
    /// Stops claiming; answers `reply` once what runs has finished, or at `timeout` with
    /// the rest released. A drain already under way is joined, and the shorter deadline wins.
    pub(super) async fn drain(
        &mut self,
        myself: &ActorRef<LaneMsg>,
        timeout: Duration,
        reply: oneshot::Sender<DrainReport>,
    ) {
        if let Mode::Draining { replies, .. } = &mut self.mode {
            // Already draining: join it (keeping what it has completed so far); this
            // caller's own deadline applies too, so the shorter one wins.
            replies.push(reply);
            myself.send_after(timeout, || LaneMsg::DrainDeadline);
            return;
        }
        self.mode = Mode::Draining {
            replies: vec![reply],
            completed: 0,
        };
        // The deadline holds even with nothing in flight: buffered acks may be stuck
        // behind a store outage, and a drain must not wait that out.
        myself.send_after(timeout, || LaneMsg::DrainDeadline);
        if self.in_flight.is_empty() {
            self.flush(myself).await;
        }
    }

    pub(super) async fn drain_deadline(&mut self, myself: &ActorRef<LaneMsg>) {
        if !matches!(self.mode, Mode::Draining { .. }) {
            return;
        }
        // Record what finished, then hand back what is still running.
        self.flush(myself).await;
        if !matches!(self.mode, Mode::Draining { .. }) {
            return;
        }
        if self.in_flight.is_empty() {
            // The flush failed: the deadline wins over acks and nacks the store would not
            // take. Their claims lapse and the messages are redelivered then.
            let unrecorded = self.acks.len() + self.nacks.len();
            tracing::warn!(lane = %self.key, unrecorded, "drain deadline: acks and nacks not recorded");
            return self.finish_drain(
                myself,
                DrainReport {
                    unrecorded,
                    ..DrainReport::default()
                },
            );
        }
        let claims: Vec<ClaimRef> = self.in_flight.values().map(|f| f.claim).collect();
        for flight in self.in_flight.values() {
            if let Some(handler) = self.handlers.get(&flight.handler) {
                handler.kill();
            }
        }
        let report = match self.store.release(&claims).await {
            Ok(outcomes) => DrainReport {
                released: outcomes
                    .iter()
                    .filter(|o| **o == ClaimOutcome::Applied)
                    .count(),
                ..DrainReport::default()
            },
            Err(error) => {
                // The leases lapse on their own; the messages are redelivered then.
                tracing::warn!(lane = %self.key, %error, "could not release claims at shutdown");
                DrainReport {
                    unreleased: claims.len(),
                    ..DrainReport::default()
                }
            }
        };
        self.in_flight.clear();
        self.publish_in_flight();
        self.finish_drain(myself, report);
    }

    /// Answers the drain with `report` (its `completed` filled in here) and stops the lane.
    pub(super) fn finish_drain(&mut self, myself: &ActorRef<LaneMsg>, report: DrainReport) {
        let mode = std::mem::replace(&mut self.mode, Mode::Paused);
        let Mode::Draining { replies, completed } = mode else {
            self.mode = mode;
            return;
        };
        let report = DrainReport {
            completed,
            ..report
        };
        self.emit(RelayEvent::LaneStopped {
            lane: self.key.clone(),
            report: report.clone(),
        });
        for reply in replies {
            let _ = reply.send(report.clone());
        }
        myself.stop(Some("drained".to_owned()));
    }
}
