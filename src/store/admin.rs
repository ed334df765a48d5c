//! What the admin side of the store contract reads and writes with: the filter that picks
//! messages (list, stats, requeue, discard), purge's request, a page of a listing, and the
//! counts per (lane, target) that stats and the bulk operations answer with.

use std::time::Duration;

use uuid::Uuid;

use crate::message::{OutboxMessage, OutboxStatus};

/// Selects messages for list, stats, requeue and discard. Empty fields match everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MessageFilter {
    /// Only this lane.
    pub lane: Option<String>,
    /// Only this target.
    pub target: Option<String>,
    /// Only this status (ignored by stats; requeue and discard only ever touch dead letters).
    pub status: Option<OutboxStatus>,
    /// Only this ordering key.
    pub ordering_key: Option<String>,
    /// Only these ids (empty: any id).
    pub ids: Vec<Uuid>,
}

/// What [`Outbox::purge`](super::Outbox::purge) deletes: finished messages older than
/// their status's age.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeRequest {
    /// Delivered messages last changed longer ago than this go; `None` keeps them all.
    pub delivered_older_than: Option<Duration>,
    /// Dead letters last changed longer ago than this go; `None` keeps them all.
    pub dead_letter_older_than: Option<Duration>,
    /// Only this lane and target; `None`: every lane.
    pub lane: Option<(String, String)>,
    /// Rows per delete statement (at least 1).
    pub batch_size: usize,
    /// Count what would be deleted, delete nothing.
    pub dry_run: bool,
    /// Keep every dead letter that has an ordering key, however old. Automatic retention
    /// sets it for a lane under [`OrderingPolicy::Block`](super::OrderingPolicy::Block),
    /// where such a dead letter holds its key until an operator requeues or discards it:
    /// deleting it would let the rest of the key flow on as if the operator had decided.
    pub keep_keyed_dead_letters: bool,
}

impl PurgeRequest {
    /// Delivered and dead-lettered messages older than `older_than`, every lane.
    pub fn older_than(older_than: Duration, batch_size: usize) -> Self {
        Self {
            delivered_older_than: Some(older_than),
            dead_letter_older_than: Some(older_than),
            lane: None,
            batch_size,
            dry_run: false,
            keep_keyed_dead_letters: false,
        }
    }

    /// Delivered messages older than `delivered`, dead letters older than `dead_letter`.
    pub fn per_status(delivered: Duration, dead_letter: Duration, batch_size: usize) -> Self {
        Self {
            delivered_older_than: Some(delivered),
            dead_letter_older_than: Some(dead_letter),
            lane: None,
            batch_size,
            dry_run: false,
            keep_keyed_dead_letters: false,
        }
    }

    /// Counts instead of deleting: [`Outbox::purge`](super::Outbox::purge) returns how
    /// many would go.
    pub fn dry_run(mut self) -> Self {
        self.dry_run = true;
        self
    }

    /// Narrows to one lane and target.
    pub fn in_lane(mut self, lane: impl Into<String>, target: impl Into<String>) -> Self {
        self.lane = Some((lane.into(), target.into()));
        self
    }

    /// Each finished status with its age, in the order the stores purge them.
    pub(crate) fn ages(&self) -> impl Iterator<Item = (OutboxStatus, Duration)> {
        [
            (OutboxStatus::Delivered, self.delivered_older_than),
            (OutboxStatus::DeadLetter, self.dead_letter_older_than),
        ]
        .into_iter()
        .filter_map(|(status, age)| age.map(|age| (status, age)))
    }

    /// Whether a purge of `status` rows must keep the keyed ones
    /// ([`keep_keyed_dead_letters`](Self::keep_keyed_dead_letters)).
    pub(crate) fn keeps_keyed(&self, status: OutboxStatus) -> bool {
        self.keep_keyed_dead_letters && status == OutboxStatus::DeadLetter
    }

    /// Whether `message`'s lane is the one asked for (any, without one).
    pub(crate) fn covers(&self, lane: &str, target: &str) -> bool {
        self.lane
            .as_ref()
            .is_none_or(|(l, t)| l == lane && t == target)
    }
}

