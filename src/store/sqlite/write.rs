//! The bodies of the write operations, each run inside the caller's `BEGIN IMMEDIATE`
//! transaction on the single write connection. They mirror the memory store step by step.
//!
//! A batch issues one small statement per item. That is not N round trips: SQLite runs in
//! this process, the statements are prepared once and cached, and the whole batch shares one
//! transaction and so one commit, which is the real cost.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::SqliteConnection;
use sqlx::{AssertSqlSafe, Row, Sqlite};
use uuid::Uuid;

use crate::message::{OutboxMessage, OutboxMessageDraft, OutboxStatus, UnixMillis};
use crate::store::LEASE_LAPSED_ERROR;
use crate::store::{
    ClaimBatch, ClaimOutcome, ClaimRef, ClaimRequest, DraftBatch, Enqueued, MessageFilter, Nack,
    NackDisposition, NackOutcome, NextDue, StoreError,
};

use super::filter::FilterSql;
use super::row::{db, decode, int, json_text, parse_uuid, uuid_text};
use super::schema::Statements;

type Query<'q> = sqlx::query::Query<'q, Sqlite, <Sqlite as sqlx::Database>::Arguments>;

/// A prepared-and-cached statement from [`Statements`].
pub(super) fn query<'q>(sql: &Arc<str>) -> Query<'q> {
    sqlx::query(AssertSqlSafe(Arc::clone(sql)))
}

/// A statement built for one call (a filter's terms vary).
pub(super) fn dynamic<'q>(sql: String) -> Query<'q> {
    sqlx::query(AssertSqlSafe(sql))
}

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
        .map_err(db("enqueue"))?;
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
        .map_err(db("enqueue"))?;
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

