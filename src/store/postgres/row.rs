//! From PostgreSQL to the store's types: rows into messages, sqlx errors into
//! [`StoreError`]s that say which operation failed and whether trying again may help.

use std::collections::BTreeMap;

use sqlx::postgres::PgRow;
use sqlx::Row;
use uuid::Uuid;

use crate::message::{OutboxMessage, OutboxStatus, Payload};
use crate::store::sql::{self, BadColumn};
use crate::store::unreadable::{ClaimedRow, Unreadable};
use crate::store::{StoreError, StoreOp};

/// Maps a sqlx error of operation `op` ([`sql::store_error`] with PostgreSQL's codes).
pub(crate) fn db_error(op: StoreOp, error: sqlx::Error) -> StoreError {
    sql::store_error(op, error, &CODES)
}

/// SQLSTATEs that mean the server cannot serve us right now, not that the request is wrong:
/// class 08 (connection exception), shutdown and startup (57P01..57P03), too many
/// connections (53300). Those no retry can cure: no privilege (42501), a read-only
/// transaction or standby (25006), a missing schema (3F000) or table (42P01), a refused
/// login (28000, 28P01).
const CODES: sql::Codes = sql::Codes {
    code: |db| db.code().map(String::from),
    unavailable: &["08*", "57P01", "57P02", "57P03", "53300"],
    denied: &["42501", "25006", "3F000", "42P01", "28000", "28P01"],
};

/// Reads one message from a row selected with [`super::sql::columns`].
pub(crate) fn message(row: &PgRow) -> Result<OutboxMessage, StoreError> {
    let outbox_id: Uuid = get(row, "outbox_id").map_err(|bad| bad.corrupt("?"))?;
    read(row, outbox_id).map_err(|bad| bad.corrupt(outbox_id.to_string()))
}

/// Reads one row a claim returned: the message, or, when a column of it cannot be read, what
/// it takes to dead-letter it (`store/unreadable.rs`). Only the columns the store itself
/// types and fills (id, sequence, token, key) failing is an error.
pub(crate) fn claimed(row: &PgRow, op: StoreOp) -> Result<ClaimedRow, StoreError> {
    let outbox_id: Uuid = row.try_get("outbox_id").map_err(|e| db_error(op, e))?;
    match read(row, outbox_id) {
        Ok(message) => Ok(ClaimedRow::Read(message)),
        Err(bad) => {
            let claim_token: Option<Uuid> =
                row.try_get("claim_token").map_err(|e| db_error(op, e))?;
            let claim_token = claim_token.ok_or_else(|| StoreError::Corrupt {
                id: outbox_id.to_string(),
                reason: format!("{op}: a claimed row without a claim token"),
            })?;
            Ok(ClaimedRow::Unreadable(Unreadable {
                seq: row.try_get("seq").map_err(|e| db_error(op, e))?,
                outbox_id: Some(outbox_id),
                claim_token,
                ordering_key: row.try_get("ordering_key").map_err(|e| db_error(op, e))?,
                error: bad.unreadable(),
            }))
        }
    }
}

/// The message in `row`, or the first column that does not decode.
fn read(row: &PgRow, outbox_id: Uuid) -> Result<OutboxMessage, BadColumn> {
    let status: String = get(row, "status")?;
    let status: OutboxStatus = status.parse().map_err(|e| BadColumn::new("status", e))?;
    let headers: serde_json::Value = get(row, "headers")?;
    let headers: BTreeMap<String, String> = serde_json::from_value(headers)
        .map_err(|e| BadColumn::new("headers", format!("is not a JSON object of strings: {e}")))?;
    Ok(OutboxMessage {
        outbox_id,
        seq: get(row, "seq")?,
        lane: get(row, "lane")?,
        target: get(row, "target")?,
        payload: get::<Box<serde_json::value::RawValue>>(row, "payload").map(Payload::from)?,
        headers,
        ordering_key: get(row, "ordering_key")?,
        dedupe_key: get(row, "dedupe_key")?,
        status,
        attempt_count: sql::count("attempt_count", get(row, "attempt_count")?)?,
        max_attempts: sql::count("max_attempts", get(row, "max_attempts")?)?,
        available_at: get(row, "available_at")?,
        claimed_by: get(row, "claimed_by")?,
        claim_token: get(row, "claim_token")?,
        lease_expires_at: get(row, "lease_expires_at")?,
        last_error: get(row, "last_error")?,
        created_at: get(row, "created_at")?,
        updated_at: get(row, "updated_at")?,
        delivered_at: get(row, "delivered_at")?,
    })
}

fn get<'r, T>(row: &'r PgRow, column: &'static str) -> Result<T, BadColumn>
where
    T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
{
    row.try_get(column)
        .map_err(|e| BadColumn::decoding(column, e))
}

/// A non-negative count read from the database.
pub(crate) fn unsigned(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}
