//! Lease timers: one per claimed batch, an input carrying the batch and a generation, so a
//! timer that outlived its batch (or an extension) is ignored.

use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use super::{Command, LaneCore};
use crate::metrics::StoreOp;
use crate::relay::RelayEvent;
use crate::store::{ClaimOutcome, ClaimRef, StoreError};

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
            self.lapse(&ids);
            self.emit(
                out,
                RelayEvent::LeaseExpired {
                    lane: self.key.clone(),
                    outbox_ids: ids,
                },
            );
            return;
        }
        if let Some(generation) = self.book.bump(batch, now) {
            out.push(Command::Extend {
                batch,
                generation,
                claims,
            });
        }
    }

    /// These claims' leases lapsed for good: stop extending them, drop buffered ones.
    pub(super) fn lapse(&mut self, outbox_ids: &[Uuid]) {
        self.book.lapse(outbox_ids);
        let dropped = self
            .buffer
            .take_where(|m| outbox_ids.contains(&m.outbox_id));
        for message in dropped {
            self.book.close(message.outbox_id);
            self.gates.forget(message.outbox_id);
        }
        // Lapsed rows are claimable again, by anyone.
        self.forget_due();
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
                self.book.extended(batch, self.config.lease);
                let extended = outcomes
                    .iter()
                    .filter(|o| **o == ClaimOutcome::Applied)
                    .count();
                let lapsed: Vec<Uuid> = claims
                    .iter()
                    .zip(&outcomes)
                    // Settled meanwhile (acked, released) is not a lapse.
                    .filter(|(c, o)| **o == ClaimOutcome::LostClaim && self.book.holds(c.outbox_id))
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
                    self.lapse(&lapsed);
                    self.emit(
                        out,
                        RelayEvent::LeaseExpired {
                            lane: self.key.clone(),
                            outbox_ids: lapsed,
                        },
                    );
                }
                self.lease_check_delay()
            }
            Err(error) => {
                self.store_failed(now, StoreOp::ExtendLease, &error, out);
                // Try again well before the margin is used up.
                self.config.lease_extend_margin.unwrap_or(self.config.lease) / 4
            }
        };
        if self.book.is_current(batch, generation) {
            out.push(Command::LeaseCheckAt {
                batch,
                generation,
                at: now + next_check,
            });
        }
    }
}
