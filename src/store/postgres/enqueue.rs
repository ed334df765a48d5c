//! Enqueue: in the caller's transaction ([`PostgresOutboxStore::enqueue_in_tx`]) or
//! through the pool (the trait's `write_drafts`, which hands drafts to idle lanes of this
//! process: `store::hand_off`). Both write a planned batch of drafts (validated, repeats
//! resolved: `store::enqueue`): one INSERT for the batch, then a read of the messages
//! holding dedupe keys the INSERT found taken.

use std::collections::HashMap;

use sqlx::postgres::PgConnection;
use sqlx::AssertSqlSafe;
use uuid::Uuid;

use crate::message::{OutboxMessage, OutboxMessageDraft};
use crate::store::hand_off::Taken;
use crate::store::{DraftBatch, Enqueued, StoreError};

use super::decode::{self, db_error};
use super::{interval, PostgresOutboxStore};

/// A batch being written: its drafts, each with the id it is inserted under, and the claim
/// it is written with when handed off to a lane of this process (`store::hand_off`).
struct Plan<'a> {
    drafts: &'a [OutboxMessageDraft],
    ids: Vec<Uuid>,
    claims: Vec<Option<HandClaim>>,
}

/// The claim a handed-off draft is inserted with.
#[derive(Debug, Clone)]
pub(super) struct HandClaim {
    pub(super) claim_token: Uuid,
    pub(super) consumer_id: String,
    pub(super) lease_ms: i64,
}

/// A write that failed, with the rows it had already inserted (to undo inside a caller's
/// transaction, which we may not roll back).
pub(super) struct WriteFailure {
    pub(super) error: StoreError,
    pub(super) inserted: Vec<Uuid>,
}

impl PostgresOutboxStore {
    /// Writes one message on the caller's connection, normally inside the caller's
    /// transaction: it becomes visible, and wakes relays, only when that transaction
    /// commits. Takes any `&mut PgConnection`: `&mut tx` for a
    /// [`sqlx::Transaction`] (it derefs to one), `&mut *conn` for a pooled connection
    /// (then the row commits at once, outside any transaction of yours). A dedupe key taken
    /// by a message another transaction has not committed yet makes this wait for that
    /// transaction to end.
    pub async fn enqueue_in_tx(
        &self,
        tx: &mut PgConnection,
        draft: OutboxMessageDraft,
    ) -> Result<Enqueued, StoreError> {
        crate::store::single(self.enqueue_many_in_tx(tx, vec![draft]).await?)
    }

    /// Writes many messages on the caller's connection (see [`Self::enqueue_in_tx`]). On an
    /// error nothing of this call is left in the caller's transaction (a conflict undoes the
    /// rows already written); on a database error PostgreSQL has aborted that transaction
    /// anyway. `outbox_enqueued_total` counts the messages when they are written, before
    /// the caller commits (or rolls back).
    pub async fn enqueue_many_in_tx(
        &self,
        tx: &mut PgConnection,
        drafts: Vec<OutboxMessageDraft>,
    ) -> Result<Vec<Enqueued>, StoreError> {
        let (batch, plan) = crate::store::enqueue::plan(drafts, &self.limits)?;
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        match self.write(tx, &batch, Vec::new()).await {
            Ok(written) => {
                let answers = plan.answers(written)?;
                // The other way in besides the trait's `enqueue_many`, which counts its own.
                crate::metrics::record_enqueued(&answers);
                Ok(answers)
            }
            Err(failure) => {
                if !failure.inserted.is_empty() {
                    sqlx::query(AssertSqlSafe(self.sql.delete_ids.clone()))
                        .bind(&failure.inserted)
                        .execute(&mut *tx)
                        .await
                        .map_err(|e| db_error("enqueue (undo)", e))?;
                }
                Err(failure.error)
            }
        }
    }

