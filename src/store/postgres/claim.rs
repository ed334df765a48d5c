//! The claim and the operations that take rows out of live (ack, a dead-lettering nack),
//! each in one transaction with the `promote_heads` call that keeps every key's head marked
//! (`heads.rs`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgConnection;
use sqlx::{AssertSqlSafe, Row, SqlSafeStr, SqlStr};

use crate::message::ClaimRef;
use crate::store::AckMode;
use crate::store::StoreOp;
use crate::store::LEASE_LAPSED_ERROR;
use crate::store::{
    ClaimBatch, ClaimOutcome, ClaimRequest, Nack, NackDisposition, NackOutcome, NextDue,
    OrderingPolicy, StoreError,
};

use super::fenced::FencedBatch;
use super::heads::LeftKeys;
use super::row::db_error;
use super::unreadable::sort_rows;
use super::{interval, to_i64, unsigned, PostgresOutboxStore};

impl PostgresOutboxStore {
    /// The claim, on `conn` inside a transaction the caller commits.
    pub(super) async fn claim_in(
        &self,
        conn: &mut PgConnection,
        request: &ClaimRequest,
    ) -> Result<ClaimBatch, StoreError> {
        let op = StoreOp::Claim;
        let rows = self
            .claim_query("", request, false)
            .bind(LEASE_LAPSED_ERROR)
            .fetch_all(&mut *conn)
            .await
            .map_err(|e| db_error(op, e))?;
        let mut batch = ClaimBatch::default();
        let mut left = LeftKeys::default();
        if let Some(row) = rows.first() {
            batch.dead_lettered = row.try_get("dead_ids").map_err(|e| db_error(op, e))?;
            let keys: Vec<String> = row.try_get("dead_keys").map_err(|e| db_error(op, e))?;
            for key in keys {
                left.push(request.lane.clone(), request.target.clone(), key);
            }
        }
        self.promote_heads(conn, &left, op).await?;
        // Each row read on its own; one that cannot be read is dead-lettered in this
        // transaction, before `next_due` looks at its key.
        let sorted = sort_rows(&rows, request.ordering, op)?;
        batch.unreadable = self.settle_unreadable(conn, &sorted, op).await?;
        batch.messages = sorted.messages;
        if batch.messages.is_empty() {
            // After the claim, in its transaction, so a relay that sleeps on this answer
            // needs no `next_due` call of its own. Only for an empty claim: a relay that got
            // messages holds claims, and asks nothing until they are recorded (it rides a
            // claim on that ack instead), so a busy claim pays no extra round trip.
            batch.next_due = NextDue::Known(
                self.next_due_on(&mut *conn, &request.lane, &request.target, request.ordering)
                    .await?,
            );
        }
        Ok(batch)
    }

