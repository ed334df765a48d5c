//! `InMemoryOutboxStore`: the whole contract over a mutex-guarded map, for tests and
//! examples. It is also the plainest statement of the contract's semantics; the SQL
//! backends must agree with it to the letter (the conformance suite checks that they do).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::broadcast;
use uuid::Uuid;

use crate::message::{DraftLimits, OutboxMessage, OutboxMessageDraft, OutboxStatus, UnixMillis};
use crate::store::{
    duration_millis, millis_until, ClaimBatch, ClaimOutcome, ClaimRef, ClaimRequest, Clock,
    Enqueued, LaneStats, MessageFilter, Nack, NackDisposition, NackOutcome, OrderingPolicy,
    OutboxStore, Page, PageRequest, StoreError, SystemClock, WakeUp, WAKEUP_CHANNEL_CAPACITY,
};

/// The error a claim writes when it dead-letters a message whose lease lapsed on its last
/// attempt. Every backend uses the same words.
pub const LEASE_LAPSED_ERROR: &str = "lease lapsed on the last attempt";

/// An outbox held in memory: nothing survives the process.
#[derive(Debug)]
pub struct InMemoryOutboxStore {
    rows: Mutex<Rows>,
    clock: Arc<dyn Clock>,
    limits: DraftLimits,
    wakeups: broadcast::Sender<WakeUp>,
}

#[derive(Debug, Default)]
struct Rows {
    next_seq: i64,
    by_seq: BTreeMap<i64, OutboxMessage>,
    seq_by_id: HashMap<Uuid, i64>,
    seq_by_dedupe: HashMap<(String, String, String), i64>,
}

impl Rows {
    fn by_id(&mut self, id: Uuid) -> Option<&mut OutboxMessage> {
        let seq = self.seq_by_id.get(&id)?;
        self.by_seq.get_mut(seq)
    }

    fn claimed_with(&mut self, claim: &ClaimRef) -> Option<&mut OutboxMessage> {
        self.by_id(claim.outbox_id).filter(|m| {
            m.status == OutboxStatus::Claimed && m.claim_token == Some(claim.claim_token)
        })
    }

    fn remove(&mut self, seq: i64) {
        if let Some(message) = self.by_seq.remove(&seq) {
            self.seq_by_id.remove(&message.outbox_id);
            if let Some(key) = &message.dedupe_key {
                self.seq_by_dedupe
                    .remove(&(message.lane, message.target, key.clone()));
            }
        }
    }
}

impl Default for InMemoryOutboxStore {
    fn default() -> Self {
        Self::new()
    }
}

impl InMemoryOutboxStore {
    /// An empty store on the system clock.
    pub fn new() -> Self {
        Self::with_clock(Arc::new(SystemClock))
    }

    /// An empty store on the given clock.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        let (wakeups, _) = broadcast::channel(WAKEUP_CHANNEL_CAPACITY);
        Self {
            rows: Mutex::new(Rows::default()),
            clock,
            limits: DraftLimits::default(),
            wakeups,
        }
    }

    /// Sets the limits drafts are validated against.
    pub fn with_limits(mut self, limits: DraftLimits) -> Self {
        self.limits = limits;
        self
    }

    fn rows(&self) -> MutexGuard<'_, Rows> {
        // A panic while the lock was held cannot leave a row half written: every mutation
        // below is computed first and applied with plain assignments.
        self.rows
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn wake(&self, lane: &str, target: &str) {
        // No receivers is fine: nobody is idle-waiting.
        let _ = self.wakeups.send(WakeUp::Lane {
            lane: lane.to_owned(),
            target: target.to_owned(),
        });
    }

    fn insert(rows: &mut Rows, draft: OutboxMessageDraft, now: UnixMillis) -> Enqueued {
        rows.next_seq += 1;
        let seq = rows.next_seq;
        let message = OutboxMessage::pending(draft, Uuid::now_v7(), seq, now);
        rows.seq_by_id.insert(message.outbox_id, seq);
        if let Some(key) = &message.dedupe_key {
            rows.seq_by_dedupe.insert(
                (message.lane.clone(), message.target.clone(), key.clone()),
                seq,
            );
        }
        rows.by_seq.insert(seq, message.clone());
        Enqueued {
            message,
            duplicate: false,
        }
    }

    /// The existing message for the draft's dedupe key, or a conflict.
    fn find_duplicate(
        rows: &Rows,
        draft: &OutboxMessageDraft,
    ) -> Result<Option<Enqueued>, StoreError> {
        let Some(key) = &draft.dedupe_key else {
            return Ok(None);
        };
        let Some(existing) = rows
            .seq_by_dedupe
            .get(&(draft.lane.clone(), draft.target.clone(), key.clone()))
            .and_then(|seq| rows.by_seq.get(seq))
        else {
            return Ok(None);
        };
        if draft.matches(existing) {
            Ok(Some(Enqueued {
                message: existing.clone(),
                duplicate: true,
            }))
        } else {
            Err(StoreError::Conflict {
                lane: draft.lane.clone(),
                target: draft.target.clone(),
                dedupe_key: key.clone(),
                existing: existing.outbox_id,
            })
        }
    }
}

