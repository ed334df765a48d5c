//! The two servers the store speaks to, and the few places their SQL differs.
//!
//! The store's statements are written in SQL that MySQL 8.0.19+ and MariaDB 10.6+ both
//! accept (`FOR UPDATE SKIP LOCKED`, stored generated columns, index hints, no `RETURNING`).
//! Where they differ, the text branches on the [`Dialect`] the store learnt from the server
//! before its first transaction (`SELECT VERSION(), @@version_comment`):
//!
//! - **An upsert's new values.** MariaDB reads them with `VALUES(col)`; MySQL deprecated
//!   that in 8.0.20 (warning 1287, "will be removed") for a row alias,
//!   `INSERT … VALUES … AS new ON DUPLICATE KEY UPDATE col = new.col`, which MariaDB does
//!   not parse ([`Dialect::upsert`]).
//! - **Plans.** MariaDB answers `ANALYZE FORMAT=JSON`, MySQL `EXPLAIN ANALYZE FORMAT=JSON`
//!   (8.3+, in its second JSON format); the two JSON shapes are read by
//!   [`ClaimPlan::reads`](super::ClaimPlan::reads).

use std::fmt;

use crate::store::{StoreError, StoreOp};

/// Which server the store is connected to: the SQL it speaks where the two differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Dialect {
    /// MariaDB 10.6 or later.
    MariaDb,
    /// Oracle MySQL (or a fork that reports a MySQL version, as Percona Server does) 8.0.19
    /// or later.
    MySql,
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dialect::MariaDb => "MariaDB",
            Dialect::MySql => "MySQL",
        })
    }
}

/// The oldest MariaDB the store runs on: `SKIP LOCKED` came in 10.6.
const MARIADB_MIN: (u32, u32, u32) = (10, 6, 0);
/// The oldest MySQL the store runs on: the upsert's row alias came in 8.0.19.
const MYSQL_MIN: (u32, u32, u32) = (8, 0, 19);

impl Dialect {
    /// The dialect of a server that answers `version` to `SELECT VERSION()` and `comment`
    /// to `SELECT @@version_comment`; an error naming the version when the store cannot
    /// run on it.
    ///
    /// ```
    /// use outbox_relay::store::mysql::Dialect;
    /// assert_eq!(
    ///     Dialect::of_server("10.11.6-MariaDB-0+deb12u1", "Debian 12"),
    ///     Ok(Dialect::MariaDb)
    /// );
    /// assert_eq!(Dialect::of_server("9.7.4-2", "(Debian)"), Ok(Dialect::MySql));
    /// assert!(Dialect::of_server("5.7.44", "MySQL Community Server (GPL)").is_err());
    /// ```
    pub fn of_server(version: &str, comment: &str) -> Result<Self, String> {
        let mariadb = version.to_ascii_lowercase().contains("mariadb")
            || comment.to_ascii_lowercase().contains("mariadb");
        let (dialect, min, needs) = if mariadb {
            (Dialect::MariaDb, MARIADB_MIN, "FOR UPDATE SKIP LOCKED")
        } else {
            (
                Dialect::MySql,
                MYSQL_MIN,
                "INSERT … AS new ON DUPLICATE KEY UPDATE",
            )
        };
        let found = version_triple(version).ok_or_else(|| {
            format!("the server's version {version:?} ({comment}) is not a version number")
        })?;
        if found < min {
            return Err(format!(
                "{dialect} {version} is too old: the store needs {dialect} {}.{}.{} or later ({needs})",
                min.0, min.1, min.2
            ));
        }
        Ok(dialect)
    }

    /// The tail of a multi-row `INSERT … VALUES (…), (…)` that, on a duplicate key, sets
    /// each of `columns` to the value the row would have inserted.
    pub(super) fn upsert(self, columns: &[&str]) -> String {
        let set = |column: &&str| match self {
            Dialect::MariaDb => format!("{column} = VALUES({column})"),
            Dialect::MySql => format!("{column} = new.{column}"),
        };
        let sets = columns.iter().map(set).collect::<Vec<_>>().join(", ");
        match self {
            Dialect::MariaDb => format!(" ON DUPLICATE KEY UPDATE {sets}"),
            Dialect::MySql => format!(" AS new ON DUPLICATE KEY UPDATE {sets}"),
        }
    }
}

/// `major.minor.patch` at the start of a version string (`10.11.6-MariaDB…`, `9.7.4-2`,
/// `8.0.36`).
fn version_triple(version: &str) -> Option<(u32, u32, u32)> {
    let numeric: String = version
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let mut parts = numeric.split('.').map(str::parse::<u32>);
    let major = parts.next()?.ok()?;
    let minor = parts.next().unwrap_or(Ok(0)).ok()?;
    let patch = parts.next().unwrap_or(Ok(0)).ok()?;
    Some((major, minor, patch))
}

/// Asks the server on `conn` which dialect it speaks.
pub(super) async fn probe(
    conn: &mut sqlx::MySqlConnection,
    op: StoreOp,
) -> Result<Dialect, StoreError> {
    let (version, comment): (String, String) =
        sqlx::query_as("SELECT VERSION(), CAST(@@version_comment AS CHAR)")
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| super::row::db_error(op, e))?;
    Dialect::of_server(&version, &comment).map_err(|what| StoreError::Unsupported { op, what })
}

#[cfg(test)]
mod tests;
