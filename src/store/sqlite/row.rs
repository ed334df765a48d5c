//! Between `OutboxMessage` and a SQLite row: decoding, the text forms of ids, statuses and
//! JSON columns, and the mapping of `sqlx` errors onto [`StoreError`].

use sqlx::sqlite::SqliteRow;
use sqlx::Row;
use uuid::Uuid;

use crate::message::{OutboxMessage, OutboxStatus, Payload};
use crate::store::sql::{self, BadColumn};
use crate::store::unreadable::{ClaimedRow, Unreadable};
use crate::store::{StoreError, StoreOp};

/// Reads a message from a row selected with `schema::COLUMNS`.
pub(super) fn decode(row: &SqliteRow) -> Result<OutboxMessage, StoreError> {
    read(row).map_err(|bad| {
        // The id first, so every later complaint can name the row.
        let id: String = row.try_get("outbox_id").unwrap_or_else(|_| "?".to_owned());
        bad.corrupt(id)
    })
}

/// Reads one row a claim returned under `claim_token`: the message, or, when a column of
/// it cannot be read, what it takes to dead-letter it (`store/unreadable.rs`). Only the
/// sequence (the table's integer key) failing is an error.
pub(super) fn claimed(row: &SqliteRow, claim_token: Uuid) -> Result<ClaimedRow, StoreError> {
    let bad = match read(row) {
        Ok(message) => return Ok(ClaimedRow::Read(message)),
        Err(bad) => bad,
    };
    let seq: i64 = row.try_get("seq").map_err(db(StoreOp::Claim))?;
    let outbox_id = row
        .try_get::<String, _>("outbox_id")
        .ok()
        .and_then(|id| Uuid::parse_str(&id).ok());
    Ok(ClaimedRow::Unreadable(Unreadable {
        seq,
        outbox_id,
        claim_token,
        ordering_key: row.try_get("ordering_key").ok().flatten(),
        error: bad.unreadable(),
    }))
}

/// The message in `row`, or the first column that does not decode.
fn read(row: &SqliteRow) -> Result<OutboxMessage, BadColumn> {
    let id_text: String = column(row, "outbox_id")?;
    let outbox_id = Uuid::parse_str(&id_text).map_err(|e| BadColumn::new("outbox_id", e))?;
    let status_text: String = column(row, "status")?;
    let payload: String = column(row, "payload")?;
    let headers: String = column(row, "headers")?;
    let claim_token: Option<String> = column(row, "claim_token")?;
    Ok(OutboxMessage {
        outbox_id,
        seq: column(row, "seq")?,
        lane: column(row, "lane")?,
        target: column(row, "target")?,
        payload: Payload::from_json(payload).map_err(|e| BadColumn::new("payload", e))?,
        headers: sql::headers(&headers)?,
        ordering_key: column(row, "ordering_key")?,
        dedupe_key: column(row, "dedupe_key")?,
        status: status_text
            .parse::<OutboxStatus>()
            .map_err(|e| BadColumn::new("status", e))?,
        attempt_count: sql::count("attempt_count", column(row, "attempt_count")?)?,
        max_attempts: sql::count("max_attempts", column(row, "max_attempts")?)?,
        available_at: column(row, "available_at")?,
        claimed_by: column(row, "claimed_by")?,
        claim_token: claim_token
            .map(|token| Uuid::parse_str(&token).map_err(|e| BadColumn::new("claim_token", e)))
            .transpose()?,
        lease_expires_at: column(row, "lease_expires_at")?,
        last_error: column(row, "last_error")?,
        created_at: column(row, "created_at")?,
        updated_at: column(row, "updated_at")?,
        delivered_at: column(row, "delivered_at")?,
    })
}

fn column<'r, T>(row: &'r SqliteRow, name: &'static str) -> Result<T, BadColumn>
where
    T: sqlx::Decode<'r, sqlx::Sqlite> + sqlx::Type<sqlx::Sqlite>,
{
    row.try_get(name).map_err(|e| BadColumn::decoding(name, e))
}

pub(super) fn parse_uuid(text: &str, field: &str, id: &str) -> Result<Uuid, StoreError> {
    Uuid::parse_str(text).map_err(|e| StoreError::Corrupt {
        id: id.to_owned(),
        reason: format!("{field}: {e}"),
    })
}

/// Ids and tokens are stored as hyphenated lowercase text: readable in the `sqlite3` shell,
/// and comparable with the strings `json_each` yields for id filters.
pub(super) fn uuid_text(id: Uuid) -> String {
    id.hyphenated().to_string()
}

/// The JSON text a header map is stored as.
pub(super) fn json_text(value: &impl serde::Serialize, field: &str) -> Result<String, StoreError> {
    // A header map of strings always serialises, so this cannot fail in practice; if it
    // ever did, nothing has been written yet.
    serde_json::to_string(value)
        .map_err(|e| StoreError::database(StoreOp::Enqueue, format!("encoding {field}: {e}")))
}

/// The JSON array of `[lane, target]` pairs a statement reads with `json_each`; `None` for
/// no lanes (every lane, to a purge).
pub(super) fn lanes_json(
    lanes: &[(String, String)],
    op: StoreOp,
) -> Result<Option<String>, StoreError> {
    if lanes.is_empty() {
        return Ok(None);
    }
    serde_json::to_string(lanes)
        .map(Some)
        .map_err(|e| StoreError::database(op, format!("encoding lanes: {e}")))
}

/// A count or limit as SQLite's integer, saturating.
pub(super) fn int(value: impl TryInto<i64>) -> i64 {
    value.try_into().unwrap_or(i64::MAX)
}

/// Maps a `sqlx` error of operation `op` onto the store's error ([`sql::store_error`] with
/// SQLite's primary result codes).
pub(super) fn db_error(op: StoreOp, error: sqlx::Error) -> StoreError {
    sql::store_error(op, error, &CODES)
}

/// Primary result codes (the low byte of an extended code) that mean "not now" rather than
/// "never": another process holds the write lock past busy_timeout (BUSY 5, LOCKED 6), or
/// the disk or file cannot be used at the moment (IOERR 10, FULL 13, CANTOPEN 14). Denied:
/// READONLY 8, PERM 3, AUTH 23.
const CODES: sql::Codes = sql::Codes {
    code: |db| {
        db.code()
            .and_then(|code| code.parse::<i64>().ok())
            .map(|code| (code & 0xff).to_string())
    },
    unavailable: &["5", "6", "10", "13", "14"],
    denied: &["8", "3", "23"],
};

/// `map_err` adapter: `.map_err(db(op))`.
pub(super) fn db(op: StoreOp) -> impl Fn(sqlx::Error) -> StoreError {
    move |error| db_error(op, error)
}

#[cfg(test)]
mod tests;
