//! The key-head mark and the per-key lock that keeps it true (see "Per-key order" in the
//! [module docs](super)).
//!
//! `{prefix}_keys` holds one row per ordering key that has live (pending or claimed)
//! messages: the key's lock and its head's sequence. A write that may move a key's head
//! locks the key's row ([`lock`]), makes its own change, then sets the head to the key's
//! first live message ([`refresh`]). The lock is held to the end of the transaction, so the
//! next writer of the key sees what this one committed.

use std::collections::{BTreeMap, BTreeSet};

use sqlx::mysql::MySqlConnection;
use sqlx::{AssertSqlSafe, Row};

use crate::store::{StoreError, StoreOp};

use super::in_list::InList;
use super::row::db_error;
use super::schema::Names;

/// One ordering key: (lane, target, key).
pub(super) type Key = (String, String, String);

/// How many keys one statement names.
const CHUNK: usize = 200;

/// `(lane = ? AND target = ? AND ordering_key = ?) OR …` for `n` keys.
pub(super) fn key_match(n: usize) -> String {
    vec!["(lane = ? AND target = ? AND ordering_key = ?)"; n].join(" OR ")
}

/// Locks the rows of `keys` (creating the missing ones) in key order, and answers each
/// key's recorded head (`None`: no live message).
///
/// It upserts first: in a caller's transaction at `REPEATABLE READ`, a locking read of a
/// key row that does not exist yet would take a gap lock, and two enqueues of new keys in
/// one gap would deadlock on their inserts. The store's own transactions, where every key
/// row it locks exists, use [`lock_existing`].
pub(super) async fn lock(
    conn: &mut MySqlConnection,
    names: &Names,
    keys: &BTreeSet<Key>,
    op: StoreOp,
) -> Result<BTreeMap<Key, Option<i64>>, StoreError> {
    let mut heads = BTreeMap::new();
    let keys: Vec<&Key> = keys.iter().collect();
    for chunk in keys.chunks(CHUNK) {
        upsert(conn, names, chunk, op).await?;
        heads.extend(locking_read(conn, names, chunk, op).await?);
    }
    Ok(heads)
}

/// [`lock`] for a `READ COMMITTED` transaction of the store's own (which takes no gap
/// locks): one locking read when every key has its row, which is always so for the keys of
/// claimed messages (an enqueue creates the row, and only a key left with no live message
/// loses it). A key without one (a requeue of a key's dead letters) costs the upsert that
/// creates it and a second read.
pub(super) async fn lock_existing(
    conn: &mut MySqlConnection,
    names: &Names,
    keys: &BTreeSet<Key>,
    op: StoreOp,
) -> Result<BTreeMap<Key, Option<i64>>, StoreError> {
    let mut heads = BTreeMap::new();
    let keys: Vec<&Key> = keys.iter().collect();
    for chunk in keys.chunks(CHUNK) {
        let found = locking_read(conn, names, chunk, op).await?;
        let missing: Vec<&Key> = chunk
            .iter()
            .copied()
            .filter(|key| !found.contains_key(*key))
            .collect();
        heads.extend(found);
        if !missing.is_empty() {
            upsert(conn, names, &missing, op).await?;
            heads.extend(locking_read(conn, names, &missing, op).await?);
        }
    }
    Ok(heads)
}

/// Creates the rows of `keys` that do not exist. An upsert takes the row's exclusive lock
/// whether it inserts or finds the row; a locking read after it then sees the latest
/// committed head, whatever the transaction's isolation.
async fn upsert(
    conn: &mut MySqlConnection,
    names: &Names,
    keys: &[&Key],
    op: StoreOp,
) -> Result<(), StoreError> {
    let sql = format!(
        "INSERT INTO {} (lane, target, ordering_key) VALUES {} \
         ON DUPLICATE KEY UPDATE head_seq = head_seq",
        names.keys,
        vec!["(?, ?, ?)"; keys.len()].join(", ")
    );
    let mut query = sqlx::query(AssertSqlSafe(sql));
    for (lane, target, key) in keys {
        query = query.bind(lane).bind(target).bind(key);
    }
    query
        .execute(&mut *conn)
        .await
        .map_err(|e| db_error(op, e))?;
    Ok(())
}

/// The rows of `keys` that exist, locked, with their recorded heads.
async fn locking_read(
    conn: &mut MySqlConnection,
    names: &Names,
    keys: &[&Key],
    op: StoreOp,
) -> Result<BTreeMap<Key, Option<i64>>, StoreError> {
    let sql = format!(
        "SELECT lane, target, ordering_key, head_seq FROM {} WHERE {} FOR UPDATE",
        names.keys,
        key_match(keys.len())
    );
    let mut query = sqlx::query(AssertSqlSafe(sql));
    for (lane, target, key) in keys {
        query = query.bind(lane).bind(target).bind(key);
    }
    let mut heads = BTreeMap::new();
    for row in query
        .fetch_all(&mut *conn)
        .await
        .map_err(|e| db_error(op, e))?
    {
        let key = read_key(&row, op)?;
        let head: Option<i64> = row.try_get("head_seq").map_err(|e| db_error(op, e))?;
        heads.insert(key, head);
    }
    Ok(heads)
}

