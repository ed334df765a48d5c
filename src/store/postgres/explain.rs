//! `EXPLAIN (ANALYZE, FORMAT JSON)` of the statements whose cost must not grow with the
//! lane: for operators who want to see what a claim reads on their data, and for the guard
//! tests that pin those plans. The statement really runs (ANALYZE), inside a transaction
//! that is rolled back, so nothing it would change is kept.

use sqlx::{AssertSqlSafe, Row};

use crate::message::ClaimRef;
use crate::store::StoreOp;
use crate::store::LEASE_LAPSED_ERROR;
use crate::store::{
    ClaimRequest, MessageFilter, OrderingPolicy, PageRequest, PurgeRequest, StoreError,
};
use crate::ValidationError;

use super::list::list_sql;
use super::row::db_error;
use super::{interval, to_i64, PostgresOutboxStore};

/// A statement to explain with [`PostgresOutboxStore::explain`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Explained {
    /// The claim statement for this request: the one that also dead-letters lapsed last
    /// attempts, run in a transaction when the lane has one.
    Claim(ClaimRequest),
    /// The one-statement claim the relay makes in the common case (no lapsed last attempt).
    FastClaim(ClaimRequest),
    /// `next_due` of a lane under an ordering policy.
    NextDue {
        /// The lane.
        lane: String,
        /// The target.
        target: String,
        /// The policy (it picks the statement).
        ordering: OrderingPolicy,
    },
    /// A page of the listing (`GET /api/v1/messages`): see `store/postgres/list.rs` for
    /// what each filter reads.
    List {
        /// The filter.
        filter: MessageFilter,
        /// The page.
        page: PageRequest,
    },
    /// The stats of one lane.
    LaneStats {
        /// The lane.
        lane: String,
        /// The target.
        target: String,
    },
    /// The ack of these claims on its own (as `ack` runs it, and as the cycle function's
    /// first step does): with `delete`, the deleting twin of a lane that keeps no history
    /// (`keep_delivered = false`). Its key-head promotion, a separate statement, is not
    /// part of it.
    Ack {
        /// The claims to ack.
        claims: Vec<ClaimRef>,
        /// Whether the ack deletes the rows ([`AckMode::Delete`](crate::store::AckMode)).
        delete: bool,
    },
    /// The lanes nobody serves (`unserved_lanes`), at most `limit`.
    UnservedLanes {
        /// The most lanes.
        limit: usize,
    },
    /// The first page of a lane's keys held by a dead head (`blocked_keys`).
    BlockedKeys {
        /// The lane.
        lane: String,
        /// The target.
        target: String,
        /// The page's size.
        limit: usize,
    },
    /// One batch of `purge` (as `purge` deletes it, not its dry run's count) for the first
    /// status the request names (delivered when it names both).
    Purge {
        /// The purge: its lanes, age, batch size and kept keyed rows.
        request: PurgeRequest,
        /// Under `plan_cache_mode = force_generic_plan`: the plan the relay's prepared
        /// statement switches to after five executions, which an explain with the values
        /// bound never shows. Otherwise the custom plan, made for these values.
        generic: bool,
    },
}

