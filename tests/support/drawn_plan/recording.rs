//! One relay process's way to the store: the schedule's store faults, and every call handed
//! to the checker with the rows it left, one call at a time.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use outbox_relay::message::{ClaimRef, DraftLimits};
use outbox_relay::store::{
    AckAndClaim, AckMode, Capabilities, ClaimBatch, ClaimOutcome, ClaimRequest, DraftBatch,
    Enqueued, LaneCount, LanePause, LanePauseRequest, LaneStats, MessageFilter, Nack, NackOutcome,
    OrderingPolicy, OutboxBackend, Page, PageRequest, PurgeRequest, StoreError, StoreOp,
    UnservedLane, WakeUp,
};
use outbox_relay::testing::simulation::Call;
use outbox_relay::time::UnixMillis;
use outbox_relay::OutboxMessage;
use rand::Rng;
use tokio::sync::broadcast;
use uuid::Uuid;

use super::{trace, Shared};

fn outage(op: StoreOp, why: &'static str) -> StoreError {
    StoreError::unavailable(op, std::io::Error::other(why))
}

/// One relay process's way to the store: the schedule's faults, and every call fed to the
/// checker.
#[derive(Debug)]
pub(super) struct Recording {
    pub(super) shared: Arc<Shared>,
    /// `None`: a process without a relay (it only enqueues).
    pub(super) relay: Option<usize>,
    /// The process died: its calls never come back.
    pub(super) dead: Arc<AtomicBool>,
}

/// What a call meets on its way.
enum Fate {
    Answered,
    FailsBeforeCommit,
    AnswerLost,
}

/// A call's turn at the store: others wait until it is dropped.
struct Turn<'a> {
    _guard: tokio::sync::MutexGuard<'a, ()>,
    fate: Fate,
    /// The store's clock as the call went in, and the time since the start then.
    now: UnixMillis,
    at: Duration,
    /// A slow store: the answer takes this much longer to come back.
    answer_delay: Duration,
}

impl Turn<'_> {
    /// Lets the next call in, and hands the answer back (late, from a slow store; as an
    /// error, when it was lost).
    async fn leave<T>(self, op: StoreOp, answer: Result<T, StoreError>) -> Result<T, StoreError> {
        let Turn {
            _guard,
            fate,
            answer_delay,
            ..
        } = self;
        drop(_guard);
        if !answer_delay.is_zero() {
            tokio::time::sleep(answer_delay).await;
        }
        match fate {
            Fate::AnswerLost => Err(outage(op, "the connection dropped before the answer came")),
            _ => answer,
        }
    }
}

