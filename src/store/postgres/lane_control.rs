//! The PostgreSQL store's lane control: the `{prefix}_lane_control` table (migration 6),
//! one row per paused (lane, target), its time the database's clock (or the store's test
//! clock). Each call is one statement that commits at once, and a pause or a resume
//! notifies the store's channel (`wake.rs`'s `LANE_CONTROL_PAYLOAD`) in it, so relays
//! apply it within a round trip; their poll stays as the fallback.

use sqlx::AssertSqlSafe;

use super::row::db_error;
use super::sql::NOW;
use super::wake::LANE_CONTROL_PAYLOAD;
use super::PostgresOutboxStore;
use crate::store::lane_control::validate_lane;
use crate::store::sql::lane_pause;
use crate::store::{LanePause, LanePauseRequest, StoreError, StoreOp};

/// The columns a pause is read from, its time as Unix milliseconds.
const COLUMNS: &str = "lane, target, paused_by, reason, \
    floor(extract(epoch FROM paused_at) * 1000)::int8 AS paused_at";

impl PostgresOutboxStore {
    pub(super) async fn record_pause(
        &self,
        request: &LanePauseRequest,
    ) -> Result<LanePause, StoreError> {
        const OP: StoreOp = StoreOp::PauseLane;
        request.validate()?;
        let table = &self.names.lane_control;
        // The notification goes out with the commit: every relay listening reads the
        // pauses at once instead of at its next poll.
        let mut call = self.call(OP).await?;
        let row = sqlx::query(AssertSqlSafe(format!(
            "WITH paused AS (
                INSERT INTO {table} AS c (lane, target, paused_by, reason, paused_at)
                VALUES ($2, $3, $4, $5, {NOW})
                ON CONFLICT (lane, target) DO UPDATE SET paused_by = excluded.paused_by,
                    reason = excluded.reason, paused_at = excluded.paused_at
                RETURNING {COLUMNS}
             )
             SELECT paused.*, pg_notify($6, $7) IS NULL AS notified FROM paused"
        )))
        .bind(self.now())
        .bind(&request.lane)
        .bind(&request.target)
        .bind(request.paused_by.trim())
        .bind(&request.reason)
        .bind(&self.names.channel)
        .bind(LANE_CONTROL_PAYLOAD)
        .persistent(self.named_statements)
        .fetch_one(&mut *call)
        .await
        .map_err(|e| db_error(OP, e))?;
        call.finish(OP).await?;
        lane_pause(&row, OP, db_error)
    }

    pub(super) async fn lift_pause(
        &self,
        lane: &str,
        target: &str,
    ) -> Result<Option<LanePause>, StoreError> {
        const OP: StoreOp = StoreOp::ResumeLane;
        validate_lane(lane, target)?;
        let table = &self.names.lane_control;
        let mut call = self.call(OP).await?;
        let row = sqlx::query(AssertSqlSafe(format!(
            "WITH lifted AS (
                DELETE FROM {table} WHERE lane = $1 AND target = $2 RETURNING {COLUMNS}
             )
             SELECT lifted.*, pg_notify($3, $4) IS NULL AS notified FROM lifted"
        )))
        .bind(lane)
        .bind(target)
        .bind(&self.names.channel)
        .bind(LANE_CONTROL_PAYLOAD)
        .persistent(self.named_statements)
        .fetch_optional(&mut *call)
        .await
        .map_err(|e| db_error(OP, e))?;
        call.finish(OP).await?;
        row.map(|row| lane_pause(&row, OP, db_error)).transpose()
    }

    pub(super) async fn all_pauses(&self) -> Result<Vec<LanePause>, StoreError> {
        const OP: StoreOp = StoreOp::LanePauses;
        let table = &self.names.lane_control;
        let mut call = self.call(OP).await?;
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM {table} ORDER BY lane, target"
        )))
        .persistent(self.named_statements)
        .fetch_all(&mut *call)
        .await
        .map_err(|e| db_error(OP, e))?;
        call.finish(OP).await?;
        rows.iter()
            .map(|row| lane_pause(row, OP, db_error))
            .collect()
    }
}