impl MessageFilter {
    /// Matches every message.
    pub fn all() -> Self {
        Self::default()
    }

    /// Only messages of this lane and target.
    pub fn lane(lane: impl Into<String>, target: impl Into<String>) -> Self {
        Self {
            lane: Some(lane.into()),
            target: Some(target.into()),
            ..Self::default()
        }
    }

    /// Narrows to one status.
    pub fn with_status(mut self, status: OutboxStatus) -> Self {
        self.status = Some(status);
        self
    }

    /// Narrows to some ids.
    pub fn with_ids(mut self, ids: impl IntoIterator<Item = Uuid>) -> Self {
        self.ids = ids.into_iter().collect();
        self
    }

    /// Whether `message` passes the filter (stores that filter in Rust use this).
    pub fn matches(&self, message: &OutboxMessage) -> bool {
        self.lane.as_ref().is_none_or(|lane| *lane == message.lane)
            && self.target.as_ref().is_none_or(|t| *t == message.target)
            && self.status.is_none_or(|s| s == message.status)
            && self
                .ordering_key
                .as_ref()
                .is_none_or(|k| message.ordering_key.as_ref() == Some(k))
            && (self.ids.is_empty() || self.ids.contains(&message.outbox_id))
    }
}

/// A page request for [`Outbox::list`](super::Outbox::list): messages in enqueue order
/// after a cursor.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageRequest {
    /// Start after this sequence number (the previous page's `next_cursor`).
    pub after: Option<i64>,
    /// At most this many messages.
    pub limit: usize,
}

/// One page of messages.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Page {
    /// The messages, in enqueue order.
    pub messages: Vec<OutboxMessage>,
    /// Pass as `after` to get the next page; `None` when this is the last.
    pub next_cursor: Option<i64>,
}

impl Page {
    /// A page from up to `limit + 1` messages read in enqueue order: the extra one only
    /// tells that another page follows, so a full last page has no cursor.
    pub fn from_overfetch(mut messages: Vec<OutboxMessage>, limit: usize) -> Self {
        let more = messages.len() > limit;
        messages.truncate(limit);
        let next_cursor = if more {
            messages.last().map(|m| m.seq)
        } else {
            None
        };
        Self {
            messages,
            next_cursor,
        }
    }
}

/// Counts for one (lane, target).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct LaneStats {
    /// The lane.
    pub lane: String,
    /// The target.
    pub target: String,
    /// Messages waiting (due or not).
    pub pending: u64,
    /// Messages held under a lease.
    pub claimed: u64,
    /// Messages delivered and not yet purged.
    pub delivered: u64,
    /// Messages in the dead letter.
    pub dead_letter: u64,
    /// How long the oldest pending message that is already due has waited since it was
    /// enqueued: a message delayed by an hour is not "old". `None` when none is due.
    pub oldest_pending_age: Option<Duration>,
    /// Ordering keys whose head (first pending or claimed message) has a dead-lettered
    /// message before it: the keys [`OrderingPolicy::Block`](super::OrderingPolicy::Block) holds
    /// back. The store does not know the lane's policy, so it counts them for `Skip` lanes too,
    /// where they are not held back (a relay of a `Skip` lane reports zero).
    pub blocked_keys: u64,
}

/// How many messages an operation touched in one (lane, target).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneCount {
    /// The lane.
    pub lane: String,
    /// The target.
    pub target: String,
    /// How many messages.
    pub count: u64,
}

impl LaneCount {
    /// Counts per (lane, target) from one (lane, target) per message, sorted by lane.
    pub fn tally(lanes: impl IntoIterator<Item = (String, String)>) -> Vec<LaneCount> {
        let mut counts: std::collections::BTreeMap<(String, String), u64> = Default::default();
        for lane in lanes {
            *counts.entry(lane).or_default() += 1;
        }
        counts
            .into_iter()
            .map(|((lane, target), count)| LaneCount {
                lane,
                target,
                count,
            })
            .collect()
    }
}
