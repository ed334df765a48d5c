//! The listing of messages whose filter [scans](MessageFilter::scans) (an enqueue time range
//! or an error text): no index orders by those terms, so they are checked on the rows the
//! filter's other terms select, read in sequence order, and at most
//! [`LIST_SCAN_PAGES`](crate::store::LIST_SCAN_PAGES) pages' worth of them per call
//! ([`list_budget`]). A call that found fewer matches answers them with a cursor after the
//! last row it read, so a listing of rare matches costs a bounded read per call and goes on
//! where it stopped, as on PostgreSQL and SQLite. `tests/mysql/list_plans.rs` pins what a
//! call reads at 100 000 rows.

use sqlx::mysql::MySqlRow;
use sqlx::{AssertSqlSafe, Row};

use crate::store::admin::list_budget;
use crate::store::{MessageFilter, Page, PageRequest, StoreError, StoreOp};

use super::admin::{bind, filter_where};
use super::row::{db_error, decode, COLUMNS};
use super::MysqlOutboxStore;
use crate::store::sql::{self, Terms, Value, Where};

/// The statement of a scanning listing and its values, in order. Its rows: the matches and
/// the last row read (`list_hit` 0 unless it matches), each with how many rows were read
/// (`list_read`).
///
/// The budget's read is a derived table of sequence numbers only (`scanned`), in sequence
/// order under a `LIMIT`, read once (window functions count it and find its last row: a
/// common table expression named three times was read three times by MariaDB 10.11); the
/// full rows are then fetched by primary key for the matches and the last row read alone.
pub(super) fn scanning_sql(messages: &str, filter: &MessageFilter, page: PageRequest) -> Where {
    let scanned = filter_where(filter, Terms::Scanned);
    let indexed = filter_where(filter, Terms::Indexed);
    let budget = list_budget(filter, page.limit);
    let limit = page.limit.saturating_add(1);
    let columns = COLUMNS
        .split(", ")
        .map(|c| format!("m.{c}"))
        .collect::<Vec<_>>()
        .join(", ");
    let clause = format!(
        "SELECT {columns}, s.list_hit, s.list_read FROM (\
             SELECT s_seq, list_hit, COUNT(*) OVER () AS list_read, \
             MAX(s_seq) OVER () AS last_read FROM (\
                 SELECT seq AS s_seq, ({hit}) IS TRUE AS list_hit FROM {messages} \
                 WHERE {terms} AND seq > ? ORDER BY seq LIMIT {budget}\
             ) scanned\
         ) s JOIN {messages} m ON m.seq = s.s_seq \
         WHERE s.list_hit OR s.s_seq = s.last_read \
         ORDER BY s.s_seq LIMIT {limit}",
        hit = scanned.clause,
        terms = indexed.clause,
    );
    let mut values = scanned.values;
    values.extend(indexed.values);
    values.push(Value::Int(page.after.unwrap_or(i64::MIN)));
    Where { clause, values }
}

impl MysqlOutboxStore {
    pub(super) async fn list_scanning(
        &self,
        filter: &MessageFilter,
        page: PageRequest,
    ) -> Result<Page, StoreError> {
        const OP: StoreOp = StoreOp::List;
        let sql = scanning_sql(&self.names.messages, filter, page);
        let rows = bind(sqlx::query(AssertSqlSafe(sql.clause.clone())), &sql.values)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| db_error(OP, e))?;
        let hit = |row: &MySqlRow| row.try_get::<i64, _>("list_hit").map(|hit| hit != 0);
        let budget = list_budget(filter, page.limit);
        sql::scanned_page(&rows, budget, page, db_error, hit, decode)
    }
}

#[cfg(test)]
mod tests;
