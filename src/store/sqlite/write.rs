//! The bodies of the write operations, each run inside the caller's `BEGIN IMMEDIATE`
//! transaction on the single write connection. They mirror the memory store step by step.
//!
//! A batch is one statement, not one per item: the claims, nacks or chosen rows go in as one
//! JSON array that the statement reads with `json_each`. SQLite runs in this process, but
//! each sqlx statement is still a round trip to the connection's worker thread (a channel
//! send, a wake-up and a reply), and a relay's cycle of 64 acks and 64 claims used to be 130
//! of them. The answers come back per row (`RETURNING`) and are put back in the caller's
//! order here, with the outcomes the memory store gives item by item.
//!
//! The operations fenced on a claim token (ack, nack, extend_lease, release) are in
//! `write/fenced.rs`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use sqlx::sqlite::SqliteConnection;
use sqlx::Row;
use uuid::Uuid;

use crate::message::{OutboxMessage, OutboxMessageDraft, OutboxStatus, UnixMillis};
use crate::store::sql;
use crate::store::unreadable::{self, ClaimedRow, SortedClaim, Unreadable};
use crate::store::StoreOp;
use crate::store::LEASE_LAPSED_ERROR;
use crate::store::{
    ClaimBatch, ClaimRequest, DraftBatch, Enqueued, MessageFilter, NextDue, StoreError,
    UnreadableRow,
};

use super::row::{self, db, decode, int, json_text, parse_uuid, uuid_text};
use super::schema::Statements;
use super::statement::{bind, dynamic, filter_where, query};

mod fenced;

pub(super) use fenced::{ack, extend_lease, nack, release};

/// Lanes to wake once the transaction has committed.
pub(super) type Woken = HashSet<(String, String)>;

type DedupeSlot = (String, String, String);

fn dedupe_slot(draft: &OutboxMessageDraft) -> Option<DedupeSlot> {
    draft
        .dedupe_key
        .as_ref()
        .map(|key| (draft.lane.clone(), draft.target.clone(), key.clone()))
}

async fn find_dedupe(
    sql: &Statements,
    conn: &mut SqliteConnection,
    (lane, target, key): &DedupeSlot,
) -> Result<Option<OutboxMessage>, StoreError> {
    let row = query(&sql.find_dedupe)
        .bind(lane)
        .bind(target)
        .bind(key)
        .fetch_optional(&mut *conn)
        .await
        .map_err(db(StoreOp::Enqueue))?;
    row.as_ref().map(decode).transpose()
}

async fn insert(
    sql: &Statements,
    conn: &mut SqliteConnection,
    draft: OutboxMessageDraft,
    now: UnixMillis,
) -> Result<OutboxMessage, StoreError> {
    let outbox_id = Uuid::now_v7();
    let available_at = now.saturating_add(draft.delay);
    let seq: i64 = query(&sql.insert)
        .bind(uuid_text(outbox_id))
        .bind(&draft.lane)
        .bind(&draft.target)
        .bind(draft.payload.as_str())
        .bind(json_text(&draft.headers, "headers")?)
        .bind(&draft.ordering_key)
        .bind(&draft.dedupe_key)
        .bind(i64::from(draft.max_attempts))
        .bind(available_at)
        .bind(now)
        .fetch_one(&mut *conn)
        .await
        .and_then(|row| row.try_get(0))
        .map_err(db(StoreOp::Enqueue))?;
    Ok(OutboxMessage::pending(draft, outbox_id, seq, now))
}