fn is_live(status: OutboxStatus) -> bool {
    matches!(status, OutboxStatus::Pending | OutboxStatus::Claimed)
}

/// The ordering keys of (lane, target) with a message claimed under a lease that has not
/// lapsed: while one is in flight, no other message of its key may be handed out.
fn keys_in_flight(rows: &Rows, lane: &str, target: &str, now: UnixMillis) -> HashSet<String> {
    rows.by_seq
        .values()
        .filter(|m| {
            m.lane == lane
                && m.target == target
                && m.status == OutboxStatus::Claimed
                && m.lease_expires_at.is_some_and(|at| at > now)
        })
        .filter_map(|m| m.ordering_key.clone())
        .collect()
}

fn clear_claim(message: &mut OutboxMessage, now: UnixMillis) {
    message.claimed_by = None;
    message.claim_token = None;
    message.lease_expires_at = None;
    message.updated_at = now;
}

#[async_trait]
impl OutboxStore for InMemoryOutboxStore {
    async fn enqueue_many(
        &self,
        drafts: Vec<OutboxMessageDraft>,
    ) -> Result<Vec<Enqueued>, StoreError> {
        for draft in &drafts {
            draft.validate(&self.limits)?;
        }
        let now = self.clock.now_millis();
        let mut woken = HashSet::new();
        let answers = {
            let mut rows = self.rows();
            // Check every dedupe key before writing anything, so a conflict leaves no row.
            let mut seen: HashMap<(String, String, String), &OutboxMessageDraft> = HashMap::new();
            for draft in &drafts {
                Self::find_duplicate(&rows, draft)?;
                if let Some(key) = &draft.dedupe_key {
                    let slot = (draft.lane.clone(), draft.target.clone(), key.clone());
                    if let Some(first) = seen.get(&slot) {
                        if first != &draft {
                            return Err(StoreError::Conflict {
                                lane: draft.lane.clone(),
                                target: draft.target.clone(),
                                dedupe_key: key.clone(),
                                existing: Uuid::nil(),
                            });
                        }
                    }
                    seen.insert(slot, draft);
                }
            }
            let mut answers = Vec::with_capacity(drafts.len());
            for draft in drafts {
                match Self::find_duplicate(&rows, &draft)? {
                    Some(duplicate) => answers.push(duplicate),
                    None => {
                        woken.insert((draft.lane.clone(), draft.target.clone()));
                        answers.push(Self::insert(&mut rows, draft, now));
                    }
                }
            }
            answers
        };
        for (lane, target) in woken {
            self.wake(&lane, &target);
        }
        crate::metrics::record_enqueued(&answers);
        Ok(answers)
    }