impl PostgresOutboxStore {
    /// Runs `statement` under `EXPLAIN (ANALYZE, FORMAT JSON)` with `jit = off` (as the
    /// relay's connections run), rolls it back, and answers PostgreSQL's JSON plan.
    #[cfg_attr(docsrs, doc(cfg(feature = "plans")))]
    pub async fn explain(&self, statement: &Explained) -> Result<serde_json::Value, StoreError> {
        let op = StoreOp::Maintenance;
        let mut tx = self.begin(op).await?;
        sqlx::raw_sql("SET LOCAL jit = off")
            .execute(&mut *tx)
            .await
            .map_err(|e| db_error(op, e))?;
        const EXPLAIN: &str = "EXPLAIN (ANALYZE, FORMAT JSON) ";
        let list;
        let execute;
        let (ids, tokens): (Vec<uuid::Uuid>, Vec<uuid::Uuid>) = match statement {
            Explained::Ack { claims, .. } => {
                claims.iter().map(|c| (c.outbox_id, c.claim_token)).unzip()
            }
            _ => (Vec::new(), Vec::new()),
        };
        // The purge runs as a statement prepared in SQL: only `EXPLAIN EXECUTE` of a prepared
        // statement follows `plan_cache_mode` (an explained statement is planned with its
        // values). `PREPARE` survives the rollback: it is deallocated below, and named once
        // per call, so one left by a failed explain is never met again.
        let prepared = format!("outbox_explain_purge_{}", uuid::Uuid::new_v4().simple());
        let query = match statement {
            Explained::Claim(request) => self
                .claim_query(EXPLAIN, request, false)
                .bind(LEASE_LAPSED_ERROR),
            Explained::FastClaim(request) => self.claim_query(EXPLAIN, request, true),
            Explained::NextDue {
                lane,
                target,
                ordering,
            } => {
                let sql = match ordering {
                    OrderingPolicy::Skip => &self.sql.next_due_skip,
                    OrderingPolicy::Block => &self.sql.next_due_block,
                };
                sqlx::query(AssertSqlSafe(format!("{EXPLAIN}{sql}")))
                    .persistent(self.named_statements)
                    .bind(self.now())
                    .bind(lane)
                    .bind(target)
            }
            Explained::List { filter, page } => {
                list = list_sql(&self.names.messages, filter, *page);
                list.query(EXPLAIN).persistent(self.named_statements)
            }
            Explained::LaneStats { lane, target } => {
                sqlx::query(AssertSqlSafe(format!("{EXPLAIN}{}", self.sql.lanes_stats)))
                    .persistent(self.named_statements)
                    .bind(self.now())
                    .bind(std::slice::from_ref(lane))
                    .bind(std::slice::from_ref(target))
            }
            Explained::Ack { delete: true, .. } => {
                sqlx::query(AssertSqlSafe(format!("{EXPLAIN}{}", self.sql.ack_delete)))
                    .persistent(self.named_statements)
                    .bind(&ids)
                    .bind(&tokens)
            }
            Explained::Ack { delete: false, .. } => {
                sqlx::query(AssertSqlSafe(format!("{EXPLAIN}{}", self.sql.ack)))
                    .persistent(self.named_statements)
                    .bind(self.now())
                    .bind(&ids)
                    .bind(&tokens)
            }
            Explained::UnservedLanes { limit } => {
                sqlx::query(AssertSqlSafe(format!("{EXPLAIN}{}", self.sql.unserved)))
                    .persistent(self.named_statements)
                    .bind(self.now())
                    .bind(to_i64(*limit))
                    .bind(
                        i64::try_from(crate::store::served::UNSERVED_COUNT_CAP).unwrap_or(i64::MAX),
                    )
            }
            Explained::BlockedKeys {
                lane,
                target,
                limit,
            } => sqlx::query(AssertSqlSafe(format!("{EXPLAIN}{}", self.sql.blocked_keys)))
                .bind(lane)
                .bind(target)
                .bind(None::<i64>)
                .bind(to_i64(*limit)),
            Explained::Purge { request, generic } => {
                let (status, older_than) = request.ages().next().ok_or_else(|| {
                    ValidationError::new(
                        "delivered_older_than",
                        "the purge request names no status: it runs no statement",
                    )
                })?;
                let mode = if *generic { "generic" } else { "custom" };
                sqlx::raw_sql(AssertSqlSafe(format!(
                    "SET LOCAL plan_cache_mode = force_{mode}_plan;
                     PREPARE {prepared} AS {}",
                    self.sql.purge
                )))
                .execute(&mut *tx)
                .await
                .map_err(|e| db_error(op, e))?;
                let (lanes, targets): (Vec<&str>, Vec<&str>) = request
                    .lanes
                    .iter()
                    .map(|(lane, target)| (lane.as_str(), target.as_str()))
                    .unzip();
                // `EXECUTE` takes no parameters of the statement around it: the values are
                // written into it as literals, quoted by PostgreSQL.
                execute = sqlx::query_scalar::<_, String>(AssertSqlSafe(format!(
                    "SELECT format('EXECUTE {prepared}(%L, %L, %L, %L, %L, %L, %L)',
                                   $1::int8, $2::int8, $3::int8, $4::text, $5::text[],
                                   $6::text[], $7::bool)"
                )))
                .persistent(false)
                .bind(self.now())
                .bind(interval(older_than))
                .bind(to_i64(request.batch_size.max(1)))
                .bind(status.as_str())
                .bind(&lanes)
                .bind(&targets)
                .bind(request.keeps_keyed(status))
                .fetch_one(&mut *tx)
                .await
                .map_err(|e| db_error(op, e))?;
                sqlx::query(AssertSqlSafe(format!("{EXPLAIN}{execute}"))).persistent(false)
            }
        };
        let row = query
            .fetch_one(&mut *tx)
            .await
            .map_err(|e| db_error(op, e))?;
        let plan: serde_json::Value = row.try_get(0).map_err(|e| db_error(op, e))?;
        if let Explained::Purge { .. } = statement {
            sqlx::raw_sql(AssertSqlSafe(format!("DEALLOCATE {prepared}")))
                .execute(&mut *tx)
                .await
                .map_err(|e| db_error(op, e))?;
        }
        tx.rollback().await.map_err(|e| db_error(op, e))?;
        Ok(plan)
    }
}
