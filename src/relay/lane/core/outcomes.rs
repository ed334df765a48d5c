//! Finished deliveries on their way to the store: acks and nacks wait for the next flush,
//! and those of the flush in flight are kept to pair with the store's answers (and to be
//! sent again if the flush fails).

use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use super::pool::{Running, Slot};
use super::{Command, LaneCore, Mode};
use crate::message::UnixMillis;
use crate::metrics::StoreOp;
use crate::relay::handler::DeliveryFailure;
use crate::relay::RelayEvent;
use crate::store::{ClaimOutcome, ClaimRef, Nack, NackDisposition, NackOutcome, StoreError};

/// A finished delivery waiting for its ack to be recorded.
#[derive(Debug)]
pub(super) struct Delivered {
    pub(super) running: Running,
    pub(super) claim: ClaimRef,
    pub(super) elapsed: Duration,
}

/// A failed delivery waiting for its nack to be recorded.
#[derive(Debug)]
pub(super) struct Failed {
    pub(super) running: Running,
    pub(super) claim: ClaimRef,
    pub(super) failure: DeliveryFailure,
    pub(super) ran: Duration,
}

/// Acks and nacks waiting for a flush, and those of the flush in flight (kept to pair with
/// the store's answers, and put back if the flush fails).
#[derive(Debug, Default)]
pub(super) struct Outcomes {
    pub(super) acks: Vec<Delivered>,
    pub(super) nacks: Vec<Failed>,
    pub(super) acking: Vec<Delivered>,
    pub(super) nacking: Vec<Failed>,
}

impl Outcomes {
    pub(super) fn flushing(&self) -> bool {
        !self.acking.is_empty() || !self.nacking.is_empty()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.acks.is_empty() && self.nacks.is_empty() && !self.flushing()
    }
}

impl LaneCore {
    pub(super) fn nack_of(&self, failed: &Failed) -> Nack {
        Nack {
            claim: failed.claim,
            error: failed.failure.error.clone(),
            disposition: if failed.failure.permanent {
                NackDisposition::Permanent
            } else {
                NackDisposition::Retry(self.config.retry.delay(
                    failed.running.message.attempt_count,
                    failed.failure.retry_after,
                ))
            },
        }
    }

    pub(super) fn delivery_done(
        &mut self,
        slot: Slot,
        outbox_id: Uuid,
        result: Result<(), DeliveryFailure>,
        elapsed: Duration,
    ) {
        let Some(running) = self.pool.finish(slot, outbox_id) else {
            return;
        };
        self.count_completed();
        let Some(claim) = self.book.close(outbox_id) else {
            return;
        };
        match result {
            Ok(()) => self.outcomes.acks.push(Delivered {
                running,
                claim,
                elapsed,
            }),
            Err(failure) => self.outcomes.nacks.push(Failed {
                running,
                claim,
                failure,
                ran: elapsed,
            }),
        }
    }

    pub(super) fn count_completed(&mut self) {
        if let Mode::Draining { completed, .. } = &mut self.mode {
            *completed += 1;
        }
    }

    pub(super) fn handler_died(
        &mut self,
        now: Instant,
        slot: Slot,
        reason: String,
        out: &mut Vec<Command>,
    ) {
        let replace = matches!(self.mode, Mode::Running | Mode::Paused);
        let Some(running) = self.pool.died(slot, replace) else {
            return;
        };
        if replace {
            out.push(Command::ReplaceHandler(slot));
        }
        let Some(running) = running else {
            return;
        };
        let outbox_id = running.message.outbox_id;
        tracing::warn!(lane = %self.key, %outbox_id, %reason, "handler panicked");
        self.count_completed();
        if let Some(claim) = self.book.close(outbox_id) {
            let ran = running.ran(now);
            self.outcomes.nacks.push(Failed {
                running,
                claim,
                failure: DeliveryFailure::panic(&reason),
                ran,
            });
        }
    }

    pub(super) fn acked(
        &mut self,
        now: Instant,
        result: Result<Vec<ClaimOutcome>, StoreError>,
        wall_ms: UnixMillis,
        out: &mut Vec<Command>,
    ) {
        let acking = std::mem::take(&mut self.outcomes.acking);
        let outcomes = match result {
            Ok(outcomes) => outcomes,
            Err(error) => {
                // Recorded later, in the order they finished.
                let later = std::mem::replace(&mut self.outcomes.acks, acking);
                self.outcomes.acks.extend(later);
                return self.store_failed(now, StoreOp::Ack, &error, out);
            }
        };
        self.store_ok();
        for (delivered, outcome) in acking.into_iter().zip(outcomes) {
            let message = &delivered.running.message;
            let outbox_id = message.outbox_id;
            if message.ordering_key.is_some() {
                // The ack frees the key's next message: it is claimable now.
                self.store_has_more = true;
            }
            match outcome {
                ClaimOutcome::Applied => {
                    let end_to_end = Duration::from_millis(
                        u64::try_from(wall_ms.saturating_sub(message.created_at)).unwrap_or(0),
                    );
                    tracing::debug!(lane = %self.key, %outbox_id, "delivered");
                    self.emit(
                        out,
                        RelayEvent::Delivered {
                            lane: self.key.clone(),
                            outbox_id,
                            attempt: message.attempt_count,
                            duration: delivered.elapsed,
                            end_to_end,
                        },
                    );
                }
                ClaimOutcome::LostClaim => {
                    tracing::info!(lane = %self.key, %outbox_id, "ack found the claim lost");
                    self.emit(
                        out,
                        RelayEvent::LostClaim {
                            lane: self.key.clone(),
                            outbox_id,
                        },
                    );
                }
            }
        }
    }

    pub(super) fn nacked(
        &mut self,
        now: Instant,
        result: Result<Vec<NackOutcome>, StoreError>,
        out: &mut Vec<Command>,
    ) {
        let nacking = std::mem::take(&mut self.outcomes.nacking);
        let outcomes = match result {
            Ok(outcomes) => outcomes,
            Err(error) => {
                let later = std::mem::replace(&mut self.outcomes.nacks, nacking);
                self.outcomes.nacks.extend(later);
                return self.store_failed(now, StoreOp::Nack, &error, out);
            }
        };
        self.store_ok();
        // A retry is now due at some later time: the idle sleep must be asked again.
        self.idle_timer_set = false;
        for (failed, outcome) in nacking.into_iter().zip(outcomes) {
            let outbox_id = failed.running.message.outbox_id;
            tracing::info!(lane = %self.key, %outbox_id, kind = %failed.failure.kind, ?outcome, error = %failed.failure.error, "delivery failed");
            self.emit(
                out,
                RelayEvent::Failed {
                    lane: self.key.clone(),
                    outbox_id,
                    kind: failed.failure.kind,
                    duration: failed.ran,
                    outcome,
                    error: failed.failure.error,
                },
            );
        }
    }
}
