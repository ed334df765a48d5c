//! What the SQL stores (PostgreSQL, MySQL, SQLite) share, with each dialect's differences
//! passed in as data: how a driver error maps onto [`StoreError`], given the dialect's table
//! of server codes ([`Codes`]), and a listing filter as a `WHERE` fragment in the dialect's
//! words ([`Where`]); a scanning listing's page from its rows ([`scanned_page`]); rows
//! decoded ([`BadColumn`], [`lane_pause`]); and the range a `migration_sql` prints
//! ([`migration_range`]).

use std::collections::BTreeMap;

use crate::message::{OutboxMessage, ValidationError};
use crate::store::unreadable::unreadable_error;
use crate::store::{LanePause, Page, PageRequest, StoreError, StoreOp};
use crate::time::UnixMillis;

mod filter;

pub(crate) use filter::{Dialect, IdList, Terms, Value, Where};

/// A dialect's server error codes that say whether trying again may help.
#[derive(Debug)]
pub(crate) struct Codes {
    /// The code a database error is classed by, as text: PostgreSQL's SQLSTATE, MySQL's
    /// error number, SQLite's primary result code.
    pub(crate) code: fn(&dyn sqlx::error::DatabaseError) -> Option<String>,
    /// The server cannot serve us right now (retryable). An entry ending in `*` is a
    /// prefix: `"08*"` is SQLSTATE class 08.
    pub(crate) unavailable: &'static [&'static str],
    /// No retry can cure it (a refused login, a missing table, a read-only server).
    pub(crate) denied: &'static [&'static str],
}

impl Codes {
    fn lists(list: &[&str], code: &str) -> bool {
        list.iter().any(|entry| match entry.strip_suffix('*') {
            Some(prefix) => code.starts_with(prefix),
            None => *entry == code,
        })
    }
}

/// Maps a sqlx error of operation `op`. Lost or unreachable connections, and the server
/// codes `codes` calls unavailable, are [`StoreError::Unavailable`] (retryable); the codes
/// it calls denied are [`StoreError::Denied`]; rows that do not decode are
/// [`StoreError::Corrupt`]; everything else is [`StoreError::Database`].
pub(crate) fn store_error(op: StoreOp, error: sqlx::Error, codes: &Codes) -> StoreError {
    match &error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => StoreError::unavailable(op, error),
        sqlx::Error::Database(db) => match (codes.code)(db.as_ref()) {
            Some(code) if Codes::lists(codes.unavailable, &code) => {
                StoreError::unavailable(op, error)
            }
            Some(code) if Codes::lists(codes.denied, &code) => StoreError::denied(op, error),
            _ => StoreError::database(op, error),
        },
        sqlx::Error::ColumnDecode { .. }
        | sqlx::Error::Decode(_)
        | sqlx::Error::ColumnNotFound(_)
        | sqlx::Error::ColumnIndexOutOfBounds { .. }
        | sqlx::Error::TypeNotFound { .. } => StoreError::Corrupt {
            id: "?".into(),
            reason: format!("{op}: {error}"),
        },
        _ => StoreError::database(op, error),
    }
}

/// A scanning listing's page from the rows its statement returned: the matches (`hit`)
/// and the last row read, each with its `seq` and how many rows were read (`list_read`),
/// at most `budget` of them (the read was cut short when it reached it):
/// [`list_budget`](crate::store::admin::list_budget), or more where a store checks more
/// terms on the rows it reads. `error` maps the driver's errors.
pub(crate) fn scanned_page<R>(
    rows: &[R],
    budget: usize,
    page: PageRequest,
    error: fn(StoreOp, sqlx::Error) -> StoreError,
    hit: impl Fn(&R) -> Result<bool, sqlx::Error>,
    decode: impl Fn(&R) -> Result<OutboxMessage, StoreError>,
) -> Result<Page, StoreError>
where
    R: sqlx::Row,
    &'static str: sqlx::ColumnIndex<R>,
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    let op = StoreOp::List;
    let mut hits = Vec::with_capacity(rows.len());
    let (mut last_read, mut read) = (None, 0i64);
    for row in rows {
        last_read = Some(row.try_get::<i64, _>("seq").map_err(|e| error(op, e))?);
        read = row.try_get("list_read").map_err(|e| error(op, e))?;
        if hit(row).map_err(|e| error(op, e))? {
            hits.push(decode(row)?);
        }
    }
    let exhausted = usize::try_from(read).is_ok_and(|read| read >= budget);
    Ok(Page::from_scan(hits, page.limit, last_read, exhausted))
}

