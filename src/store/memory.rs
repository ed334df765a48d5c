//! `InMemoryOutboxStore`: the whole contract over a mutex-guarded map, for tests and
//! examples. It is also the plainest statement of the contract's semantics; the SQL
//! backends must agree with it to the letter (the conformance suite checks that they do).
//!
//! The map keeps, per (lane, target), the orders a claim reads (see `rows`): claimed
//! messages by lease expiry, pending key heads by due time, each key's queue. So a claim
//! reads only what it hands out, as the SQL stores do with their indexes, and a backlog of
//! a million messages costs a claim a few tree descents, not a walk.

use std::collections::{BTreeMap, HashSet};

use rows::Rows;

mod lane_control;
mod rows;
mod served;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::broadcast;
use uuid::Uuid;

use crate::message::ClaimRef;
use crate::message::{DraftLimits, OutboxMessage, OutboxMessageDraft, OutboxStatus, UnixMillis};
use crate::store::admin::StatsTally;
use crate::store::{
    AckMode, ClaimBatch, ClaimOutcome, ClaimRequest, DraftBatch, Enqueued, LaneCount, LaneStats,
    MessageFilter, Nack, NackDisposition, NackOutcome, NextDue, OrderingPolicy, OutboxBackend,
    Page, PageRequest, PreClaim, PurgeRequest, StoreError, StoreOp, WakeUp, LEASE_LAPSED_ERROR,
    WAKEUP_CHANNEL_CAPACITY,
};
use crate::time::{Clock, SystemClock};