/// Writes a planned batch. Every dedupe key is checked before anything is written, so a
/// conflict leaves no row (the caller rolls back anyway). No two drafts of the batch share a
/// key (the plan answered the repeats), so a key is looked up once.
pub(super) async fn enqueue(
    sql: &Statements,
    conn: &mut SqliteConnection,
    drafts: DraftBatch,
    now: UnixMillis,
    woken: &mut Woken,
) -> Result<Vec<Enqueued>, StoreError> {
    let mut existing: Vec<Option<OutboxMessage>> = Vec::with_capacity(drafts.len());
    for draft in drafts.drafts() {
        let Some(slot) = dedupe_slot(draft) else {
            existing.push(None);
            continue;
        };
        let found = find_dedupe(sql, conn, &slot).await?;
        if let Some(found) = &found {
            if !draft.matches(found) {
                return Err(StoreError::Conflict {
                    lane: slot.0,
                    target: slot.1,
                    dedupe_key: slot.2,
                    existing: found.outbox_id,
                });
            }
        }
        existing.push(found);
    }
    let mut answers = Vec::with_capacity(existing.len());
    for (draft, found) in drafts.into_drafts().into_iter().zip(existing) {
        if let Some(message) = found {
            answers.push(Enqueued {
                message,
                duplicate: true,
            });
            continue;
        }
        woken.insert((draft.lane.clone(), draft.target.clone()));
        answers.push(Enqueued {
            message: insert(sql, conn, draft, now).await?,
            duplicate: false,
        });
    }
    Ok(answers)
}

/// Claims for each request in turn ([`claim`]), in the caller's transaction: one batch
/// per request, in order.
pub(super) async fn claim_each(
    sql: &Statements,
    conn: &mut SqliteConnection,
    requests: &[ClaimRequest],
    now: UnixMillis,
) -> Result<Vec<ClaimBatch>, StoreError> {
    let mut batches = Vec::with_capacity(requests.len());
    for request in requests {
        batches.push(claim(sql, conn, request, now).await?);
    }
    Ok(batches)
}

/// Dead-letters lapsed claims that used their last attempt, then claims up to `limit` rows:
/// lapsed claims first (they became claimable earliest, and their keys are blocked), then
/// due pending rows, each due head with its key run when the request asks for runs. Every
/// selection reads an index in order, takes only key heads (the `key_head` mark) and stops
/// at its limit, as the memory store does with its own indexes; a run is read from its
/// key's index, from the head on, and stops at its length.
async fn claim(
    sql: &Statements,
    conn: &mut SqliteConnection,
    request: &ClaimRequest,
    now: UnixMillis,
) -> Result<ClaimBatch, StoreError> {
    const OP: StoreOp = StoreOp::Claim;
    let statements = sql.policy(request.ordering);
    let mut batch = ClaimBatch::default();
    let doomed = query(&statements.claim_doomed)
        .bind(now)
        .bind(&request.lane)
        .bind(&request.target)
        .fetch_all(&mut *conn)
        .await
        .map_err(db(OP))?;
    let mut doomed_seqs = Vec::with_capacity(doomed.len());
    for row in &doomed {
        doomed_seqs.push(row.try_get::<i64, _>(0).map_err(db(OP))?);
        let id: String = row.try_get(1).map_err(db(OP))?;
        batch.dead_lettered.push(parse_uuid(&id, "outbox_id", &id)?);
    }
    if !doomed_seqs.is_empty() {
        query(&sql.dead_letter_lapsed)
            .bind(json_text(&doomed_seqs, "lapsed claims")?)
            .bind(LEASE_LAPSED_ERROR)
            .bind(now)
            .execute(&mut *conn)
            .await
            .map_err(db(OP))?;
    }
    // Both selections are made before either is claimed, as in the memory store: they never
    // share a key (a key has one head), so claiming in between would change neither.
    let mut chosen = select_seqs(
        &statements.claim_lapsed,
        conn,
        request.limit,
        None,
        now,
        request,
    )
    .await
    .map_err(db(OP))?;
    let room = request.limit - chosen.len();
    if room > 0 {
        // A lapsed claim comes alone; a due head brings its key run (when asked for one),
        // right behind it, counted in the room.
        let ready = match request.run_len() {
            1 => select_seqs(&statements.claim_ready, conn, room, None, now, request).await,
            run => select_seqs(&statements.claim_runs, conn, room, Some(run), now, request).await,
        };
        chosen.extend(ready.map_err(db(OP))?);
    }
    if !chosen.is_empty() {
        // Each row read on its own: one that cannot be read is dead-lettered here, in the
        // claim's transaction and before `next_due` looks at its key, while the rows read
        // beside it are handed out (`store/unreadable.rs`).
        let rows = mark_claimed(sql, conn, &chosen, request, now).await?;
        let sorted = unreadable::sort(rows, request.ordering);
        batch.unreadable = settle_unreadable(sql, conn, &sorted, now).await?;
        batch.messages = sorted.messages;
    }
    if batch.messages.len() < request.limit {
        let due = super::read::next_due(
            sql,
            &mut *conn,
            &request.lane,
            &request.target,
            request.ordering,
            now,
        )
        .await?;
        batch.next_due = NextDue::Known(due);
    }
    Ok(batch)
}

