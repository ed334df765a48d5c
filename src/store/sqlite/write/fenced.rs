//! The batch operations fenced on a claim token (ack, nack, extend_lease, release): each
//! changes a row only while it is still claimed under the token named, one statement per
//! round of claims, and answers per claim in the caller's order, a claim no longer held
//! answered lost.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnection, SqliteRow};
use sqlx::Row;
use uuid::Uuid;

use crate::message::ClaimRef;
use crate::message::{OutboxStatus, UnixMillis};
use crate::store::sqlite::row::{db, json_text, parse_uuid, uuid_text};
use crate::store::sqlite::schema::Statements;
use crate::store::sqlite::statement::{query, Query};
use crate::store::StoreOp;
use crate::store::{AckMode, ClaimOutcome, Nack, NackDisposition, NackOutcome, StoreError};

use super::Woken;

/// The claims of one call split into rounds for the batch statements: each
/// (outbox_id, claim_token) pair once, and each message at most once per round, so a row
/// that `RETURNING` names tells which pair it matched. Nearly every call is one round; a
/// second holds a message named under a second token (a stale claim beside its successor).
/// At most one of a message's tokens can match its row, and no batch statement hands a row a
/// token another pair names, so the rounds' order changes nothing.
fn rounds<T>(items: &[T], claim: impl Fn(&T) -> &ClaimRef) -> Vec<Vec<&T>> {
    let mut tokens: HashMap<Uuid, Vec<Uuid>> = HashMap::new();
    let mut rounds: Vec<Vec<&T>> = Vec::new();
    for item in items {
        let ClaimRef {
            outbox_id,
            claim_token,
        } = *claim(item);
        let seen = tokens.entry(outbox_id).or_default();
        if seen.contains(&claim_token) {
            continue;
        }
        if rounds.len() <= seen.len() {
            rounds.push(Vec::new());
        }
        rounds[seen.len()].push(item);
        seen.push(claim_token);
    }
    rounds
}

/// `[[outbox_id, claim_token], ...]`, as the batch statements read it (`sql/ack.sql`).
fn claims_json(claims: &[&ClaimRef]) -> Result<String, StoreError> {
    let pairs: Vec<(String, String)> = claims
        .iter()
        .map(|claim| (uuid_text(claim.outbox_id), uuid_text(claim.claim_token)))
        .collect();
    json_text(&pairs, "claims")
}

/// The outcome of each claim in the caller's order, from what the batch statements did to
/// each pair. A pair named again after it was applied is a lost claim, as the memory store,
/// going item by item, finds the row no longer held; unless `repeats_apply` (an extended
/// lease is still held under the same token).
fn in_order<T: Copy>(
    claims: impl IntoIterator<Item = ClaimRef>,
    applied: &HashMap<ClaimRef, T>,
    lost: T,
    repeats_apply: bool,
) -> Vec<T> {
    let mut seen = HashSet::new();
    claims
        .into_iter()
        .map(|claim| match applied.get(&claim) {
            Some(outcome) if seen.insert(claim) || repeats_apply => *outcome,
            _ => lost,
        })
        .collect()
}

/// Reads the `outbox_id` of each row a batch statement returned (column 0) and pairs it
/// with the round's claim of that message.
fn returned_claim(
    row: &SqliteRow,
    round: &HashMap<Uuid, ClaimRef>,
    op: StoreOp,
) -> Result<ClaimRef, StoreError> {
    let id: String = row.try_get(0).map_err(db(op))?;
    let outbox_id = parse_uuid(&id, "outbox_id", &id)?;
    round.get(&outbox_id).copied().ok_or_else(|| {
        StoreError::database(
            op,
            format!("changed message {id}, which the call did not name"),
        )
    })
}