    /// A claim statement under `request`'s ordering policy, `prefix` before its text
    /// (`EXPLAIN ..`, or nothing), with `$1`..`$7` bound: now, lane, target, limit, lease,
    /// consumer, longest key run. `fast`: the one-statement claim; else the full one, which
    /// binds `$8` (the lapsed-lease error) after.
    pub(super) fn claim_query<'q>(
        &self,
        prefix: &str,
        request: &'q ClaimRequest,
        fast: bool,
    ) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
        let sql = match (request.ordering, fast) {
            (OrderingPolicy::Skip, false) => &self.sql.claim_skip,
            (OrderingPolicy::Block, false) => &self.sql.claim_block,
            (OrderingPolicy::Skip, true) => &self.sql.claim_fast_skip,
            (OrderingPolicy::Block, true) => &self.sql.claim_fast_block,
        };
        // Without a prefix (every claim but an EXPLAIN's), the store's text itself.
        let sql = if prefix.is_empty() {
            AssertSqlSafe(Arc::clone(sql)).into_sql_str()
        } else {
            AssertSqlSafe(format!("{prefix}{sql}")).into_sql_str()
        };
        self.bind_request(sql, request)
            .bind(to_i64(request.run_len()))
    }

    /// `sql` with a claim request's parameters bound as `$1`..`$6`: now, lane, target,
    /// limit, lease, consumer (the claim statements and the cycle function alike).
    pub(super) fn bind_request<'q>(
        &self,
        sql: SqlStr,
        request: &'q ClaimRequest,
    ) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
        sqlx::query(sql)
            .persistent(self.named_statements)
            .bind(self.now())
            .bind(&request.lane)
            .bind(&request.target)
            .bind(to_i64(request.limit))
            .bind(interval(request.lease))
            .bind(&request.consumer_id)
    }

    /// The one-statement claim (`sql/claim_fast_*.sql`), on the pool: the batch, and
    /// whether the lane has a lapsed last attempt that only [`Self::claim_in`] dead-letters.
    /// Its `next_due` is left `Unknown`.
    pub(super) async fn claim_fast(
        &self,
        request: &ClaimRequest,
    ) -> Result<(ClaimBatch, bool), StoreError> {
        let op = StoreOp::Claim;
        let mut call = self.call(op).await?;
        let rows = self
            .claim_query("", request, true)
            .fetch_all(&mut *call)
            .await
            .map_err(|e| db_error(op, e))?;
        call.finish(op).await?;
        let mut lapsed_last = false;
        for row in &rows {
            lapsed_last = row.try_get("lapsed_last").map_err(|e| db_error(op, e))?;
        }
        let sorted = sort_rows(&rows, request.ordering, op)?;
        Ok((self.answer_committed(sorted, op).await, lapsed_last))
    }

    /// `next_due` in a call of its own.
    pub(super) async fn next_due_alone(
        &self,
        lane: &str,
        target: &str,
        ordering: OrderingPolicy,
    ) -> Result<Option<Duration>, StoreError> {
        let mut call = self.call(StoreOp::NextDue).await?;
        let due = self.next_due_on(&mut *call, lane, target, ordering).await?;
        call.finish(StoreOp::NextDue).await?;
        Ok(due)
    }

    /// `next_due` of each of `lanes`, in order, in one statement (`sql/lanes_next_due.sql`,
    /// `lanes_next_due`).
    pub(super) async fn lanes_next_due_of(
        &self,
        lanes: &[(String, String, OrderingPolicy)],
    ) -> Result<Vec<Option<Duration>>, StoreError> {
        let op = StoreOp::NextDue;
        let mut skip: (Vec<&str>, Vec<&str>, Vec<i32>) = Default::default();
        let mut block: (Vec<&str>, Vec<&str>, Vec<i32>) = Default::default();
        for (i, (lane, target, ordering)) in lanes.iter().enumerate() {
            let part = match ordering {
                OrderingPolicy::Skip => &mut skip,
                OrderingPolicy::Block => &mut block,
            };
            part.0.push(lane);
            part.1.push(target);
            part.2.push(i32::try_from(i).unwrap_or(i32::MAX));
        }
        let mut call = self.call(op).await?;
        let rows = sqlx::query(AssertSqlSafe(self.sql.lanes_next_due.clone()))
            .persistent(self.named_statements)
            .bind(self.now())
            .bind(&skip.0)
            .bind(&skip.1)
            .bind(&skip.2)
            .bind(&block.0)
            .bind(&block.1)
            .bind(&block.2)
            .fetch_all(&mut *call)
            .await
            .map_err(|e| db_error(op, e))?;
        call.finish(op).await?;
        let mut due = vec![None; lanes.len()];
        for row in &rows {
            let i: i32 = row.try_get("i").map_err(|e| db_error(op, e))?;
            let wait: Option<i64> = row.try_get("wait_ms").map_err(|e| db_error(op, e))?;
            if let Some(slot) = usize::try_from(i).ok().and_then(|i| due.get_mut(i)) {
                *slot = wait.map(|ms| Duration::from_millis(unsigned(ms)));
            }
        }
        Ok(due)
    }

    /// `next_due` on `executor`: a call's connection, or a claim's transaction.
    pub(super) async fn next_due_on<'c>(
        &self,
        executor: impl sqlx::PgExecutor<'c>,
        lane: &str,
        target: &str,
        ordering: OrderingPolicy,
    ) -> Result<Option<Duration>, StoreError> {
        let sql = match ordering {
            OrderingPolicy::Skip => &self.sql.next_due_skip,
            OrderingPolicy::Block => &self.sql.next_due_block,
        };
        let wait: Option<i64> = sqlx::query_scalar(AssertSqlSafe(sql.clone()))
            .bind(self.now())
            .bind(lane)
            .bind(target)
            .persistent(self.named_statements)
            .fetch_one(executor)
            .await
            .map_err(|e| db_error(StoreOp::NextDue, e))?;
        Ok(wait.map(|ms| Duration::from_millis(unsigned(ms))))
    }

    /// The ack, on `conn` inside a transaction the caller commits.
    pub(super) async fn ack_in(
        &self,
        conn: &mut PgConnection,
        claims: &[ClaimRef],
        mode: AckMode,
    ) -> Result<Vec<ClaimOutcome>, StoreError> {
        let op = StoreOp::Ack;
        let batch = FencedBatch::new(claims);
        let query = if mode == AckMode::Delete {
            sqlx::query(AssertSqlSafe(self.sql.ack_delete.clone()))
        } else {
            sqlx::query(AssertSqlSafe(self.sql.ack.clone())).bind(self.now())
        };
        let rows = query
            .persistent(self.named_statements)
            .bind(&batch.ids)
            .bind(&batch.tokens)
            .fetch_all(&mut *conn)
            .await
            .map_err(|e| db_error(op, e))?;
        let mut left = LeftKeys::default();
        for row in &rows {
            left.push_row(row, op)?;
        }
        self.promote_heads(conn, &left, op).await?;
        Ok(batch.outcomes(&FencedBatch::applied(&rows, op)?, false))
    }

    /// The nacks, in one transaction: the fenced statement requeues or dead-letters each
    /// claim still held, then `promote_heads` marks the new head of each key a dead letter
    /// took out of live. Answers per nack, in input order.
    pub(super) async fn record_nacks(
        &self,
        nacks: &[Nack],
    ) -> Result<Vec<NackOutcome>, StoreError> {
        let op = StoreOp::Nack;
        let batch = FencedBatch::new(nacks.iter().map(|n| &n.claim));
        // The first nack of each claim is the one that counts, as in the reference store.
        let mut firsts: Vec<&Nack> = Vec::with_capacity(batch.ids.len());
        for (nack, &(_, first)) in nacks.iter().zip(&batch.slots) {
            if first {
                firsts.push(nack);
            }
        }
        let errors: Vec<&str> = firsts.iter().map(|n| n.error.as_str()).collect();
        let retries: Vec<Option<i64>> = firsts
            .iter()
            .map(|n| match n.disposition {
                NackDisposition::Retry(delay) => Some(interval(delay)),
                NackDisposition::Permanent => None,
            })
            .collect();
        let mut tx = self.relay_begin(op).await?;
        let rows = self
            .fenced(&mut tx, op, &self.sql.nack, &batch, |q| {
                q.bind(errors).bind(retries)
            })
            .await?;
        let mut outcomes: HashMap<usize, NackOutcome> = HashMap::new();
        let mut left = LeftKeys::default();
        for row in &rows {
            let ord: i64 = row.try_get("ord").map_err(|e| db_error(op, e))?;
            let status: String = row.try_get("status").map_err(|e| db_error(op, e))?;
            let outcome = if status == "pending" {
                NackOutcome::Requeued
            } else {
                left.push_row(row, op)?;
                NackOutcome::DeadLettered
            };
            outcomes.insert(usize::try_from(ord - 1).unwrap_or(usize::MAX), outcome);
        }
        self.promote_heads(&mut tx, &left, op).await?;
        tx.commit().await.map_err(|e| db_error(op, e))?;
        let dead = outcomes
            .values()
            .filter(|o| **o == NackOutcome::DeadLettered)
            .count();
        self.vacuum.retired(dead, &self.pool, &self.names.messages);
        Ok(batch
            .slots
            .iter()
            .map(|&(slot, first)| match outcomes.get(&slot) {
                Some(outcome) if first => *outcome,
                _ => NackOutcome::LostClaim,
            })
            .collect())
    }
}