    async fn claim(&self, request: &ClaimRequest) -> Result<ClaimBatch, StoreError> {
        let now = self.clock.now_millis();
        let mut rows = self.rows();
        let mut batch = ClaimBatch::default();
        // Keys with a message in flight: a requeued dead head (which is earlier) must not be
        // handed out beside its successor.
        let in_flight = keys_in_flight(&rows, &request.lane, &request.target, now);
        // Keys held back by an earlier row, found walking the lane in enqueue order.
        let mut held_keys: HashSet<String> = HashSet::new();
        // (pending?, due, seq): lapsed claims first, because they became claimable earliest
        // and their keys are blocked, then due pending rows.
        let mut candidates: Vec<(bool, UnixMillis, i64)> = Vec::new();
        let mut lapsed_out_of_attempts = Vec::new();
        for message in rows.by_seq.values() {
            if message.lane != request.lane || message.target != request.target {
                continue;
            }
            let holds_key = is_live(message.status)
                || (request.ordering == OrderingPolicy::Block
                    && message.status == OutboxStatus::DeadLetter);
            let lapsed = message.status == OutboxStatus::Claimed
                && message.lease_expires_at.is_some_and(|at| at <= now);
            let claimable =
                lapsed || (message.status == OutboxStatus::Pending && message.available_at <= now);
            let key_free = message
                .ordering_key
                .as_ref()
                .is_none_or(|key| !held_keys.contains(key) && !in_flight.contains(key));
            if claimable && key_free {
                if lapsed && message.attempt_count >= message.max_attempts {
                    lapsed_out_of_attempts.push(message.seq);
                    // Dead now: under Skip it no longer holds its key.
                    if request.ordering == OrderingPolicy::Skip {
                        continue;
                    }
                } else {
                    // A lapsed claim is due from its lapse, a pending row from its due time.
                    let due = match message.lease_expires_at {
                        Some(lapsed_at) if lapsed => lapsed_at,
                        _ => message.available_at,
                    };
                    candidates.push((!lapsed, due, message.seq));
                }
            }
            if holds_key {
                if let Some(key) = &message.ordering_key {
                    held_keys.insert(key.clone());
                }
            }
        }
        for seq in lapsed_out_of_attempts {
            if let Some(message) = rows.by_seq.get_mut(&seq) {
                message.status = OutboxStatus::DeadLetter;
                message.last_error = Some(LEASE_LAPSED_ERROR.to_owned());
                clear_claim(message, now);
                batch.dead_lettered.push(message.outbox_id);
            }
        }
        candidates.sort_unstable();
        candidates.truncate(request.limit);
        let lease_until = now.saturating_add(duration_millis(request.lease));
        for (_, _, seq) in candidates {
            if let Some(message) = rows.by_seq.get_mut(&seq) {
                message.status = OutboxStatus::Claimed;
                message.attempt_count = message.attempt_count.saturating_add(1);
                message.claimed_by = Some(request.consumer_id.clone());
                message.claim_token = Some(Uuid::new_v4());
                message.lease_expires_at = Some(lease_until);
                message.updated_at = now;
                batch.messages.push(message.clone());
            }
        }
        Ok(batch)
    }

    async fn ack(&self, claims: &[ClaimRef]) -> Result<Vec<ClaimOutcome>, StoreError> {
        let now = self.clock.now_millis();
        let mut rows = self.rows();
        Ok(claims
            .iter()
            .map(|claim| match rows.claimed_with(claim) {
                Some(message) => {
                    message.status = OutboxStatus::Delivered;
                    message.delivered_at = Some(now);
                    clear_claim(message, now);
                    ClaimOutcome::Applied
                }
                None => ClaimOutcome::LostClaim,
            })
            .collect())
    }

    async fn nack(&self, nacks: &[Nack]) -> Result<Vec<NackOutcome>, StoreError> {
        let now = self.clock.now_millis();
        let mut rows = self.rows();
        Ok(nacks
            .iter()
            .map(|nack| match rows.claimed_with(&nack.claim) {
                Some(message) => {
                    message.last_error = Some(nack.error.clone());
                    clear_claim(message, now);
                    match nack.disposition {
                        NackDisposition::Retry(delay)
                            if message.attempt_count < message.max_attempts =>
                        {
                            message.status = OutboxStatus::Pending;
                            message.available_at = now.saturating_add(duration_millis(delay));
                            NackOutcome::Requeued
                        }
                        _ => {
                            message.status = OutboxStatus::DeadLetter;
                            NackOutcome::DeadLettered
                        }
                    }
                }
                None => NackOutcome::LostClaim,
            })
            .collect())
    }