    /// The trait's `write_drafts`: through the pool, one INSERT statement on its own or, when
    /// a draft has a dedupe key, in a transaction.
    pub(super) async fn write_handing_off(
        &self,
        drafts: DraftBatch,
    ) -> Result<Vec<Enqueued>, StoreError> {
        // Drafts a lane of this process takes (`store::hand_off`): written claimed, handed
        // to it after the commit. A credit not used goes back when its `Taken` drops.
        let sent_at = tokio::time::Instant::now();
        let taken: Vec<Option<Taken>> = drafts
            .drafts()
            .iter()
            .map(|d| {
                (d.ordering_key.is_none() && d.delay.is_zero())
                    .then(|| self.hand_off.take(&d.lane, &d.target))
                    .flatten()
            })
            .collect();
        let claims: Vec<Option<HandClaim>> = taken
            .iter()
            .map(|t| {
                t.as_ref().map(|t| HandClaim {
                    claim_token: Uuid::new_v4(),
                    consumer_id: t.consumer_id().to_owned(),
                    lease_ms: interval(t.lease()),
                })
            })
            .collect();
        let answers = if drafts.drafts().iter().all(|d| d.dedupe_key.is_none()) {
            // One INSERT statement: atomic on its own, no transaction round trips.
            let mut conn = self
                .pool
                .acquire()
                .await
                .map_err(|e| db_error("enqueue", e))?;
            self.write(&mut conn, &drafts, claims.clone())
                .await
                .map_err(|f| f.error)?
        } else {
            // A conflict found after some rows went in must take them back out: roll back.
            let mut tx = self
                .pool
                .begin()
                .await
                .map_err(|e| db_error("enqueue", e))?;
            let answers = self
                .write(&mut tx, &drafts, claims.clone())
                .await
                .map_err(|f| f.error)?;
            tx.commit().await.map_err(|e| db_error("enqueue", e))?;
            answers
        };
        // Committed: each handed-off draft that went in fresh, claimed with its token, goes
        // to its lane; the others' credits go back.
        for ((taken, claim), answer) in taken.into_iter().zip(&claims).zip(&answers) {
            let (Some(taken), Some(claim)) = (taken, claim) else {
                continue;
            };
            if !answer.duplicate && answer.message.claim_token == Some(claim.claim_token) {
                taken.deliver(answer.message.clone(), sent_at);
            } else {
                taken.give_back();
            }
        }
        Ok(answers)
    }

    /// Inserts a planned batch (valid drafts, no two with one dedupe key: see
    /// `store::enqueue`), reading back the holders of dedupe keys already taken.
    ///
    /// `claims`: per draft, the claim to insert it with (handed off), or `None` (pending);
    /// empty for none. Only the first INSERT writes them: a draft inserted on a retry (its
    /// dedupe key's holder vanished) goes in pending.
    pub(super) async fn write(
        &self,
        conn: &mut PgConnection,
        drafts: &DraftBatch,
        claims: Vec<Option<HandClaim>>,
    ) -> Result<Vec<Enqueued>, WriteFailure> {
        let mut plan = Plan {
            drafts: drafts.drafts(),
            ids: drafts.drafts().iter().map(|_| Uuid::now_v7()).collect(),
            claims: if claims.len() == drafts.len() {
                claims
            } else {
                vec![None; drafts.len()]
            },
        };
        let mut answers: Vec<Option<Enqueued>> = vec![None; plan.drafts.len()];
        let mut inserted = Vec::new();
        let fail = |error, inserted: &Vec<Uuid>| WriteFailure {
            error,
            inserted: inserted.clone(),
        };
        let mut todo: Vec<usize> = (0..plan.drafts.len()).collect();
        // A holder found taken by the insert may be purged or discarded before we read it;
        // then the key is free again and the insert is retried. Twice more is plenty.
        for _ in 0..3 {
            if todo.is_empty() {
                break;
            }
            let mut rows = self
                .insert(conn, &plan, &todo)
                .await
                .map_err(|e| fail(e, &inserted))?;
            plan.claims.iter_mut().for_each(|claim| *claim = None);
            let mut taken = Vec::new();
            for i in todo.drain(..) {
                match rows.remove(&plan.ids[i]) {
                    Some(message) => {
                        inserted.push(message.outbox_id);
                        answers[i] = Some(Enqueued {
                            message,
                            duplicate: false,
                        });
                    }
                    None => taken.push(i),
                }
            }
            if taken.is_empty() {
                break;
            }
            let holders = self
                .find_dedupe(conn, &plan, &taken)
                .await
                .map_err(|e| fail(e, &inserted))?;
            for i in taken {
                let draft = &plan.drafts[i];
                let holder = draft.dedupe_key.as_ref().and_then(|key| {
                    holders.get(&(draft.lane.clone(), draft.target.clone(), key.clone()))
                });
                match holder {
                    Some(existing) if draft.matches(existing) => {
                        answers[i] = Some(Enqueued {
                            message: existing.clone(),
                            duplicate: true,
                        });
                    }
                    Some(existing) => {
                        let error = StoreError::Conflict {
                            lane: draft.lane.clone(),
                            target: draft.target.clone(),
                            dedupe_key: draft.dedupe_key.clone().unwrap_or_default(),
                            existing: existing.outbox_id,
                        };
                        return Err(fail(error, &inserted));
                    }
                    None => todo.push(i),
                }
            }
        }
        if !todo.is_empty() {
            let error = StoreError::database(
                "enqueue",
                "a dedupe key's holder kept vanishing before it could be read",
            );
            return Err(fail(error, &inserted));
        }
        answers
            .into_iter()
            .map(|answer| answer.ok_or_else(|| StoreError::database("enqueue", "no answer")))
            .collect::<Result<_, _>>()
            .map_err(|e| fail(e, &inserted))
    }

