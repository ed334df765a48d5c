//! A statement whose `IN (?)` takes a list of any length: the one place that writes the
//! list's placeholders, binds its values and runs it in chunks.
//!
//! A list is cut into chunks of at most [`CHUNK`] values, one statement each (a statement
//! has at most 65,535 placeholders, and a long list makes a plan the server re-reads for
//! every value). Every statement written this way gives the same result run on a list at
//! once or on its chunks in turn: each value's rows depend on that value alone.

use sqlx::mysql::{MySqlArguments, MySqlConnection, MySqlRow};
use sqlx::query::Query;
use sqlx::{AssertSqlSafe, MySql};
use uuid::Uuid;

use crate::store::{StoreError, StoreOp};

use super::row::{db_error, marks};

/// The most values one statement's list takes.
pub(super) const CHUNK: usize = 500;

/// Where the list goes in a statement's text.
const PLACE: &str = "IN (?)";

/// A value bound to a statement.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Param<'a> {
    Int(i64),
    Text(&'a str),
    Id(Uuid),
}

impl From<i64> for Param<'_> {
    fn from(value: i64) -> Self {
        Param::Int(value)
    }
}

impl<'a> From<&'a str> for Param<'a> {
    fn from(value: &'a str) -> Self {
        Param::Text(value)
    }
}

impl<'a> From<&'a String> for Param<'a> {
    fn from(value: &'a String) -> Self {
        Param::Text(value)
    }
}

impl From<Uuid> for Param<'_> {
    fn from(value: Uuid) -> Self {
        Param::Id(value)
    }
}

/// A statement with one list: its text holds `IN (?)` once, where the list goes, and it
/// binds the values given with [`Self::bind`] (placeholders before the list), the list's,
/// then those given with [`Self::bind_after`].
#[derive(Debug, Clone)]
pub(super) struct InList<'a> {
    sql: &'a str,
    before: Vec<Param<'a>>,
    after: Vec<Param<'a>>,
}

impl<'a> InList<'a> {
    pub(super) fn new(sql: &'a str) -> Self {
        debug_assert_eq!(sql.matches(PLACE).count(), 1, "one `{PLACE}` in {sql}");
        Self {
            sql,
            before: Vec::new(),
            after: Vec::new(),
        }
    }

    /// Binds the next placeholder before the list.
    pub(super) fn bind(mut self, value: impl Into<Param<'a>>) -> Self {
        self.before.push(value.into());
        self
    }

    /// Binds the next placeholder after the list.
    pub(super) fn bind_after(mut self, value: impl Into<Param<'a>>) -> Self {
        self.after.push(value.into());
        self
    }

    /// The statement's text for a list of `n` values.
    pub(super) fn sql(&self, n: usize) -> String {
        self.sql
            .replacen(PLACE, &format!("IN ({})", marks(n.max(1))), 1)
    }

    /// `sql` (the statement's text for `values`, perhaps with something before it, such as
    /// `EXPLAIN`) with every value bound.
    pub(super) fn query<'q, 'v: 'q, T: Copy + Into<Param<'v>>>(
        &'q self,
        sql: String,
        values: &'q [T],
    ) -> Query<'q, MySql, MySqlArguments> {
        let params = self
            .before
            .iter()
            .copied()
            .chain(values.iter().map(|v| (*v).into()))
            .chain(self.after.iter().copied());
        params.fold(
            sqlx::query(AssertSqlSafe(sql)),
            |query, param| match param {
                Param::Int(value) => query.bind(value),
                Param::Text(value) => query.bind(value),
                Param::Id(value) => query.bind(value),
            },
        )
    }

    /// Runs the statement on `values`, a chunk at a time; the rows it affected. An empty
    /// list runs nothing.
    pub(super) async fn execute<'v, T: Copy + Into<Param<'v>>>(
        &self,
        conn: &mut MySqlConnection,
        values: &[T],
        op: StoreOp,
    ) -> Result<u64, StoreError> {
        let mut affected = 0;
        for chunk in values.chunks(CHUNK) {
            let done = self
                .query(self.sql(chunk.len()), chunk)
                .execute(&mut *conn)
                .await
                .map_err(|e| db_error(op, e))?;
            affected += done.rows_affected();
        }
        Ok(affected)
    }

    /// Runs the statement on `values`, a chunk at a time; the rows of every chunk, in
    /// order. An empty list runs nothing.
    pub(super) async fn fetch<'v, T: Copy + Into<Param<'v>>>(
        &self,
        conn: &mut MySqlConnection,
        values: &[T],
        op: StoreOp,
    ) -> Result<Vec<MySqlRow>, StoreError> {
        let mut rows = Vec::new();
        for chunk in values.chunks(CHUNK) {
            rows.extend(
                self.query(self.sql(chunk.len()), chunk)
                    .fetch_all(&mut *conn)
                    .await
                    .map_err(|e| db_error(op, e))?,
            );
        }
        Ok(rows)
    }
}

#[cfg(test)]
mod tests;
