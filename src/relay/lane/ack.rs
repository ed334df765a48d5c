//! Acks and nacks in batches: one store round trip for each kind per `Flush`.

use std::time::Duration;

use ractor::ActorRef;

use crate::metrics::StoreOp;
use crate::relay::RelayEvent;
use crate::store::{
    ClaimOutcome, ClaimRef, Clock, Nack, NackDisposition, NackOutcome, SystemClock,
};

use super::{LaneCounters, LaneMsg, LaneRelayState, Mode};

impl LaneRelayState {
    /// Records the buffered acks and nacks, one store round trip for each kind.
    pub(super) async fn flush(&mut self, myself: &ActorRef<LaneMsg>) {
        self.flush_pending = false;
        if !self.acks.is_empty() {
            let claims: Vec<ClaimRef> = self.acks.iter().map(|(f, _)| f.claim).collect();
            let outcomes = match self.store.ack(&claims).await {
                Ok(outcomes) => outcomes,
                // The acks stay buffered; `StoreRetry` flushes them again.
                Err(error) => return self.store_failed(myself, StoreOp::Ack, &error),
            };
            self.store_ok();
            // This machine's wall clock against the store's `created_at`.
            let now = SystemClock.now_millis();
            for ((flight, elapsed), outcome) in
                std::mem::take(&mut self.acks).into_iter().zip(outcomes)
            {
                let outbox_id = flight.message.outbox_id;
                match outcome {
                    ClaimOutcome::Applied => {
                        LaneCounters::add(&self.counters.delivered, 1);
                        let end_to_end = Duration::from_millis(
                            u64::try_from(now.saturating_sub(flight.message.created_at))
                                .unwrap_or(0),
                        );
                        tracing::debug!(lane = %self.key, %outbox_id, "delivered");
                        self.emit(RelayEvent::Delivered {
                            lane: self.key.clone(),
                            outbox_id,
                            attempt: flight.message.attempt_count,
                            duration: elapsed,
                            end_to_end,
                        });
                    }
                    ClaimOutcome::LostClaim => {
                        LaneCounters::add(&self.counters.lost_claims, 1);
                        tracing::info!(lane = %self.key, %outbox_id, "ack found the claim lost");
                        self.emit(RelayEvent::LostClaim {
                            lane: self.key.clone(),
                            outbox_id,
                        });
                    }
                }
            }
        }
        if !self.nacks.is_empty() {
            let nacks: Vec<Nack> = self
                .nacks
                .iter()
                .map(|(flight, failure, _)| Nack {
                    claim: flight.claim,
                    error: failure.error.clone(),
                    disposition: if failure.permanent {
                        NackDisposition::Permanent
                    } else {
                        NackDisposition::Retry(
                            self.config
                                .retry
                                .delay(flight.message.attempt_count, failure.retry_after),
                        )
                    },
                })
                .collect();
            let outcomes = match self.store.nack(&nacks).await {
                Ok(outcomes) => outcomes,
                Err(error) => return self.store_failed(myself, StoreOp::Nack, &error),
            };
            self.store_ok();
            for ((flight, failure, duration), outcome) in
                std::mem::take(&mut self.nacks).into_iter().zip(outcomes)
            {
                let outbox_id = flight.message.outbox_id;
                LaneCounters::add(&self.counters.failed, 1);
                match outcome {
                    NackOutcome::DeadLettered => LaneCounters::add(&self.counters.dead_lettered, 1),
                    NackOutcome::LostClaim => LaneCounters::add(&self.counters.lost_claims, 1),
                    NackOutcome::Requeued => {}
                }
                tracing::info!(lane = %self.key, %outbox_id, kind = %failure.kind, ?outcome, error = %failure.error, "delivery failed");
                self.emit(RelayEvent::Failed {
                    lane: self.key.clone(),
                    outbox_id,
                    kind: failure.kind,
                    duration,
                    outcome,
                    error: failure.error,
                });
            }
        }
        if matches!(self.mode, Mode::Draining { .. }) {
            if self.in_flight.is_empty() {
                self.finish_drain(myself, crate::relay::DrainReport::default());
            }
        } else {
            self.pump(myself).await;
        }
    }
}