fn read_key(row: &sqlx::mysql::MySqlRow, op: StoreOp) -> Result<Key, StoreError> {
    let text = |column: &'static str| {
        super::row::text(row, column).map_err(|bad| StoreError::Corrupt {
            id: "?".into(),
            reason: format!("{op}: {bad:?}"),
        })
    };
    Ok((text("lane")?, text("target")?, text("ordering_key")?))
}

/// Sets each locked key's head to its first live message, moving the mark, and records it
/// (a key left with no live message loses its row). `heads`: what [`lock`] answered.
///
/// Two statements when heads move: the read of each key's first live message (and whether
/// its recorded head still carries the mark), then one `UPDATE` of both tables that marks
/// each new head and records it in its key's row. Clearing an old head's mark costs a
/// statement only when that row still carries it (a requeue that puts an earlier message
/// ahead of it): an ack or a dead-lettering clears the mark in the write that finishes the
/// row, and a deleted row has none.
pub(super) async fn refresh(
    conn: &mut MySqlConnection,
    names: &Names,
    heads: &BTreeMap<Key, Option<i64>>,
    op: StoreOp,
) -> Result<(), StoreError> {
    let keys: Vec<(&Key, &Option<i64>)> = heads.iter().collect();
    for chunk in keys.chunks(CHUNK) {
        let lives = first_live(conn, names, chunk, op).await?;
        let mut unmark = Vec::new();
        let mut mark = Vec::new();
        let mut forget = Vec::new();
        for ((key, old), live) in chunk.iter().zip(lives) {
            let change = Change::of(**old, live);
            unmark.extend(change.unmark);
            mark.extend(change.mark);
            if change.forget {
                forget.push(*key);
            }
        }
        // Each new head is marked and recorded in its key's row by one statement (the
        // key rows are locked by `lock`, so each exists).
        InList::new(&names.sql.clear_marks)
            .execute(conn, &unmark, op)
            .await?;
        InList::new(&names.sql.mark_heads)
            .execute(conn, &mark, op)
            .await?;
        if !forget.is_empty() {
            let sql = format!(
                "DELETE FROM {} WHERE {}",
                names.keys,
                key_match(forget.len())
            );
            let mut query = sqlx::query(AssertSqlSafe(sql));
            for (lane, target, key) in &forget {
                query = query.bind(lane).bind(target).bind(key);
            }
            query
                .execute(&mut *conn)
                .await
                .map_err(|e| db_error(op, e))?;
        }
    }
    Ok(())
}

/// What [`first_live`] found for one key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Live {
    /// The key's first pending or claimed message.
    first: Option<i64>,
    /// Whether the recorded head's row still carries the mark (false when it is gone).
    old_marked: bool,
}

/// The writes that move one key's head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Change {
    /// The row whose mark is cleared.
    unmark: Option<i64>,
    /// The row marked and recorded as the key's head.
    mark: Option<i64>,
    /// The key has no live message left: its row goes.
    forget: bool,
}

impl Change {
    /// From the recorded head `old` and what the key holds now.
    fn of(old: Option<i64>, live: Live) -> Self {
        let unchanged = live.first == old && live.old_marked;
        Change {
            unmark: old.filter(|o| live.old_marked && live.first != Some(*o)),
            mark: live.first.filter(|_| !unchanged),
            forget: live.first.is_none(),
        }
    }
}

/// Each key's first live message: two index dives per key (its first pending and its first
/// claimed), and a primary-key probe of its recorded head's mark, in one statement.
async fn first_live(
    conn: &mut MySqlConnection,
    names: &Names,
    keys: &[(&Key, &Option<i64>)],
    op: StoreOp,
) -> Result<Vec<Live>, StoreError> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let m = &names.messages;
    let part = |i: usize| {
        format!(
            "SELECT {i} AS i, \
             (SELECT MIN(seq) FROM {m} WHERE lane = ? AND target = ? AND ordering_key = ? AND status = 'pending') AS p, \
             (SELECT MIN(seq) FROM {m} WHERE lane = ? AND target = ? AND ordering_key = ? AND status = 'claimed') AS c, \
             (SELECT key_head FROM {m} WHERE seq = ?) AS o"
        )
    };
    let sql = (0..keys.len())
        .map(part)
        .collect::<Vec<_>>()
        .join(" UNION ALL ");
    let mut query = sqlx::query(AssertSqlSafe(sql));
    for ((lane, target, key), old) in keys {
        query = query
            .bind(lane)
            .bind(target)
            .bind(key)
            .bind(lane)
            .bind(target)
            .bind(key)
            .bind(**old);
    }
    let mut lives = vec![Live::default(); keys.len()];
    for row in query
        .fetch_all(&mut *conn)
        .await
        .map_err(|e| db_error(op, e))?
    {
        let i: i64 = row.try_get("i").map_err(|e| db_error(op, e))?;
        let p: Option<i64> = row.try_get("p").map_err(|e| db_error(op, e))?;
        let c: Option<i64> = row.try_get("c").map_err(|e| db_error(op, e))?;
        let o: Option<i8> = row.try_get("o").map_err(|e| db_error(op, e))?;
        let first = match (p, c) {
            (Some(p), Some(c)) => Some(p.min(c)),
            (p, c) => p.or(c),
        };
        if let Some(slot) = usize::try_from(i).ok().and_then(|i| lives.get_mut(i)) {
            *slot = Live {
                first,
                old_marked: o == Some(1),
            };
        }
    }
    Ok(lives)
}

#[cfg(test)]
mod tests;
