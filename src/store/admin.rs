//! What the admin side of the store contract reads and writes with: the filter that picks
//! messages (list, stats, requeue, discard), purge's request, a page of a listing, and the
//! counts per (lane, target) that stats and the bulk operations answer with.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, SystemTime};

use uuid::Uuid;

use crate::message::{OutboxMessage, OutboxStatus};
use crate::time::UnixMillis;

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
    /// Only messages enqueued at or after this instant (compared to the millisecond, as
    /// the stores keep `created_at`).
    pub enqueued_after: Option<SystemTime>,
    /// Only messages enqueued strictly before this instant (to the millisecond).
    pub enqueued_before: Option<SystemTime>,
    /// Only messages whose `last_error` contains this text (case-sensitive, a plain
    /// substring: no pattern characters).
    pub error_contains: Option<String>,
}

/// What [`Outbox::purge`](super::Outbox::purge) deletes: finished messages older than
/// their status's age.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeRequest {
    /// Delivered messages last changed longer ago than this go; `None` keeps them all.
    pub delivered_older_than: Option<Duration>,
    /// Dead letters last changed longer ago than this go; `None` keeps them all.
    pub dead_letter_older_than: Option<Duration>,
    /// Only these (lane, target) pairs; empty: every lane. Every store deletes for all of
    /// them in one statement per status and batch, so a caller with many lanes of the same
    /// ages asks once for them all (automatic retention asks for at most
    /// [`PURGE_LANES_PER_REQUEST`](crate::retention::PURGE_LANES_PER_REQUEST) at a time).
    pub lanes: Vec<(String, String)>,
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
            lanes: Vec::new(),
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
            lanes: Vec::new(),
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

    /// Narrows to these (lane, target) pairs.
    pub fn in_lanes<L: Into<String>, T: Into<String>>(
        mut self,
        lanes: impl IntoIterator<Item = (L, T)>,
    ) -> Self {
        self.lanes = lanes
            .into_iter()
            .map(|(lane, target)| (lane.into(), target.into()))
            .collect();
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

    /// Whether `message`'s lane is one of those asked for (any, without any).
    pub(crate) fn covers(&self, lane: &str, target: &str) -> bool {
        self.lanes.is_empty() || self.lanes.iter().any(|(l, t)| l == lane && t == target)
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

    /// Narrows to messages enqueued in `[after, before)`; either end may be open.
    pub fn enqueued_between(
        mut self,
        after: Option<SystemTime>,
        before: Option<SystemTime>,
    ) -> Self {
        self.enqueued_after = after;
        self.enqueued_before = before;
        self
    }

    /// Narrows to messages whose last error contains `text`.
    pub fn with_error_containing(mut self, text: impl Into<String>) -> Self {
        self.error_contains = Some(text.into());
        self
    }

    /// Whether the filter has a term no index orders by (the enqueue time range or the
    /// error text): a listing then reads a bounded number of rows per page and may answer
    /// a short page with a cursor ([`LIST_SCAN_PAGES`]). SQLite also checks a lane's
    /// `claimed` and `delivered` status on the rows it reads, so those pages may be short
    /// too.
    pub fn scans(&self) -> bool {
        self.enqueued_after.is_some()
            || self.enqueued_before.is_some()
            || self.error_contains.is_some()
    }

    /// The enqueue time range in the stores' milliseconds: `[after, before)`.
    pub(crate) fn enqueued_millis(&self) -> (Option<UnixMillis>, Option<UnixMillis>) {
        (
            self.enqueued_after.map(UnixMillis::from),
            self.enqueued_before.map(UnixMillis::from),
        )
    }

    /// Whether `message` passes the filter (stores that filter in Rust use this).
    pub fn matches(&self, message: &OutboxMessage) -> bool {
        let (after, before) = self.enqueued_millis();
        self.lane.as_ref().is_none_or(|lane| *lane == message.lane)
            && self.target.as_ref().is_none_or(|t| *t == message.target)
            && self.status.is_none_or(|s| s == message.status)
            && self
                .ordering_key
                .as_ref()
                .is_none_or(|k| message.ordering_key.as_ref() == Some(k))
            && (self.ids.is_empty() || self.ids.contains(&message.outbox_id))
            && after.is_none_or(|after| message.created_at >= after)
            && before.is_none_or(|before| message.created_at < before)
            && self.error_contains.as_ref().is_none_or(|text| {
                message
                    .last_error
                    .as_ref()
                    .is_some_and(|error| error.contains(text.as_str()))
            })
    }
}

/// How many pages' worth of rows (`limit + 1` each) one listing call reads at most when
/// its filter [scans](MessageFilter::scans): a time range or an error text (on SQLite, a
/// `claimed` or `delivered` status too) is checked on the rows the lane's index yields in
/// enqueue order, and the SQL stores stop after this
/// many, answering the matches found so far and a cursor to go on from. Such a page can
/// be short, even empty, and still have a `next_cursor`: the listing is done only when
/// `next_cursor` is `None`. The cost of one call stays a small multiple of the page.
pub const LIST_SCAN_PAGES: usize = 10;

/// A page request for [`Outbox::list`](super::Outbox::list): messages in enqueue order
/// after a cursor.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageRequest {
    /// Start after this sequence number (the previous page's `next_cursor`).
    pub after: Option<i64>,
    /// At most this many messages.
    pub limit: usize,
}

