//! Where an ordering key stands, for an operator: which message is its head, which dead
//! letters come before it (what holds the key back under
//! [`OrderingPolicy::Block`](super::OrderingPolicy::Block)), and what waits behind it; and
//! the keys of a lane that a dead head holds.
//!
//! [`OutboxBackend`]'s provided methods answer them with [`OutboxBackend::list`] alone,
//! each a few index reads of the key (`list` by lane, target, key and status reads the
//! key's index on the SQL stores), so every backend has them; a backend with one
//! statement for it may override them.

use super::{MessageFilter, OutboxBackend, PageRequest, StoreError};
use crate::message::{OutboxMessage, OutboxStatus};

/// The most dead letters `blocked_keys` reads to fill one page of keys: past it, the
/// page ends early (with a cursor), so a lane with a long unkeyed dead tail costs a bounded
/// read per page.
pub const BLOCKED_KEYS_SCAN: usize = 2000;

/// One ordering key as it stands ([`Outbox::key_state`](super::Outbox::key_state)).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeyState {
    /// The key's head: its earliest pending or claimed message. `None` when nothing of the
    /// key is live.
    pub head: Option<OutboxMessage>,
    /// Dead letters of the key enqueued before its head (every dead letter of the key when
    /// it has no head), earliest first, at most `limit`. Under `OrderingPolicy::Block` the
    /// first of them holds the key until an operator requeues or discards it.
    pub dead_before_head: Vec<OutboxMessage>,
    /// Live messages behind the head, in enqueue order, at most `limit`.
    pub waiting: Vec<OutboxMessage>,
    /// Whether more live messages wait than `waiting` holds.
    pub more_waiting: bool,
}

impl KeyState {
    /// Whether a dead letter comes before the key's head: what
    /// `OrderingPolicy::Block` holds back.
    pub fn is_blocked(&self) -> bool {
        self.head.is_some() && !self.dead_before_head.is_empty()
    }
}

/// A key held by a dead head ([`Outbox::blocked_keys`](super::Outbox::blocked_keys)).
#[derive(Debug, Clone, PartialEq)]
pub struct BlockedKey {
    /// The ordering key.
    pub ordering_key: String,
    /// Its earliest dead letter: requeue or discard it to let the key go on.
    pub dead_head: OutboxMessage,
    /// The live message it holds back (the key's head).
    pub held: OutboxMessage,
}

/// A page of [`BlockedKey`]s.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BlockedKeys {
    /// The keys, by the enqueue order of their dead heads.
    pub keys: Vec<BlockedKey>,
    /// Pass as `after` for the next page; `None` when the dead letters are all read.
    pub next_cursor: Option<i64>,
}

fn key_filter(lane: &str, target: &str, key: &str, status: OutboxStatus) -> MessageFilter {
    MessageFilter {
        ordering_key: Some(key.to_owned()),
        status: Some(status),
        ..MessageFilter::lane(lane, target)
    }
}

/// [`OutboxBackend::key_state`] by listing: the key's claimed, pending and dead messages,
/// the first `limit + 1` of each status in enqueue order.
pub(crate) async fn key_state<B: OutboxBackend + ?Sized>(
    backend: &B,
    lane: &str,
    target: &str,
    key: &str,
    limit: usize,
) -> Result<KeyState, StoreError> {
    let limit = limit.max(1);
    let page = PageRequest {
        after: None,
        limit: limit + 1,
    };
    let claimed = backend
        .list(&key_filter(lane, target, key, OutboxStatus::Claimed), page)
        .await?;
    let pending = backend
        .list(&key_filter(lane, target, key, OutboxStatus::Pending), page)
        .await?;
    let dead = backend
        .list(
            &key_filter(lane, target, key, OutboxStatus::DeadLetter),
            page,
        )
        .await?;
    let mut live: Vec<OutboxMessage> = claimed
        .messages
        .into_iter()
        .chain(pending.messages)
        .collect();
    live.sort_by_key(|message| message.seq);
    let more_live = claimed.next_cursor.is_some() || pending.next_cursor.is_some();
    let mut live = live.into_iter();
    let head = live.next();
    let mut waiting: Vec<OutboxMessage> = live.collect();
    let more_waiting = more_live || waiting.len() > limit;
    waiting.truncate(limit);
    let head_seq = head.as_ref().map_or(i64::MAX, |head| head.seq);
    let mut dead_before_head: Vec<OutboxMessage> = dead
        .messages
        .into_iter()
        .filter(|message| message.seq < head_seq)
        .collect();
    dead_before_head.truncate(limit);
    Ok(KeyState {
        head,
        dead_before_head,
        waiting,
        more_waiting,
    })
}

