//! A lane driven against a model store and a model target on a manual clock: every store
//! call answers at once, deliveries take `delivery_time`, timers fire in time order. The
//! gate tests run minutes of virtual time through it in milliseconds.

use std::collections::{BTreeMap, HashMap};

use super::*;
use crate::delivery::DeliveryError;
use crate::lane::BreakerState;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RowState {
    Pending,
    Claimed,
    Delivered,
    Dead,
}

#[derive(Debug)]
pub(super) struct Row {
    pub(super) message: OutboxMessage,
    pub(super) state: RowState,
    pub(super) due: Instant,
}

/// What the target answers to a delivery that ends this long after the start.
pub(super) type Target = Box<dyn Fn(Duration) -> Result<(), DeliveryError>>;

pub(super) struct Sim {
    pub(super) core: LaneCore,
    pub(super) now: Instant,
    pub(super) start: Instant,
    pub(super) rows: Vec<Row>,
    index: HashMap<Uuid, usize>,
    max_attempts: u32,
    target: Target,
    delivery_time: Duration,
    /// Timers by (when, order of scheduling).
    timers: BTreeMap<(Instant, u64), Input>,
    timer_seq: u64,
    /// Per claim: when it was answered, how many it asked for, how many it got, and the
    /// breaker's state when it was sent.
    pub(super) claims: Vec<(Instant, usize, usize, Option<BreakerState>)>,
    /// When each message was last claimed, and the longest wait from claim to delivery.
    claimed_at: HashMap<Uuid, Instant>,
    pub(super) longest_wait_for_handler: Duration,
    pub(super) delivered_at: Vec<Instant>,
    pub(super) breaker_changes: Vec<(Instant, BreakerState)>,
    pub(super) attempts_while_open: usize,
    pub(super) throttled: Duration,
}

impl Sim {
    pub(super) fn new(config: LaneConfig, messages: usize, target: Target) -> Self {
        let start = Instant::now();
        let rows = (0..messages)
            .map(|i| {
                let mut message = message(None);
                message.seq = i as i64;
                message.status = OutboxStatus::Pending;
                message.attempt_count = 0;
                message.claim_token = None;
                Row {
                    message,
                    state: RowState::Pending,
                    due: start,
                }
            })
            .collect::<Vec<_>>();
        let index = rows
            .iter()
            .enumerate()
            .map(|(i, r)| (r.message.outbox_id, i))
            .collect();
        Self {
            core: LaneCore::new(config, false),
            now: start,
            start,
            rows,
            index,
            max_attempts: 5,
            target,
            delivery_time: Duration::from_millis(2),
            timers: BTreeMap::new(),
            timer_seq: 0,
            claims: Vec::new(),
            claimed_at: HashMap::new(),
            longest_wait_for_handler: Duration::ZERO,
            delivered_at: Vec::new(),
            breaker_changes: Vec::new(),
            attempts_while_open: 0,
            throttled: Duration::ZERO,
        }
    }

    pub(super) fn count(&self, state: RowState) -> usize {
        self.rows.iter().filter(|r| r.state == state).count()
    }

    fn at(&mut self, at: Instant, input: Input) {
        self.timer_seq += 1;
        self.timers
            .insert((at.max(self.now), self.timer_seq), input);
    }

    /// Runs until `until` (virtual), or until nothing is left to happen.
    pub(super) fn run_until(&mut self, until: Instant) {
        let mut inputs = vec![Input::Start];
        if self.now > self.start {
            inputs.clear();
        }
        loop {
            while let Some(input) = inputs.pop() {
                let commands = self.core.handle(self.now, input);
                for command in commands {
                    if let Some(answer) = self.carry_out(command) {
                        inputs.insert(0, answer);
                    }
                }
            }
            let Some((&(at, seq), _)) = self.timers.iter().next() else {
                return;
            };
            if at > until {
                self.now = until;
                return;
            }
            let Some(input) = self.timers.remove(&(at, seq)) else {
                return;
            };
            self.now = at;
            inputs.push(input);
        }
    }

    fn claim(&mut self, limit: usize) -> ClaimBatch {
        let now = self.now;
        let mut due: Vec<usize> = (0..self.rows.len())
            .filter(|&i| self.rows[i].state == RowState::Pending && self.rows[i].due <= now)
            .collect();
        due.sort_by_key(|&i| (self.rows[i].due, self.rows[i].message.seq));
        due.truncate(limit);
        let breaker = self.core.breaker_state();
        let mut messages = Vec::new();
        for i in due {
            let row = &mut self.rows[i];
            row.state = RowState::Claimed;
            row.message.attempt_count += 1;
            row.message.claim_token = Some(Uuid::new_v4());
            row.message.status = OutboxStatus::Claimed;
            self.claimed_at.insert(row.message.outbox_id, now);
            if breaker == Some(BreakerState::Open) {
                self.attempts_while_open += 1;
            }
            messages.push(row.message.clone());
        }
        let next_due = self
            .rows
            .iter()
            .filter(|r| r.state == RowState::Pending)
            .map(|r| r.due.saturating_duration_since(now))
            .min();
        self.claims.push((now, limit, messages.len(), breaker));
        ClaimBatch {
            messages,
            dead_lettered: Vec::new(),
            unreadable: Vec::new(),
            next_due: NextDue::Known(next_due),
        }
    }

