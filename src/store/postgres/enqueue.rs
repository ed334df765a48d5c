//! Enqueue: in the caller's transaction (`Outbox::enqueue_in_tx`) or through the pool (the
//! backend's `write_drafts`, which inserts drafts handed off to idle lanes of this process
//! already claimed: `store::hand_off`). Both write a planned batch of drafts (validated, repeats
//! resolved: `store::enqueue`): one INSERT for the batch, then a read of the messages
//! holding dedupe keys the INSERT found taken.

use std::collections::HashMap;

use sqlx::postgres::PgConnection;
use sqlx::AssertSqlSafe;
use uuid::Uuid;

use crate::message::{OutboxMessage, OutboxMessageDraft};
use crate::store::StoreOp;
use crate::store::{DraftBatch, Enqueued, StoreError};

use super::row::{self, db_error};
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
    /// Writes a planned batch on the caller's connection (`Outbox::enqueue_many_in_tx`). On
    /// an error nothing of it is left in the caller's transaction (a conflict undoes the
    /// rows already written); on a database error PostgreSQL has aborted that transaction
    /// anyway.
    pub(crate) async fn write_in_tx(
        &self,
        tx: &mut PgConnection,
        batch: &DraftBatch,
    ) -> Result<Vec<Enqueued>, StoreError> {
        match self.write(tx, batch, Vec::new()).await {
            Ok(written) => Ok(written),
            Err(failure) => {
                if !failure.inserted.is_empty() {
                    sqlx::query(AssertSqlSafe(self.sql.delete_ids.clone()))
                        .persistent(self.named_statements)
                        .bind(&failure.inserted)
                        .execute(&mut *tx)
                        .await
                        .map_err(|e| db_error(StoreOp::Enqueue, e))?;
                }
                Err(failure.error)
            }
        }
    }

    /// The backend's `write_drafts`: through the pool, one INSERT statement on its own or,
    /// when a draft has a dedupe key, in a transaction. A draft with a pre-claim (handed
    /// off to a lane of this process) is inserted claimed.
    pub(super) async fn write_pooled(
        &self,
        drafts: DraftBatch,
    ) -> Result<Vec<Enqueued>, StoreError> {
        let claims: Vec<Option<HandClaim>> = (0..drafts.len())
            .map(|i| {
                drafts.pre_claim(i).map(|pre| HandClaim {
                    claim_token: pre.claim_token,
                    consumer_id: pre.consumer_id.clone(),
                    lease_ms: interval(pre.lease),
                })
            })
            .collect();
        let claims = if claims.iter().any(Option::is_some) {
            claims
        } else {
            Vec::new()
        };
        if drafts.drafts().iter().all(|d| d.dedupe_key.is_none()) {
            // One INSERT statement: atomic on its own, no transaction round trips (but
            // through a transaction pooler, the call's own transaction: `call.rs`).
            let mut call = self.call(StoreOp::Enqueue).await?;
            let answers = self
                .write(&mut call, &drafts, claims)
                .await
                .map_err(|f| f.error)?;
            call.finish(StoreOp::Enqueue).await?;
            Ok(answers)
        } else {
            // A conflict found after some rows went in must take them back out: roll back.
            let mut tx = self.begin(StoreOp::Enqueue).await?;
            let answers = self
                .write(&mut tx, &drafts, claims)
                .await
                .map_err(|f| f.error)?;
            tx.commit()
                .await
                .map_err(|e| db_error(StoreOp::Enqueue, e))?;
            Ok(answers)
        }
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
                StoreOp::Enqueue,
                "a dedupe key's holder kept vanishing before it could be read",
            );
            return Err(fail(error, &inserted));
        }
        answers
            .into_iter()
            .map(|answer| answer.ok_or_else(|| StoreError::database(StoreOp::Enqueue, "no answer")))
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
            .map_err(|e| StoreError::database(StoreOp::Enqueue, e))?;
        let rows = sqlx::query(AssertSqlSafe(self.sql.enqueue.clone()))
            .persistent(self.named_statements)
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
            .map_err(|e| db_error(StoreOp::Enqueue, e))?;
        rows.iter()
            .map(|row| row::message(row).map(|m| (m.outbox_id, m)))
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
            .persistent(self.named_statements)
            .bind(drafts.clone().map(|d| d.lane.clone()).collect::<Vec<_>>())
            .bind(drafts.clone().map(|d| d.target.clone()).collect::<Vec<_>>())
            .bind(drafts.map(|d| d.dedupe_key.clone()).collect::<Vec<_>>())
            .fetch_all(conn)
            .await
            .map_err(|e| db_error(StoreOp::Enqueue, e))?;
        let mut holders = HashMap::new();
        for row in &rows {
            let message = row::message(row)?;
            if let Some(key) = message.dedupe_key.clone() {
                holders.insert((message.lane.clone(), message.target.clone(), key), message);
            }
        }
        Ok(holders)
    }
}
