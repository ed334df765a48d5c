//! Store calls: what a lane's command asks of the store, run against the reference store
//! when the request arrives, checked, and answered to the lane one latency leg later (or
//! failed before it committed, or committed with its answer lost).

use std::collections::HashMap;
use std::time::Duration;

use uuid::Uuid;

use super::{skewed, Event, Fate, World};
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
            self.observe_claim(batch, now);
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
        self.observe_claim(&batch, now);
        Ok(batch)
    }

    /// The checker sees a claim's batch: the claimed rows are in the answer as the store
    /// holds them, the dead-lettered ones are read back.
    fn observe_claim(&mut self, batch: &ClaimBatch, now: UnixMillis) {
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

    /// Runs a call under its fate: a call that fails before it commits does not run; one
    /// whose answer is lost runs and its answer is an outage.
    fn fated<T>(
        &mut self,
        fate: Fate,
        op: StoreOp,
        call: impl FnOnce(&mut Self) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        if fate == Fate::FailsBeforeCommit {
            return Err(outage(op));
        }
        let answer = call(self);
        if fate == Fate::AnswerLost {
            Err(outage(op))
        } else {
            answer
        }
    }

    /// A pass of `relay`'s due watcher (`relay/upkeep.rs`), as its request reaches the
    /// store: the store's `lanes_next_due` for the lane, and, when that falls before the
    /// next pass, a poke ([`Input::DueAt`]) that reaches the lane with the answer one leg
    /// later. A relay cut off from the store pokes "now", as the watcher does when its call
    /// fails. The watcher's beat runs on while its process is down, poking nothing.
    pub(super) fn watch(&mut self, relay: usize) {
        let every = self.relays[relay].config.max_poll_interval;
        self.after(every, Event::Watch(relay));
        if !self.relays[relay].alive() {
            return;
        }
        self.tally.store_calls += 1;
        self.clock.set(self.store_now());
        let cut = self.faults.cut.get(relay).copied().flatten();
        let due = if cut.is_some_and(|(until, _)| self.now < until) {
            Some(Duration::ZERO)
        } else {
            let lanes = [(
                LANE.to_owned(),
                TARGET.to_owned(),
                self.relays[relay].config.ordering,
            )];
            self.store
                .run(self.store.backend().lanes_next_due(&lanes))
                .map_or(Some(Duration::ZERO), |due| due.first().copied().flatten())
        };
        let Some(due) = due.filter(|due| *due <= every) else {
            return;
        };
        let leg = self.leg();
        // The watcher reads the due time against its own clock when the answer comes.
        let at = self.base + skewed(self.now + leg, self.plan.clock_skew_ppm(relay)) + due;
        let epoch = self.relays[relay].epoch;
        self.after(
            leg,
            Event::Lane {
                relay,
                epoch,
                input: Input::DueAt(at),
            },
        );
    }

    /// The call's request reaches the store: it runs (unless it fails first), and its
    /// answer sets off back to the lane.
    pub(super) fn execute(&mut self, relay: usize, epoch: u64, call: StoreRequest, fate: Fate) {
        self.tally.store_calls += 1;
        let now = self.store_now();
        self.clock.set(now);
        let answer = match call {
            StoreRequest::Claim {
                claim,
                limit,
                key_run,
            } => {
                let request = self.claim_request(relay, limit, key_run);
                let result = self.fated(fate, StoreOp::Claim, |w| w.claim(&request, now));
                StoreAnswer::Claimed { claim, result }
            }
            StoreRequest::AckAndClaim {
                claim,
                acks,
                limit,
                key_run,
            } => {
                let request = self.claim_request(relay, limit, key_run);
                let result = self.fated(fate, StoreOp::AckAndClaim, |w| {
                    w.ack_and_claim(&acks, &request, now)
                });
                StoreAnswer::AckedAndClaimed {
                    claim,
                    result,
                    wall_ms: now,
                }
            }
            StoreRequest::Ack(acks) => StoreAnswer::Acked {
                result: self.fated(fate, StoreOp::Ack, |w| Ok(w.ack(&acks, now))),
                wall_ms: now,
            },
            StoreRequest::Nack(nacks) => {
                StoreAnswer::Nacked(self.fated(fate, StoreOp::Nack, |w| {
                    let outcomes = w
                        .store
                        .run(w.store.backend().nack(&nacks))
                        .unwrap_or_default();
                    let after = w.rows_of(World::nack_refs(&nacks));
                    w.check.observe(Call::Nack(&nacks), now, &after);
                    Ok(outcomes)
                }))
            }
            StoreRequest::NextDue => {
                let ordering = self.relays[relay].config.ordering;
                StoreAnswer::NextDue(self.fated(fate, StoreOp::NextDue, |w| {
                    w.store
                        .run(w.store.backend().next_due(LANE, TARGET, ordering))
                }))
            }
            StoreRequest::Extend {
                batch,
                generation,
                claims,
            } => {
                let lease = self.relays[relay].config.lease;
                let result = self.fated(fate, StoreOp::ExtendLease, |w| {
                    let outcomes = w
                        .store
                        .run(w.store.backend().extend_lease(&claims, lease))
                        .unwrap_or_default();
                    let after = w.rows_of(World::claim_refs(&claims));
                    w.check.observe(Call::Extend(&claims, lease), now, &after);
                    Ok(outcomes)
                });
                StoreAnswer::Extended {
                    batch,
                    generation,
                    claims,
                    result,
                }
            }
            StoreRequest::Release(claims) => {
                let sent = claims.len();
                let result = self.fated(fate, StoreOp::Release, |w| {
                    let outcomes = w
                        .store
                        .run(w.store.backend().release(&claims))
                        .unwrap_or_default();
                    let after = w.rows_of(World::claim_refs(&claims));
                    w.check.observe(Call::Release(&claims), now, &after);
                    Ok(outcomes)
                });
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
