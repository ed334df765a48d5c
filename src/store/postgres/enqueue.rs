//! Writing drafts: validation and in-batch dedupe first, then one INSERT for the batch,
//! then a read of the messages holding dedupe keys the INSERT found taken.

use std::collections::HashMap;

use sqlx::postgres::PgConnection;
use sqlx::AssertSqlSafe;
use uuid::Uuid;

use crate::message::{OutboxMessage, OutboxMessageDraft};
use crate::store::{Enqueued, StoreError};

use super::decode::{self, db_error};
use super::{interval, PostgresOutboxStore};

/// Drafts checked and ready to write: each with its id, and for a repeat of an earlier
/// draft of the batch with the same dedupe key, the index of that first one.
pub(super) struct Plan {
    pub(super) drafts: Vec<OutboxMessageDraft>,
    pub(super) ids: Vec<Uuid>,
    pub(super) first: Vec<usize>,
}

/// A write that failed, with the rows it had already inserted (to undo inside a caller's
/// transaction, which we may not roll back).
pub(super) struct WriteFailure {
    pub(super) error: StoreError,
    pub(super) inserted: Vec<Uuid>,
}

impl PostgresOutboxStore {
    /// Validates every draft and resolves repeats within the batch, before anything is
    /// written, as the reference store does.
    pub(super) fn plan(&self, drafts: Vec<OutboxMessageDraft>) -> Result<Plan, StoreError> {
        for draft in &drafts {
            draft.validate(&self.limits)?;
        }
        let mut drafts = drafts;
        crate::trace_context::capture(&mut drafts);
        let mut first = Vec::with_capacity(drafts.len());
        let mut seen: HashMap<(&str, &str, &str), usize> = HashMap::new();
        for (i, draft) in drafts.iter().enumerate() {
            let Some(key) = &draft.dedupe_key else {
                first.push(i);
                continue;
            };
            let slot = (draft.lane.as_str(), draft.target.as_str(), key.as_str());
            match seen.get(&slot) {
                Some(&j) if drafts[j] != *draft => {
                    return Err(StoreError::Conflict {
                        lane: draft.lane.clone(),
                        target: draft.target.clone(),
                        dedupe_key: key.clone(),
                        existing: Uuid::nil(),
                    })
                }
                Some(&j) => first.push(j),
                None => {
                    seen.insert(slot, i);
                    first.push(i);
                }
            }
        }
        let ids = drafts.iter().map(|_| Uuid::now_v7()).collect();
        Ok(Plan { drafts, ids, first })
    }

    /// Inserts the plan's drafts, reading back the holders of dedupe keys already taken.
    pub(super) async fn write(
        &self,
        conn: &mut PgConnection,
        plan: &Plan,
    ) -> Result<Vec<Enqueued>, WriteFailure> {
        let mut answers: Vec<Option<Enqueued>> = vec![None; plan.drafts.len()];
        let mut inserted = Vec::new();
        let fail = |error, inserted: &Vec<Uuid>| WriteFailure {
            error,
            inserted: inserted.clone(),
        };
        let mut todo: Vec<usize> = (0..plan.drafts.len())
            .filter(|&i| plan.first[i] == i)
            .collect();
        // A holder found taken by the insert may be purged or discarded before we read it;
        // then the key is free again and the insert is retried. Twice more is plenty.
        for _ in 0..3 {
            if todo.is_empty() {
                break;
            }
            let mut rows = self
                .insert(conn, plan, &todo)
                .await
                .map_err(|e| fail(e, &inserted))?;
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
                .find_dedupe(conn, plan, &taken)
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
        for i in 0..plan.drafts.len() {
            let j = plan.first[i];
            if j != i {
                answers[i] = answers[j].as_ref().map(|first| Enqueued {
                    message: first.message.clone(),
                    duplicate: true,
                });
            }
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
        plan: &Plan,
        which: &[usize],
    ) -> Result<HashMap<Uuid, OutboxMessage>, StoreError> {
        let drafts = which.iter().map(|&i| &plan.drafts[i]);
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
        plan: &Plan,
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
