//! Between `OutboxMessage` and a MySQL row: the columns read, decoding, the mapping of
//! `sqlx` errors onto [`StoreError`], and the small SQL text helpers the statements share.

use sqlx::mysql::MySqlRow;
use sqlx::Row;
use uuid::Uuid;

use crate::message::{OutboxMessage, OutboxStatus, Payload};
use crate::store::sql::{self, BadColumn};
use crate::store::unreadable::{ClaimedRow, Unreadable};
use crate::store::{StoreError, StoreOp};
use crate::time::UnixMillis;

/// The columns a message is read from.
pub(super) const COLUMNS: &str = "seq, outbox_id, lane, target, payload, headers, ordering_key, \
    dedupe_key, status, attempt_count, max_attempts, available_at, claimed_by, claim_token, \
    lease_expires_at, last_error, created_at, updated_at, delivered_at";

/// `?, ?, …` for `n` values.
pub(super) fn marks(n: usize) -> String {
    vec!["?"; n].join(", ")
}

/// Maps a driver error onto the store's error kinds ([`sql::store_error`] with MySQL's
/// error numbers).
pub(super) fn db_error(op: StoreOp, error: sqlx::Error) -> StoreError {
    sql::store_error(op, error, &CODES)
}

/// Unavailable: server shutdown, too many connections, lost connection, read-only server.
/// Denied: no privilege, unknown database or table, access denied, read-only.
const CODES: sql::Codes = sql::Codes {
    code: |db| {
        db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
            .map(|e| e.number().to_string())
    },
    unavailable: &["1053", "1040", "2006", "2013", "1927"],
    denied: &[
        "1044", "1045", "1142", "1143", "1049", "1146", "1290", "1792",
    ],
};

/// The server's error number (1213 a deadlock, 1062 a duplicate key).
fn number(error: &sqlx::Error) -> Option<u16> {
    let db = error.as_database_error()?;
    db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
        .map(|e| e.number())
}

/// The server's error number under a store error.
pub(super) fn error_number(error: &StoreError) -> Option<u16> {
    let source = match error {
        StoreError::Unavailable { source, .. }
        | StoreError::Denied { source, .. }
        | StoreError::Database { source, .. } => source,
        _ => return None,
    };
    number(source.downcast_ref::<sqlx::Error>()?)
}

/// Whether a call that failed with `error` is worth running again at once: the server
/// chose its transaction as a deadlock victim (1213), or a dedupe key it found free was
/// committed by another transaction before its insert (1062). Either rolled back.
pub(super) fn is_transient(error: &StoreError) -> bool {
    matches!(error_number(error), Some(1213 | 1062))
}

/// A `VARBINARY` column as text.
pub(super) fn text(row: &MySqlRow, column: &'static str) -> Result<String, BadColumn> {
    let bytes: Vec<u8> = row.try_get(column).map_err(|e| BadColumn::new(column, e))?;
    String::from_utf8(bytes).map_err(|e| BadColumn::new(column, e))
}

/// A nullable `VARBINARY` column as text.
pub(super) fn opt_text(row: &MySqlRow, column: &'static str) -> Result<Option<String>, BadColumn> {
    let bytes: Option<Vec<u8>> = row.try_get(column).map_err(|e| BadColumn::new(column, e))?;
    bytes
        .map(|b| String::from_utf8(b).map_err(|e| BadColumn::new(column, e)))
        .transpose()
}

fn column<'r, T>(row: &'r MySqlRow, name: &'static str) -> Result<T, BadColumn>
where
    T: sqlx::Decode<'r, sqlx::MySql> + sqlx::Type<sqlx::MySql>,
{
    row.try_get(name).map_err(|e| BadColumn::new(name, e))
}

fn millis(row: &MySqlRow, name: &'static str) -> Result<UnixMillis, BadColumn> {
    column::<i64>(row, name).map(UnixMillis::from_millis)
}

fn opt_millis(row: &MySqlRow, name: &'static str) -> Result<Option<UnixMillis>, BadColumn> {
    column::<Option<i64>>(row, name).map(|m| m.map(UnixMillis::from_millis))
}

/// The status word as stored.
pub(super) fn status_word(status: OutboxStatus) -> &'static str {
    status.as_str()
}

pub(super) fn status_of(word: &str) -> Result<OutboxStatus, BadColumn> {
    OutboxStatus::ALL
        .into_iter()
        .find(|s| s.as_str() == word)
        .ok_or_else(|| BadColumn::new("status", format!("unknown status {word:?}")))
}

/// The message in `row`, or the first column that does not decode.
fn read(row: &MySqlRow) -> Result<OutboxMessage, BadColumn> {
    let payload: String = column(row, "payload")?;
    let headers: String = column(row, "headers")?;
    let status: String = column(row, "status")?;
    Ok(OutboxMessage {
        outbox_id: column(row, "outbox_id")?,
        seq: column(row, "seq")?,
        lane: text(row, "lane")?,
        target: text(row, "target")?,
        payload: Payload::from_json(payload).map_err(|e| BadColumn::new("payload", e))?,
        headers: sql::headers(&headers)?,
        ordering_key: opt_text(row, "ordering_key")?,
        dedupe_key: opt_text(row, "dedupe_key")?,
        status: status_of(&status)?,
        attempt_count: column(row, "attempt_count")?,
        max_attempts: column(row, "max_attempts")?,
        available_at: millis(row, "available_at")?,
        claimed_by: column(row, "claimed_by")?,
        claim_token: column(row, "claim_token")?,
        lease_expires_at: opt_millis(row, "lease_expires_at")?,
        last_error: column(row, "last_error")?,
        created_at: millis(row, "created_at")?,
        updated_at: millis(row, "updated_at")?,
        delivered_at: opt_millis(row, "delivered_at")?,
    })
}

/// Reads a message from a row selected with [`COLUMNS`].
pub(super) fn decode(row: &MySqlRow) -> Result<OutboxMessage, StoreError> {
    read(row).map_err(|bad| {
        let id = row
            .try_get::<Uuid, _>("outbox_id")
            .map_or_else(|_| "?".to_owned(), |id| id.to_string());
        bad.corrupt(id)
    })
}

/// Reads a row a claim took: the message as claimed (status, token, lease and attempt as
/// the claim's update wrote them), or what it takes to dead-letter it.
pub(super) fn claimed(row: &MySqlRow, update: &ClaimUpdate<'_>, claim_token: Uuid) -> ClaimedRow {
    match read(row) {
        Ok(mut message) => {
            message.status = OutboxStatus::Claimed;
            message.attempt_count = message.attempt_count.saturating_add(1);
            message.claimed_by = Some(update.consumer_id.to_owned());
            message.claim_token = Some(claim_token);
            message.lease_expires_at = Some(update.lease_until);
            message.updated_at = update.now;
            ClaimedRow::Read(message)
        }
        Err(bad) => ClaimedRow::Unreadable(Unreadable {
            seq: row.try_get("seq").unwrap_or_default(),
            outbox_id: row.try_get("outbox_id").ok(),
            claim_token,
            ordering_key: opt_text(row, "ordering_key").ok().flatten(),
            error: bad.unreadable(),
        }),
    }
}

/// What a claim writes to the rows it takes.
#[derive(Debug)]
pub(super) struct ClaimUpdate<'a> {
    pub(super) consumer_id: &'a str,
    pub(super) lease_until: UnixMillis,
    pub(super) now: UnixMillis,
}