/// Dead-letters lapsed claims that used their last attempt, then claims up to `limit` rows:
/// lapsed claims first (they became claimable earliest, and their keys are blocked), then
/// due pending rows. Every selection reads an index in order, takes only key heads (the
/// `key_head` mark) and stops at its limit, as the memory store does with its own indexes.
pub(super) async fn claim(
    sql: &Statements,
    conn: &mut SqliteConnection,
    request: &ClaimRequest,
    now: UnixMillis,
) -> Result<ClaimBatch, StoreError> {
    const OP: &str = "claim";
    let statements = sql.policy(request.ordering);
    let mut batch = ClaimBatch::default();
    let doomed = query(&statements.claim_doomed)
        .bind(now)
        .bind(&request.lane)
        .bind(&request.target)
        .fetch_all(&mut *conn)
        .await
        .map_err(db(OP))?;
    for row in doomed {
        let seq: i64 = row.try_get(0).map_err(db(OP))?;
        let id: String = row.try_get(1).map_err(db(OP))?;
        query(&sql.dead_letter_lapsed)
            .bind(seq)
            .bind(LEASE_LAPSED_ERROR)
            .bind(now)
            .execute(&mut *conn)
            .await
            .map_err(db(OP))?;
        batch.dead_lettered.push(parse_uuid(&id, "outbox_id", &id)?);
    }
    // Both selections are made before either is claimed, as in the memory store: they never
    // share a key (a key has one head), so claiming in between would change neither.
    let mut chosen = select_seqs(&statements.claim_lapsed, conn, request.limit, now, request)
        .await
        .map_err(db(OP))?;
    let room = request.limit - chosen.len();
    if room > 0 {
        chosen.extend(
            select_seqs(&statements.claim_ready, conn, room, now, request)
                .await
                .map_err(db(OP))?,
        );
    }
    let lease_until = now.saturating_add(request.lease);
    for seq in chosen {
        let row = query(&sql.mark_claimed)
            .bind(seq)
            .bind(&request.consumer_id)
            .bind(uuid_text(Uuid::new_v4()))
            .bind(lease_until)
            .bind(now)
            .fetch_one(&mut *conn)
            .await
            .map_err(db(OP))?;
        batch.messages.push(decode(&row)?);
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

/// The seqs a claim selection returns (binds: now, lane, target, limit).
async fn select_seqs(
    statement: &Arc<str>,
    conn: &mut SqliteConnection,
    limit: usize,
    now: UnixMillis,
    request: &ClaimRequest,
) -> Result<Vec<i64>, sqlx::Error> {
    let rows = query(statement)
        .bind(now)
        .bind(&request.lane)
        .bind(&request.target)
        .bind(int(limit))
        .fetch_all(&mut *conn)
        .await?;
    rows.iter().map(|row| row.try_get(0)).collect()
}

/// Opens a savepoint: a part of the transaction that can be undone alone.
pub(super) async fn savepoint(conn: &mut SqliteConnection, name: &str) -> Result<(), StoreError> {
    dynamic(format!("SAVEPOINT {name}"))
        .execute(&mut *conn)
        .await
        .map_err(db("savepoint"))?;
    Ok(())
}

/// Keeps (`keep`) or undoes what was written since the savepoint, and closes it.
pub(super) async fn end_savepoint(
    conn: &mut SqliteConnection,
    name: &str,
    keep: bool,
) -> Result<(), StoreError> {
    if !keep {
        dynamic(format!("ROLLBACK TO {name}"))
            .execute(&mut *conn)
            .await
            .map_err(db("savepoint"))?;
    }
    dynamic(format!("RELEASE {name}"))
        .execute(&mut *conn)
        .await
        .map_err(db("savepoint"))?;
    Ok(())
}

fn applied(rows_affected: u64) -> ClaimOutcome {
    if rows_affected == 1 {
        ClaimOutcome::Applied
    } else {
        ClaimOutcome::LostClaim
    }
}

/// Marks claims delivered. A claim that is no longer held matches no row: lost.
pub(super) async fn ack(
    sql: &Statements,
    conn: &mut SqliteConnection,
    claims: &[ClaimRef],
    now: UnixMillis,
) -> Result<Vec<ClaimOutcome>, StoreError> {
    let mut outcomes = Vec::with_capacity(claims.len());
    for claim in claims {
        let done = query(&sql.ack)
            .bind(uuid_text(claim.outbox_id))
            .bind(uuid_text(claim.claim_token))
            .bind(now)
            .execute(&mut *conn)
            .await
            .map_err(db("ack"))?;
        outcomes.push(applied(done.rows_affected()));
    }
    Ok(outcomes)
}

/// Records failed deliveries: back to pending after the delay while attempts remain,
/// otherwise (or when permanent) into the dead letter.
pub(super) async fn nack(
    sql: &Statements,
    conn: &mut SqliteConnection,
    nacks: &[Nack],
    now: UnixMillis,
) -> Result<Vec<NackOutcome>, StoreError> {
    let mut outcomes = Vec::with_capacity(nacks.len());
    for nack in nacks {
        let (retry, due) = match nack.disposition {
            NackDisposition::Retry(delay) => (true, now.saturating_add(delay)),
            NackDisposition::Permanent => (false, now),
        };
        let row = query(&sql.nack)
            .bind(uuid_text(nack.claim.outbox_id))
            .bind(uuid_text(nack.claim.claim_token))
            .bind(&nack.error)
            .bind(retry)
            .bind(due)
            .bind(now)
            .fetch_optional(&mut *conn)
            .await
            .map_err(db("nack"))?;
        let outcome = match row {
            None => NackOutcome::LostClaim,
            Some(row) => {
                let status: String = row.try_get(0).map_err(db("nack"))?;
                if status == OutboxStatus::Pending.as_str() {
                    NackOutcome::Requeued
                } else {
                    NackOutcome::DeadLettered
                }
            }
        };
        outcomes.push(outcome);
    }
    Ok(outcomes)
}

/// Moves the lease of each claim still held to `lease` from now.
pub(super) async fn extend_lease(
    sql: &Statements,
    conn: &mut SqliteConnection,
    claims: &[ClaimRef],
    lease: Duration,
    now: UnixMillis,
) -> Result<Vec<ClaimOutcome>, StoreError> {
    let until = now.saturating_add(lease);
    let mut outcomes = Vec::with_capacity(claims.len());
    for claim in claims {
        let done = query(&sql.extend)
            .bind(uuid_text(claim.outbox_id))
            .bind(uuid_text(claim.claim_token))
            .bind(until)
            .bind(now)
            .execute(&mut *conn)
            .await
            .map_err(db("extend_lease"))?;
        outcomes.push(applied(done.rows_affected()));
    }
    Ok(outcomes)
}

/// Returns claims unused: pending, due now, the attempt not counted.
pub(super) async fn release(
    sql: &Statements,
    conn: &mut SqliteConnection,
    claims: &[ClaimRef],
    now: UnixMillis,
    woken: &mut Woken,
) -> Result<Vec<ClaimOutcome>, StoreError> {
    let mut outcomes = Vec::with_capacity(claims.len());
    for claim in claims {
        let row = query(&sql.release)
            .bind(uuid_text(claim.outbox_id))
            .bind(uuid_text(claim.claim_token))
            .bind(now)
            .fetch_optional(&mut *conn)
            .await
            .map_err(db("release"))?;
        outcomes.push(match row {
            None => ClaimOutcome::LostClaim,
            Some(row) => {
                let lane: String = row.try_get(0).map_err(db("release"))?;
                let target: String = row.try_get(1).map_err(db("release"))?;
                woken.insert((lane, target));
                ClaimOutcome::Applied
            }
        });
    }
    Ok(outcomes)
}

/// Moves the selected dead letters back to pending, due now, attempts reset, `last_error`
/// kept. Returns the (lane, target) of each.
pub(super) async fn requeue_dead_letters(
    sql: &Statements,
    conn: &mut SqliteConnection,
    filter: &MessageFilter,
    now: UnixMillis,
) -> Result<Vec<(String, String)>, StoreError> {
    let filter = FilterSql::new(&filter.clone().with_status(OutboxStatus::DeadLetter), "");
    let mut statement = dynamic(format!(
        "UPDATE {} SET status = 'pending', attempt_count = 0, available_at = ?, updated_at = ?
         WHERE {} RETURNING lane, target",
        sql.table, filter.clause
    ))
    .bind(now)
    .bind(now);
    for value in filter.binds {
        statement = statement.bind(value);
    }
    let rows = statement
        .fetch_all(&mut *conn)
        .await
        .map_err(db("requeue_dead_letters"))?;
    rows.iter()
        .map(|row| {
            let lane: String = row.try_get(0).map_err(db("requeue_dead_letters"))?;
            let target: String = row.try_get(1).map_err(db("requeue_dead_letters"))?;
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
    let filter = FilterSql::new(&filter.clone().with_status(OutboxStatus::DeadLetter), "");
    let mut statement = dynamic(format!("DELETE FROM {} WHERE {}", sql.table, filter.clause));
    for value in filter.binds {
        statement = statement.bind(value);
    }
    let done = statement
        .execute(&mut *conn)
        .await
        .map_err(db("discard_dead_letters"))?;
    Ok(done.rows_affected())
}

/// Deletes at most `batch_size` finished rows last changed before `cutoff`.
pub(super) async fn purge_batch(
    sql: &Statements,
    conn: &mut SqliteConnection,
    status: OutboxStatus,
    cutoff: UnixMillis,
    lane: Option<&(String, String)>,
    batch_size: usize,
) -> Result<u64, StoreError> {
    let done = query(&sql.purge_batch)
        .bind(cutoff)
        .bind(int(batch_size))
        .bind(status.as_str())
        .bind(lane.map(|(lane, _)| lane.as_str()))
        .bind(lane.map(|(_, target)| target.as_str()))
        .execute(&mut *conn)
        .await
        .map_err(db("purge"))?;
    Ok(done.rows_affected())
}