/// One page of messages. A page holds at most the limit asked for; with a filter that
/// [scans](MessageFilter::scans), it may hold fewer and still have a `next_cursor`.
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

/// The most rows a listing of `limit` messages under `filter` reads: one past the page
/// (the sign that another follows), or [`LIST_SCAN_PAGES`] times that when the filter
/// [scans](MessageFilter::scans).
#[cfg_attr(
    not(any(feature = "sqlite", feature = "postgres", feature = "mysql")),
    allow(dead_code)
)]
pub(crate) fn list_budget(filter: &MessageFilter, limit: usize) -> usize {
    let page = limit.saturating_add(1);
    if filter.scans() {
        page.saturating_mul(LIST_SCAN_PAGES)
    } else {
        page
    }
}

impl Page {
    /// A page from a bounded scan: `hits` are the matches among the rows read in enqueue
    /// order (at most `limit + 1` of them), `last_read` the sequence of the last row read,
    /// and `exhausted` whether the read stopped at its budget rather than at the lane's end.
    /// A full page ends at its last message; a short one after an exhausted read goes on
    /// after the last row read, so the next call skips what this one already checked.
    #[cfg_attr(
        not(any(feature = "sqlite", feature = "postgres", feature = "mysql")),
        allow(dead_code)
    )]
    pub(crate) fn from_scan(
        hits: Vec<OutboxMessage>,
        limit: usize,
        last_read: Option<i64>,
        exhausted: bool,
    ) -> Self {
        if hits.len() > limit || !exhausted {
            return Self::from_overfetch(hits, limit);
        }
        Self {
            messages: hits,
            next_cursor: last_read,
        }
    }
}

/// Stats counted message by message in enqueue order, for a filter (by key, by ids, or
/// scanning) that the per-status counts cannot answer.
#[derive(Debug, Default)]
pub(crate) struct StatsTally {
    lanes: BTreeMap<(String, String), LaneStats>,
    /// Per key, what came first in enqueue order: a dead letter or a live message. A key is
    /// blocked when a dead letter comes before its head (its first live message).
    dead_first: HashSet<(String, String, String)>,
    has_live: HashSet<(String, String, String)>,
    blocked: HashSet<(String, String, String)>,
}

impl StatsTally {
    /// Counts the next message in enqueue order, at `now`. Only a due message is old: one
    /// delayed by an hour is not waiting.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn add(
        &mut self,
        lane: &str,
        target: &str,
        key: Option<&str>,
        status: OutboxStatus,
        available_at: UnixMillis,
        created_at: UnixMillis,
        now: UnixMillis,
    ) {
        let stats = self
            .lanes
            .entry((lane.to_owned(), target.to_owned()))
            .or_insert_with(|| LaneStats {
                lane: lane.to_owned(),
                target: target.to_owned(),
                ..LaneStats::default()
            });
        match status {
            OutboxStatus::Pending => {
                stats.pending += 1;
                let age = now.saturating_duration_since(created_at);
                if available_at <= now && stats.oldest_pending_age.is_none_or(|old| age > old) {
                    stats.oldest_pending_age = Some(age);
                }
            }
            OutboxStatus::Claimed => stats.claimed += 1,
            OutboxStatus::Delivered => stats.delivered += 1,
            OutboxStatus::DeadLetter => stats.dead_letter += 1,
        }
        if let Some(key) = key {
            let slot = (lane.to_owned(), target.to_owned(), key.to_owned());
            let live = matches!(status, OutboxStatus::Pending | OutboxStatus::Claimed);
            if status == OutboxStatus::DeadLetter && !self.has_live.contains(&slot) {
                self.dead_first.insert(slot);
            } else if live && self.has_live.insert(slot.clone()) && self.dead_first.contains(&slot)
            {
                self.blocked.insert(slot);
            }
        }
    }

    /// The stats of every (lane, target) counted, in (lane, target) order.
    pub(crate) fn finish(mut self) -> Vec<LaneStats> {
        for (lane, target, _) in self.blocked {
            if let Some(stats) = self.lanes.get_mut(&(lane, target)) {
                stats.blocked_keys += 1;
            }
        }
        self.lanes.into_values().collect()
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

/// Sorts `lanes` by lane and target, by bytes (not by a database's collation), keeping one
/// of each.
pub(crate) fn sort_lanes(lanes: &mut Vec<LaneStats>) {
    lanes.sort_by(|a, b| (&a.lane, &a.target).cmp(&(&b.lane, &b.target)));
    lanes.dedup_by(|a, b| (&a.lane, &a.target) == (&b.lane, &b.target));
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
        Self::sum(lanes.into_iter().map(|(lane, target)| LaneCount {
            lane,
            target,
            count: 1,
        }))
    }

    /// Counts per (lane, target) from partial counts (a lane may come more than once: its
    /// counts are added), sorted by lane, none of zero.
    pub fn sum(counts: impl IntoIterator<Item = LaneCount>) -> Vec<LaneCount> {
        let mut sums: BTreeMap<(String, String), u64> = BTreeMap::new();
        for LaneCount {
            lane,
            target,
            count,
        } in counts
        {
            if count > 0 {
                *sums.entry((lane, target)).or_default() += count;
            }
        }
        sums.into_iter()
            .map(|((lane, target), count)| LaneCount {
                lane,
                target,
                count,
            })
            .collect()
    }

    /// The counts added up: how many messages in all.
    pub fn total(counts: &[LaneCount]) -> u64 {
        counts.iter().map(|lane| lane.count).sum()
    }
}
