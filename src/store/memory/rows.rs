//! The rows of the memory store and the orders a claim reads them in. Every change to a
//! message goes through [`Rows::update`], [`Rows::insert`] or [`Rows::remove`], which keep
//! the indexes true, so a claim reads only what it returns (plus an index descent), at any
//! backlog and any key distribution.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;

use uuid::Uuid;

use crate::message::ClaimRef;
use crate::message::{OutboxMessage, OutboxStatus, UnixMillis};
use crate::store::OrderingPolicy;

type LaneKey = (String, String);

/// Every message, by seq, with the look-ups and per-lane orders the operations need.
#[derive(Debug, Default)]
pub(super) struct Rows {
    pub(super) next_seq: i64,
    /// The messages in enqueue order; read-only outside this module, so the indexes below
    /// cannot go stale.
    by_seq: BTreeMap<i64, OutboxMessage>,
    seq_by_id: HashMap<Uuid, i64>,
    pub(super) seq_by_dedupe: HashMap<(String, String, String), i64>,
    lanes: HashMap<LaneKey, LaneIndex>,
}

/// The claim's view of one (lane, target).
#[derive(Debug, Default)]
pub(super) struct LaneIndex {
    /// Claimed messages by (lease_expires_at, seq): lapsed claims first, and the next lapse.
    leases: BTreeSet<(UnixMillis, i64)>,
    /// Pending messages that head their ordering key (or have none), by (available_at, seq).
    /// The rest of a key's queue is not here, so a hot key costs a claim one entry.
    ready: BTreeSet<(UnixMillis, i64)>,
    /// Each ordering key's queue.
    keys: HashMap<String, KeyQueue>,
    /// Pending messages in enqueue order: the oldest due one for stats.
    pending: BTreeSet<i64>,
    /// Messages per status (see `status_slot`).
    counts: [u64; 4],
}

/// One ordering key's messages that matter to the per-key rule, by seq.
#[derive(Debug, Default)]
struct KeyQueue {
    /// Pending and claimed: the first is the key's head.
    live: BTreeSet<i64>,
    /// Claimed (a subset of `live`; more than one only after a requeue of an earlier dead
    /// letter while a later message was in flight).
    claimed: BTreeSet<i64>,
    /// Dead letters: under `Block` one before the head holds the key.
    dead: BTreeSet<i64>,
}

impl KeyQueue {
    fn head(&self) -> Option<i64> {
        self.live.first().copied()
    }

    fn is_empty(&self) -> bool {
        self.live.is_empty() && self.dead.is_empty()
    }
}

fn status_slot(status: OutboxStatus) -> usize {
    match status {
        OutboxStatus::Pending => 0,
        OutboxStatus::Claimed => 1,
        OutboxStatus::Delivered => 2,
        OutboxStatus::DeadLetter => 3,
    }
}

fn is_live(status: OutboxStatus) -> bool {
    matches!(status, OutboxStatus::Pending | OutboxStatus::Claimed)
}

impl Rows {
    pub(super) fn get(&self, seq: i64) -> Option<&OutboxMessage> {
        self.by_seq.get(&seq)
    }

    pub(super) fn by_id(&self, id: Uuid) -> Option<&OutboxMessage> {
        self.seq_by_id.get(&id).and_then(|seq| self.by_seq.get(seq))
    }

    /// Every message, in enqueue order.
    pub(super) fn all(&self) -> impl Iterator<Item = &OutboxMessage> {
        self.by_seq.values()
    }

    /// Messages from seq `start` on, in enqueue order.
    pub(super) fn since_seq(&self, start: i64) -> impl Iterator<Item = &OutboxMessage> {
        self.by_seq.range(start..).map(|(_, m)| m)
    }

    /// The seq of the message `claim` names, if it is still claimed with that token.
    pub(super) fn claimed_with(&self, claim: &ClaimRef) -> Option<i64> {
        self.by_id(claim.outbox_id)
            .filter(|m| {
                m.status == OutboxStatus::Claimed && m.claim_token == Some(claim.claim_token)
            })
            .map(|m| m.seq)
    }