/// A lane control row (`lane, target, paused_by, reason, paused_at` in Unix milliseconds)
/// as a pause; `error` maps the driver's errors.
pub(crate) fn lane_pause<R>(
    row: &R,
    op: StoreOp,
    error: fn(StoreOp, sqlx::Error) -> StoreError,
) -> Result<LanePause, StoreError>
where
    R: sqlx::Row,
    &'static str: sqlx::ColumnIndex<R>,
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Option<String>: sqlx::Decode<'r, R::Database>,
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    let get = |column| row.try_get::<String, _>(column).map_err(|e| error(op, e));
    Ok(LanePause {
        lane: get("lane")?,
        target: get("target")?,
        paused_by: get("paused_by")?,
        reason: row.try_get("reason").map_err(|e| error(op, e))?,
        paused_at: UnixMillis::from_millis(row.try_get("paused_at").map_err(|e| error(op, e))?),
    })
}

/// A column of a row that does not decode, and why.
#[derive(Debug)]
pub(crate) struct BadColumn {
    column: &'static str,
    reason: String,
}

impl BadColumn {
    /// `column` does not decode, for `reason`.
    pub(crate) fn new(column: &'static str, reason: impl std::fmt::Display) -> Self {
        Self {
            column,
            reason: reason.to_string(),
        }
    }

    /// `column` as sqlx failed to decode it, without sqlx's "error occurred while decoding
    /// column" around the reason (the column is named already).
    #[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
    pub(crate) fn decoding(column: &'static str, error: sqlx::Error) -> Self {
        match error {
            sqlx::Error::ColumnDecode { source, .. } => Self::new(column, source),
            other => Self::new(column, other),
        }
    }

    /// The store's error for the message `id` (`"?"` when unknown) whose column this is.
    pub(crate) fn corrupt(self, id: impl Into<String>) -> StoreError {
        StoreError::Corrupt {
            id: id.into(),
            reason: format!("{}: {}", self.column, self.reason),
        }
    }

    /// The error an unreadable claimed row is dead-lettered with (`store/unreadable.rs`).
    pub(crate) fn unreadable(self) -> String {
        unreadable_error(self.column, self.reason)
    }
}

/// The headers column's JSON text as a header map (PostgreSQL's is `jsonb`, read as such).
#[cfg_attr(not(any(feature = "sqlite", feature = "mysql")), allow(dead_code))]
pub(crate) fn headers(json: &str) -> Result<BTreeMap<String, String>, BadColumn> {
    serde_json::from_str(json)
        .map_err(|e| BadColumn::new("headers", format!("is not a JSON object of strings: {e}")))
}

/// A count column's integer as a count (MySQL's columns are unsigned, read as such).
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
pub(crate) fn count(column: &'static str, value: i64) -> Result<u32, BadColumn> {
    u32::try_from(value).map_err(|_| {
        BadColumn::new(
            column,
            format!("{value} is out of range (0 to {})", u32::MAX),
        )
    })
}

/// Checks the versions a `migration_sql` prints, after `from` up to `to`: `from` one this
/// build knows (0 for none), `to` between it and `latest`; the error names the field.
pub(crate) fn migration_range(from: i64, to: i64, latest: i64) -> Result<(), ValidationError> {
    if !(0..=latest).contains(&from) {
        return Err(ValidationError::new(
            "from",
            format!("is {from}; this build knows versions 0 to {latest}"),
        ));
    }
    if !(from..=latest).contains(&to) {
        return Err(ValidationError::new(
            "to",
            format!(
                "is {to}; it must be between from ({from}) and {latest}, the latest this build knows"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
