//! The listing of messages (`GET /api/v1/messages`, `outbox-relay list`), as SQL built from
//! the filter: only the fields it sets become terms, so each shape of filter gets the plan
//! its indexes allow (a generic plan for `($1 IS NULL OR lane = $1)` reads no index).
//!
//! What a page reads (pinned at 1 M rows by `tests/postgres/plans.rs`):
//! - by lane and target: `list_idx` (lane, target, status, seq), one index range per
//!   status, each under a LIMIT, merged in seq order, or the one range of the status asked
//!   for; by ordering key too: `list_key_idx` (lane, target, ordering_key, status, seq)
//!   the same way. Each range stops at the page (or the scan budget).
//! - by ids: the primary key, one probe per id.
//! - the enqueue time range and the error text are checked on the rows read that way, and
//!   at most [`list_budget`] of them: [`LIST_SCAN_PAGES`](crate::store::LIST_SCAN_PAGES)
//!   pages' worth. A page that found fewer matches answers them with a cursor after the
//!   last row read, so a listing with such a filter costs a bounded read per call however
//!   rare its matches are, and goes on where it stopped.

use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::Query;
use sqlx::{AssertSqlSafe, Postgres, Row};

use crate::message::OutboxStatus;
use crate::store::admin::list_budget;
use crate::store::{MessageFilter, Page, PageRequest, StoreError, StoreOp};

use super::row::{self, db_error};
use super::sql::{columns, instant};
use super::{to_i64, PostgresOutboxStore};
use crate::store::sql::{self, Terms, Value};

/// PostgreSQL's words for a filter.
const DIALECT: sql::Dialect = sql::Dialect {
    numbered: true,
    instant,
    // strpos, not LIKE: the text is a plain substring, '%' and '_' included.
    contains: "strpos",
    ids: sql::IdList::Array,
    status_literal: true,
    indexed_text: |p| p.to_owned(),
};

/// `filter`'s `terms` over table alias `alias`, its placeholders numbered after `bound`.
pub(super) fn filter_where(
    filter: &MessageFilter,
    alias: &str,
    terms: sql::Terms,
    bound: usize,
) -> sql::Where {
    sql::Where::of(&DIALECT, filter, alias, terms, bound)
}

/// A listing's statement and its values in `$n` order.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct ListSql {
    pub(super) text: String,
    pub(super) values: Vec<Value>,
}

impl ListSql {
    /// `value` as the next parameter: answers its placeholder.
    fn bind(&mut self, value: Value) -> String {
        self.values.push(value);
        format!("${}", self.values.len())
    }

    /// The statement (prefixed with `prefix`, e.g. `EXPLAIN ...`) with every value bound.
    pub(super) fn query(&self, prefix: &str) -> Query<'_, Postgres, PgArguments> {
        let mut query = sqlx::query(AssertSqlSafe(format!("{prefix}{}", self.text)));
        for value in &self.values {
            query = match value {
                Value::Text(text) => query.bind(text),
                Value::Int(n) => query.bind(n),
                Value::Id(id) => query.bind(id),
                Value::Ids(ids) => query.bind(ids),
            };
        }
        query
    }
}

/// The listing of `page` under `filter` from table `t`. Its rows: the matches and the last
/// row read (`list_hit` false unless it matches), each with how many rows were read
/// (`list_read`).
pub(super) fn list_sql(t: &str, filter: &MessageFilter, page: PageRequest) -> ListSql {
    // The checked terms, bound once and shared by every arm.
    let hit = filter_where(filter, "m.", Terms::Scanned, 0);
    let mut sql = ListSql {
        text: String::new(),
        values: hit.values,
    };
    let hit = hit.clause;

    // The indexed terms. `seq > 0` (every row: seq counts from 1) is list_idx's predicate,
    // which only these statements state, so no claim or probe of the relay can pick it.
    // The status is each arm's own.
    let mut terms = vec!["m.seq > 0".to_owned()];
    if let Some(after) = page.after {
        terms.push(format!("m.seq > {}", sql.bind(Value::Int(after))));
    }
    let unsorted = MessageFilter {
        status: None,
        ..filter.clone()
    };
    let indexed = filter_where(&unsorted, "m.", Terms::Indexed, sql.values.len());
    terms.push(indexed.clause);
    sql.values.extend(indexed.values);
    // One arm per status when a lane is listed whole: the statuses' ranges of list_idx
    // (or of list_key_idx) merged in seq order.
    let one_lane = filter.lane.is_some() && filter.target.is_some() && filter.ids.is_empty();
    let statuses: Vec<Option<OutboxStatus>> = match filter.status {
        Some(status) => vec![Some(status)],
        None if one_lane => OutboxStatus::ALL.iter().copied().map(Some).collect(),
        None => vec![None],
    };
    let cols = columns("m");
    let terms = terms.join(" AND ");
    let budget = sql.bind(Value::Int(to_i64(list_budget(filter, page.limit))));
    // Each arm stops at the budget itself: its index range in seq order under a LIMIT,
    // whatever the planner believes of the merge above it (on a table it has no
    // statistics for, it would rather sort the arms' every row).
    let arms: Vec<String> = statuses
        .iter()
        .map(|status| {
            // The status as a range of one value, `status >= 'x' AND status <= 'x'`, not
            // as `status = 'x'`: the planner cannot prove a partial index's
            // `status = 'x'` from it, so the narrow indexes of one status (dead_idx,
            // key_pending_idx, ...: read whole and sorted when it guesses they are small)
            // are out; and ordered by (status, seq), which list_idx and list_key_idx give
            // and seq_idx does not, it cannot walk the whole table in seq order hoping to
            // meet a rare status soon. The statistics still price the range.
            let (status, order) = match status {
                Some(s) => (
                    format!(
                        " AND m.status >= '{s}' AND m.status <= '{s}'",
                        s = s.as_str()
                    ),
                    "m.status, m.seq",
                ),
                None => (String::new(), "m.seq"),
            };
            format!(
                "(SELECT {cols}, ({hit}) IS TRUE AS list_hit FROM {t} m WHERE {terms}{status}
                  ORDER BY {order} LIMIT {budget})"
            )
        })
        .collect();
    let limit = sql.bind(Value::Int(to_i64(page.limit.saturating_add(1))));
    sql.text = format!(
        "WITH scanned AS MATERIALIZED (
            SELECT * FROM ({arms}) s ORDER BY s.seq LIMIT {budget}
         )
         SELECT *, (SELECT count(*) FROM scanned) AS list_read FROM scanned
         WHERE list_hit OR seq = (SELECT max(seq) FROM scanned)
         ORDER BY seq LIMIT {limit}",
        arms = arms.join(" UNION ALL "),
    );
    sql
}

impl PostgresOutboxStore {
    pub(super) async fn list_page(
        &self,
        filter: &MessageFilter,
        page: PageRequest,
    ) -> Result<Page, StoreError> {
        let op = StoreOp::List;
        let sql = list_sql(&self.names.messages, filter, page);
        let mut call = self.call(op).await?;
        let rows: Vec<PgRow> = sql
            .query("")
            .persistent(self.named_statements)
            .fetch_all(&mut *call)
            .await
            .map_err(|e| db_error(op, e))?;
        call.finish(op).await?;
        sql::scanned_page(
            &rows,
            list_budget(filter, page.limit),
            page,
            db_error,
            |row| row.try_get("list_hit"),
            row::message,
        )
    }
}

#[cfg(test)]
mod tests;