impl Recording {
    /// The way in for a lane's call: dies with the process, panics for a lane crash, waits
    /// out a slow store, then takes its turn; the fate is drawn in the turn.
    async fn enter(&self) -> Turn<'_> {
        self.enter_as(true).await
    }

    /// The way in (`lane`: a call of the lane, which a lane crash panics).
    async fn enter_as(&self, lane: bool) -> Turn<'_> {
        if self.dead.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        let (delay, answer_delay) = {
            let mut state = self.shared.state();
            let panics = lane
                && self
                    .relay
                    .is_some_and(|relay| std::mem::take(&mut state.panic_next[relay]));
            if panics {
                drop(state);
                panic!("a store call panicked (an injected lane crash)");
            }
            let now = self.shared.elapsed();
            if now < state.slow_until {
                let extra = state.slow_extra.as_micros() as u64;
                (
                    Duration::from_micros(state.rng.random_range(0..=extra)),
                    Duration::from_micros(state.rng.random_range(0..=extra)),
                )
            } else {
                (Duration::ZERO, Duration::ZERO)
            }
        };
        if !delay.is_zero() {
            // A slow store: the request takes this much longer to arrive.
            tokio::time::sleep(delay).await;
        }
        let guard = self.shared.turn.lock().await;
        if self.dead.load(Ordering::SeqCst) {
            drop(guard);
            return std::future::pending().await;
        }
        let mut state = self.shared.state();
        let now = self.shared.elapsed();
        // The schedule's store faults strike the lanes' calls, as in the simulation.
        let fate = match self.relay.and_then(|relay| state.cut[relay]) {
            _ if !lane => Fate::Answered,
            Some((until, lost)) if now < until => {
                if lost {
                    Fate::AnswerLost
                } else {
                    Fate::FailsBeforeCommit
                }
            }
            _ if state.fail_before > 0 => {
                state.fail_before -= 1;
                Fate::FailsBeforeCommit
            }
            _ if state.lose_answer > 0 => {
                state.lose_answer -= 1;
                Fate::AnswerLost
            }
            _ => Fate::Answered,
        };
        state.store_calls += 1;
        let store_now = self.shared.store_now(&state);
        self.shared.clock.set(store_now);
        Turn {
            _guard: guard,
            fate,
            now: store_now,
            at: now,
            answer_delay,
        }
    }

    /// The rows these ids name, as the store holds them now.
    async fn rows(&self, ids: Vec<Uuid>) -> HashMap<Uuid, OutboxMessage> {
        let mut rows = HashMap::new();
        for id in ids {
            match self.shared.inner.get(id).await {
                Ok(Some(row)) => {
                    rows.insert(id, row);
                }
                Ok(None) => {}
                Err(error) => panic!("reading back {id}: {error}"),
            }
        }
        rows
    }

    /// The checker takes a call's effect.
    fn observe(&self, call: Call<'_>, turn: &Turn<'_>, after: &HashMap<Uuid, OutboxMessage>) {
        let now = turn.now;
        if trace() {
            let rows: Vec<_> = after
                .values()
                .map(|r| (r.outbox_id, r.status, r.claim_token, r.lease_expires_at))
                .collect();
            eprintln!(
                "{:?} relay {:?} at {now}: {call:?} -> {rows:?}",
                turn.at, self.relay
            );
        }
        let mut state = self.shared.state();
        state.checker.set_now(turn.at);
        state.checker.observe(call, now, after);
        drop(state);
        self.shared.changed.notify_waiters();
    }

    /// A claim's answer to the checker: the rows it handed out are in it, the ones it
    /// dead-lettered are read back.
    async fn observe_claim(&self, batch: &ClaimBatch, turn: &Turn<'_>) {
        let mut after = self.rows(batch.dead_lettered.clone()).await;
        after.extend(batch.messages.iter().map(|m| (m.outbox_id, m.clone())));
        self.observe(
            Call::Claim {
                claimed: &batch.messages,
                dead: &batch.dead_lettered,
            },
            turn,
            &after,
        );
    }
}

#[async_trait]
impl OutboxBackend for Recording {
    fn capabilities(&self) -> Capabilities {
        self.shared.inner.capabilities()
    }

    fn draft_limits(&self) -> DraftLimits {
        self.shared.inner.draft_limits()
    }

    async fn write_drafts(&self, drafts: DraftBatch) -> Result<Vec<Enqueued>, StoreError> {
        let turn = self.enter_as(false).await;
        let failing = {
            let mut state = self.shared.state();
            let failing = state.fail_enqueues > 0;
            state.fail_enqueues = state.fail_enqueues.saturating_sub(1);
            failing
        };
        if failing {
            let failed = Err(outage(
                StoreOp::Enqueue,
                "the write failed before it committed",
            ));
            return turn.leave(StoreOp::Enqueue, failed).await;
        }
        let answers = self.shared.inner.write_drafts(drafts).await;
        if let Ok(answers) = &answers {
            let mut state = self.shared.state();
            state.checker.set_now(turn.at);
            for answer in answers {
                state.checker.enqueued(&answer.message, answer.duplicate);
            }
        }
        turn.leave(StoreOp::Enqueue, answers).await
    }

    async fn claim(&self, requests: &[ClaimRequest]) -> Result<Vec<ClaimBatch>, StoreError> {
        let turn = self.enter().await;
        if let Fate::FailsBeforeCommit = turn.fate {
            return turn
                .leave(StoreOp::Claim, Err(outage(StoreOp::Claim, "dropped")))
                .await;
        }
        let batches = self.shared.inner.claim(requests).await;
        if let Ok(batches) = &batches {
            for batch in batches {
                self.observe_claim(batch, &turn).await;
            }
        }
        turn.leave(StoreOp::Claim, batches).await
    }

