//! Finished deliveries on their way to the store: acks and nacks wait for the next flush,
//! and those of the flush in flight are kept to pair with the store's answers (and to be
//! sent again if the flush fails).

use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use super::pool::{Running, Slot};
use super::{ClaimId, Command, LaneCore, Mode, StoreRequest};
use crate::delivery::DeliveryFailure;
use crate::lane::{LaneKey, RelayEvent};
use crate::message::ClaimRef;
use crate::message::UnixMillis;
use crate::mutation::Mutation;
use crate::store::StoreOp;
use crate::store::{ClaimOutcome, Nack, NackDisposition, NackOutcome, StoreError};

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

/// Acks and nacks waiting for a flush, and those of the flushes in flight (kept to pair with
/// the store's answers, and put back if a flush fails).
///
/// Two kinds of flush. An ack flush *rides* on a claim (`ack_and_claim`): each claim out
/// may carry its own, named by the claim's id, so with several claims in flight each
/// carries the acks of what finished before it went, and their store cycles overlap. A
/// *plain* flush (acks alone, or nacks) goes on its own; at most one is in flight, and plain
/// acks go only when no flush at all is in flight (with a claim out, the next claim is
/// their ride: one round trip instead of two).
///
/// Invariant, kept by these methods alone: an outcome is in exactly one of the lists
/// (waiting, riding on one claim, in the plain flush) until the store answered it.
#[derive(Debug, Default)]
pub(super) struct Outcomes {
    acks: Vec<Delivered>,
    nacks: Vec<Failed>,
    /// Acks riding on the claims out, by claim.
    riding: Vec<(ClaimId, Vec<Delivered>)>,
    acking: Vec<Delivered>,
    nacking: Vec<Failed>,
}

/// The plain flush [`Outcomes::start_flush`] began.
pub(super) enum Flush {
    /// These claims to ack.
    Acks(Vec<ClaimRef>),
    /// The failures in [`Outcomes::nacking`] to nack.
    Nacks,
}

impl Outcomes {
    pub(super) fn delivered(&mut self, delivered: Delivered) {
        self.acks.push(delivered);
    }

    pub(super) fn failed(&mut self, failed: Failed) {
        self.nacks.push(failed);
    }

    /// Outcomes not yet recorded, waiting or in flight.
    pub(super) fn len(&self) -> usize {
        let riding: usize = self.riding.iter().map(|(_, acks)| acks.len()).sum();
        self.acks.len() + self.nacks.len() + riding + self.acking.len() + self.nacking.len()
    }

    /// The acks riding on claim `claim`.
    pub(super) fn riding_on(&self, claim: ClaimId) -> usize {
        self.riding
            .iter()
            .find(|(id, _)| *id == claim)
            .map_or(0, |(_, acks)| acks.len())
    }

    /// Acks waiting for a flush (the next claim carries them).
    #[cfg(any(test, feature = "simulate"))]
    pub(super) fn waiting_acks(&self) -> usize {
        self.acks.len()
    }

    /// Outcomes that no claim carries or will carry: the nacks, and the plain flush in
    /// flight. (The acks waiting ride on the next claim, recorded in its transaction.)
    pub(super) fn apart(&self) -> usize {
        self.nacks.len() + self.acking.len() + self.nacking.len()
    }

    /// A plain flush is in flight.
    fn plain_flushing(&self) -> bool {
        !self.acking.is_empty() || !self.nacking.is_empty()
    }

    /// Some flush, plain or riding on a claim, is in flight.
    pub(super) fn flushing(&self) -> bool {
        self.plain_flushing() || !self.riding.is_empty()
    }