    async fn extend_lease(
        &self,
        claims: &[ClaimRef],
        lease: Duration,
    ) -> Result<Vec<ClaimOutcome>, StoreError> {
        let now = self.clock.now_millis();
        let mut rows = self.rows();
        Ok(claims
            .iter()
            .map(|claim| match rows.claimed_with(claim) {
                Some(message) => {
                    message.lease_expires_at = Some(now.saturating_add(duration_millis(lease)));
                    message.updated_at = now;
                    ClaimOutcome::Applied
                }
                None => ClaimOutcome::LostClaim,
            })
            .collect())
    }

    async fn release(&self, claims: &[ClaimRef]) -> Result<Vec<ClaimOutcome>, StoreError> {
        let now = self.clock.now_millis();
        let mut woken = HashSet::new();
        let outcomes = {
            let mut rows = self.rows();
            claims
                .iter()
                .map(|claim| match rows.claimed_with(claim) {
                    Some(message) => {
                        message.status = OutboxStatus::Pending;
                        message.available_at = now;
                        message.attempt_count = message.attempt_count.saturating_sub(1);
                        clear_claim(message, now);
                        woken.insert((message.lane.clone(), message.target.clone()));
                        ClaimOutcome::Applied
                    }
                    None => ClaimOutcome::LostClaim,
                })
                .collect()
        };
        for (lane, target) in woken {
            self.wake(&lane, &target);
        }
        Ok(outcomes)
    }

    async fn next_due(
        &self,
        lane: &str,
        target: &str,
        ordering: OrderingPolicy,
    ) -> Result<Option<Duration>, StoreError> {
        let now = self.clock.now_millis();
        let rows = self.rows();
        let in_flight = keys_in_flight(&rows, lane, target, now);
        // The same walk as claim: a message its key holds back is not due, or an idle relay
        // would spin on empty claims while the key's head is in flight (or dead, under Block).
        let mut held_keys: HashSet<&str> = HashSet::new();
        let mut earliest: Option<UnixMillis> = None;
        for m in rows
            .by_seq
            .values()
            .filter(|m| m.lane == lane && m.target == target)
        {
            let at = match m.status {
                OutboxStatus::Pending => Some(m.available_at),
                OutboxStatus::Claimed => m.lease_expires_at,
                _ => None,
            };
            let key = m.ordering_key.as_deref();
            if let Some(at) = at {
                // A running lease always counts: its lapse frees the row or its key.
                let running = m.status == OutboxStatus::Claimed && at > now;
                let held =
                    key.is_some_and(|key| held_keys.contains(key) || in_flight.contains(key));
                if running || !held {
                    earliest = Some(earliest.map_or(at, |e| e.min(at)));
                }
            }
            let holds_key = is_live(m.status)
                || (ordering == OrderingPolicy::Block && m.status == OutboxStatus::DeadLetter);
            if let (Some(key), true) = (key, holds_key) {
                held_keys.insert(key);
            }
        }
        Ok(earliest.map(|at| millis_until(now, at)))
    }

    async fn stats(&self, filter: &MessageFilter) -> Result<Vec<LaneStats>, StoreError> {
        let now = self.clock.now_millis();
        let filter = MessageFilter {
            status: None,
            ..filter.clone()
        };
        let rows = self.rows();
        let mut lanes: BTreeMap<(String, String), LaneStats> = BTreeMap::new();
        let mut dead_keys: HashSet<(String, String, String)> = HashSet::new();
        let mut blocked: HashSet<(String, String, String)> = HashSet::new();
        for m in rows.by_seq.values().filter(|m| filter.matches(m)) {
            let stats = lanes
                .entry((m.lane.clone(), m.target.clone()))
                .or_insert_with(|| LaneStats {
                    lane: m.lane.clone(),
                    target: m.target.clone(),
                    ..LaneStats::default()
                });
            match m.status {
                OutboxStatus::Pending => {
                    stats.pending += 1;
                    let age = millis_until(m.created_at, now);
                    let due = m.available_at <= now;
                    if due && stats.oldest_pending_age.is_none_or(|oldest| age > oldest) {
                        stats.oldest_pending_age = Some(age);
                    }
                }
                OutboxStatus::Claimed => stats.claimed += 1,
                OutboxStatus::Delivered => stats.delivered += 1,
                OutboxStatus::DeadLetter => stats.dead_letter += 1,
            }
            if let Some(key) = &m.ordering_key {
                let slot = (m.lane.clone(), m.target.clone(), key.clone());
                if m.status == OutboxStatus::DeadLetter {
                    dead_keys.insert(slot);
                } else if is_live(m.status) && dead_keys.contains(&slot) {
                    blocked.insert(slot);
                }
            }
        }
        for (lane, target, _) in blocked {
            if let Some(stats) = lanes.get_mut(&(lane, target)) {
                stats.blocked_keys += 1;
            }
        }
        Ok(lanes.into_values().collect())
    }