    async fn ack(
        &self,
        claims: &[ClaimRef],
        mode: AckMode,
    ) -> Result<Vec<ClaimOutcome>, StoreError> {
        let turn = self.enter().await;
        if let Fate::FailsBeforeCommit = turn.fate {
            return turn
                .leave(StoreOp::Ack, Err(outage(StoreOp::Ack, "dropped")))
                .await;
        }
        let outcomes = self.shared.inner.ack(claims, mode).await;
        if outcomes.is_ok() {
            let after = self
                .rows(claims.iter().map(|c| c.outbox_id).collect())
                .await;
            self.observe(Call::Ack(claims), &turn, &after);
        }
        turn.leave(StoreOp::Ack, outcomes).await
    }

    async fn ack_and_claim(
        &self,
        acks: &[ClaimRef],
        requests: &[ClaimRequest],
        mode: AckMode,
    ) -> Result<AckAndClaim<Vec<ClaimBatch>>, StoreError> {
        let op = StoreOp::AckAndClaim;
        let turn = self.enter().await;
        if let Fate::FailsBeforeCommit = turn.fate {
            return turn.leave(op, Err(outage(op, "dropped"))).await;
        }
        let answer = self.shared.inner.ack_and_claim(acks, requests, mode).await;
        if let Ok(answer) = &answer {
            let mut after = self.rows(acks.iter().map(|c| c.outbox_id).collect()).await;
            // A row the same statement claimed again was not the ack's to change (an ack
            // that changed it left it delivered, for no claim to take): for the ack, it is
            // as the checker last saw it; the claim's check judges the claim.
            {
                let state = self.shared.state();
                let claimed = answer.claimed.iter().flatten().flat_map(|b| &b.messages);
                for message in claimed {
                    if let (Some(row), Some(before)) = (
                        after.get_mut(&message.outbox_id),
                        state.checker.row(message.outbox_id),
                    ) {
                        *row = before.clone();
                    }
                }
            }
            self.observe(Call::Ack(acks), &turn, &after);
            if let Ok(batches) = &answer.claimed {
                for batch in batches {
                    self.observe_claim(batch, &turn).await;
                }
            }
        }
        turn.leave(op, answer).await
    }

    async fn nack(&self, nacks: &[Nack]) -> Result<Vec<NackOutcome>, StoreError> {
        let turn = self.enter().await;
        if let Fate::FailsBeforeCommit = turn.fate {
            return turn
                .leave(StoreOp::Nack, Err(outage(StoreOp::Nack, "dropped")))
                .await;
        }
        let outcomes = self.shared.inner.nack(nacks).await;
        if outcomes.is_ok() {
            let after = self
                .rows(nacks.iter().map(|n| n.claim.outbox_id).collect())
                .await;
            self.observe(Call::Nack(nacks), &turn, &after);
        }
        turn.leave(StoreOp::Nack, outcomes).await
    }

    async fn extend_lease(
        &self,
        claims: &[ClaimRef],
        lease: Duration,
    ) -> Result<Vec<ClaimOutcome>, StoreError> {
        let op = StoreOp::ExtendLease;
        let turn = self.enter().await;
        if let Fate::FailsBeforeCommit = turn.fate {
            return turn.leave(op, Err(outage(op, "dropped"))).await;
        }
        let outcomes = self.shared.inner.extend_lease(claims, lease).await;
        if outcomes.is_ok() {
            let after = self
                .rows(claims.iter().map(|c| c.outbox_id).collect())
                .await;
            self.observe(Call::Extend(claims, lease), &turn, &after);
        }
        turn.leave(op, outcomes).await
    }

