//! The fenced writes: ack, nack, lease extension and release act only on a row still
//! claimed with the caller's token. Each call is one transaction: one locking read of the
//! rows named, the decision per claim in Rust (in order, so a claim named twice applies
//! once), then one statement per kind of change.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use sqlx::mysql::MySqlConnection;
use sqlx::{AssertSqlSafe, Row};
use uuid::Uuid;

use crate::message::ClaimRef;
use crate::store::{AckAndClaim, AckMode, ClaimBatch, ClaimRequest};
use crate::store::{ClaimOutcome, Nack, NackDisposition, NackOutcome, StoreError, StoreOp};
use crate::time::UnixMillis;

use super::claim;
use super::heads::{self, Key};
use super::in_list::InList;
use super::row::{db_error, opt_text, text};
use super::schema::Names;
use super::MysqlOutboxStore;

/// What a fenced write needs to know of a row.
struct Held {
    seq: i64,
    lane: String,
    target: String,
    key: Option<String>,
    claimed: bool,
    token: Option<Uuid>,
    key_head: bool,
    attempts: u32,
    max_attempts: u32,
}

impl Held {
    fn key(&self) -> Option<Key> {
        self.key
            .as_ref()
            .map(|k| (self.lane.clone(), self.target.clone(), k.clone()))
    }
}

/// Locks and reads the rows the claims name, by id.
async fn held(
    conn: &mut MySqlConnection,
    names: &Names,
    claims: impl Iterator<Item = Uuid>,
    op: StoreOp,
) -> Result<HashMap<Uuid, Held>, StoreError> {
    let ids: Vec<Uuid> = claims.collect::<BTreeSet<Uuid>>().into_iter().collect();
    let mut held = HashMap::with_capacity(ids.len());
    let rows = InList::new(&names.sql.fenced_rows)
        .fetch(conn, &ids, op)
        .await?;
    for row in rows {
        let get = |e| db_error(op, e);
        let corrupt = |bad| StoreError::Corrupt {
            id: "?".into(),
            reason: format!("{op}: {bad:?}"),
        };
        let id: Uuid = row.try_get("outbox_id").map_err(get)?;
        let status: String = row.try_get("status").map_err(get)?;
        let key_head: i8 = row.try_get("key_head").map_err(get)?;
        held.insert(
            id,
            Held {
                seq: row.try_get("seq").map_err(get)?,
                lane: text(&row, "lane").map_err(corrupt)?,
                target: text(&row, "target").map_err(corrupt)?,
                key: opt_text(&row, "ordering_key").map_err(corrupt)?,
                claimed: status == "claimed",
                token: row.try_get("claim_token").map_err(get)?,
                key_head: key_head == 1,
                attempts: row.try_get("attempt_count").map_err(get)?,
                max_attempts: row.try_get("max_attempts").map_err(get)?,
            },
        );
    }
    Ok(held)
}

/// Decides each claim in order: the rows it applies to, `None` for a lost claim. A claim
/// named twice applies once.
fn fence<'h>(held: &'h HashMap<Uuid, Held>, claims: &[ClaimRef]) -> Vec<Option<&'h Held>> {
    let mut used = BTreeSet::new();
    claims
        .iter()
        .map(|claim| {
            held.get(&claim.outbox_id).filter(|row| {
                row.claimed && row.token == Some(claim.claim_token) && used.insert(row.seq)
            })
        })
        .collect()
}

fn outcomes(applied: &[Option<&Held>]) -> Vec<ClaimOutcome> {
    applied
        .iter()
        .map(|a| match a {
            Some(_) => ClaimOutcome::Applied,
            None => ClaimOutcome::LostClaim,
        })
        .collect()
}

/// Acks `claims` on `conn`, inside the caller's transaction: marks each row still held
/// under its token delivered (or, with `AckMode::Delete`, deletes it) and moves the heads of
/// the keys whose head left. Round trips: the locking read of the rows, the locking read of
/// their keys' rows (only when a head leaves), the write, and the heads' refresh (two
/// statements). The write clears the acked rows' head mark itself, so the refresh has no
/// mark of theirs to clear.
pub(super) async fn ack_on(
    conn: &mut MySqlConnection,
    names: &Names,
    claims: &[ClaimRef],
    mode: AckMode,
    now: UnixMillis,
) -> Result<Vec<ClaimOutcome>, StoreError> {
    const OP: StoreOp = StoreOp::Ack;
    if claims.is_empty() {
        return Ok(Vec::new());
    }
    let held = held(conn, names, claims.iter().map(|c| c.outbox_id), OP).await?;
    let applied = fence(&held, claims);
    let rows: Vec<&Held> = applied.iter().flatten().copied().collect();
    // Only a head leaving moves its key's head; a run's tail acked first does not.
    let keys: BTreeSet<Key> = rows
        .iter()
        .filter(|r| r.key_head)
        .filter_map(|r| r.key())
        .collect();
    let locked = heads::lock_existing(conn, names, &keys, OP).await?;
    let seqs: Vec<i64> = rows.iter().map(|r| r.seq).collect();
    let write = match mode {
        AckMode::Delete => InList::new(&names.sql.ack_delete),
        AckMode::KeepDelivered => InList::new(&names.sql.ack_delivered)
            .bind(now.as_millis())
            .bind(now.as_millis()),
    };
    write.execute(conn, &seqs, OP).await?;
    heads::refresh(conn, names, &locked, OP).await?;
    Ok(outcomes(&applied))
}

