//! `EXPLAIN FORMAT=JSON` of every statement a claim and `next_due` run, as they would run
//! now on a lane: for operators who want to see what a claim reads on their data, and for
//! the guard test that pins the plans (`tests/mysql/plans.rs`). Nothing is changed: the
//! statements run, if at all, in a transaction that is rolled back.
//!
//! The servers answer in different JSON: MariaDB and MySQL's first format nest
//! `query_block`s of tables (`access_type` `range`, `ref`, `index`, `ALL`; `key`; `rows`,
//! `r_rows` or `rows_examined_per_scan`; `filesort` or `using_filesort`), MySQL's second
//! format (8.3+, the default in 9) is a tree of operations (`access_type` `index` with an
//! `index_access_type`, `table`, `sort`; `index_name`; `estimated_rows`, `actual_rows`).
//! [`ClaimPlan::reads`] and [`ClaimPlan::sorts`] read both into one answer.

use sqlx::{AssertSqlSafe, Row};

use serde_json::Value;

use crate::store::{ClaimRequest, MessageFilter, PageRequest, StoreError, StoreOp};

use super::claim::{first_dead, next_lapse_sql, run_sql, running_keys, scan_sql, stops_sql, Scan};
use super::row::{db_error, opt_text};
use super::{Dialect, MysqlOutboxStore};

/// One statement of a claim, or `lanes_stats`'s ([`MysqlOutboxStore::explain_lanes_stats`]),
/// and the server's plan for it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClaimPlan {
    /// Which statement: `lapsed`, `ready`, `running_keys`, `first_dead`, `run_stops`,
    /// `run`, `next_lapse`, `next_due_ready`; or `lanes_stats`.
    pub statement: &'static str,
    /// The statement as explained.
    pub sql: String,
    /// The server's `EXPLAIN FORMAT=JSON` answer, or with [`Explain::Analyze`] MariaDB's
    /// `ANALYZE FORMAT=JSON` or MySQL's `EXPLAIN ANALYZE FORMAT=JSON` answer (with the rows
    /// each table really read).
    pub plan: serde_json::Value,
}

/// How a statement reaches the rows of one table, as its plan says.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Access {
    /// A range of an index (`range`; MySQL's `index_range_scan`).
    IndexRange,
    /// The entries of an index under one key value (`ref`, `eq_ref`, `const`; MySQL's
    /// `index_lookup`).
    IndexLookup,
    /// Answered while planning, by one dive into an index (`MIN`/`MAX` over an index
    /// range: "Select tables optimized away", "No matching min/max row").
    OneIndexDive,
    /// Every entry of an index (`index`; MySQL's `index_scan`).
    FullIndexScan,
    /// Every row of the table (`ALL`; MySQL's `table`).
    FullTableScan,
    /// Any other access, as the server named it.
    Other(String),
}

/// One table a statement reads, read from its plan ([`ClaimPlan::reads`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TableRead {
    /// How the rows are reached.
    pub access: Access,
    /// The index read, when the plan names one.
    pub index: Option<String>,
    /// The rows read per loop: really read when the plan was analyzed, else estimated.
    pub rows: u64,
}

/// How [`MysqlOutboxStore::explain_claim`] asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Explain {
    /// `EXPLAIN FORMAT=JSON`: the plan, with estimated rows (MySQL 8 and MariaDB).
    Plan,
    /// MariaDB's `ANALYZE FORMAT=JSON`, MySQL's `EXPLAIN ANALYZE FORMAT=JSON` (8.3+): runs
    /// each statement, inside a transaction that is rolled back, and answers the plan with
    /// the rows really read.
    Analyze,
}

impl ClaimPlan {
    /// Every table the statement reads, in the plan's order, whichever server's JSON the
    /// plan is in (module docs).
    pub fn reads(&self) -> Vec<TableRead> {
        let mut out = Vec::new();
        collect_reads(&self.plan, &mut out);
        out
    }

    /// Whether the plan sorts rows (a filesort) instead of reading them in index order.
    pub fn sorts(&self) -> bool {
        plan_sorts(&self.plan)
    }
}

/// What a plan says when a table was answered while planning by one index dive.
const ANSWERED_BY_ONE_INDEX_DIVE: [&str; 2] =
    ["No matching min/max row", "Select tables optimized away"];

fn rows_of(node: &serde_json::Map<String, Value>) -> u64 {
    // Really read (MariaDB's ANALYZE, MySQL's EXPLAIN ANALYZE), else the estimate.
    [
        "r_rows",
        "actual_rows",
        "rows",
        "rows_examined_per_scan",
        "estimated_rows",
    ]
    .iter()
    .find_map(|name| node.get(*name).and_then(Value::as_f64))
    .map_or(0, |rows| rows.max(0.0).ceil() as u64)
}

