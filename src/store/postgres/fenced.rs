//! The batch operations fenced on a claim token (ack, nack, extend_lease, release): one
//! UPDATE over `unnest` of the claims, answered per claim in input order.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use sqlx::postgres::{PgArguments, PgConnection, PgRow};
use sqlx::query::Query;
use sqlx::{AssertSqlSafe, Postgres, Row};
use uuid::Uuid;

use crate::message::ClaimRef;
use crate::store::StoreOp;
use crate::store::{ClaimOutcome, StoreError};

use super::row::db_error;
use super::PostgresOutboxStore;

impl PostgresOutboxStore {
    /// Runs a fenced batch statement whose rows answer the ordinals (1-based, of the
    /// de-duplicated claims) it applied to.
    pub(super) async fn fenced(
        &self,
        conn: &mut PgConnection,
        op: StoreOp,
        sql: &Arc<str>,
        batch: &FencedBatch,
        extra: impl FnOnce(Query<'_, Postgres, PgArguments>) -> Query<'_, Postgres, PgArguments>,
    ) -> Result<Vec<PgRow>, StoreError> {
        let query = sqlx::query(AssertSqlSafe(sql.clone()))
            .persistent(self.named_statements)
            .bind(self.now())
            .bind(&batch.ids)
            .bind(&batch.tokens);
        extra(query)
            .fetch_all(conn)
            .await
            .map_err(|e| db_error(op, e))
    }
}

/// A batch of claims for ack, nack, extend_lease or release, each (id, token) pair once.
///
/// The reference store applies a batch in order, so a repeated claim finds the row already
/// changed: ack, nack and release answer `LostClaim` for a repeat, extend_lease `Applied`
/// again. One UPDATE touches a row at most once, so repeats are sent once and answered here.
pub(super) struct FencedBatch {
    pub(super) ids: Vec<Uuid>,
    pub(super) tokens: Vec<Uuid>,
    /// For each input, its position in `ids`/`tokens`, and whether it is the first.
    pub(super) slots: Vec<(usize, bool)>,
}

impl FencedBatch {
    pub(super) fn new<'a>(claims: impl IntoIterator<Item = &'a ClaimRef>) -> Self {
        let mut batch = FencedBatch {
            ids: Vec::new(),
            tokens: Vec::new(),
            slots: Vec::new(),
        };
        let mut seen: HashMap<ClaimRef, usize> = HashMap::new();
        for claim in claims {
            match seen.get(claim) {
                Some(&slot) => batch.slots.push((slot, false)),
                None => {
                    seen.insert(*claim, batch.ids.len());
                    batch.slots.push((batch.ids.len(), true));
                    batch.ids.push(claim.outbox_id);
                    batch.tokens.push(claim.claim_token);
                }
            }
        }
        batch
    }

    /// Positions (0-based) of the unique claims a statement applied to, from its `ord`s.
    pub(super) fn applied(rows: &[PgRow], op: StoreOp) -> Result<HashSet<usize>, StoreError> {
        rows.iter()
            .map(|row| {
                let ord: i64 = row.try_get("ord").map_err(|e| db_error(op, e))?;
                Ok(usize::try_from(ord - 1).unwrap_or(usize::MAX))
            })
            .collect()
    }

    pub(super) fn outcomes(&self, applied: &HashSet<usize>, repeatable: bool) -> Vec<ClaimOutcome> {
        self.slots
            .iter()
            .map(|&(slot, first)| {
                if applied.contains(&slot) && (first || repeatable) {
                    ClaimOutcome::Applied
                } else {
                    ClaimOutcome::LostClaim
                }
            })
            .collect()
    }
}
