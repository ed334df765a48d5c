//! Enqueue: the store's own (`write_drafts`, one transaction) and in a caller's transaction
//! (`Outbox::enqueue_in_tx`), the same statements on the connection given.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use sqlx::mysql::MySqlConnection;
use sqlx::{AssertSqlSafe, Row};
use uuid::Uuid;

use crate::message::{OutboxMessage, OutboxMessageDraft};
use crate::store::{DraftBatch, Enqueued, StoreError, StoreOp};
use crate::time::UnixMillis;

use super::heads::{self, Key};
use super::in_list::InList;
use super::row::{db_error, decode, error_number, COLUMNS};
use super::schema::Names;
use super::MysqlOutboxStore;

const OP: StoreOp = StoreOp::Enqueue;

/// Rows per INSERT statement, and the payload bytes one statement carries at most (the
/// server's `max_allowed_packet` is 16 MiB by default on MariaDB, 64 MiB on MySQL 8).
const ROWS_PER_INSERT: usize = 200;
const BYTES_PER_INSERT: usize = 4 << 20;

impl MysqlOutboxStore {
    pub(super) async fn write_once(
        &self,
        drafts: &DraftBatch,
    ) -> Result<Vec<Enqueued>, StoreError> {
        let mut tx = self.begin(OP).await?;
        let answers = write(&mut tx, &self.names, drafts, self.now(), false).await?;
        tx.commit().await.map_err(|e| db_error(OP, e))?;
        Ok(answers)
    }
}

/// Writes `drafts` on `conn`: answers one [`Enqueued`] per draft, or an error with nothing
/// of this call left behind. `in_caller_tx`: the connection is a caller's, so a dedupe key
/// another transaction committed under this one is handled here (the failed INSERT rolled
/// back alone) rather than by running the whole call again.
pub(super) async fn write(
    conn: &mut MySqlConnection,
    names: &Names,
    drafts: &DraftBatch,
    now: UnixMillis,
    in_caller_tx: bool,
) -> Result<Vec<Enqueued>, StoreError> {
    let mut tries = 0;
    loop {
        match write_attempt(conn, names, drafts, now).await {
            Err(error) if in_caller_tx && tries < 3 && error_number(&error) == Some(1062) => {
                tries += 1;
            }
            answer => return answer,
        }
    }
}

async fn write_attempt(
    conn: &mut MySqlConnection,
    names: &Names,
    drafts: &DraftBatch,
    now: UnixMillis,
) -> Result<Vec<Enqueued>, StoreError> {
    let existing = held_dedupe_keys(conn, names, drafts.drafts()).await?;
    let mut answers: Vec<Option<Enqueued>> = Vec::with_capacity(drafts.len());
    let mut fresh: Vec<(usize, &OutboxMessageDraft)> = Vec::new();
    for (index, draft) in drafts.drafts().iter().enumerate() {
        let held = draft
            .dedupe_key
            .as_ref()
            .and_then(|key| existing.get(&(draft.lane.clone(), draft.target.clone(), key.clone())));
        match held {
            Some(message) if draft.matches(message) => answers.push(Some(Enqueued {
                message: message.clone(),
                duplicate: true,
            })),
            Some(message) => {
                return Err(StoreError::Conflict {
                    lane: draft.lane.clone(),
                    target: draft.target.clone(),
                    dedupe_key: draft.dedupe_key.clone().unwrap_or_default(),
                    existing: message.outbox_id,
                })
            }
            None => {
                answers.push(None);
                fresh.push((index, draft));
            }
        }
    }
    if fresh.is_empty() {
        return Ok(answers.into_iter().flatten().collect());
    }

    // Lock the keys first (in key order), then decide which draft heads its key.
    let keys: BTreeSet<Key> = fresh
        .iter()
        .filter_map(|(_, d)| {
            d.ordering_key
                .as_ref()
                .map(|k| (d.lane.clone(), d.target.clone(), k.clone()))
        })
        .collect();
    let held_heads = heads::lock(conn, names, &keys, OP).await?;
    let mut headed: BTreeSet<Key> = BTreeSet::new();
    let rows: Vec<FreshRow<'_>> = fresh
        .iter()
        .map(|(index, draft)| {
            let key_head = draft.ordering_key.as_ref().is_some_and(|k| {
                let key = (draft.lane.clone(), draft.target.clone(), k.clone());
                let free = held_heads.get(&key).is_none_or(Option::is_none);
                free && headed.insert(key)
            });
            FreshRow {
                index: *index,
                draft,
                outbox_id: Uuid::now_v7(),
                key_head,
            }
        })
        .collect();
    insert(conn, names, &rows, now).await?;
    let seqs = read_seqs(conn, names, &rows).await?;

    let mut new_heads: BTreeMap<Key, Option<i64>> = BTreeMap::new();
    for row in &rows {
        let seq = seqs.get(&row.outbox_id).copied().ok_or_else(|| {
            StoreError::database(OP, format!("row {} was not written", row.outbox_id))
        })?;
        if row.key_head {
            if let Some(k) = &row.draft.ordering_key {
                new_heads.insert(
                    (row.draft.lane.clone(), row.draft.target.clone(), k.clone()),
                    Some(seq),
                );
            }
        }
        answers[row.index] = Some(Enqueued {
            message: OutboxMessage::pending(row.draft.clone(), row.outbox_id, seq, now),
            duplicate: false,
        });
    }
    record_heads(conn, names, &new_heads).await?;
    Ok(answers.into_iter().flatten().collect())
}