    /// Whether acks wait for a flush that may take them now: a claim going out, or a plain
    /// ack flush when nothing is in flight.
    pub(super) fn acks_ready(&self) -> bool {
        !self.acks.is_empty() && self.acking.is_empty()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The ordering key of an unrecorded outcome's message, if it has one.
    pub(super) fn key_of(&self, outbox_id: Uuid) -> Option<String> {
        let riding = self.riding.iter().flat_map(|(_, acks)| acks);
        let acks = self
            .acks
            .iter()
            .chain(riding)
            .chain(&self.acking)
            .map(|d| &d.running);
        let nacks = self.nacks.iter().chain(&self.nacking).map(|f| &f.running);
        acks.chain(nacks)
            .find(|running| running.message.outbox_id == outbox_id)
            .and_then(|running| running.message.ordering_key.clone())
    }

    /// The acks waiting ride on claim `claim`: the claims to ack with it (none waiting:
    /// `None`, and the claim goes plain).
    pub(super) fn ride_on(&mut self, claim: ClaimId) -> Option<Vec<ClaimRef>> {
        if self.acks.is_empty() {
            return None;
        }
        let acks = std::mem::take(&mut self.acks);
        let refs = acks.iter().map(|d| d.claim).collect();
        self.riding.push((claim, acks));
        Some(refs)
    }

    /// Begins a plain flush unless one is in flight: the acks when no flush at all is in
    /// flight (they free rows and ordering keys), else the nacks.
    pub(super) fn start_flush(&mut self) -> Option<Flush> {
        if self.plain_flushing() {
            return None;
        }
        if !self.acks.is_empty() && !self.flushing() {
            self.acking = std::mem::take(&mut self.acks);
            return Some(Flush::Acks(self.acking.iter().map(|d| d.claim).collect()));
        }
        if !self.nacks.is_empty() {
            self.nacking = std::mem::take(&mut self.nacks);
            return Some(Flush::Nacks);
        }
        None
    }

    /// The failures of the nack flush in flight.
    pub(super) fn nacking(&self) -> &[Failed] {
        &self.nacking
    }

    /// The store answered an ack flush (riding on claim `claim`, or the plain one for
    /// `None`): what it recorded, or nothing if it failed (then they wait for the next
    /// flush, ahead of what finished since).
    pub(super) fn acks_answered(
        &mut self,
        claim: Option<ClaimId>,
        recorded: bool,
    ) -> Vec<Delivered> {
        let answered = match claim {
            None => std::mem::take(&mut self.acking),
            Some(claim) => match self.riding.iter().position(|(id, _)| *id == claim) {
                Some(at) => self.riding.remove(at).1,
                None => Vec::new(),
            },
        };
        if recorded {
            return answered;
        }
        let later = std::mem::replace(&mut self.acks, answered);
        self.acks.extend(later);
        Vec::new()
    }

    /// The store answered the nack flush, as [`Outcomes::acks_answered`].
    pub(super) fn nacks_answered(&mut self, recorded: bool) -> Vec<Failed> {
        let nacking = std::mem::take(&mut self.nacking);
        if recorded {
            return nacking;
        }
        let later = std::mem::replace(&mut self.nacks, nacking);
        self.nacks.extend(later);
        Vec::new()
    }
}

impl LaneCore {
    /// Sends what may go now: with `claim_limit`, a claim that carries the acks waiting
    /// (one round trip for both; with several claims in flight each carries its own), and
    /// a plain flush if one may go beside it. Whether the claim went.
    pub(super) fn flush(
        &mut self,
        now: Instant,
        claim_limit: Option<usize>,
        out: &mut Vec<Command>,
    ) -> bool {
        let rode = match claim_limit {
            Some(limit) if self.outcomes.acks_ready() => {
                self.send_claim(now, limit, out);
                true
            }
            _ => false,
        };
        match self.outcomes.start_flush() {
            None => {}
            Some(Flush::Acks(acks)) => out.push(Command::Store(StoreRequest::Ack(acks))),
            Some(Flush::Nacks) => {
                let nacks = self
                    .outcomes
                    .nacking()
                    .iter()
                    .map(|f| self.nack_of(f))
                    .collect();
                out.push(Command::Store(StoreRequest::Nack(nacks)));
            }
        }
        rode
    }

    /// A claim of up to `limit` goes out, carrying the acks waiting if any
    /// (`ack_and_claim`), else on its own.
    pub(super) fn send_claim(&mut self, now: Instant, limit: usize, out: &mut Vec<Command>) {
        let claim = self.claim_sent(now, limit, out);
        let key_run = self.key_run(limit);
        let call = match self.outcomes.ride_on(claim) {
            Some(acks) => StoreRequest::AckAndClaim {
                claim,
                acks,
                limit,
                key_run,
            },
            None => StoreRequest::Claim {
                claim,
                limit,
                key_run,
            },
        };
        out.push(Command::Store(call));
    }

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
        now: Instant,
        slot: Slot,
        outbox_id: Uuid,
        result: Result<(), DeliveryFailure>,
        elapsed: Duration,
        out: &mut Vec<Command>,
    ) {
        let Some(running) = self.pool.finish(slot, outbox_id) else {
            return;
        };
        let result = result.map_err(|failure| self.hold_to_ceiling(outbox_id, failure, out));
        if let (Err(_), Some(key)) = (&result, &running.message.ordering_key) {
            if !self.mutated(Mutation::FailedRunNotReleased) {
                self.release_key(key, out);
            }
        }
        self.note_delivery_time(elapsed);
        match &result {
            // A permanent rejection is the target answering: not an outage.
            Ok(()) => self.gates.observe(now, outbox_id, false, None),
            Err(failure) => {
                self.gates
                    .observe(now, outbox_id, !failure.permanent, failure.retry_after)
            }
        }
        self.count_completed();
        // Held, and extended, until its ack or nack is recorded (`book.rs`).
        let Some(claim) = self.book.finish(outbox_id) else {
            return;
        };
        match result {
            Ok(()) => self.outcomes.delivered(Delivered {
                running,
                claim,
                elapsed,
            }),
            Err(failure) => self.outcomes.failed(Failed {
                running,
                claim,
                failure,
                ran: elapsed,
            }),
        }
    }