    async fn list(&self, filter: &MessageFilter, page: PageRequest) -> Result<Page, StoreError> {
        let rows = self.rows();
        let start = page.after.map_or(i64::MIN, |after| after.saturating_add(1));
        let messages: Vec<OutboxMessage> = rows
            .by_seq
            .range(start..)
            .map(|(_, m)| m)
            .filter(|m| filter.matches(m))
            .take(page.limit.saturating_add(1))
            .cloned()
            .collect();
        Ok(Page::from_overfetch(messages, page.limit))
    }

    async fn get(&self, outbox_id: Uuid) -> Result<Option<OutboxMessage>, StoreError> {
        Ok(self.rows().by_id(outbox_id).map(|m| m.clone()))
    }

    async fn requeue_dead_letters(&self, filter: &MessageFilter) -> Result<u64, StoreError> {
        let now = self.clock.now_millis();
        let filter = filter.clone().with_status(OutboxStatus::DeadLetter);
        // The (lane, target) of each requeued message.
        let requeued: Vec<(String, String)> = {
            let mut rows = self.rows();
            let mut requeued = Vec::new();
            for message in rows.by_seq.values_mut().filter(|m| filter.matches(m)) {
                message.status = OutboxStatus::Pending;
                message.attempt_count = 0;
                message.available_at = now;
                message.updated_at = now;
                requeued.push((message.lane.clone(), message.target.clone()));
            }
            requeued
        };
        let woken: HashSet<&(String, String)> = requeued.iter().collect();
        for (lane, target) in woken {
            self.wake(lane, target);
        }
        crate::metrics::record_requeued(requeued.iter().map(|(l, t)| (l.as_str(), t.as_str())));
        Ok(requeued.len() as u64)
    }

    async fn discard_dead_letters(&self, filter: &MessageFilter) -> Result<u64, StoreError> {
        let filter = filter.clone().with_status(OutboxStatus::DeadLetter);
        let mut rows = self.rows();
        let doomed: Vec<i64> = rows
            .by_seq
            .values()
            .filter(|m| filter.matches(m))
            .map(|m| m.seq)
            .collect();
        for seq in &doomed {
            rows.remove(*seq);
        }
        Ok(doomed.len() as u64)
    }

    async fn purge(&self, older_than: Duration, batch_size: usize) -> Result<u64, StoreError> {
        let cutoff = self
            .clock
            .now_millis()
            .saturating_sub(duration_millis(older_than));
        let batch_size = batch_size.max(1);
        let mut purged = 0u64;
        loop {
            // One lock per batch, as the SQL stores use one statement per batch.
            let mut rows = self.rows();
            let doomed: Vec<i64> = rows
                .by_seq
                .values()
                .filter(|m| {
                    matches!(m.status, OutboxStatus::Delivered | OutboxStatus::DeadLetter)
                        && m.updated_at < cutoff
                })
                .take(batch_size)
                .map(|m| m.seq)
                .collect();
            for seq in &doomed {
                rows.remove(*seq);
            }
            purged += doomed.len() as u64;
            if doomed.len() < batch_size {
                return Ok(purged);
            }
        }
    }

    fn subscribe(&self) -> broadcast::Receiver<WakeUp> {
        self.wakeups.subscribe()
    }
}