    /// One INSERT for the drafts at `which`; answers the rows written, by id.
    async fn insert(
        &self,
        conn: &mut PgConnection,
        plan: &Plan<'_>,
        which: &[usize],
    ) -> Result<HashMap<Uuid, OutboxMessage>, StoreError> {
        let drafts = which.iter().map(|&i| &plan.drafts[i]);
        let claims = which.iter().map(|&i| plan.claims[i].as_ref());
        let headers = drafts
            .clone()
            .map(|d| serde_json::to_value(&d.headers))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| StoreError::database("enqueue: headers", e))?;
        let rows = sqlx::query(AssertSqlSafe(self.sql.enqueue.clone()))
            .bind(self.now())
            .bind(&self.names.channel)
            .bind(which.iter().map(|&i| plan.ids[i]).collect::<Vec<_>>())
            .bind(drafts.clone().map(|d| d.lane.clone()).collect::<Vec<_>>())
            .bind(drafts.clone().map(|d| d.target.clone()).collect::<Vec<_>>())
            .bind(
                drafts
                    .clone()
                    .map(|d| d.payload.as_str().to_owned())
                    .collect::<Vec<_>>(),
            )
            .bind(headers)
            .bind(
                drafts
                    .clone()
                    .map(|d| d.ordering_key.clone())
                    .collect::<Vec<_>>(),
            )
            .bind(
                drafts
                    .clone()
                    .map(|d| d.dedupe_key.clone())
                    .collect::<Vec<_>>(),
            )
            .bind(
                drafts
                    .clone()
                    .map(|d| interval(d.delay))
                    .collect::<Vec<_>>(),
            )
            .bind(
                drafts
                    .map(|d| i64::from(d.max_attempts))
                    .collect::<Vec<_>>(),
            )
            .bind(
                claims
                    .clone()
                    .map(|c| c.map(|c| c.consumer_id.clone()))
                    .collect::<Vec<_>>(),
            )
            .bind(
                claims
                    .clone()
                    .map(|c| c.map(|c| c.claim_token))
                    .collect::<Vec<_>>(),
            )
            .bind(claims.map(|c| c.map(|c| c.lease_ms)).collect::<Vec<_>>())
            .fetch_all(conn)
            .await
            .map_err(|e| db_error("enqueue", e))?;
        rows.iter()
            .map(|row| decode::message(row).map(|m| (m.outbox_id, m)))
            .collect()
    }

    /// The messages holding the dedupe keys of the drafts at `which`.
    async fn find_dedupe(
        &self,
        conn: &mut PgConnection,
        plan: &Plan<'_>,
        which: &[usize],
    ) -> Result<HashMap<(String, String, String), OutboxMessage>, StoreError> {
        let drafts = which.iter().map(|&i| &plan.drafts[i]);
        let rows = sqlx::query(AssertSqlSafe(self.sql.find_dedupe.clone()))
            .bind(drafts.clone().map(|d| d.lane.clone()).collect::<Vec<_>>())
            .bind(drafts.clone().map(|d| d.target.clone()).collect::<Vec<_>>())
            .bind(drafts.map(|d| d.dedupe_key.clone()).collect::<Vec<_>>())
            .fetch_all(conn)
            .await
            .map_err(|e| db_error("enqueue (dedupe)", e))?;
        let mut holders = HashMap::new();
        for row in &rows {
            let message = decode::message(row)?;
            if let Some(key) = message.dedupe_key.clone() {
                holders.insert((message.lane.clone(), message.target.clone(), key), message);
            }
        }
        Ok(holders)
    }
}