fn collect_reads(plan: &Value, out: &mut Vec<TableRead>) {
    match plan {
        Value::Object(node) => {
            let text = |name: &str| node.get(name).and_then(Value::as_str);
            let dive = [text("message"), text("zero_rows_cause")]
                .into_iter()
                .flatten()
                .any(|m| ANSWERED_BY_ONE_INDEX_DIVE.contains(&m))
                || text("access_type") == Some("rows_fetched_before_execution");
            if dive {
                out.push(TableRead {
                    access: Access::OneIndexDive,
                    index: None,
                    rows: 1,
                });
            } else if let Some(access) = text("access_type") {
                // MySQL's second format names every node's operation in `access_type`;
                // only the ones over a table are reads.
                let over_table = node.contains_key("table_name");
                let v2 = node.contains_key("index_name") || node.contains_key("estimated_rows");
                let access = match (access, text("index_access_type")) {
                    (_, Some("index_range_scan")) | ("range", None) => Some(Access::IndexRange),
                    (_, Some("index_lookup")) | ("ref" | "eq_ref" | "const" | "system", None) => {
                        Some(Access::IndexLookup)
                    }
                    (_, Some("index_scan")) => Some(Access::FullIndexScan),
                    ("index", None) if !v2 => Some(Access::FullIndexScan),
                    ("ALL", None) => Some(Access::FullTableScan),
                    ("table", None) if over_table => Some(Access::FullTableScan),
                    (_, Some(other)) => Some(Access::Other(other.to_owned())),
                    (other, None) if !v2 || over_table => Some(Access::Other(other.to_owned())),
                    _ => None,
                };
                if let Some(access) = access {
                    out.push(TableRead {
                        access,
                        index: text("key").or(text("index_name")).map(str::to_owned),
                        rows: rows_of(node),
                    });
                }
            }
            node.values().for_each(|v| collect_reads(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| collect_reads(v, out)),
        _ => {}
    }
}

fn plan_sorts(plan: &Value) -> bool {
    match plan {
        Value::Object(node) => {
            node.contains_key("filesort")
                || node.get("using_filesort").and_then(Value::as_bool) == Some(true)
                || node.get("access_type").and_then(Value::as_str) == Some("sort")
                || node.values().any(plan_sorts)
        }
        Value::Array(items) => items.iter().any(plan_sorts),
        _ => false,
    }
}

impl MysqlOutboxStore {
    /// Explains the statements a claim for `request` runs, and `next_due`'s, with the keys
    /// of the lane's first due heads as their key lists (a key `-` when there is none).
    #[cfg_attr(docsrs, doc(cfg(feature = "plans")))]
    pub async fn explain_claim(
        &self,
        request: &ClaimRequest,
        how: Explain,
    ) -> Result<Vec<ClaimPlan>, StoreError> {
        const OP: StoreOp = StoreOp::Maintenance;
        let dialect = self.probe_dialect(OP).await?;
        let prefix = prefix(how, dialect);
        let now = self.now();
        let limit = request.limit.max(1);
        let mut conn = self.begin(OP).await?;
        json_format(&mut conn, how, dialect, true, OP).await?;
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
        let keys: Vec<&str> = heads.iter().map(|(key, _)| key.as_str()).collect();
        for (statement, list) in [
            (
                "running_keys",
                running_keys(&self.names, (lane, target), now),
            ),
            ("first_dead", first_dead(&self.names, (lane, target))),
        ] {
            let sql = list.sql(n);
            let query = list.query(format!("{prefix} {sql}"), &keys);
            plans.push(ClaimPlan {
                statement,
                plan: plan_of(query.fetch_one(&mut *conn).await, OP)?,
                sql,
            });
        }
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
        json_format(&mut conn, how, dialect, false, OP).await?;
        conn.rollback().await.map_err(|e| db_error(OP, e))?;
        Ok(plans)
    }
}

impl MysqlOutboxStore {
    /// Explains the one statement [`lanes_stats`](crate::store::OutboxBackend::lanes_stats)
    /// runs for `lanes` (`sql/lanes_stats.sql`): for the guard test that pins it to index
    /// reads under each lane (`tests/mysql/lanes_stats.rs`). Nothing is changed (`ANALYZE`
    /// runs the read-only statement).
    #[cfg_attr(docsrs, doc(cfg(feature = "plans")))]
    pub async fn explain_lanes_stats(
        &self,
        lanes: &[(String, String)],
        how: Explain,
    ) -> Result<ClaimPlan, StoreError> {
        const OP: StoreOp = StoreOp::Maintenance;
        let dialect = self.probe_dialect(OP).await?;
        let sql = self.names.sql.lanes_stats.to_string();
        let asked = serde_json::to_string(lanes).map_err(|e| StoreError::database(OP, e))?;
        let mut conn = self.pool.acquire().await.map_err(|e| db_error(OP, e))?;
        json_format(&mut conn, how, dialect, true, OP).await?;
        let row = sqlx::query(AssertSqlSafe(format!("{} {sql}", prefix(how, dialect))))
            .bind(self.now().as_millis())
            .bind(asked)
            .fetch_one(&mut *conn)
            .await;
        json_format(&mut conn, how, dialect, false, OP).await?;
        Ok(ClaimPlan {
            statement: "lanes_stats",
            plan: plan_of(row, OP)?,
            sql,
        })
    }
}

/// The server's plan of one listing call ([`MysqlOutboxStore::explain_list`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ListPlan {
    /// The statement as explained.
    pub sql: String,
    /// The server's `EXPLAIN FORMAT=JSON` answer, or with
    /// [`Explain::Analyze`] MariaDB's `ANALYZE FORMAT=JSON` or
    /// MySQL's `EXPLAIN ANALYZE FORMAT=JSON` answer (the rows each table really read), in
    /// the server's own JSON (see [`ClaimPlan`]).
    pub plan: serde_json::Value,
}

impl MysqlOutboxStore {
    /// Explains the statement one listing call under `filter` runs for `page`, when the
    /// filter [scans](MessageFilter::scans) (an enqueue time range or an error text): for
    /// operators who want to see what a listing reads on their data, and for the guard test
    /// that pins it. Nothing is changed (`ANALYZE` runs the read-only statement).
    #[cfg_attr(docsrs, doc(cfg(feature = "plans")))]
    pub async fn explain_list(
        &self,
        filter: &MessageFilter,
        page: PageRequest,
        how: Explain,
    ) -> Result<ListPlan, StoreError> {
        const OP: StoreOp = StoreOp::Maintenance;
        let dialect = self.probe_dialect(OP).await?;
        let sql = super::list::scanning_sql(&self.names.messages, filter, page);
        let text = format!("{} {}", prefix(how, dialect), sql.clause);
        let mut conn = self.pool.acquire().await.map_err(|e| db_error(OP, e))?;
        json_format(&mut conn, how, dialect, true, OP).await?;
        let row = super::admin::bind(sqlx::query(AssertSqlSafe(text)), &sql.values)
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| db_error(OP, e));
        json_format(&mut conn, how, dialect, false, OP).await?;
        let row = row?;
        let plan: String = row.try_get(0).map_err(|e| db_error(OP, e))?;
        let plan = serde_json::from_str(&plan).map_err(|e| StoreError::database(OP, e))?;
        Ok(ListPlan {
            sql: sql.clause,
            plan,
        })
    }
}

