//! `EXPLAIN FORMAT=JSON` of every statement a claim and `next_due` run, as they would run
//! now on a lane: for operators who want to see what a claim reads on their data, and for
//! the guard test that pins the plans (`tests/mysql/plans.rs`). Nothing is changed: the
//! statements run, if at all, in a transaction that is rolled back.

use sqlx::{AssertSqlSafe, Row};

use crate::store::{ClaimRequest, StoreError, StoreOp};

use super::claim::{
    first_dead_sql, next_lapse_sql, run_sql, running_sql, scan_sql, stops_sql, Scan,
};
use super::row::{db_error, opt_text};
use super::MysqlOutboxStore;

/// One statement of a claim and the server's plan for it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClaimPlan {
    /// Which statement: `lapsed`, `ready`, `running_keys`, `first_dead`, `run_stops`,
    /// `run`, `next_lapse` or `next_due_ready`.
    pub statement: &'static str,
    /// The statement as explained.
    pub sql: String,
    /// The server's `EXPLAIN FORMAT=JSON` answer, or with [`Explain::Analyze`] its
    /// `ANALYZE FORMAT=JSON` answer (the rows each table really read, as `r_rows`).
    pub plan: serde_json::Value,
}

/// How [`MysqlOutboxStore::explain_claim`] asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Explain {
    /// `EXPLAIN FORMAT=JSON`: the plan, with estimated rows (MySQL 8 and MariaDB).
    Plan,
    /// `ANALYZE FORMAT=JSON` (MariaDB only): runs each statement, inside a transaction
    /// that is rolled back, and answers the plan with the rows really read.
    Analyze,
}

impl MysqlOutboxStore {
    /// Explains the statements a claim for `request` runs, and `next_due`'s, with the keys
    /// of the lane's first due heads as their key lists (a key `-` when there is none).
    pub async fn explain_claim(
        &self,
        request: &ClaimRequest,
        how: Explain,
    ) -> Result<Vec<ClaimPlan>, StoreError> {
        const OP: StoreOp = StoreOp::Maintenance;
        let prefix = match how {
            Explain::Plan => "EXPLAIN FORMAT=JSON",
            Explain::Analyze => "ANALYZE FORMAT=JSON",
        };
        let now = self.now();
        let limit = request.limit.max(1);
        let mut conn = self.begin(OP).await?;
        // The keys the gates and runs would look at: those of the first due heads.
        let (first_page, _) = scan_sql(&self.names, Scan::Ready, now, None, limit, false);
        let rows = sqlx::query(AssertSqlSafe(first_page))
            .bind(&request.lane)
            .bind(&request.target)
            .fetch_all(&mut *conn)
            .await
            .map_err(|e| db_error(OP, e))?;
        let mut heads: Vec<(String, i64)> = Vec::new();
        for row in &rows {
            if let Ok(Some(key)) = opt_text(row, "ordering_key") {
                let seq: i64 = row.try_get("seq").map_err(|e| db_error(OP, e))?;
                heads.push((key, seq));
            }
        }
        if heads.is_empty() {
            heads.push(("-".to_owned(), 0));
        }
        let lane = request.lane.as_str();
        let target = request.target.as_str();
        let mut plans = Vec::new();
        let (lapsed, _) = scan_sql(&self.names, Scan::Lapsed, now, None, limit, true);
        let (ready, _) = scan_sql(&self.names, Scan::Ready, now, None, limit, true);
        let (all_ready, _) = scan_sql(&self.names, Scan::AllReady, now, None, limit, false);
        for (statement, sql) in [
            ("lapsed", lapsed),
            ("ready", ready),
            ("next_due_ready", all_ready),
        ] {
            let query = sqlx::query(AssertSqlSafe(format!("{prefix} {sql}")))
                .bind(lane)
                .bind(target);
            plans.push(ClaimPlan {
                statement,
                plan: plan_of(query.fetch_one(&mut *conn).await, OP)?,
                sql,
            });
        }
        let n = heads.len();
        let sql = running_sql(&self.names, n);
        let mut query = sqlx::query(AssertSqlSafe(format!("{prefix} {sql}")))
            .bind(lane)
            .bind(target);
        for (key, _) in &heads {
            query = query.bind(key.as_str());
        }
        let query = query.bind(now.as_millis());
        plans.push(ClaimPlan {
            statement: "running_keys",
            plan: plan_of(query.fetch_one(&mut *conn).await, OP)?,
            sql,
        });
        let sql = first_dead_sql(&self.names, n);
        let mut query = sqlx::query(AssertSqlSafe(format!("{prefix} {sql}")))
            .bind(lane)
            .bind(target);
        for (key, _) in &heads {
            query = query.bind(key.as_str());
        }
        plans.push(ClaimPlan {
            statement: "first_dead",
            plan: plan_of(query.fetch_one(&mut *conn).await, OP)?,
            sql,
        });
        let sql = stops_sql(&self.names, n, request.ordering);
        let mut query = sqlx::query(AssertSqlSafe(format!("{prefix} {sql}")));
        for (key, seq) in &heads {
            query = query.bind(lane).bind(target).bind(key.as_str()).bind(seq);
        }
        plans.push(ClaimPlan {
            statement: "run_stops",
            plan: plan_of(query.fetch_one(&mut *conn).await, OP)?,
            sql,
        });
        let sql = run_sql(&self.names, n, request.run_len().max(2) - 1);
        let mut query = sqlx::query(AssertSqlSafe(format!("{prefix} {sql}")));
        for (key, seq) in &heads {
            query = query
                .bind(lane)
                .bind(target)
                .bind(key.as_str())
                .bind(seq)
                .bind(i64::MAX);
        }
        plans.push(ClaimPlan {
            statement: "run",
            plan: plan_of(query.fetch_one(&mut *conn).await, OP)?,
            sql,
        });
        let sql = next_lapse_sql(&self.names);
        let query = sqlx::query(AssertSqlSafe(format!("{prefix} {sql}")))
            .bind(lane)
            .bind(target)
            .bind(now.as_millis());
        plans.push(ClaimPlan {
            statement: "next_lapse",
            plan: plan_of(query.fetch_one(&mut *conn).await, OP)?,
            sql,
        });
        conn.rollback().await.map_err(|e| db_error(OP, e))?;
        Ok(plans)
    }
}

fn plan_of(
    row: Result<sqlx::mysql::MySqlRow, sqlx::Error>,
    op: StoreOp,
) -> Result<serde_json::Value, StoreError> {
    let row = row.map_err(|e| db_error(op, e))?;
    let text: String = row.try_get(0).map_err(|e| db_error(op, e))?;
    serde_json::from_str(&text).map_err(|e| StoreError::database(op, e))
}
