//! Draining a lane for remove and shutdown: stop claiming, release the buffer, let
//! deliveries finish, release what still runs at the deadline, report, stop.

use std::time::Duration;

use tokio::time::Instant;

use super::{Command, LaneCore, Mode, TimerKind};
use crate::lane::{DrainReport, RelayEvent};
use crate::message::ClaimRef;
use crate::store::{ClaimOutcome, StoreError};

impl LaneCore {
    pub(super) fn drain(&mut self, now: Instant, timeout: Duration, out: &mut Vec<Command>) {
        // Joining a drain under way: this caller's own deadline applies too, so the
        // shorter one wins.
        out.push(Command::timer(TimerKind::DrainDeadline, now + timeout, 0));
        if matches!(self.mode, Mode::Draining { .. }) {
            return;
        }
        self.mode = Mode::Draining {
            completed: 0,
            released: 0,
            unreleased: 0,
            deadline_passed: false,
        };
        let claims: Vec<ClaimRef> = self
            .buffer
            .take_all()
            .into_iter()
            .filter_map(|m| self.book.close(m.outbox_id))
            .collect();
        self.release(claims, out);
    }

    pub(super) fn drain_deadline(&mut self, now: Instant, out: &mut Vec<Command>) {
        let Mode::Draining {
            deadline_passed, ..
        } = &mut self.mode
        else {
            return;
        };
        if *deadline_passed {
            return;
        }
        *deadline_passed = true;
        // One last try at what finished; the deadline does not wait for it. What the store
        // would not take lapses and is redelivered then.
        self.flush(now, None, out);
        let mut claims = Vec::new();
        for running in self.pool.abandon() {
            out.push(Command::KillHandler(running.slot));
            if let Some(claim) = self.book.close(running.message.outbox_id) {
                claims.push(claim);
            }
        }
        self.release(claims, out);
    }

    pub(super) fn released(&mut self, sent: usize, result: Result<Vec<ClaimOutcome>, StoreError>) {
        self.releasing = self.releasing.saturating_sub(sent);
        // Released rows are due now.
        self.forget_due();
        let (applied, failed) = match result {
            Ok(outcomes) => (
                outcomes
                    .iter()
                    .filter(|o| **o == ClaimOutcome::Applied)
                    .count(),
                0,
            ),
            Err(error) => {
                // The leases lapse on their own; the messages are redelivered then.
                tracing::warn!(lane = %self.key, %error, "could not release claims");
                (0, sent)
            }
        };
        if let Mode::Draining {
            released,
            unreleased,
            ..
        } = &mut self.mode
        {
            *released += applied;
            *unreleased += failed;
        }
    }

    pub(super) fn finish_drain_if_done(&mut self, out: &mut Vec<Command>) {
        let Mode::Draining {
            completed,
            released,
            unreleased,
            deadline_passed,
        } = self.mode
        else {
            return;
        };
        let done = if deadline_passed {
            self.releasing == 0
        } else {
            self.pool.running() == 0
                && self.outcomes.is_empty()
                && self.releasing == 0
                && !self.claim_loop.is_claiming()
        };
        if !done {
            return;
        }
        let unrecorded = if deadline_passed {
            self.outcomes.len()
        } else {
            0
        };
        if unrecorded > 0 {
            tracing::warn!(lane = %self.key, unrecorded, "drain deadline: acks and nacks not recorded");
        }
        self.mode = Mode::Stopped;
        let report = DrainReport {
            completed,
            released,
            unrecorded,
            unreleased,
            abandoned: false,
        };
        self.emit(
            out,
            RelayEvent::LaneStopped {
                lane: self.key.clone(),
                report: report.clone(),
            },
        );
        out.push(Command::Stop(report));
    }
}
