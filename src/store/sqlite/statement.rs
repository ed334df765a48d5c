//! How a statement is made and given its values: the cached statements of `Statements`,
//! the ones built for one call from a filter's terms in SQLite's words, and the values bound
//! to them. The reads and the writes both use them.

use std::sync::Arc;

use sqlx::{AssertSqlSafe, Sqlite};

use crate::store::sql::{self, Value, Where};
use crate::store::MessageFilter;

use super::row::uuid_text;

/// A statement with its values, as sqlx runs it.
pub(super) type Query<'q> = sqlx::query::Query<'q, Sqlite, <Sqlite as sqlx::Database>::Arguments>;

/// A prepared-and-cached statement from [`Statements`](super::schema::Statements).
pub(super) fn query<'q>(sql: &Arc<str>) -> Query<'q> {
    sqlx::query(AssertSqlSafe(Arc::clone(sql)))
}

/// A statement built for one call (a filter's terms vary).
pub(super) fn dynamic<'q>(sql: String) -> Query<'q> {
    sqlx::query(AssertSqlSafe(sql))
}

/// SQLite's words for a filter.
const DIALECT: sql::Dialect = sql::Dialect {
    numbered: false,
    instant: |p| p.to_owned(),
    // instr, not LIKE: the text is a plain substring, and case-sensitive as the other
    // stores compare it.
    contains: "instr",
    ids: sql::IdList::Json,
    status_literal: false,
    indexed_text: |p| format!("({p} || '')"),
};

/// `filter`'s `terms` as a `WHERE` fragment over table alias `alias` (`"l."`, or `""`).
pub(super) fn filter_where(filter: &MessageFilter, alias: &str, terms: sql::Terms) -> Where {
    Where::of(&DIALECT, filter, alias, terms, 0)
}

/// `values` bound to `query`, in order.
pub(super) fn bind<'q>(query: Query<'q>, values: Vec<Value>) -> Query<'q> {
    values.into_iter().fold(query, |query, value| match value {
        Value::Text(text) => query.bind(text),
        Value::Int(n) => query.bind(n),
        Value::Id(id) => query.bind(uuid_text(id)),
        Value::Ids(ids) => ids.into_iter().fold(query, |q, id| q.bind(uuid_text(id))),
    })
}