/// The seqs a claim selection returns, in claim order (binds: now, lane, target, limit,
/// and the run length when `run` is given: due heads with their key runs).
async fn select_seqs(
    statement: &Arc<str>,
    conn: &mut SqliteConnection,
    limit: usize,
    run: Option<usize>,
    now: UnixMillis,
    request: &ClaimRequest,
) -> Result<Vec<i64>, sqlx::Error> {
    let mut select = query(statement)
        .bind(now)
        .bind(&request.lane)
        .bind(&request.target)
        .bind(int(limit));
    if let Some(run) = run {
        select = select.bind(int(run));
    }
    let rows = select.fetch_all(&mut *conn).await?;
    rows.iter().map(|row| row.try_get(0)).collect()
}

/// Claims the chosen rows in one statement, each under a fresh token, and returns them in
/// the order chosen (lapsed claims first, then by due time, each run behind its head), as
/// the memory store does:
/// `RETURNING` promises no order.
async fn mark_claimed(
    sql: &Statements,
    conn: &mut SqliteConnection,
    chosen: &[i64],
    request: &ClaimRequest,
    now: UnixMillis,
) -> Result<Vec<ClaimedRow>, StoreError> {
    let picks: Vec<(i64, Uuid)> = chosen.iter().map(|seq| (*seq, Uuid::new_v4())).collect();
    let given: Vec<(i64, String)> = picks
        .iter()
        .map(|(seq, token)| (*seq, uuid_text(*token)))
        .collect();
    let rows = query(&sql.mark_claimed)
        .bind(json_text(&given, "claims")?)
        .bind(&request.consumer_id)
        .bind(now.saturating_add(request.lease))
        .bind(now)
        .fetch_all(&mut *conn)
        .await
        .map_err(db(StoreOp::Claim))?;
    let position: HashMap<i64, (usize, Uuid)> = picks
        .iter()
        .enumerate()
        .map(|(i, (seq, token))| (*seq, (i, *token)))
        .collect();
    let mut claimed = Vec::with_capacity(rows.len());
    for row in &rows {
        let seq: i64 = row.try_get("seq").map_err(db(StoreOp::Claim))?;
        let Some(&(at, token)) = position.get(&seq) else {
            return Err(StoreError::database(
                StoreOp::Claim,
                format!("claimed row {seq}, which no pick names"),
            ));
        };
        claimed.push((at, row::claimed(row, token)?));
    }
    claimed.sort_by_key(|(at, _)| *at);
    Ok(claimed.into_iter().map(|(_, row)| row).collect())
}

/// Dead-letters the unreadable rows of a claim, fenced on the tokens it just gave them,
/// and releases the messages held back behind them (`Block`), in the claim's transaction.
/// Answers the rows dead-lettered.
async fn settle_unreadable(
    sql: &Statements,
    conn: &mut SqliteConnection,
    sorted: &SortedClaim,
    now: UnixMillis,
) -> Result<Vec<UnreadableRow>, StoreError> {
    const OP: StoreOp = StoreOp::Claim;
    let mut dead = Vec::new();
    if !sorted.unreadable.is_empty() {
        let given: Vec<(i64, String, &str)> = sorted
            .unreadable
            .iter()
            .map(|row| (row.seq, uuid_text(row.claim_token), row.error.as_str()))
            .collect();
        let rows = query(&sql.dead_letter_unreadable)
            .bind(json_text(&given, "unreadable rows")?)
            .bind(now)
            .fetch_all(&mut *conn)
            .await
            .map_err(db(OP))?;
        let mut applied = HashSet::new();
        for row in &rows {
            applied.insert(row.try_get::<i64, _>(0).map_err(db(OP))?);
        }
        dead.extend(
            sorted
                .unreadable
                .iter()
                .filter(|row| applied.contains(&row.seq))
                .map(Unreadable::answer),
        );
    }
    if !sorted.held_back.is_empty() {
        // Their key is held by the dead letter now: no wake-up would find them claimable.
        let mut woken = Woken::new();
        fenced::release(sql, conn, &sorted.held_back, now, &mut woken).await?;
    }
    Ok(dead)
}