/// [`OutboxBackend::blocked_keys`] by listing: the lane's dead letters in enqueue order
/// from `after`, and for the earliest of each key, whether a live message of the key
/// comes after it.
pub(crate) async fn blocked_keys<B: OutboxBackend + ?Sized>(
    backend: &B,
    lane: &str,
    target: &str,
    after: Option<i64>,
    limit: usize,
) -> Result<BlockedKeys, StoreError> {
    let limit = limit.max(1);
    let dead_filter = MessageFilter {
        status: Some(OutboxStatus::DeadLetter),
        ..MessageFilter::lane(lane, target)
    };
    let mut seen = std::collections::HashSet::new();
    let mut keys = Vec::new();
    let mut cursor = after;
    let mut scanned = 0;
    loop {
        let page = backend
            .list(
                &dead_filter,
                PageRequest {
                    after: cursor,
                    limit: 200,
                },
            )
            .await?;
        for dead in page.messages {
            scanned += 1;
            cursor = Some(dead.seq);
            let Some(key) = dead.ordering_key.clone() else {
                continue;
            };
            if !seen.insert(key.clone()) {
                continue;
            }
            // The earliest dead letter of the key read so far; an earlier one (before
            // `after`) was on a previous page.
            let state = key_state(backend, lane, target, &key, 1).await?;
            if let (Some(held), Some(first_dead)) = (state.head, state.dead_before_head.first()) {
                if first_dead.seq == dead.seq {
                    keys.push(BlockedKey {
                        ordering_key: key,
                        dead_head: dead,
                        held,
                    });
                }
            }
            if keys.len() == limit || scanned >= BLOCKED_KEYS_SCAN {
                return Ok(BlockedKeys {
                    keys,
                    next_cursor: cursor,
                });
            }
        }
        if page.next_cursor.is_none() {
            return Ok(BlockedKeys {
                keys,
                next_cursor: None,
            });
        }
    }
}

/// A page of blocked keys from the (dead head, held message) id pairs a store's own
/// statement found, in its order: both messages of every key in one read by id. A row that
/// changed between the two reads (requeued, delivered, discarded) drops its key from the
/// page.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) async fn blocked_keys_from_pairs<B: OutboxBackend + ?Sized>(
    backend: &B,
    pairs: Vec<(uuid::Uuid, uuid::Uuid)>,
    next_cursor: Option<i64>,
) -> Result<BlockedKeys, StoreError> {
    let ids: Vec<uuid::Uuid> = pairs
        .iter()
        .flat_map(|(dead, held)| [*dead, *held])
        .collect();
    let found = if ids.is_empty() {
        Vec::new()
    } else {
        let page = PageRequest {
            after: None,
            limit: ids.len(),
        };
        backend
            .list(&MessageFilter::all().with_ids(ids), page)
            .await?
            .messages
    };
    let mut by_id: std::collections::HashMap<uuid::Uuid, OutboxMessage> =
        found.into_iter().map(|m| (m.outbox_id, m)).collect();
    let keys = pairs
        .into_iter()
        .filter_map(|(dead, held)| {
            let dead_head = by_id.remove(&dead)?;
            let held = by_id.remove(&held)?;
            Some(BlockedKey {
                ordering_key: dead_head.ordering_key.clone()?,
                dead_head,
                held,
            })
        })
        .collect();
    Ok(BlockedKeys { keys, next_cursor })
}
