//! Lease timers: one per claimed batch, an input carrying the batch and a generation, so a
//! timer that outlived its batch (or an extension) is ignored.

use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use super::{Command, LaneCore, StoreRequest, TimerKind};
use crate::lane::RelayEvent;
use crate::message::ClaimRef;
use crate::message::OutboxMessage;
use crate::mutation::Mutation;
use crate::store::StoreOp;
use crate::store::{ClaimOutcome, StoreError};

impl LaneCore {
    /// When to look at a batch's lease: before it lapses if extension is on, at the lapse if not.
    pub(super) fn lease_check_delay(&self) -> Duration {
        match self.config.lease_extend_margin {
            Some(margin) => self.config.lease.saturating_sub(margin),
            None => self.config.lease,
        }
    }

    pub(super) fn lease_due(
        &mut self,
        now: Instant,
        batch: u64,
        generation: u64,
        out: &mut Vec<Command>,
    ) {
        let Some(claims) = self.book.due(batch, generation) else {
            return; // every claim of the batch was settled: a stale timer
        };
        if self.config.lease_extend_margin.is_none() {
            // No extension: the lease lapses now. Running deliveries go on (their late acks
            // are fenced by the store if another claimer took them); buffered ones are
            // dropped, since starting them now would race the next claimer.
            let ids: Vec<Uuid> = claims.iter().map(|c| c.outbox_id).collect();
            self.lapse_and_report(&ids, out);
            return;
        }
        if let Some(generation) = self.book.bump(batch, now) {
            out.push(Command::Store(StoreRequest::Extend {
                batch,
                generation,
                claims,
            }));
        }
    }

    /// These claims' leases lapsed for good (or may have): stop extending them, drop the
    /// buffered ones, and hand back the buffered messages of the keys of finished ones
    /// whose ack or nack is unrecorded: another claimer may be delivering such a message
    /// again, and the next of its key must not run beside it. Reports the lapse of all
    /// but the finished ones, whose ack or nack answers for them.
    pub(super) fn lapse_and_report(&mut self, outbox_ids: &[Uuid], out: &mut Vec<Command>) {
        let finished: Vec<Uuid> = outbox_ids
            .iter()
            .copied()
            .filter(|id| self.book.is_finished(*id))
            .collect();
        self.book.lapse(outbox_ids);
        let dropped = self
            .buffer
            .take_where(|m| outbox_ids.contains(&m.outbox_id));
        for message in dropped {
            self.book.close(message.outbox_id);
            self.gates.forget(message.outbox_id);
        }
        for outbox_id in &finished {
            if let Some(key) = self.outcomes.key_of(*outbox_id) {
                self.release_key(&key, out);
            }
        }
        // Lapsed rows are claimable again, by anyone.
        self.forget_due();
        let expired: Vec<Uuid> = outbox_ids
            .iter()
            .copied()
            .filter(|id| !finished.contains(id))
            .collect();
        if !expired.is_empty() {
            self.emit(
                out,
                RelayEvent::LeaseExpired {
                    lane: self.key.clone(),
                    outbox_ids: expired,
                },
            );
        }
    }

    /// How long a claim's lease must still surely hold for its delivery to start: the
    /// delivery timeout, so a delivery ends before its lapse; with lease extension, at most
    /// the extension margin, so its batch's next extension is still ahead of it (a delivery
    /// then runs past its lapse only when that extension fails, and by less than
    /// `delivery_timeout - lease_extend_margin`).
    pub(super) fn start_margin(&self) -> Duration {
        match self.config.lease_extend_margin {
            Some(margin) => margin.min(self.config.delivery_timeout),
            None => self.config.delivery_timeout,
        }
    }