    /// `failure` with its `Retry-After` held to the lane's `retry_after_max`, the clamp
    /// logged and reported. Before the gates and the nack see it, so neither the message's
    /// retry nor a lane hold waits longer than the ceiling.
    fn hold_to_ceiling(
        &self,
        outbox_id: Uuid,
        mut failure: DeliveryFailure,
        out: &mut Vec<Command>,
    ) -> DeliveryFailure {
        let ceiling = self.config.retry_after_max;
        if let Some(asked) = failure.retry_after.filter(|asked| *asked > ceiling) {
            tracing::warn!(
                lane = %self.key,
                %outbox_id,
                asked = ?asked,
                ceiling = ?ceiling,
                "the target's Retry-After is longer than the lane's retry_after_max; retrying at the ceiling"
            );
            failure.retry_after = Some(ceiling);
            self.emit(
                out,
                RelayEvent::RetryAfterClamped {
                    lane: self.key.clone(),
                    outbox_id,
                    asked,
                    ceiling,
                },
            );
        }
        failure
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
        if let Some(key) = &running.message.ordering_key {
            self.release_key(key, out);
        }
        self.gates.observe(now, outbox_id, true, None);
        self.count_completed();
        if let Some(claim) = self.book.finish(outbox_id) {
            let ran = running.ran(now);
            self.outcomes.failed(Failed {
                running,
                claim,
                failure: DeliveryFailure::panic(&reason),
                ran,
            });
        }
    }

    /// The store answered the ack flush riding on claim `claim` (`None`: the plain one).
    pub(super) fn acked(
        &mut self,
        now: Instant,
        claim: Option<ClaimId>,
        result: Result<Vec<ClaimOutcome>, StoreError>,
        wall_ms: UnixMillis,
        out: &mut Vec<Command>,
    ) {
        let acking = self.outcomes.acks_answered(claim, result.is_ok());
        let outcomes = match result {
            Ok(outcomes) => outcomes,
            Err(error) => return self.store_failed(now, StoreOp::Ack, &error, out),
        };
        self.store_ok();
        for (delivered, outcome) in acking.into_iter().zip(outcomes) {
            self.book.settle(delivered.claim);
            let message = &delivered.running.message;
            let outbox_id = message.outbox_id;
            if message.ordering_key.is_some() {
                // The ack frees the key's next message: it is claimable now.
                self.store_may_have_more();
            }
            match outcome {
                ClaimOutcome::Applied => {
                    let end_to_end = wall_ms.saturating_duration_since(message.created_at);
                    tracing::debug!(
                        lane = %self.key.name,
                        target = %self.key.target,
                        %outbox_id,
                        attempt = message.attempt_count,
                        duration_ms = delivered.elapsed.as_millis() as u64,
                        "delivered"
                    );
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
                    // Its lease lapsed: the row may be claimable again, or be someone else's.
                    self.forget_due();
                    tracing::info!(lane = %self.key.name, target = %self.key.target, %outbox_id, "ack found the claim lost");
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
        let nacking = self.outcomes.nacks_answered(result.is_ok());
        let outcomes = match result {
            Ok(outcomes) => outcomes,
            Err(error) => return self.store_failed(now, StoreOp::Nack, &error, out),
        };
        self.store_ok();
        // A retry is now due at some later time: the idle sleep must be asked again.
        self.forget_due();
        for (failed, outcome) in nacking.into_iter().zip(outcomes) {
            self.book.settle(failed.claim);
            let outbox_id = failed.running.message.outbox_id;
            log_failure(&self.key, outbox_id, &failed, outcome);
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

/// One line per failed delivery, at the level its outcome deserves: a dead letter needs an
/// operator (WARN), a scheduled retry or a lost claim is the relay doing its job (INFO).
/// This is the only place a failure is logged; the binary adds no line of its own.
fn log_failure(key: &LaneKey, outbox_id: Uuid, failed: &Failed, outcome: NackOutcome) {
    let (lane, target) = (&key.name, &key.target);
    let (kind, error) = (failed.failure.kind.as_str(), &failed.failure.error);
    match outcome {
        NackOutcome::DeadLettered => tracing::warn!(
            %lane, %target, %outbox_id, kind, %error,
            "delivery failed; message dead-lettered"
        ),
        NackOutcome::Requeued => tracing::info!(
            %lane, %target, %outbox_id, kind, %error,
            "delivery failed; will retry"
        ),
        NackOutcome::LostClaim => tracing::info!(
            %lane, %target, %outbox_id, kind, %error,
            "delivery failed; the nack found the claim lost"
        ),
    }
}