    pub(super) fn insert(&mut self, message: OutboxMessage) {
        let seq = message.seq;
        self.seq_by_id.insert(message.outbox_id, seq);
        if let Some(key) = &message.dedupe_key {
            self.seq_by_dedupe.insert(
                (message.lane.clone(), message.target.clone(), key.clone()),
                seq,
            );
        }
        self.by_seq.insert(seq, message);
        self.index(seq);
    }

    /// Changes one message, keeping every index true. `None` if there is no such message.
    pub(super) fn update<R>(
        &mut self,
        seq: i64,
        change: impl FnOnce(&mut OutboxMessage) -> R,
    ) -> Option<R> {
        self.unindex(seq);
        let answer = self.by_seq.get_mut(&seq).map(change);
        self.index(seq);
        answer
    }

    pub(super) fn remove(&mut self, seq: i64) {
        self.unindex(seq);
        if let Some(message) = self.by_seq.remove(&seq) {
            self.seq_by_id.remove(&message.outbox_id);
            if let Some(key) = &message.dedupe_key {
                self.seq_by_dedupe
                    .remove(&(message.lane, message.target, key.clone()));
            }
        }
    }

    fn index(&mut self, seq: i64) {
        self.reindex(seq, true);
    }

    fn unindex(&mut self, seq: i64) {
        self.reindex(seq, false);
    }

    /// Adds (or removes) the index entries of message `seq`. When that changes its key's
    /// head, the old and the new head move in or out of `ready` too.
    fn reindex(&mut self, seq: i64, add: bool) {
        let Rows { by_seq, lanes, .. } = self;
        let Some(m) = by_seq.get(&seq) else {
            return;
        };
        let lane = lanes.entry((m.lane.clone(), m.target.clone())).or_default();
        let edit = |set: &mut BTreeSet<(UnixMillis, i64)>, entry| {
            if add {
                set.insert(entry);
            } else {
                set.remove(&entry);
            }
        };
        if let (OutboxStatus::Claimed, Some(at)) = (m.status, m.lease_expires_at) {
            edit(&mut lane.leases, (at, seq));
        }
        let count = &mut lane.counts[status_slot(m.status)];
        *count = if add {
            *count + 1
        } else {
            count.saturating_sub(1)
        };
        if m.status == OutboxStatus::Pending {
            if add {
                lane.pending.insert(seq);
            } else {
                lane.pending.remove(&seq);
            }
        }
        let Some(key) = &m.ordering_key else {
            if m.status == OutboxStatus::Pending {
                edit(&mut lane.ready, (m.available_at, seq));
            }
            return;
        };
        let queue = lane.keys.entry(key.clone()).or_default();
        let old_head = queue.head();
        let edit = |set: &mut BTreeSet<i64>| {
            if add {
                set.insert(seq);
            } else {
                set.remove(&seq);
            }
        };
        if is_live(m.status) {
            edit(&mut queue.live);
        }
        match m.status {
            OutboxStatus::Claimed => edit(&mut queue.claimed),
            OutboxStatus::DeadLetter => edit(&mut queue.dead),
            _ => {}
        }
        let new_head = queue.head();
        if queue.is_empty() {
            lane.keys.remove(key);
        }
        // The message's own entry goes whatever it was; then the old and the new head are in
        // `ready` exactly when the new head is pending.
        if !add {
            lane.ready.remove(&(m.available_at, seq));
        }
        for head in [old_head, new_head].into_iter().flatten() {
            let Some(h) = by_seq.get(&head) else {
                continue;
            };
            let entry = (h.available_at, head);
            if Some(head) == new_head && h.status == OutboxStatus::Pending && (add || head != seq) {
                lane.ready.insert(entry);
            } else {
                lane.ready.remove(&entry);
            }
        }
    }

    /// Every (lane, target) that ever had a message, with its index.
    pub(super) fn lanes(&self) -> impl Iterator<Item = (&LaneKey, &LaneIndex)> {
        self.lanes.iter()
    }

