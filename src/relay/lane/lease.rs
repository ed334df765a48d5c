//! Lease timers: each claimed batch has one, an actor message carrying the batch and a
//! generation, so a timer that outlived its batch (or an extension) is ignored.

use std::time::Duration;

use ractor::ActorRef;
use uuid::Uuid;

use crate::metrics::StoreOp;
use crate::relay::RelayEvent;
use crate::store::{ClaimOutcome, ClaimRef};

use super::{LaneMsg, LaneRelayState};

impl LaneRelayState {
    /// When to look at a batch's lease: before it lapses if extension is on, at the lapse if not.
    pub(super) fn lease_check_delay(&self) -> Duration {
        match self.config.lease_extend_margin {
            Some(margin) => self.config.lease.saturating_sub(margin),
            None => self.config.lease,
        }
    }

    pub(super) async fn lease_check(
        &mut self,
        myself: &ActorRef<LaneMsg>,
        batch_id: u64,
        generation: u64,
    ) {
        let Some(batch) = self.batches.get(&batch_id) else {
            return; // every delivery of the batch finished: a stale timer
        };
        if batch.generation != generation {
            return;
        }
        let claims: Vec<ClaimRef> = batch
            .running
            .iter()
            .filter_map(|id| self.in_flight.get(id).map(|f| f.claim))
            .collect();
        let Some(margin) = self.config.lease_extend_margin else {
            // No extension: the lease lapses now with these deliveries still running. Their
            // late acks will be fenced by the store if another claimer took them.
            self.batches.remove(&batch_id);
            self.emit(RelayEvent::LeaseExpired {
                lane: self.key.clone(),
                outbox_ids: claims.iter().map(|c| c.outbox_id).collect(),
            });
            return;
        };
        let next_generation = generation + 1;
        let next_check = match self.store.extend_lease(&claims, self.config.lease).await {
            Ok(outcomes) => {
                self.store_ok();
                let extended = outcomes
                    .iter()
                    .filter(|o| **o == ClaimOutcome::Applied)
                    .count();
                let lapsed: Vec<Uuid> = claims
                    .iter()
                    .zip(&outcomes)
                    .filter(|(_, o)| **o == ClaimOutcome::LostClaim)
                    .map(|(c, _)| c.outbox_id)
                    .collect();
                if extended > 0 {
                    self.emit(RelayEvent::LeaseExtended {
                        lane: self.key.clone(),
                        count: extended,
                    });
                }
                if !lapsed.is_empty() {
                    // Lost for good: the deliveries run on (their acks will be fenced), but
                    // the batch stops extending them, so each lapse is reported once.
                    if let Some(batch) = self.batches.get_mut(&batch_id) {
                        for outbox_id in &lapsed {
                            batch.running.remove(outbox_id);
                        }
                        if batch.running.is_empty() {
                            self.batches.remove(&batch_id);
                        }
                    }
                    self.emit(RelayEvent::LeaseExpired {
                        lane: self.key.clone(),
                        outbox_ids: lapsed,
                    });
                }
                self.lease_check_delay()
            }
            Err(error) => {
                self.store_failed(myself, StoreOp::ExtendLease, &error);
                // Try again well before the margin is used up.
                margin / 4
            }
        };
        if let Some(batch) = self.batches.get_mut(&batch_id) {
            batch.generation = next_generation;
            myself.send_after(next_check, move || LaneMsg::LeaseCheck {
                batch: batch_id,
                generation: next_generation,
            });
        }
    }
}