impl MysqlOutboxStore {
    /// An ack in a transaction of its own.
    pub(super) async fn ack_once(
        &self,
        claims: &[ClaimRef],
        mode: AckMode,
    ) -> Result<Vec<ClaimOutcome>, StoreError> {
        const OP: StoreOp = StoreOp::Ack;
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        let now = self.now();
        let mut tx = self.begin(OP).await?;
        let answers = ack_on(&mut tx, &self.names, claims, mode, now).await?;
        tx.commit().await.map_err(|e| db_error(OP, e))?;
        Ok(answers)
    }

    /// Acks, then claims, in one transaction: one commit for both, and the claims see what
    /// the acks freed. A failed claim rolls the acks back with it and answers the error:
    /// nothing is recorded, so the acks may be sent again (the `ack_and_claim` contract).
    pub(super) async fn ack_and_claim_once(
        &self,
        acks: &[ClaimRef],
        requests: &[ClaimRequest],
        mode: AckMode,
    ) -> Result<AckAndClaim<Vec<ClaimBatch>>, StoreError> {
        const OP: StoreOp = StoreOp::Claim;
        let now = self.now();
        let mut tx = self.begin(OP).await?;
        let acked = ack_on(&mut tx, &self.names, acks, mode, now).await?;
        let claimed = claim::claim_each(&mut tx, &self.names, requests, now).await?;
        tx.commit().await.map_err(|e| db_error(OP, e))?;
        Ok(AckAndClaim {
            acked,
            claimed: Ok(claimed),
        })
    }

    pub(super) async fn nack_once(&self, nacks: &[Nack]) -> Result<Vec<NackOutcome>, StoreError> {
        const OP: StoreOp = StoreOp::Nack;
        if nacks.is_empty() {
            return Ok(Vec::new());
        }
        let now = self.now();
        let mut tx = self.begin(OP).await?;
        let claims: Vec<ClaimRef> = nacks.iter().map(|n| n.claim).collect();
        let held = held(&mut tx, &self.names, claims.iter().map(|c| c.outbox_id), OP).await?;
        let applied = fence(&held, &claims);
        let mut answers = Vec::with_capacity(nacks.len());
        let mut dead: Vec<(&Held, &Nack)> = Vec::new();
        let mut retry: Vec<(&Held, &Nack, Duration)> = Vec::new();
        for (nack, row) in nacks.iter().zip(&applied) {
            let Some(row) = row else {
                answers.push(NackOutcome::LostClaim);
                continue;
            };
            match nack.disposition {
                NackDisposition::Retry(delay) if row.attempts < row.max_attempts => {
                    retry.push((row, nack, delay));
                    answers.push(NackOutcome::Requeued);
                }
                _ => {
                    dead.push((row, nack));
                    answers.push(NackOutcome::DeadLettered);
                }
            }
        }
        let keys: BTreeSet<Key> = dead
            .iter()
            .filter(|(r, _)| r.key_head)
            .filter_map(|(r, _)| r.key())
            .collect();
        let locked = heads::lock_existing(&mut tx, &self.names, &keys, OP).await?;
        let retry_sql = Arc::clone(&self.names.sql.nack_retry);
        for (row, nack, delay) in &retry {
            sqlx::query(AssertSqlSafe(Arc::clone(&retry_sql)))
                .bind(now.saturating_add(*delay).as_millis())
                .bind(&nack.error)
                .bind(now.as_millis())
                .bind(row.seq)
                .execute(&mut *tx)
                .await
                .map_err(|e| db_error(OP, e))?;
        }
        // One statement per row: each has its own error.
        for (row, nack) in &dead {
            InList::new(&self.names.sql.dead_letter)
                .bind(&nack.error)
                .bind(now.as_millis())
                .execute(&mut tx, &[row.seq], OP)
                .await?;
        }
        heads::refresh(&mut tx, &self.names, &locked, OP).await?;
        tx.commit().await.map_err(|e| db_error(OP, e))?;
        Ok(answers)
    }

    pub(super) async fn extend_once(
        &self,
        claims: &[ClaimRef],
        lease: Duration,
    ) -> Result<Vec<ClaimOutcome>, StoreError> {
        const OP: StoreOp = StoreOp::ExtendLease;
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        let now = self.now();
        let mut tx = self.begin(OP).await?;
        let held = held(&mut tx, &self.names, claims.iter().map(|c| c.outbox_id), OP).await?;
        let applied = fence(&held, claims);
        let seqs: Vec<i64> = applied.iter().flatten().map(|r| r.seq).collect();
        InList::new(&self.names.sql.extend)
            .bind(now.saturating_add(lease).as_millis())
            .bind(now.as_millis())
            .execute(&mut tx, &seqs, OP)
            .await?;
        tx.commit().await.map_err(|e| db_error(OP, e))?;
        Ok(outcomes(&applied))
    }

    /// Releases claims; answers the outcomes and the lanes to wake.
    pub(super) async fn release_once(
        &self,
        claims: &[ClaimRef],
    ) -> Result<(Vec<ClaimOutcome>, Vec<(String, String)>), StoreError> {
        const OP: StoreOp = StoreOp::Release;
        if claims.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        let now: UnixMillis = self.now();
        let mut tx = self.begin(OP).await?;
        let held = held(&mut tx, &self.names, claims.iter().map(|c| c.outbox_id), OP).await?;
        let applied = fence(&held, claims);
        let seqs: Vec<i64> = applied.iter().flatten().map(|r| r.seq).collect();
        InList::new(&self.names.sql.release)
            .bind(now.as_millis())
            .bind(now.as_millis())
            .execute(&mut tx, &seqs, OP)
            .await?;
        tx.commit().await.map_err(|e| db_error(OP, e))?;
        let lanes = applied
            .iter()
            .flatten()
            .map(|r| (r.lane.clone(), r.target.clone()))
            .collect();
        Ok((outcomes(&applied), lanes))
    }
}