/// A draft going in fresh.
struct FreshRow<'d> {
    /// Its place in the batch.
    index: usize,
    draft: &'d OutboxMessageDraft,
    outbox_id: Uuid,
    /// Whether it heads its key (no live message of the key before it).
    key_head: bool,
}

/// The stored messages holding the dedupe keys of `drafts`, read with a locking read (the
/// latest committed rows, whatever the transaction's isolation; a key another transaction
/// is inserting makes this wait for it).
async fn held_dedupe_keys(
    conn: &mut MySqlConnection,
    names: &Names,
    drafts: &[OutboxMessageDraft],
) -> Result<HashMap<Key, OutboxMessage>, StoreError> {
    let keyed: Vec<&OutboxMessageDraft> =
        drafts.iter().filter(|d| d.dedupe_key.is_some()).collect();
    let mut held = HashMap::new();
    for chunk in keyed.chunks(200) {
        let sql = format!(
            "SELECT {COLUMNS} FROM {} WHERE {} LOCK IN SHARE MODE",
            names.messages,
            vec!["(lane = ? AND target = ? AND dedupe_key = ?)"; chunk.len()].join(" OR ")
        );
        let mut query = sqlx::query(AssertSqlSafe(sql));
        for d in chunk {
            query = query.bind(&d.lane).bind(&d.target).bind(&d.dedupe_key);
        }
        for row in query
            .fetch_all(&mut *conn)
            .await
            .map_err(|e| db_error(OP, e))?
        {
            let message = decode(&row)?;
            if let Some(key) = message.dedupe_key.clone() {
                held.insert((message.lane.clone(), message.target.clone(), key), message);
            }
        }
    }
    Ok(held)
}

async fn insert(
    conn: &mut MySqlConnection,
    names: &Names,
    rows: &[FreshRow<'_>],
    now: UnixMillis,
) -> Result<(), StoreError> {
    let mut start = 0;
    while start < rows.len() {
        let mut end = start;
        let mut bytes = 0;
        while end < rows.len()
            && end - start < ROWS_PER_INSERT
            && (end == start || bytes < BYTES_PER_INSERT)
        {
            bytes += rows[end].draft.payload.as_str().len();
            end += 1;
        }
        let chunk = &rows[start..end];
        let sql = format!(
            "INSERT INTO {} (outbox_id, lane, target, payload, headers, ordering_key, dedupe_key, \
             status, attempt_count, max_attempts, available_at, created_at, updated_at, key_head) \
             VALUES {}",
            names.messages,
            vec!["(?, ?, ?, ?, ?, ?, ?, 'pending', 0, ?, ?, ?, ?, ?)"; chunk.len()].join(", ")
        );
        let mut query = sqlx::query(AssertSqlSafe(sql));
        for row in chunk {
            let d = row.draft;
            let headers =
                serde_json::to_string(&d.headers).map_err(|e| StoreError::database(OP, e))?;
            query = query
                .bind(row.outbox_id)
                .bind(&d.lane)
                .bind(&d.target)
                .bind(d.payload.as_str())
                .bind(headers)
                .bind(&d.ordering_key)
                .bind(&d.dedupe_key)
                .bind(d.max_attempts)
                .bind(now.saturating_add(d.delay).as_millis())
                .bind(now.as_millis())
                .bind(now.as_millis())
                .bind(i32::from(row.key_head));
        }
        query
            .execute(&mut *conn)
            .await
            .map_err(|e| db_error(OP, e))?;
        start = end;
    }
    Ok(())
}

/// The sequence the server gave each fresh row.
async fn read_seqs(
    conn: &mut MySqlConnection,
    names: &Names,
    rows: &[FreshRow<'_>],
) -> Result<HashMap<Uuid, i64>, StoreError> {
    let ids: Vec<Uuid> = rows.iter().map(|row| row.outbox_id).collect();
    let mut seqs = HashMap::with_capacity(rows.len());
    for row in InList::new(&names.sql.fresh_seqs)
        .fetch(conn, &ids, OP)
        .await?
    {
        let id: Uuid = row.try_get("outbox_id").map_err(|e| db_error(OP, e))?;
        let seq: i64 = row.try_get("seq").map_err(|e| db_error(OP, e))?;
        seqs.insert(id, seq);
    }
    Ok(seqs)
}

/// Records the heads an enqueue gave keys that had none (their rows are locked).
async fn record_heads(
    conn: &mut MySqlConnection,
    names: &Names,
    new_heads: &BTreeMap<Key, Option<i64>>,
) -> Result<(), StoreError> {
    if new_heads.is_empty() {
        return Ok(());
    }
    let entries: Vec<(&Key, i64)> = new_heads
        .iter()
        .filter_map(|(k, h)| h.map(|h| (k, h)))
        .collect();
    for chunk in entries.chunks(200) {
        let sql = format!(
            "INSERT INTO {} (lane, target, ordering_key, head_seq) VALUES {}{}",
            names.keys,
            vec!["(?, ?, ?, ?)"; chunk.len()].join(", "),
            names.dialect().upsert(&["head_seq"])
        );
        let mut query = sqlx::query(AssertSqlSafe(sql));
        for ((lane, target, key), head) in chunk {
            query = query.bind(lane).bind(target).bind(key).bind(head);
        }
        query
            .execute(&mut *conn)
            .await
            .map_err(|e| db_error(OP, e))?;
    }
    Ok(())
}