    /// A buffered message taken to start whose lease will not hold for the start margin:
    /// it goes back unused (its attempt not counted), and with it the rest of its key run,
    /// which must not start before it.
    pub(super) fn release_unstarted(&mut self, message: &OutboxMessage, out: &mut Vec<Command>) {
        tracing::info!(lane = %self.key, outbox_id = %message.outbox_id,
            "lease too near its end for the delivery timeout; handed back unstarted");
        self.gates.forget(message.outbox_id);
        let claims: Vec<_> = self.book.close(message.outbox_id).into_iter().collect();
        self.release(claims, out);
        if let Some(key) = &message.ordering_key {
            self.release_key(key, out);
        }
        // Claimable again once the release lands.
        self.store_may_have_more();
    }

    /// A buffered message taken to start whose lease may have lapsed: it is not started
    /// (another claimer may hold it by now), and counts as lapsed.
    pub(super) fn drop_lapsed(&mut self, message: &OutboxMessage, out: &mut Vec<Command>) {
        let outbox_id = message.outbox_id;
        tracing::info!(lane = %self.key, %outbox_id,
            "lease may have lapsed before the delivery could start; not started");
        self.book.lapse(&[outbox_id]);
        self.book.close(outbox_id);
        self.gates.forget(outbox_id);
        self.forget_due();
        // The store holds it again once the lease lapses: a claim may find it there.
        self.store_may_have_more();
        self.emit(
            out,
            RelayEvent::LeaseExpired {
                lane: self.key.clone(),
                outbox_ids: vec![outbox_id],
            },
        );
    }

    pub(super) fn extended(
        &mut self,
        now: Instant,
        batch: u64,
        generation: u64,
        claims: Vec<ClaimRef>,
        result: Result<Vec<ClaimOutcome>, StoreError>,
        out: &mut Vec<Command>,
    ) {
        let next_check = match result {
            Ok(outcomes) => {
                self.store_ok();
                self.book.extended(batch, generation, self.config.lease);
                let extended = outcomes
                    .iter()
                    .filter(|o| **o == ClaimOutcome::Applied)
                    .count();
                let by_message = self.mutated(Mutation::LostTokenLapsesFreshClaim);
                let lapsed: Vec<Uuid> = claims
                    .iter()
                    .zip(&outcomes)
                    // Settled meanwhile (acked, released) is not a lapse, nor is the loss
                    // of a token the lane no longer holds: a message released and claimed
                    // again since is held under its fresh token, and dropping it would
                    // let its key's next message start before it.
                    .filter(|(c, o)| {
                        **o == ClaimOutcome::LostClaim
                            && if by_message {
                                self.book.holds(c.outbox_id)
                            } else {
                                self.book.holds_claim(c)
                            }
                    })
                    .map(|(c, _)| c.outbox_id)
                    .collect();
                if extended > 0 {
                    self.emit(
                        out,
                        RelayEvent::LeaseExtended {
                            lane: self.key.clone(),
                            count: extended,
                        },
                    );
                }
                if !lapsed.is_empty() {
                    // Lost for good: each lapse is reported once, then no longer extended.
                    self.lapse_and_report(&lapsed, out);
                }
                self.lease_check_delay()
            }
            Err(error) => {
                self.store_failed(now, StoreOp::ExtendLease, &error, out);
                if self.book.batch_may_have_lapsed(batch, now) {
                    // Past the earliest lapse with no extension applied: the store may
                    // hand these claims to another claimer now. None of them starts here
                    // again; running ones go on, their acks fenced by the store.
                    let ids: Vec<Uuid> = claims
                        .iter()
                        .filter(|c| self.book.holds_claim(c))
                        .map(|c| c.outbox_id)
                        .collect();
                    self.lapse_and_report(&ids, out);
                }
                // Try again well before the margin is used up.
                self.config.lease_extend_margin.unwrap_or(self.config.lease) / 4
            }
        };
        if self.book.is_current(batch, generation) {
            out.push(Command::timer(
                TimerKind::Lease { batch },
                now + next_check,
                generation,
            ));
        }
    }
}
