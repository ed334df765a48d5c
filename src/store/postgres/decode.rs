//! From PostgreSQL to the store's types: rows into messages, sqlx errors into
//! [`StoreError`]s that say which operation failed and whether trying again may help.

use std::collections::BTreeMap;

use sqlx::postgres::PgRow;
use sqlx::Row;
use uuid::Uuid;

use crate::message::{OutboxMessage, OutboxStatus, Payload};
use crate::store::StoreError;

/// Maps a sqlx error of operation `op`. Lost or unreachable connections are
/// [`StoreError::Unavailable`] (retryable); rows that do not decode are
/// [`StoreError::Corrupt`]; everything else is [`StoreError::Database`].
pub(crate) fn db_error(op: &str, error: sqlx::Error) -> StoreError {
    match &error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => StoreError::unavailable(op, error),
        sqlx::Error::Database(db) if db.code().is_some_and(|code| is_unavailable(&code)) => {
            StoreError::unavailable(op, error)
        }
        sqlx::Error::Database(db) if db.code().is_some_and(|code| is_denied(&code)) => {
            StoreError::denied(op, error)
        }
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

/// SQLSTATEs that mean the server cannot serve us right now, not that the request is wrong:
/// class 08 (connection exception), shutdown and startup (57P01..57P03), too many
/// connections (53300).
fn is_unavailable(code: &str) -> bool {
    code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03" | "53300")
}

/// SQLSTATEs that no retry can cure: no privilege (42501), a read-only transaction or
/// standby (25006), a missing schema (3F000) or table (42P01), a refused login (28000,
/// 28P01).
fn is_denied(code: &str) -> bool {
    matches!(
        code,
        "42501" | "25006" | "3F000" | "42P01" | "28000" | "28P01"
    )
}

/// Reads one message from a row selected with [`super::sql::columns`].
pub(crate) fn message(row: &PgRow) -> Result<OutboxMessage, StoreError> {
    let outbox_id: Uuid = row.try_get("outbox_id").map_err(|e| corrupt("?", e))?;
    let id = outbox_id.to_string();
    let get = |e: sqlx::Error| corrupt(&id, e);
    let status: String = row.try_get("status").map_err(get)?;
    let status: OutboxStatus = status.parse().map_err(|e| StoreError::Corrupt {
        id: id.clone(),
        reason: format!("{e}"),
    })?;
    let headers: serde_json::Value = row.try_get("headers").map_err(get)?;
    let headers: BTreeMap<String, String> =
        serde_json::from_value(headers).map_err(|e| StoreError::Corrupt {
            id: id.clone(),
            reason: format!("headers: {e}"),
        })?;
    Ok(OutboxMessage {
        outbox_id,
        seq: row.try_get("seq").map_err(get)?,
        lane: row.try_get("lane").map_err(get)?,
        target: row.try_get("target").map_err(get)?,
        payload: row
            .try_get::<Box<serde_json::value::RawValue>, _>("payload")
            .map(Payload::from)
            .map_err(get)?,
        headers,
        ordering_key: row.try_get("ordering_key").map_err(get)?,
        dedupe_key: row.try_get("dedupe_key").map_err(get)?,
        status,
        attempt_count: count(
            &id,
            "attempt_count",
            row.try_get("attempt_count").map_err(get)?,
        )?,
        max_attempts: count(
            &id,
            "max_attempts",
            row.try_get("max_attempts").map_err(get)?,
        )?,
        available_at: row.try_get("available_at").map_err(get)?,
        claimed_by: row.try_get("claimed_by").map_err(get)?,
        claim_token: row.try_get("claim_token").map_err(get)?,
        lease_expires_at: row.try_get("lease_expires_at").map_err(get)?,
        last_error: row.try_get("last_error").map_err(get)?,
        created_at: row.try_get("created_at").map_err(get)?,
        updated_at: row.try_get("updated_at").map_err(get)?,
        delivered_at: row.try_get("delivered_at").map_err(get)?,
    })
}

fn count(id: &str, column: &str, value: i64) -> Result<u32, StoreError> {
    u32::try_from(value).map_err(|_| StoreError::Corrupt {
        id: id.to_owned(),
        reason: format!("{column} {value} is out of range"),
    })
}

fn corrupt(id: &str, error: sqlx::Error) -> StoreError {
    StoreError::Corrupt {
        id: id.to_owned(),
        reason: error.to_string(),
    }
}

/// A non-negative count read from the database.
pub(crate) fn unsigned(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}