    async fn release(&self, claims: &[ClaimRef]) -> Result<Vec<ClaimOutcome>, StoreError> {
        let op = StoreOp::Release;
        let turn = self.enter().await;
        if let Fate::FailsBeforeCommit = turn.fate {
            return turn.leave(op, Err(outage(op, "dropped"))).await;
        }
        let outcomes = self.shared.inner.release(claims).await;
        if outcomes.is_ok() {
            let after = self
                .rows(claims.iter().map(|c| c.outbox_id).collect())
                .await;
            self.observe(Call::Release(claims), &turn, &after);
        }
        turn.leave(op, outcomes).await
    }

    async fn next_due(
        &self,
        lane: &str,
        target: &str,
        ordering: OrderingPolicy,
    ) -> Result<Option<Duration>, StoreError> {
        let op = StoreOp::NextDue;
        let turn = self.enter().await;
        if let Fate::FailsBeforeCommit = turn.fate {
            return turn.leave(op, Err(outage(op, "dropped"))).await;
        }
        let due = self.shared.inner.next_due(lane, target, ordering).await;
        turn.leave(op, due).await
    }

    async fn stats(&self, filter: &MessageFilter) -> Result<Vec<LaneStats>, StoreError> {
        let _turn = self.enter_as(false).await;
        self.shared.inner.stats(filter).await
    }

    async fn list(&self, filter: &MessageFilter, page: PageRequest) -> Result<Page, StoreError> {
        let _turn = self.enter_as(false).await;
        self.shared.inner.list(filter, page).await
    }

    async fn get(&self, outbox_id: Uuid) -> Result<Option<OutboxMessage>, StoreError> {
        let _turn = self.enter_as(false).await;
        self.shared.inner.get(outbox_id).await
    }

    async fn requeue_dead_letters_per_lane(
        &self,
        filter: &MessageFilter,
    ) -> Result<Vec<LaneCount>, StoreError> {
        let _turn = self.enter_as(false).await;
        self.shared
            .inner
            .requeue_dead_letters_per_lane(filter)
            .await
    }

    async fn discard_dead_letters(&self, filter: &MessageFilter) -> Result<u64, StoreError> {
        let _turn = self.enter_as(false).await;
        self.shared.inner.discard_dead_letters(filter).await
    }

    async fn purge(&self, request: &PurgeRequest) -> Result<Vec<LaneCount>, StoreError> {
        let _turn = self.enter_as(false).await;
        self.shared.inner.purge(request).await
    }

    /// The store's wake-ups, less those the schedule loses for this relay.
    fn subscribe(&self) -> broadcast::Receiver<WakeUp> {
        let mut from_store = self.shared.inner.subscribe();
        let (sender, receiver) = broadcast::channel(64);
        let (shared, relay) = (self.shared.clone(), self.relay);
        tokio::spawn(async move {
            loop {
                let wake = match from_store.recv().await {
                    Ok(wake) => wake,
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return,
                };
                let lost = relay.is_some_and(|relay| {
                    shared.elapsed() < shared.state().wakeups_lost_until[relay]
                });
                if !lost && sender.send(wake).is_err() {
                    return;
                }
            }
        });
        receiver
    }

    fn max_connections(&self) -> Option<u32> {
        self.shared.inner.max_connections()
    }

    async fn pause_lane(&self, request: &LanePauseRequest) -> Result<LanePause, StoreError> {
        let _turn = self.enter_as(false).await;
        self.shared.inner.pause_lane(request).await
    }

    async fn resume_lane(&self, lane: &str, target: &str) -> Result<Option<LanePause>, StoreError> {
        let _turn = self.enter_as(false).await;
        self.shared.inner.resume_lane(lane, target).await
    }

    async fn lane_pauses(&self) -> Result<Vec<LanePause>, StoreError> {
        let _turn = self.enter_as(false).await;
        self.shared.inner.lane_pauses().await
    }

    async fn record_served(
        &self,
        lanes: &[(String, String)],
        served_for: Duration,
    ) -> Result<(), StoreError> {
        let _turn = self.enter_as(false).await;
        self.shared.inner.record_served(lanes, served_for).await
    }

    async fn unserved_lanes(&self, limit: usize) -> Result<Vec<UnservedLane>, StoreError> {
        let _turn = self.enter_as(false).await;
        self.shared.inner.unserved_lanes(limit).await
    }
}