/// The statement prefix that explains (or analyzes) a statement on `dialect`.
fn prefix(how: Explain, dialect: Dialect) -> &'static str {
    match (how, dialect) {
        (Explain::Plan, _) => "EXPLAIN FORMAT=JSON",
        (Explain::Analyze, Dialect::MariaDb) => "ANALYZE FORMAT=JSON",
        (Explain::Analyze, Dialect::MySql) => "EXPLAIN ANALYZE FORMAT=JSON",
    }
}

/// MySQL analyzes only into its second JSON format (the default from 9.0 on): `start`
/// sets it on the connection for an analyze, and the end (`start = false`) sets it back,
/// since the connection goes back to the pool. Nothing to do otherwise.
async fn json_format(
    conn: &mut sqlx::mysql::MySqlConnection,
    how: Explain,
    dialect: Dialect,
    start: bool,
    op: StoreOp,
) -> Result<(), StoreError> {
    if (how, dialect) != (Explain::Analyze, Dialect::MySql) {
        return Ok(());
    }
    let sql = if start {
        "SET SESSION explain_json_format_version = 2"
    } else {
        "SET SESSION explain_json_format_version = DEFAULT"
    };
    sqlx::query(sql)
        .execute(&mut *conn)
        .await
        .map_err(|e| db_error(op, e))?;
    Ok(())
}

fn plan_of(
    row: Result<sqlx::mysql::MySqlRow, sqlx::Error>,
    op: StoreOp,
) -> Result<serde_json::Value, StoreError> {
    let row = row.map_err(|e| db_error(op, e))?;
    let text: String = row.try_get(0).map_err(|e| db_error(op, e))?;
    serde_json::from_str(&text).map_err(|e| StoreError::database(op, e))
}

#[cfg(test)]
mod tests;