    /// The row a claim points at, if the claim is still current.
    fn current(&mut self, claim: &ClaimRef) -> Option<&mut Row> {
        let i = *self.index.get(&claim.outbox_id)?;
        let row = &mut self.rows[i];
        (row.state == RowState::Claimed && row.message.claim_token == Some(claim.claim_token))
            .then_some(row)
    }

    fn ack(&mut self, acks: &[ClaimRef]) -> Vec<ClaimOutcome> {
        let now = self.now;
        let mut outcomes = Vec::new();
        for claim in acks {
            match self.current(claim) {
                Some(row) => {
                    row.state = RowState::Delivered;
                    self.delivered_at.push(now);
                    outcomes.push(ClaimOutcome::Applied);
                }
                None => outcomes.push(ClaimOutcome::LostClaim),
            }
        }
        outcomes
    }

    fn carry_out(&mut self, command: Command) -> Option<Input> {
        let now = self.now;
        match command {
            Command::Store(StoreRequest::Claim { claim, limit, .. }) => {
                Some(Input::Store(StoreAnswer::Claimed {
                    claim,
                    result: Ok(self.claim(limit)),
                }))
            }
            Command::Store(StoreRequest::AckAndClaim {
                claim, acks, limit, ..
            }) => {
                let acked = self.ack(&acks);
                let claimed = self.claim(limit);
                Some(Input::Store(StoreAnswer::AckedAndClaimed {
                    claim,
                    result: Ok(crate::store::AckAndClaim {
                        acked,
                        claimed: Ok(claimed),
                    }),
                    wall_ms: UnixMillis::EPOCH,
                }))
            }
            Command::Store(StoreRequest::Ack(acks)) => Some(Input::Store(StoreAnswer::Acked {
                result: Ok(self.ack(&acks)),
                wall_ms: UnixMillis::EPOCH,
            })),
            Command::Store(StoreRequest::Nack(nacks)) => {
                let max_attempts = self.max_attempts;
                let outcomes = nacks
                    .iter()
                    .map(|nack| match self.current(&nack.claim) {
                        None => NackOutcome::LostClaim,
                        Some(row) => match nack.disposition {
                            NackDisposition::Retry(delay)
                                if row.message.attempt_count < max_attempts =>
                            {
                                row.state = RowState::Pending;
                                row.due = now + delay;
                                NackOutcome::Requeued
                            }
                            _ => {
                                row.state = RowState::Dead;
                                NackOutcome::DeadLettered
                            }
                        },
                    })
                    .collect();
                Some(Input::Store(StoreAnswer::Nacked(Ok(outcomes))))
            }
            // The sim's lanes take no hand-offs.
            Command::GrantCredits(_) => None,
            Command::RevokeCredits => Some(Input::CreditsRevoked(0)),
            Command::Store(StoreRequest::NextDue) => {
                let due = self
                    .rows
                    .iter()
                    .filter(|r| r.state == RowState::Pending)
                    .map(|r| r.due.saturating_duration_since(now))
                    .min();
                Some(Input::Store(StoreAnswer::NextDue(Ok(due))))
            }
            Command::Store(StoreRequest::Extend {
                batch,
                generation,
                claims,
            }) => Some(Input::Store(StoreAnswer::Extended {
                batch,
                generation,
                result: Ok(vec![ClaimOutcome::Applied; claims.len()]),
                claims,
            })),
            Command::Store(StoreRequest::Release(claims)) => {
                let outcomes = claims
                    .iter()
                    .map(|claim| match self.current(claim) {
                        Some(row) => {
                            row.state = RowState::Pending;
                            row.due = now;
                            row.message.attempt_count -= 1;
                            ClaimOutcome::Applied
                        }
                        None => ClaimOutcome::LostClaim,
                    })
                    .collect();
                Some(Input::Store(StoreAnswer::Released {
                    sent: claims.len(),
                    result: Ok(outcomes),
                }))
            }
            Command::Deliver { slot, message } => {
                if let Some(claimed) = self.claimed_at.get(&message.outbox_id) {
                    let waited = now.saturating_duration_since(*claimed);
                    self.longest_wait_for_handler = self.longest_wait_for_handler.max(waited);
                }
                let done = now + self.delivery_time;
                let result =
                    (self.target)(done - self.start).map_err(|e| DeliveryFailure::from_error(&e));
                self.at(
                    done,
                    Input::DeliveryDone {
                        slot,
                        outbox_id: message.outbox_id,
                        result,
                        elapsed: self.delivery_time,
                    },
                );
                None
            }
            Command::TimerAt {
                kind,
                at,
                generation,
            } => {
                self.at(at, Input::timer(kind, generation));
                None
            }
            Command::Throttled { duration, .. } => {
                self.throttled += duration;
                None
            }
            Command::Emit(RelayEvent::BreakerChanged { state, .. }) => {
                self.breaker_changes.push((now, state));
                None
            }
            Command::ReplaceHandler(_)
            | Command::KillHandler(_)
            | Command::EmptyClaim
            | Command::Emit(_)
            | Command::Stop(_) => None,
        }
    }
}
