//! Store calls: what a lane's command asks of the store, run against the reference store
//! when the request arrives, checked, and answered to the lane one latency leg later (or
//! failed before it committed, or committed with its answer lost).

use std::collections::HashMap;

use uuid::Uuid;

use super::{Fate, World};
use crate::message::ClaimRef;
use crate::message::{OutboxMessage, UnixMillis};
use crate::relay::lane::core::{Input, StoreAnswer, StoreRequest};
use crate::sim::check::Call;
use crate::sim::plan::{LANE, TARGET};
use crate::store::StoreOp;
use crate::store::{single_batch, AckAndClaim, AckMode, ClaimBatch, ClaimRequest, StoreError};

fn outage(op: StoreOp) -> StoreError {
    StoreError::unavailable(
        op,
        std::io::Error::other("the simulated connection dropped"),
    )
}

impl World<'_> {
    /// The rows these ids name, as the store holds them now.
    fn rows_of(&self, ids: impl IntoIterator<Item = Uuid>) -> HashMap<Uuid, OutboxMessage> {
        ids.into_iter()
            .filter_map(|id| {
                self.store
                    .run(self.store.backend().get(id))
                    .ok()
                    .flatten()
                    .map(|row| (id, row))
            })
            .collect()
    }

    fn claim_request(&self, relay: usize, limit: usize, key_run: usize) -> ClaimRequest {
        let config = &self.relays[relay].config;
        ClaimRequest::new(LANE, TARGET, limit, config.lease, &config.consumer_id)
            .with_ordering(config.ordering)
            .with_key_run(key_run)
    }

    fn ack(&mut self, acks: &[ClaimRef], now: UnixMillis) -> Vec<crate::store::ClaimOutcome> {
        let outcomes = self
            .store
            .run(self.store.backend().ack(acks, AckMode::KeepDelivered))
            .unwrap_or_default();
        let after = self.rows_of(World::claim_refs(acks));
        self.check.observe(Call::Ack(acks), now, &after);
        outcomes
    }

    /// The acks and the claim in one call, as the lane sends them: one transaction on
    /// SQLite, an ack then a claim on the memory store.
    fn ack_and_claim(
        &mut self,
        acks: &[ClaimRef],
        request: &ClaimRequest,
        now: UnixMillis,
    ) -> Result<AckAndClaim, StoreError> {
        let answer = self.store.run(self.store.backend().ack_and_claim(
            acks,
            std::slice::from_ref(request),
            AckMode::KeepDelivered,
        ))?;
        let claimed = answer.claimed.and_then(single_batch);
        // The rows as the call left them. One the claim handed out again, or dead-lettered
        // as a lapsed last attempt, was not the ack's to change (an ack that changed it left
        // it delivered, for no claim to take): for the ack, it is as the checker last saw
        // it; the claim's check judges the claim.
        let mut after = self.rows_of(World::claim_refs(acks));
        let taken_by_the_claim = claimed.iter().flat_map(|batch| {
            let claimed = batch.messages.iter().map(|message| message.outbox_id);
            claimed.chain(batch.dead_lettered.iter().copied())
        });
        for id in taken_by_the_claim {
            if let (Some(row), Some(before)) = (after.get_mut(&id), self.check.row(id)) {
                *row = before.clone();
            }
        }
        self.check.observe(Call::Ack(acks), now, &after);
        if let Ok(batch) = &claimed {
            let mut after = self.rows_of(batch.dead_lettered.iter().copied());
            after.extend(batch.messages.iter().map(|m| (m.outbox_id, m.clone())));
            self.check.observe(
                Call::Claim {
                    claimed: &batch.messages,
                    dead: &batch.dead_lettered,
                },
                now,
                &after,
            );
        }
        Ok(AckAndClaim {
            acked: answer.acked,
            claimed,
        })
    }

    fn claim(&mut self, request: &ClaimRequest, now: UnixMillis) -> Result<ClaimBatch, StoreError> {
        let batch = single_batch(
            self.store
                .run(self.store.backend().claim(std::slice::from_ref(request)))?,
        )?;
        // The claimed rows are in the answer as the store holds them.
        let mut after = self.rows_of(batch.dead_lettered.iter().copied());
        after.extend(batch.messages.iter().map(|m| (m.outbox_id, m.clone())));
        self.check.observe(
            Call::Claim {
                claimed: &batch.messages,
                dead: &batch.dead_lettered,
            },
            now,
            &after,
        );
        Ok(batch)
    }

    /// The call's request reaches the store: it runs (unless it fails first), and its
    /// answer sets off back to the lane.
    pub(super) fn execute(&mut self, relay: usize, epoch: u64, call: StoreRequest, fate: Fate) {
        self.tally.store_calls += 1;
        let now = self.store_now();
        self.clock.set(now);
        let lost = fate == Fate::AnswerLost;
        let failed = fate == Fate::FailsBeforeCommit;
        let answer = match call {
            StoreRequest::Claim {
                claim,
                limit,
                key_run,
            } => {
                let request = self.claim_request(relay, limit, key_run);
                let result = if failed {
                    Err(outage(StoreOp::Claim))
                } else {
                    self.claim(&request, now)
                };
                StoreAnswer::Claimed {
                    claim,
                    result: if lost {
                        Err(outage(StoreOp::Claim))
                    } else {
                        result
                    },
                }
            }
            StoreRequest::AckAndClaim {
                claim,
                acks,
                limit,
                key_run,
            } => {
                let request = self.claim_request(relay, limit, key_run);
                let result = if failed {
                    Err(outage(StoreOp::AckAndClaim))
                } else {
                    let answer = self.ack_and_claim(&acks, &request, now);
                    if lost {
                        Err(outage(StoreOp::AckAndClaim))
                    } else {
                        answer
                    }
                };
                StoreAnswer::AckedAndClaimed {
                    claim,
                    result,
                    wall_ms: now,
                }
            }
            StoreRequest::Ack(acks) => {
                let result = if failed {
                    Err(outage(StoreOp::Ack))
                } else {
                    let outcomes = self.ack(&acks, now);
                    if lost {
                        Err(outage(StoreOp::Ack))
                    } else {
                        Ok(outcomes)
                    }
                };
                StoreAnswer::Acked {
                    result,
                    wall_ms: now,
                }
            }
            StoreRequest::Nack(nacks) => {
                let result = if failed {
                    Err(outage(StoreOp::Nack))
                } else {
                    let outcomes = self
                        .store
                        .run(self.store.backend().nack(&nacks))
                        .unwrap_or_default();
                    let after = self.rows_of(World::nack_refs(&nacks));
                    self.check.observe(Call::Nack(&nacks), now, &after);
                    if lost {
                        Err(outage(StoreOp::Nack))
                    } else {
                        Ok(outcomes)
                    }
                };
                StoreAnswer::Nacked(result)
            }
            StoreRequest::NextDue => {
                let ordering = self.relays[relay].config.ordering;
                let result = self
                    .store
                    .run(self.store.backend().next_due(LANE, TARGET, ordering));
                StoreAnswer::NextDue(if failed || lost {
                    Err(outage(StoreOp::NextDue))
                } else {
                    result
                })
            }
            StoreRequest::Extend {
                batch,
                generation,
                claims,
            } => {
                let lease = self.relays[relay].config.lease;
                let result = if failed {
                    Err(outage(StoreOp::ExtendLease))
                } else {
                    let outcomes = self
                        .store
                        .run(self.store.backend().extend_lease(&claims, lease))
                        .unwrap_or_default();
                    let after = self.rows_of(World::claim_refs(&claims));
                    self.check
                        .observe(Call::Extend(&claims, lease), now, &after);
                    if lost {
                        Err(outage(StoreOp::ExtendLease))
                    } else {
                        Ok(outcomes)
                    }
                };
                StoreAnswer::Extended {
                    batch,
                    generation,
                    claims,
                    result,
                }
            }
            StoreRequest::Release(claims) => {
                let sent = claims.len();
                let result = if failed {
                    Err(outage(StoreOp::Release))
                } else {
                    let outcomes = self
                        .store
                        .run(self.store.backend().release(&claims))
                        .unwrap_or_default();
                    let after = self.rows_of(World::claim_refs(&claims));
                    self.check.observe(Call::Release(&claims), now, &after);
                    if lost {
                        Err(outage(StoreOp::Release))
                    } else {
                        Ok(outcomes)
                    }
                };
                StoreAnswer::Released { sent, result }
            }
        };
        let input = Input::Store(answer);
        if self.tally.store_calls.is_multiple_of(256) {
            self.check_stats();
        }
        self.look_for_wakeups();
        self.send_to_lane_after_a_leg(relay, epoch, input);
    }
}
