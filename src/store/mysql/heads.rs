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

use super::row::{db_error, marks};
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
pub(super) async fn lock(
    conn: &mut MySqlConnection,
    names: &Names,
    keys: &BTreeSet<Key>,
    op: StoreOp,
) -> Result<BTreeMap<Key, Option<i64>>, StoreError> {
    let mut heads = BTreeMap::new();
    let keys: Vec<&Key> = keys.iter().collect();
    for chunk in keys.chunks(CHUNK) {
        // An upsert takes the row's exclusive lock whether it inserts or finds the row;
        // the locking read after it then sees the latest committed head, whatever the
        // transaction's isolation.
        let sql = format!(
            "INSERT INTO {} (lane, target, ordering_key) VALUES {} \
             ON DUPLICATE KEY UPDATE head_seq = head_seq",
            names.keys,
            vec!["(?, ?, ?)"; chunk.len()].join(", ")
        );
        let mut query = sqlx::query(AssertSqlSafe(sql));
        for (lane, target, key) in chunk {
            query = query.bind(lane).bind(target).bind(key);
        }
        query
            .execute(&mut *conn)
            .await
            .map_err(|e| db_error(op, e))?;
        let sql = format!(
            "SELECT lane, target, ordering_key, head_seq FROM {} WHERE {} FOR UPDATE",
            names.keys,
            key_match(chunk.len())
        );
        let mut query = sqlx::query(AssertSqlSafe(sql));
        for (lane, target, key) in chunk {
            query = query.bind(lane).bind(target).bind(key);
        }
        for row in query
            .fetch_all(&mut *conn)
            .await
            .map_err(|e| db_error(op, e))?
        {
            let key = read_key(&row, op)?;
            let head: Option<i64> = row.try_get("head_seq").map_err(|e| db_error(op, e))?;
            heads.insert(key, head);
        }
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
pub(super) async fn refresh(
    conn: &mut MySqlConnection,
    names: &Names,
    heads: &BTreeMap<Key, Option<i64>>,
    op: StoreOp,
) -> Result<(), StoreError> {
    let keys: Vec<(&Key, &Option<i64>)> = heads.iter().collect();
    for chunk in keys.chunks(CHUNK) {
        let firsts = first_live(conn, names, chunk.iter().map(|(k, _)| *k), op).await?;
        let mut unmark = Vec::new();
        let mut mark = Vec::new();
        let mut record = Vec::new();
        let mut forget = Vec::new();
        for ((key, old), new) in chunk.iter().zip(firsts) {
            if let Some(old) = old {
                if Some(*old) != new {
                    unmark.push(*old);
                }
            }
            match new {
                Some(new) => {
                    mark.push(new);
                    if **old != Some(new) {
                        record.push((*key, new));
                    }
                }
                None => forget.push(*key),
            }
        }
        set_mark(conn, names, &unmark, 0, op).await?;
        set_mark(conn, names, &mark, 1, op).await?;
        if !record.is_empty() {
            let sql = format!(
                "INSERT INTO {} (lane, target, ordering_key, head_seq) VALUES {}{}",
                names.keys,
                vec!["(?, ?, ?, ?)"; record.len()].join(", "),
                names.dialect().upsert(&["head_seq"])
            );
            let mut query = sqlx::query(AssertSqlSafe(sql));
            for ((lane, target, key), head) in &record {
                query = query.bind(lane).bind(target).bind(key).bind(head);
            }
            query
                .execute(&mut *conn)
                .await
                .map_err(|e| db_error(op, e))?;
        }
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

/// Sets `key_head` of the rows `seqs` to `value`.
async fn set_mark(
    conn: &mut MySqlConnection,
    names: &Names,
    seqs: &[i64],
    value: i32,
    op: StoreOp,
) -> Result<(), StoreError> {
    if seqs.is_empty() {
        return Ok(());
    }
    let sql = format!(
        "UPDATE {} SET key_head = {value} WHERE seq IN ({}) AND key_head <> {value}",
        names.messages,
        marks(seqs.len())
    );
    let mut query = sqlx::query(AssertSqlSafe(sql));
    for seq in seqs {
        query = query.bind(seq);
    }
    query
        .execute(&mut *conn)
        .await
        .map_err(|e| db_error(op, e))?;
    Ok(())
}

/// Each key's first live message: two index dives per key (its first pending and its first
/// claimed), in one statement.
async fn first_live<'k>(
    conn: &mut MySqlConnection,
    names: &Names,
    keys: impl Iterator<Item = &'k Key>,
    op: StoreOp,
) -> Result<Vec<Option<i64>>, StoreError> {
    let keys: Vec<&Key> = keys.collect();
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let m = &names.messages;
    let part = |i: usize| {
        format!(
            "SELECT {i} AS i, \
             (SELECT MIN(seq) FROM {m} WHERE lane = ? AND target = ? AND ordering_key = ? AND status = 'pending') AS p, \
             (SELECT MIN(seq) FROM {m} WHERE lane = ? AND target = ? AND ordering_key = ? AND status = 'claimed') AS c"
        )
    };
    let sql = (0..keys.len())
        .map(part)
        .collect::<Vec<_>>()
        .join(" UNION ALL ");
    let mut query = sqlx::query(AssertSqlSafe(sql));
    for (lane, target, key) in &keys {
        query = query
            .bind(lane)
            .bind(target)
            .bind(key)
            .bind(lane)
            .bind(target)
            .bind(key);
    }
    let mut firsts = vec![None; keys.len()];
    for row in query
        .fetch_all(&mut *conn)
        .await
        .map_err(|e| db_error(op, e))?
    {
        let i: i64 = row.try_get("i").map_err(|e| db_error(op, e))?;
        let p: Option<i64> = row.try_get("p").map_err(|e| db_error(op, e))?;
        let c: Option<i64> = row.try_get("c").map_err(|e| db_error(op, e))?;
        let first = match (p, c) {
            (Some(p), Some(c)) => Some(p.min(c)),
            (p, c) => p.or(c),
        };
        if let Some(slot) = usize::try_from(i).ok().and_then(|i| firsts.get_mut(i)) {
            *slot = first;
        }
    }
    Ok(firsts)
}
