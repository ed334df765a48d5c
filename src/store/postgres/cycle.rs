//! The relay's cycle in one round trip: the cycle function (`sql/cycle.sql`) acks, promotes
//! the heads the acks left, claims, and answers `next_due` for an empty claim.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use sqlx::{AssertSqlSafe, Row, SqlSafeStr};
use uuid::Uuid;

use crate::message::ClaimRef;
use crate::store::StoreError;
use crate::store::StoreOp;
use crate::store::{AckMode, ClaimBatch, ClaimOutcome, ClaimRequest, NextDue, OrderingPolicy};

use super::fenced::FencedBatch;
use super::row::{db_error, unsigned};
use super::unreadable::sort_rows;
use super::{to_i64, PostgresOutboxStore};

/// What one call of the cycle function did.
pub(super) struct Cycle {
    /// One answer per ack, in order.
    pub(super) acked: Vec<ClaimOutcome>,
    /// The claim; empty when `lapsed_last`.
    pub(super) batch: ClaimBatch,
    /// The lane has a lapsed last attempt: the cycle claimed nothing, and the full claim
    /// (which dead-letters it) must run instead.
    pub(super) lapsed_last: bool,
}

impl PostgresOutboxStore {
    /// Whether to run the cycle function: [`super::PostgresConfig::cycle_function`], and the
    /// database has this build's (`migrate` creates it; a store over a database migrated by
    /// another build, by a role that may not create functions, runs the cycle's steps as
    /// separate statements instead).
    pub(super) fn has_cycle(&self) -> bool {
        self.cycle_function && self.cycle_ready.load(Ordering::Relaxed)
    }

    /// Acks `acks` and claims under `request`, in one call of the cycle function, which
    /// commits on its own (asynchronously unless [`super::PostgresConfig::synchronous_commit`]).
    /// All or nothing: an error leaves every row as it was.
    pub(super) async fn cycle(
        &self,
        acks: &[ClaimRef],
        request: &ClaimRequest,
        mode: AckMode,
    ) -> Result<Cycle, StoreError> {
        let op = if acks.is_empty() {
            StoreOp::Claim
        } else {
            StoreOp::AckAndClaim
        };
        let fenced = FencedBatch::new(acks);
        let mut call = self.call(op).await?;
        let rows = self
            .bind_request(
                AssertSqlSafe(Arc::clone(&self.sql.cycle)).into_sql_str(),
                request,
            )
            .bind(&fenced.ids)
            .bind(&fenced.tokens)
            .bind(request.ordering == OrderingPolicy::Block)
            .bind(self.async_commit)
            .bind(to_i64(request.run_len()))
            .bind(mode == AckMode::Delete)
            .fetch_all(&mut *call)
            .await
            .map_err(|e| db_error(op, e))?;
        call.finish(op).await?;
        let mut applied: Vec<i64> = Vec::new();
        let mut lapsed_last = false;
        let mut due_ms = None;
        for row in &rows {
            let id: Option<Uuid> = row.try_get("outbox_id").map_err(|e| db_error(op, e))?;
            if id.is_none() {
                // The last row: what the cycle did besides claiming.
                applied = row.try_get("acked").map_err(|e| db_error(op, e))?;
                lapsed_last = row.try_get("lapsed_last").map_err(|e| db_error(op, e))?;
                due_ms = Some(
                    row.try_get::<Option<i64>, _>("next_due_ms")
                        .map_err(|e| db_error(op, e))?,
                );
            }
        }
        // Each row read on its own: one that cannot be read is dead-lettered alone, and
        // the acks, committed by the function, are answered as applied all the same.
        let sorted = sort_rows(&rows, request.ordering, op)?;
        let settled = !sorted.unreadable.is_empty() || !sorted.held_back.is_empty();
        let mut batch = self.answer_committed(sorted, op).await;
        if batch.messages.is_empty() && !lapsed_last {
            batch.next_due = if settled {
                // The function answers no `next_due` for a claim that took rows, and a dead
                // letter may have made its key's next message claimable now. The acks are
                // committed: a failure here must not fail the call, so the lane asks later.
                self.next_due_alone(&request.lane, &request.target, request.ordering)
                    .await
                    .map_or(NextDue::Unknown, NextDue::Known)
            } else {
                NextDue::Known(
                    due_ms
                        .flatten()
                        .map(|ms| Duration::from_millis(unsigned(ms))),
                )
            };
        }
        let applied = applied
            .into_iter()
            .map(|ord| usize::try_from(ord - 1).unwrap_or(usize::MAX))
            .collect();
        Ok(Cycle {
            acked: fenced.outcomes(&applied, false),
            batch,
            lapsed_last,
        })
    }
}