/// Runs a claims statement (?1 the claims, then `binds`) once per round and returns, per
/// pair it changed, what the row it returned says.
async fn claims_statement<T>(
    statement: &Arc<str>,
    conn: &mut SqliteConnection,
    claims: &[ClaimRef],
    op: StoreOp,
    bind: impl Fn(Query<'_>) -> Query<'_>,
    mut outcome: impl FnMut(&SqliteRow) -> Result<T, StoreError>,
) -> Result<HashMap<ClaimRef, T>, StoreError> {
    let mut applied = HashMap::new();
    for round in rounds(claims, |claim| claim) {
        let rows = bind(query(statement).bind(claims_json(&round)?))
            .fetch_all(&mut *conn)
            .await
            .map_err(db(op))?;
        let named: HashMap<Uuid, ClaimRef> = round.iter().map(|c| (c.outbox_id, **c)).collect();
        for row in &rows {
            applied.insert(returned_claim(row, &named, op)?, outcome(row)?);
        }
    }
    Ok(applied)
}

/// Runs a claims statement whose rows say "changed" (each shown to `on_row`): Applied per
/// pair it changed, LostClaim for the rest, in input order (see [`in_order`] for
/// `repeats_apply`).
async fn applied_or_lost(
    statement: &Arc<str>,
    conn: &mut SqliteConnection,
    claims: &[ClaimRef],
    op: StoreOp,
    bind: impl Fn(Query<'_>) -> Query<'_>,
    repeats_apply: bool,
    mut on_row: impl FnMut(&SqliteRow) -> Result<(), StoreError>,
) -> Result<Vec<ClaimOutcome>, StoreError> {
    let applied = claims_statement(statement, conn, claims, op, bind, |row| {
        on_row(row).map(|()| ClaimOutcome::Applied)
    })
    .await?;
    Ok(in_order(
        claims.iter().copied(),
        &applied,
        ClaimOutcome::LostClaim,
        repeats_apply,
    ))
}

/// Marks claims delivered. A claim that is no longer held matches no row: lost.
///
/// Keyed heads last. A head that leaves hands its mark to its key's next live row (the
/// trigger `head_on_leave`), and SQLite updates a statement's rows in rowid order, so a key
/// run of n rows acked in one statement handed the mark along the run n times, each
/// hand-off two writes and two index probes. So the first statement takes the rows that
/// hand nothing on to a row acked after them (rows without a key, and keyed rows queued
/// behind their head), and a second one, only when some claims are left, takes the rest:
/// each head then hands its mark once, past its run. A lane without keys runs one
/// statement, as before.
///
/// With [`AckMode::Delete`] the rows are deleted instead, in the same two statements (the
/// trigger `head_on_delete` hands a deleted head's mark on as `head_on_leave` does).
pub(in crate::store::sqlite) async fn ack(
    sql: &Statements,
    conn: &mut SqliteConnection,
    claims: &[ClaimRef],
    now: UnixMillis,
    mode: AckMode,
) -> Result<Vec<ClaimOutcome>, StoreError> {
    const OP: StoreOp = StoreOp::Ack;
    let applied = |_: &SqliteRow| Ok(ClaimOutcome::Applied);
    let delete = mode == AckMode::Delete;
    let (first, second) = if delete {
        (&sql.ack_delete_first, &sql.ack_delete)
    } else {
        (&sql.ack_first, &sql.ack)
    };
    // The deleting statements write no time.
    let mut done = claims_statement(
        first,
        conn,
        claims,
        OP,
        |q| if delete { q } else { q.bind(now) },
        applied,
    )
    .await?;
    let rest: Vec<ClaimRef> = claims
        .iter()
        .filter(|claim| !done.contains_key(claim))
        .copied()
        .collect();
    if !rest.is_empty() {
        done.extend(
            claims_statement(
                second,
                conn,
                &rest,
                OP,
                |q| if delete { q } else { q.bind(now) },
                applied,
            )
            .await?,
        );
    }
    Ok(in_order(
        claims.iter().copied(),
        &done,
        ClaimOutcome::LostClaim,
        false,
    ))
}

/// Records failed deliveries: back to pending after the delay while attempts remain,
/// otherwise (or when permanent) into the dead letter.
pub(in crate::store::sqlite) async fn nack(
    sql: &Statements,
    conn: &mut SqliteConnection,
    nacks: &[Nack],
    now: UnixMillis,
) -> Result<Vec<NackOutcome>, StoreError> {
    const OP: StoreOp = StoreOp::Nack;
    let mut applied = HashMap::new();
    for round in rounds(nacks, |nack| &nack.claim) {
        let given: Vec<(String, String, &str, u8, i64)> = round
            .iter()
            .map(|nack| {
                let (retry, due) = match nack.disposition {
                    NackDisposition::Retry(delay) => (1, now.saturating_add(delay)),
                    NackDisposition::Permanent => (0, now),
                };
                (
                    uuid_text(nack.claim.outbox_id),
                    uuid_text(nack.claim.claim_token),
                    nack.error.as_str(),
                    retry,
                    due.as_millis(),
                )
            })
            .collect();
        let rows = query(&sql.nack)
            .bind(json_text(&given, "nacks")?)
            .bind(now)
            .fetch_all(&mut *conn)
            .await
            .map_err(db(OP))?;
        let named: HashMap<Uuid, ClaimRef> = round
            .iter()
            .map(|nack| (nack.claim.outbox_id, nack.claim))
            .collect();
        for row in &rows {
            let status: String = row.try_get(1).map_err(db(OP))?;
            let outcome = if status == OutboxStatus::Pending.as_str() {
                NackOutcome::Requeued
            } else {
                NackOutcome::DeadLettered
            };
            applied.insert(returned_claim(row, &named, OP)?, outcome);
        }
    }
    Ok(in_order(
        nacks.iter().map(|nack| nack.claim),
        &applied,
        NackOutcome::LostClaim,
        false,
    ))
}

/// Moves the lease of each claim still held to `lease` from now.
pub(in crate::store::sqlite) async fn extend_lease(
    sql: &Statements,
    conn: &mut SqliteConnection,
    claims: &[ClaimRef],
    lease: Duration,
    now: UnixMillis,
) -> Result<Vec<ClaimOutcome>, StoreError> {
    let until = now.saturating_add(lease);
    applied_or_lost(
        &sql.extend,
        conn,
        claims,
        StoreOp::ExtendLease,
        |q| q.bind(until).bind(now),
        true,
        |_| Ok(()),
    )
    .await
}

/// Returns claims unused: pending, due now, the attempt not counted.
pub(in crate::store::sqlite) async fn release(
    sql: &Statements,
    conn: &mut SqliteConnection,
    claims: &[ClaimRef],
    now: UnixMillis,
    woken: &mut Woken,
) -> Result<Vec<ClaimOutcome>, StoreError> {
    const OP: StoreOp = StoreOp::Release;
    applied_or_lost(
        &sql.release,
        conn,
        claims,
        OP,
        |q| q.bind(now),
        false,
        |row| {
            let lane: String = row.try_get(1).map_err(db(OP))?;
            let target: String = row.try_get(2).map_err(db(OP))?;
            woken.insert((lane, target));
            Ok(())
        },
    )
    .await
}
