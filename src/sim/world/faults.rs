//! Faults as the world applies them, and events in one line for traces.

use super::{Event, Fate, World};
use crate::relay::lane::core::Input;
use crate::relay::supervisor::restarts::{Restart, Restarts};
use crate::sim::plan::Fault;

impl World<'_> {
    pub(super) fn fault(&mut self, fault: Fault) {
        self.tally.faults += 1;
        match fault {
            Fault::FailBeforeCommit(n) => self.faults.fail_before += n,
            Fault::LoseAnswer(n) => self.faults.lose_answer += n,
            Fault::Slow { for_, extra } => {
                self.faults.slow_until = self.faults.slow_until.max(self.now + for_);
                self.faults.slow_extra = self.faults.slow_extra.max(extra);
            }
            Fault::Crash { relay, down } => {
                if self.relays[relay].alive() {
                    self.tally.mattered("relay process crash");
                    for delivery in self.relays[relay].crash() {
                        self.check.ended(delivery, false);
                    }
                    // A new process: a new supervisor, which has restarted nothing yet.
                    self.relays[relay].restarts = Restarts::default();
                    self.after(down, Event::Restart(relay));
                }
            }
            Fault::Cut {
                relay,
                for_,
                answers_lost,
            } => {
                let fate = if answers_lost {
                    Fate::AnswerLost
                } else {
                    Fate::FailsBeforeCommit
                };
                self.faults.cut[relay] = Some((self.now + for_, fate));
            }
            Fault::LoseWakeUps { relay, for_ } => {
                let until = &mut self.faults.wakeups_lost_until[relay];
                *until = (*until).max(self.now + for_);
            }
            Fault::FailEnqueues(n) => self.store.fail_next_writes(n),
            Fault::Freeze { relay, for_ } => {
                let until = &mut self.frozen_until[relay];
                *until = (*until).max(self.now + for_);
                let running: Vec<u64> = self.relays[relay]
                    .running
                    .values()
                    .map(|(delivery, _)| *delivery)
                    .collect();
                self.check.froze(running);
            }
            Fault::LaneCrash { relay } => {
                if self.relays[relay].alive() {
                    self.tally.mattered("lane crash");
                    for delivery in self.relays[relay].crash() {
                        self.check.ended(delivery, false);
                    }
                    let now = self.instant(relay);
                    let supervisor = self.plan.supervisor;
                    let r = &mut self.relays[relay];
                    match r.restarts.crashed(now, &supervisor) {
                        Restart::After { after, .. } => self.after(after, Event::Restart(relay)),
                        // The lane stays failed; the process's liveness fails after
                        // `fail_liveness_after`, and its orchestrator starts a new one.
                        Restart::GiveUp => {
                            r.restarts = Restarts::default();
                            let after = supervisor.fail_liveness_after.unwrap_or_default();
                            self.after(after, Event::Restart(relay));
                        }
                    }
                }
            }
            Fault::ClockJump(ms) => {
                self.tally.mattered(if ms > 0 {
                    "store clock jump forward"
                } else {
                    "store clock jump back"
                });
                self.offset_ms += ms;
                if ms > 0 {
                    self.check.jumped_forward = Some(self.now);
                }
            }
            Fault::Pause { relay, for_ } => {
                let r = &mut self.relays[relay];
                if r.alive() && !r.paused {
                    self.tally.mattered("pause");
                    r.paused = true;
                    let epoch = r.epoch;
                    self.feed(relay, Input::Pause);
                    self.after(for_, Event::Resume { relay, epoch });
                }
            }
        }
    }
}

/// An event in one line, for traces.
pub(super) fn short(event: &Event) -> String {
    match event {
        Event::Lane {
            relay,
            epoch,
            input,
        } => {
            let text = format!("{input:?}");
            format!("relay {relay}/{epoch} <- {}", &text[..text.len().min(300)])
        }
        Event::Store {
            relay,
            epoch,
            call,
            fate,
        } => {
            let text = format!("{call:?}");
            format!(
                "relay {relay}/{epoch} store {fate:?} {}",
                &text[..text.len().min(300)]
            )
        }
        Event::Done {
            relay,
            epoch,
            slot,
            handler,
            outbox_id,
            ending,
            ..
        } => {
            format!(
                "relay {relay}/{epoch} slot {slot} handler {handler} done {outbox_id} {ending:?}"
            )
        }
        other => format!("{other:?}"),
    }
}
