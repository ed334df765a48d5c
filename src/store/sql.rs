//! What the SQL stores (PostgreSQL, MySQL, SQLite) share, with each dialect's differences
//! passed in as data: how a driver error maps onto [`StoreError`], given the dialect's table
//! of server codes ([`Codes`]), and a listing filter as a `WHERE` fragment in the dialect's
//! words ([`Where`]).

use crate::store::{StoreError, StoreOp};

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

#[cfg(test)]
mod tests;