    /// The index of one (lane, target), if it ever had a message.
    pub(super) fn lane(&self, lane: &str, target: &str) -> Option<&LaneIndex> {
        self.lanes.get(&(lane.to_owned(), target.to_owned()))
    }

    /// Whether message `m` (a pending or lapsed head candidate) may be handed out now under
    /// the per-key rule: it heads its key, no other message of the key runs under a lease,
    /// and under `Block` no earlier dead letter holds the key.
    pub(super) fn key_allows(
        &self,
        lane: &LaneIndex,
        m: &OutboxMessage,
        ordering: OrderingPolicy,
        now: UnixMillis,
    ) -> bool {
        let Some(queue) = m.ordering_key.as_ref().and_then(|k| lane.keys.get(k)) else {
            return true;
        };
        queue.head() == Some(m.seq)
            && !(ordering == OrderingPolicy::Block
                && queue.dead.first().is_some_and(|dead| *dead < m.seq))
            && !queue.claimed.iter().any(|other| {
                *other != m.seq
                    && self
                        .get(*other)
                        .and_then(|o| o.lease_expires_at)
                        .is_some_and(|at| at > now)
            })
    }
}

impl LaneIndex {
    /// The key run behind head `head` (of key `key`): up to `max` of the key's next live
    /// messages by seq, each pending and due by `now`, stopping at the first that is not,
    /// and under `Block` at a dead letter in between. Reads only the messages it returns
    /// (plus the one it stops at).
    pub(super) fn run_after(
        &self,
        rows: &Rows,
        key: &str,
        head: i64,
        max: usize,
        ordering: OrderingPolicy,
        now: UnixMillis,
    ) -> Vec<i64> {
        let Some(queue) = self.keys.get(key) else {
            return Vec::new();
        };
        let next_dead = match ordering {
            OrderingPolicy::Block => queue.dead.range(head + 1..).next().copied(),
            OrderingPolicy::Skip => None,
        };
        queue
            .live
            .range(head + 1..)
            .copied()
            .take(max)
            .take_while(|seq| next_dead.is_none_or(|dead| *seq < dead))
            .take_while(|seq| {
                rows.get(*seq)
                    .is_some_and(|m| m.status == OutboxStatus::Pending && m.available_at <= now)
            })
            .collect()
    }

    /// Claimed messages whose lease lapsed by `now`, earliest lapse first.
    pub(super) fn lapsed(&self, now: UnixMillis) -> impl Iterator<Item = i64> + '_ {
        self.leases.range(..=(now, i64::MAX)).map(|(_, seq)| *seq)
    }

    /// The earliest lease that has not lapsed by `now`.
    pub(super) fn next_lapse(&self, now: UnixMillis) -> Option<UnixMillis> {
        self.leases
            .range((Bound::Excluded((now, i64::MAX)), Bound::Unbounded))
            .next()
            .map(|(at, _)| *at)
    }

    /// How many messages of this lane have `status`.
    pub(super) fn count(&self, status: OutboxStatus) -> u64 {
        self.counts[status_slot(status)]
    }

    /// The first pending message in enqueue order that is due by `now`.
    pub(super) fn first_due<'r>(
        &self,
        rows: &'r Rows,
        now: UnixMillis,
    ) -> Option<&'r OutboxMessage> {
        self.pending
            .iter()
            .filter_map(|seq| rows.get(*seq))
            .find(|m| m.available_at <= now)
    }

    /// Ordering keys whose first dead letter comes before their head: the keys `Block`
    /// holds back.
    pub(super) fn blocked_keys(&self) -> u64 {
        self.keys
            .values()
            .filter(|q| matches!((q.dead.first(), q.head()), (Some(d), Some(h)) if d < &h))
            .count() as u64
    }

    /// Pending key heads (and messages without a key), earliest due first.
    pub(super) fn ready(&self) -> impl Iterator<Item = (UnixMillis, i64)> + '_ {
        self.ready.iter().copied()
    }
}