/// Opens the claim's savepoint: a part of the transaction that can be undone alone.
pub(super) async fn savepoint(conn: &mut SqliteConnection) -> Result<(), StoreError> {
    sqlx::query("SAVEPOINT claim")
        .execute(&mut *conn)
        .await
        .map_err(db(StoreOp::Enqueue))?;
    Ok(())
}

/// Keeps (`keep`) or undoes what was written since the claim's savepoint, and closes it.
pub(super) async fn end_savepoint(
    conn: &mut SqliteConnection,
    keep: bool,
) -> Result<(), StoreError> {
    if !keep {
        sqlx::query("ROLLBACK TO claim")
            .execute(&mut *conn)
            .await
            .map_err(db(StoreOp::Enqueue))?;
    }
    sqlx::query("RELEASE claim")
        .execute(&mut *conn)
        .await
        .map_err(db(StoreOp::Enqueue))?;
    Ok(())
}

/// Moves the selected dead letters back to pending, due now, attempts reset, `last_error`
/// kept. Returns the (lane, target) of each.
pub(super) async fn requeue_dead_letters(
    sql: &Statements,
    conn: &mut SqliteConnection,
    filter: &MessageFilter,
    now: UnixMillis,
) -> Result<Vec<(String, String)>, StoreError> {
    let filter = filter_where(
        &filter.clone().with_status(OutboxStatus::DeadLetter),
        "",
        sql::Terms::All,
    );
    let statement = dynamic(format!(
        "UPDATE {} SET status = 'pending', attempt_count = 0, available_at = ?, updated_at = ?
         WHERE {} RETURNING lane, target",
        sql.table, filter.clause
    ))
    .bind(now)
    .bind(now);
    let rows = bind(statement, filter.values)
        .fetch_all(&mut *conn)
        .await
        .map_err(db(StoreOp::RequeueDeadLetters))?;
    rows.iter()
        .map(|row| {
            let lane: String = row.try_get(0).map_err(db(StoreOp::RequeueDeadLetters))?;
            let target: String = row.try_get(1).map_err(db(StoreOp::RequeueDeadLetters))?;
            Ok((lane, target))
        })
        .collect()
}

/// Deletes the selected dead letters. Returns how many.
pub(super) async fn discard_dead_letters(
    sql: &Statements,
    conn: &mut SqliteConnection,
    filter: &MessageFilter,
) -> Result<u64, StoreError> {
    let filter = filter_where(
        &filter.clone().with_status(OutboxStatus::DeadLetter),
        "",
        sql::Terms::All,
    );
    let statement = dynamic(format!("DELETE FROM {} WHERE {}", sql.table, filter.clause));
    let done = bind(statement, filter.values)
        .execute(&mut *conn)
        .await
        .map_err(db(StoreOp::DiscardDeadLetters))?;
    Ok(done.rows_affected())
}

/// Deletes at most `batch_size` finished rows last changed before `cutoff` (of the lanes in
/// `lanes`, a JSON array of pairs, or of any), none with an ordering key when `keep_keyed`.
/// Answers the (lane, target) of each row deleted.
pub(super) async fn purge_batch(
    sql: &Statements,
    conn: &mut SqliteConnection,
    status: OutboxStatus,
    cutoff: UnixMillis,
    lanes: Option<&str>,
    batch_size: usize,
    keep_keyed: bool,
) -> Result<Vec<(String, String)>, StoreError> {
    let rows = query(&sql.purge_batch)
        .bind(cutoff)
        .bind(int(batch_size))
        .bind(status.as_str())
        .bind(lanes)
        .bind(keep_keyed)
        .fetch_all(&mut *conn)
        .await
        .map_err(db(StoreOp::Purge))?;
    rows.iter()
        .map(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
        .collect::<Result<_, sqlx::Error>>()
        .map_err(db(StoreOp::Purge))
}
