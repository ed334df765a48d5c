//! The rows of a claim that do not decode (`store/unreadable.rs`): each dead-lettered alone
//! by the fenced nack statement, with `promote_heads` for its key, and under `Block` the
//! messages of its key claimed behind it released, all in one transaction.

use sqlx::postgres::{PgConnection, PgRow};
use sqlx::Row;
use uuid::Uuid;

use crate::message::ClaimRef;
use crate::store::unreadable::{self, SortedClaim};
use crate::store::StoreOp;
use crate::store::{ClaimBatch, OrderingPolicy, StoreError, UnreadableRow};

use super::fenced::FencedBatch;
use super::heads::LeftKeys;
use super::row::{self, db_error};
use super::PostgresOutboxStore;

/// Reads the message rows of a claim (those with an `outbox_id`), each on its own, and
/// sorts them under `ordering`.
pub(super) fn sort_rows<'r>(
    rows: impl IntoIterator<Item = &'r PgRow>,
    ordering: OrderingPolicy,
    op: StoreOp,
) -> Result<SortedClaim, StoreError> {
    let mut claimed = Vec::new();
    for row in rows {
        let id: Option<Uuid> = row.try_get("outbox_id").map_err(|e| db_error(op, e))?;
        if id.is_some() {
            claimed.push(row::claimed(row, op)?);
        }
    }
    Ok(unreadable::sort(claimed, ordering))
}

impl PostgresOutboxStore {
    /// Dead-letters the unreadable rows of `sorted` and releases the messages it holds back,
    /// on `conn`, inside a transaction the caller commits. Answers the rows dead-lettered (a
    /// row whose token no longer matches is left alone, as every fenced statement does).
    pub(super) async fn settle_unreadable(
        &self,
        conn: &mut PgConnection,
        sorted: &SortedClaim,
        op: StoreOp,
    ) -> Result<Vec<UnreadableRow>, StoreError> {
        let rows: Vec<_> = sorted
            .unreadable
            .iter()
            .filter_map(|row| {
                row.outbox_id.map(|outbox_id| {
                    let claim = ClaimRef {
                        outbox_id,
                        claim_token: row.claim_token,
                    };
                    (claim, row)
                })
            })
            .collect();
        let mut dead = Vec::new();
        if !rows.is_empty() {
            let batch = FencedBatch::new(rows.iter().map(|(claim, _)| claim));
            let errors: Vec<&str> = rows.iter().map(|(_, row)| row.error.as_str()).collect();
            let permanent: Vec<Option<i64>> = vec![None; rows.len()];
            let updated = self
                .fenced(&mut *conn, op, &self.sql.nack, &batch, |q| {
                    q.bind(errors).bind(permanent)
                })
                .await?;
            let mut left = LeftKeys::default();
            for row in &updated {
                left.push_row(row, op)?;
            }
            let applied = FencedBatch::applied(&updated, op)?;
            for (slot, (_, row)) in rows.iter().enumerate() {
                if applied.contains(&slot) {
                    dead.push(row.answer());
                }
            }
            self.promote_heads(&mut *conn, &left, op).await?;
        }
        if !sorted.held_back.is_empty() {
            let batch = FencedBatch::new(&sorted.held_back);
            let channel = self.names.channel.clone();
            self.fenced(&mut *conn, op, &self.sql.release, &batch, |q| {
                q.bind(channel)
            })
            .await?;
        }
        Ok(dead)
    }

    /// The claim's answer from `sorted`, for a claim that already committed (the cycle
    /// function, the one-statement claim): the unreadable rows are dead-lettered in a
    /// transaction of their own. If that fails, they are left claimed, and their leases
    /// lapse as a crashed relay's would: the next claims try again, and the last attempt's
    /// lapse dead-letters them. The messages read are handed out either way.
    pub(super) async fn answer_committed(&self, sorted: SortedClaim, op: StoreOp) -> ClaimBatch {
        let mut batch = ClaimBatch::default();
        if !sorted.unreadable.is_empty() || !sorted.held_back.is_empty() {
            match self.settle_apart(&sorted, op).await {
                Ok(dead) => batch.unreadable = dead,
                Err(error) => tracing::warn!(
                    %error,
                    rows = sorted.unreadable.len(),
                    "could not dead-letter claimed rows that cannot be read; their leases will lapse"
                ),
            }
        }
        batch.messages = sorted.messages;
        batch
    }

    async fn settle_apart(
        &self,
        sorted: &SortedClaim,
        op: StoreOp,
    ) -> Result<Vec<UnreadableRow>, StoreError> {
        let mut tx = self.relay_begin(op).await?;
        let dead = self.settle_unreadable(&mut tx, sorted, op).await?;
        tx.commit().await.map_err(|e| db_error(op, e))?;
        self.vacuum
            .retired(dead.len(), &self.pool, &self.names.messages);
        Ok(dead)
    }
}
