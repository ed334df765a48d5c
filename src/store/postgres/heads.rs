//! Keeping every key's head marked after rows leave live: the keys whose live rows changed
//! ([`LeftKeys`]) and the `promote_heads` call made with them, after the statement that took
//! the rows out and in its transaction (see `schema/heads.rs` for why it must be a statement
//! of its own, after the UPDATE). The claim, the ack, a dead-lettering nack and the
//! dead-lettering of unreadable rows all end this way.

use sqlx::postgres::{PgConnection, PgRow};
use sqlx::{AssertSqlSafe, Row};

use crate::store::{StoreError, StoreOp};

use super::row::db_error;
use super::PostgresOutboxStore;

/// Keys whose live rows changed, for `promote_heads`: (lane, target, key) as three arrays.
#[derive(Debug, Default)]
pub(super) struct LeftKeys {
    lanes: Vec<String>,
    targets: Vec<String>,
    keys: Vec<String>,
}

impl LeftKeys {
    /// Adds the key `key` of (`lane`, `target`).
    pub(super) fn push(&mut self, lane: String, target: String, key: String) {
        self.lanes.push(lane);
        self.targets.push(target);
        self.keys.push(key);
    }

    /// Reads `lane`, `target` and `ordering_key` of a row that left live; a row without a
    /// key has no head to promote.
    pub(super) fn push_row(&mut self, row: &PgRow, op: StoreOp) -> Result<(), StoreError> {
        let key: Option<String> = row.try_get("ordering_key").map_err(|e| db_error(op, e))?;
        if let Some(key) = key {
            self.push(
                row.try_get("lane").map_err(|e| db_error(op, e))?,
                row.try_get("target").map_err(|e| db_error(op, e))?,
                key,
            );
        }
        Ok(())
    }
}

impl PostgresOutboxStore {
    /// Marks the new head of each key in `left`, inside the transaction that took rows of
    /// those keys out of live, after it did.
    pub(super) async fn promote_heads(
        &self,
        conn: &mut PgConnection,
        left: &LeftKeys,
        op: StoreOp,
    ) -> Result<(), StoreError> {
        if left.keys.is_empty() {
            return Ok(());
        }
        sqlx::query(AssertSqlSafe(self.sql.promote_heads.clone()))
            .bind(&left.lanes)
            .bind(&left.targets)
            .bind(&left.keys)
            .persistent(self.named_statements)
            .execute(conn)
            .await
            .map_err(|e| db_error(op, e))?;
        Ok(())
    }
}