/// An outbox held in memory: nothing survives the process.
#[derive(Debug)]
pub struct InMemoryOutboxStore {
    rows: Mutex<Rows>,
    /// The fleet-wide lane pauses, by (lane, target): `lane_control.rs`.
    pauses: Mutex<BTreeMap<(String, String), crate::store::LanePause>>,
    /// Until when a relay serves each (lane, target): `served.rs`.
    served: Mutex<BTreeMap<(String, String), UnixMillis>>,
    clock: Arc<dyn Clock>,
    limits: DraftLimits,
    wakeups: broadcast::Sender<WakeUp>,
    /// Whether it says [`Capabilities::pre_claim`](crate::store::Capabilities::pre_claim)
    /// ([`InMemoryOutboxStore::with_pre_claim`]).
    pre_claim: bool,
    /// Writes of drafts still to fail before they commit (the simulation's failing
    /// enqueues: `fail_next_writes`).
    failing_writes: AtomicU32,
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
            pauses: Mutex::default(),
            served: Mutex::default(),
            clock,
            limits: DraftLimits::default(),
            wakeups,
            pre_claim: false,
            failing_writes: AtomicU32::new(0),
        }
    }

    /// The next `n` writes of drafts fail before they commit, as an enqueue whose database
    /// went away: the simulation's fault, to check what an enqueue that fails leaves (no
    /// row, and any hand-off credit it took back with its lane).
    #[cfg(any(test, feature = "simulate"))]
    pub(crate) fn fail_next_writes(&self, n: u32) {
        self.failing_writes.fetch_add(n, Ordering::Relaxed);
    }

    /// Says [`Capabilities::pre_claim`](crate::store::Capabilities::pre_claim), so an
    /// [`Outbox`](crate::store::Outbox) over it hands what it enqueues to idle lanes of its
    /// relays (`store::hand_off`), as over PostgreSQL. Off by default: a test of a relay on
    /// the memory store then sees every message claimed, as on SQLite.
    ///
    /// A draft that comes with a pre-claim is written claimed either way (at its first
    /// attempt, by the pre-claim's consumer, token and lease) and wakes nobody.
    pub fn with_pre_claim(mut self) -> Self {
        self.pre_claim = true;
        self
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

    /// Inserts `draft` pending, or claimed with `pre_claim` (a hand-off: its first attempt,
    /// as a claim would write it).
    fn insert(
        rows: &mut Rows,
        draft: OutboxMessageDraft,
        pre_claim: Option<&PreClaim>,
        now: UnixMillis,
    ) -> Enqueued {
        rows.next_seq += 1;
        let mut message = OutboxMessage::pending(draft, Uuid::now_v7(), rows.next_seq, now);
        if let Some(pre) = pre_claim {
            message.status = OutboxStatus::Claimed;
            message.attempt_count = 1;
            message.claimed_by = Some(pre.consumer_id.clone());
            message.claim_token = Some(pre.claim_token);
            message.lease_expires_at = Some(now.saturating_add(pre.lease));
        }
        rows.insert(message.clone());
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
            .and_then(|seq| rows.get(*seq))
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

/// Stats of whole lanes from their indexes: a few look-ups per lane, whatever its backlog.
fn lane_stats(rows: &Rows, filter: &MessageFilter, now: UnixMillis) -> Vec<LaneStats> {
    let mut lanes: Vec<LaneStats> = rows
        .lanes()
        .filter(|((lane, target), _)| {
            filter.lane.as_ref().is_none_or(|l| l == lane)
                && filter.target.as_ref().is_none_or(|t| t == target)
        })
        .map(|((lane, target), index)| LaneStats {
            lane: lane.clone(),
            target: target.clone(),
            pending: index.count(OutboxStatus::Pending),
            claimed: index.count(OutboxStatus::Claimed),
            delivered: index.count(OutboxStatus::Delivered),
            dead_letter: index.count(OutboxStatus::DeadLetter),
            // Enqueue order stands for enqueue time (the clock only moves forward).
            oldest_pending_age: index
                .first_due(rows, now)
                .map(|m| now.saturating_duration_since(m.created_at)),
            blocked_keys: index.blocked_keys(),
        })
        .filter(|s| s.pending + s.claimed + s.delivered + s.dead_letter > 0)
        .collect();
    lanes.sort_by(|a, b| (&a.lane, &a.target).cmp(&(&b.lane, &b.target)));
    lanes
}

/// The lapsed claims of the request's lane that `pick` selects and the per-key rule lets
/// go, earliest lapse first.
fn lapsed_heads(
    rows: &Rows,
    request: &ClaimRequest,
    now: UnixMillis,
    pick: impl Fn(&OutboxMessage) -> bool,
) -> Vec<i64> {
    let Some(lane) = rows.lane(&request.lane, &request.target) else {
        return Vec::new();
    };
    lane.lapsed(now)
        .filter(|seq| {
            rows.get(*seq)
                .is_some_and(|m| pick(m) && rows.key_allows(lane, m, request.ordering, now))
        })
        .collect()
}

fn clear_claim(message: &mut OutboxMessage, now: UnixMillis) {
    message.claimed_by = None;
    message.claim_token = None;
    message.lease_expires_at = None;
    message.updated_at = now;
}

/// One request's claim, on rows the caller holds locked.
fn claim_in(rows: &mut Rows, request: &ClaimRequest, now: UnixMillis) -> ClaimBatch {
    let mut batch = ClaimBatch::default();
    let ordering = request.ordering;
    // Lapsed claims that used their last attempt end in the dead letter, whatever the
    // limit: a message that crashes its claimer every time must not be handed out again.
    // Under Skip that frees its key for the next message, which may go out below.
    let doomed = lapsed_heads(rows, request, now, |m| m.attempt_count >= m.max_attempts);
    for seq in doomed {
        let dead = rows.update(seq, |message| {
            message.status = OutboxStatus::DeadLetter;
            message.last_error = Some(LEASE_LAPSED_ERROR.to_owned());
            clear_claim(message, now);
            message.outbox_id
        });
        batch.dead_lettered.extend(dead);
    }
    // Lapsed claims first, because they became claimable earliest and their keys are
    // blocked; then due pending heads. Each is read in index order and stops at the
    // limit. The two sets never share a key (a key has one head), so choosing both
    // before claiming either gives what claiming in between would.
    let mut chosen = lapsed_heads(rows, request, now, |m| m.attempt_count < m.max_attempts);
    chosen.truncate(request.limit);
    #[cfg(test)]
    let lapsed_behind =
        crate::sim::mutation::active(crate::sim::mutation::Mutation::LapsedClaimsBehindPending)
            .then(|| std::mem::take(&mut chosen));
    // Each due head brings its key run (up to `key_run - 1` more of its key), right
    // behind it; the limit counts them all.
    if let Some(lane) = rows.lane(&request.lane, &request.target) {
        let heads = lane
            .ready()
            .take_while(|(due, _)| *due <= now)
            .filter_map(|(_, seq)| rows.get(seq))
            .filter(|m| rows.key_allows(lane, m, ordering, now));
        for head in heads {
            if chosen.len() >= request.limit {
                break;
            }
            chosen.push(head.seq);
            if let Some(key) = &head.ordering_key {
                let room = (request.limit - chosen.len()).min(request.run_len() - 1);
                chosen.extend(lane.run_after(rows, key, head.seq, room, ordering, now));
            }
        }
    }
    #[cfg(test)]
    if let Some(lapsed) = lapsed_behind {
        let room = request.limit.saturating_sub(chosen.len());
        chosen.extend(lapsed.into_iter().take(room));
    }
    let lease_until = now.saturating_add(request.lease);
    for seq in chosen {
        let claimed = rows.update(seq, |message| {
            message.status = OutboxStatus::Claimed;
            message.attempt_count = message.attempt_count.saturating_add(1);
            message.claimed_by = Some(request.consumer_id.clone());
            message.claim_token = Some(Uuid::new_v4());
            message.lease_expires_at = Some(lease_until);
            message.updated_at = now;
            message.clone()
        });
        batch.messages.extend(claimed);
    }
    if batch.messages.len() < request.limit {
        batch.next_due = NextDue::Known(next_due_in(
            rows,
            &request.lane,
            &request.target,
            ordering,
            now,
        ));
    }
    batch
}

/// Marks the rows of claims still held delivered.
fn ack_keeping(rows: &mut Rows, claims: &[ClaimRef], now: UnixMillis) -> Vec<ClaimOutcome> {
    claims
        .iter()
        .map(|claim| {
            let current = rows.claimed_with(claim);
            #[cfg(test)]
            let current = current.or_else(|| {
                use crate::sim::mutation::{active, once, Mutation};
                let any = rows
                    .by_id(claim.outbox_id)
                    .filter(|m| m.status == OutboxStatus::Claimed);
                any.filter(|_| {
                    active(Mutation::AckSkipsToken) || once(Mutation::StaleAckAcceptedOnce)
                })
                .map(|m| m.seq)
            });
            let acked = current.and_then(|seq| {
                rows.update(seq, |message| {
                    message.status = OutboxStatus::Delivered;
                    message.delivered_at = Some(now);
                    clear_claim(message, now);
                })
            });
            match acked {
                Some(()) => ClaimOutcome::Applied,
                None => ClaimOutcome::LostClaim,
            }
        })
        .collect()
}

/// Deletes the rows of claims still held.
fn ack_deleting(rows: &mut Rows, claims: &[ClaimRef]) -> Vec<ClaimOutcome> {
    claims
        .iter()
        .map(|claim| match rows.claimed_with(claim) {
            Some(seq) => {
                rows.remove(seq);
                ClaimOutcome::Applied
            }
            None => ClaimOutcome::LostClaim,
        })
        .collect()
}

#[async_trait]
impl OutboxBackend for InMemoryOutboxStore {
    fn capabilities(&self) -> crate::store::Capabilities {
        let capabilities = crate::store::Capabilities::none()
            .with_delete_on_ack()
            .with_served_lanes();
        if self.pre_claim {
            capabilities.with_pre_claim()
        } else {
            capabilities
        }
    }

    fn draft_limits(&self) -> DraftLimits {
        self.limits
    }

    async fn write_drafts(&self, drafts: DraftBatch) -> Result<Vec<Enqueued>, StoreError> {
        let failing = self
            .failing_writes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        if failing.is_ok() {
            return Err(StoreError::unavailable(
                StoreOp::Enqueue,
                "the write failed before it committed (an injected fault)",
            ));
        }
        let now = self.clock.now_millis();
        let mut woken = HashSet::new();
        let answers = {
            let mut rows = self.rows();
            // Check every dedupe key before writing anything, so a conflict leaves no row.
            // (No two drafts of a batch share a key: a repeat never reaches the store.)
            let found = drafts
                .drafts()
                .iter()
                .map(|draft| Self::find_duplicate(&rows, draft))
                .collect::<Result<Vec<_>, _>>()?;
            let pre_claims: Vec<Option<PreClaim>> = (0..drafts.len())
                .map(|i| drafts.pre_claim(i).cloned())
                .collect();
            drafts
                .into_drafts()
                .into_iter()
                .zip(found)
                .zip(pre_claims)
                .map(|((draft, duplicate), pre_claim)| {
                    duplicate.unwrap_or_else(|| {
                        // A handed-off row is its lane's already: nobody to wake for it.
                        if pre_claim.is_none() {
                            woken.insert((draft.lane.clone(), draft.target.clone()));
                        }
                        Self::insert(&mut rows, draft, pre_claim.as_ref(), now)
                    })
                })
                .collect::<Vec<_>>()
        };
        for (lane, target) in woken {
            self.wake(&lane, &target);
        }
        Ok(answers)
    }

    /// Claims request after request, under one lock: as one transaction would.
    async fn claim(&self, requests: &[ClaimRequest]) -> Result<Vec<ClaimBatch>, StoreError> {
        let now = self.clock.now_millis();
        let mut rows = self.rows();
        Ok(requests
            .iter()
            .map(|request| claim_in(&mut rows, request, now))
            .collect())
    }

    async fn ack(
        &self,
        claims: &[ClaimRef],
        mode: AckMode,
    ) -> Result<Vec<ClaimOutcome>, StoreError> {
        let now = self.clock.now_millis();
        let mut rows = self.rows();
        Ok(match mode {
            AckMode::KeepDelivered => ack_keeping(&mut rows, claims, now),
            AckMode::Delete => ack_deleting(&mut rows, claims),
        })
    }

    async fn nack(&self, nacks: &[Nack]) -> Result<Vec<NackOutcome>, StoreError> {
        let now = self.clock.now_millis();
        let mut rows = self.rows();
        Ok(nacks
            .iter()
            .map(|nack| {
                let Some(seq) = rows.claimed_with(&nack.claim) else {
                    return NackOutcome::LostClaim;
                };
                rows.update(seq, |message| {
                    message.last_error = Some(nack.error.clone());
                    clear_claim(message, now);
                    match nack.disposition {
                        NackDisposition::Retry(delay)
                            if message.attempt_count < message.max_attempts =>
                        {
                            message.status = OutboxStatus::Pending;
                            message.available_at = now.saturating_add(delay);
                            NackOutcome::Requeued
                        }
                        _ => {
                            message.status = OutboxStatus::DeadLetter;
                            NackOutcome::DeadLettered
                        }
                    }
                })
                .unwrap_or(NackOutcome::LostClaim)
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
            .map(|claim| {
                let extended = rows.claimed_with(claim).and_then(|seq| {
                    rows.update(seq, |message| {
                        message.lease_expires_at = Some(now.saturating_add(lease));
                        message.updated_at = now;
                    })
                });
                match extended {
                    Some(()) => ClaimOutcome::Applied,
                    None => ClaimOutcome::LostClaim,
                }
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
                .map(|claim| {
                    let released = rows.claimed_with(claim).and_then(|seq| {
                        rows.update(seq, |message| {
                            message.status = OutboxStatus::Pending;
                            message.available_at = now;
                            message.attempt_count = message.attempt_count.saturating_sub(1);
                            clear_claim(message, now);
                            (message.lane.clone(), message.target.clone())
                        })
                    });
                    match released {
                        Some(lane) => {
                            woken.insert(lane);
                            ClaimOutcome::Applied
                        }
                        None => ClaimOutcome::LostClaim,
                    }
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
        Ok(next_due_in(&self.rows(), lane, target, ordering, now))
    }

    async fn stats(&self, filter: &MessageFilter) -> Result<Vec<LaneStats>, StoreError> {
        let now = self.clock.now_millis();
        let filter = MessageFilter {
            status: None,
            ..filter.clone()
        };
        let rows = self.rows();
        if filter.ordering_key.is_none() && filter.ids.is_empty() && !filter.scans() {
            return Ok(lane_stats(&rows, &filter, now));
        }
        let mut tally = StatsTally::default();
        for m in rows.all().filter(|m| filter.matches(m)) {
            tally.add(
                &m.lane,
                &m.target,
                m.ordering_key.as_deref(),
                m.status,
                m.available_at,
                m.created_at,
                now,
            );
        }
        Ok(tally.finish())
    }

    async fn list(&self, filter: &MessageFilter, page: PageRequest) -> Result<Page, StoreError> {
        let rows = self.rows();
        let start = page.after.map_or(i64::MIN, |after| after.saturating_add(1));
        let messages: Vec<OutboxMessage> = rows
            .since_seq(start)
            .filter(|m| filter.matches(m))
            .take(page.limit.saturating_add(1))
            .cloned()
            .collect();
        Ok(Page::from_overfetch(messages, page.limit))
    }

    async fn get(&self, outbox_id: Uuid) -> Result<Option<OutboxMessage>, StoreError> {
        Ok(self.rows().by_id(outbox_id).cloned())
    }

    async fn requeue_dead_letters_per_lane(
        &self,
        filter: &MessageFilter,
    ) -> Result<Vec<LaneCount>, StoreError> {
        let now = self.clock.now_millis();
        let filter = filter.clone().with_status(OutboxStatus::DeadLetter);
        // The (lane, target) of each requeued message.
        let requeued: Vec<(String, String)> = {
            let mut rows = self.rows();
            let doomed: Vec<i64> = rows
                .all()
                .filter(|m| filter.matches(m))
                .map(|m| m.seq)
                .collect();
            doomed
                .into_iter()
                .filter_map(|seq| {
                    rows.update(seq, |message| {
                        message.status = OutboxStatus::Pending;
                        message.attempt_count = 0;
                        message.available_at = now;
                        message.updated_at = now;
                        (message.lane.clone(), message.target.clone())
                    })
                })
                .collect()
        };
        let woken: HashSet<&(String, String)> = requeued.iter().collect();
        for (lane, target) in woken {
            self.wake(lane, target);
        }
        Ok(LaneCount::tally(requeued))
    }

    async fn discard_dead_letters(&self, filter: &MessageFilter) -> Result<u64, StoreError> {
        let filter = filter.clone().with_status(OutboxStatus::DeadLetter);
        let mut rows = self.rows();
        let doomed: Vec<i64> = rows
            .all()
            .filter(|m| filter.matches(m))
            .map(|m| m.seq)
            .collect();
        for seq in &doomed {
            rows.remove(*seq);
        }
        Ok(doomed.len() as u64)
    }

    async fn purge(&self, request: &PurgeRequest) -> Result<Vec<LaneCount>, StoreError> {
        let batch_size = request.batch_size.max(1);
        let mut purged = Vec::new();
        for (status, older_than) in request.ages() {
            let cutoff = self.clock.now_millis().saturating_sub(older_than);
            let keep_keyed = request.keeps_keyed(status);
            let doomed = |m: &&OutboxMessage| {
                m.status == status
                    && m.updated_at < cutoff
                    && request.covers(&m.lane, &m.target)
                    && !(keep_keyed && m.ordering_key.is_some())
            };
            if request.dry_run {
                purged.extend(LaneCount::tally(
                    self.rows()
                        .all()
                        .filter(doomed)
                        .map(|m| (m.lane.clone(), m.target.clone())),
                ));
                continue;
            }
            loop {
                // One lock per batch, as the SQL stores use one statement per batch.
                let mut rows = self.rows();
                let batch: Vec<(i64, (String, String))> = rows
                    .all()
                    .filter(doomed)
                    .take(batch_size)
                    .map(|m| (m.seq, (m.lane.clone(), m.target.clone())))
                    .collect();
                for (seq, _) in &batch {
                    rows.remove(*seq);
                }
                let done = batch.len() < batch_size;
                purged.extend(LaneCount::tally(batch.into_iter().map(|(_, lane)| lane)));
                if done {
                    break;
                }
            }
        }
        Ok(LaneCount::sum(purged))
    }

    async fn pause_lane(
        &self,
        request: &crate::store::LanePauseRequest,
    ) -> Result<crate::store::LanePause, StoreError> {
        self.record_pause(request)
    }

    async fn resume_lane(
        &self,
        lane: &str,
        target: &str,
    ) -> Result<Option<crate::store::LanePause>, StoreError> {
        self.lift_pause(lane, target)
    }

    async fn record_served(
        &self,
        lanes: &[(String, String)],
        served_for: Duration,
    ) -> Result<(), StoreError> {
        self.record_served_lanes(lanes, served_for);
        Ok(())
    }

    async fn unserved_lanes(
        &self,
        limit: usize,
    ) -> Result<Vec<crate::store::UnservedLane>, StoreError> {
        Ok(self.unserved(limit))
    }

    async fn lane_pauses(&self) -> Result<Vec<crate::store::LanePause>, StoreError> {
        Ok(self.all_pauses())
    }

    fn subscribe(&self) -> broadcast::Receiver<WakeUp> {
        self.wakeups.subscribe()
    }
}

/// `next_due` over `rows` at `now`: the claim answers it too, under the same lock.
fn next_due_in(
    rows: &Rows,
    lane: &str,
    target: &str,
    ordering: OrderingPolicy,
    now: UnixMillis,
) -> Option<Duration> {
    let index = rows.lane(lane, target)?;
    let allows = |seq: &i64| {
        rows.get(*seq)
            .is_some_and(|m| rows.key_allows(index, m, ordering, now))
    };
    // A running lease always counts: its lapse frees the message or its key. A message
    // its key holds back does not (its key's head is counted instead), or an idle relay
    // would spin on empty claims while the head is in flight (or dead, under Block).
    let candidates = [
        index.next_lapse(now),
        index.lapsed(now).find(allows).map(|_| now),
        index
            .ready()
            .find(|(_, seq)| allows(seq))
            .map(|(due, _)| due),
    ];
    candidates
        .into_iter()
        .flatten()
        .min()
        .map(|at| at.saturating_duration_since(now))
}
