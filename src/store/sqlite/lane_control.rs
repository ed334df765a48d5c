//! The SQLite store's lane control: the `{table}_lane_control` table (migration 4), one
//! row per paused (lane, target). Writes take the write turn like every other write.

use sqlx::Row;

use super::row::db;
use super::{Commit, SqliteOutboxStore};
use crate::store::lane_control::validate_lane;
use crate::store::{LanePause, LanePauseRequest, StoreError, StoreOp};
use crate::time::UnixMillis;

impl SqliteOutboxStore {
    fn lane_control_table(&self) -> String {
        format!("{}_lane_control", self.sql.table)
    }

    pub(super) async fn record_pause(
        &self,
        request: &LanePauseRequest,
    ) -> Result<LanePause, StoreError> {
        const OP: StoreOp = StoreOp::PauseLane;
        request.validate()?;
        let table = self.lane_control_table();
        let (_turn, mut tx) = self.begin_write(OP, Commit::Durable).await?;
        let now = self.clock.now_millis();
        let pause = LanePause {
            lane: request.lane.clone(),
            target: request.target.clone(),
            paused_by: request.paused_by.trim().to_owned(),
            reason: request.reason.clone(),
            paused_at: now,
        };
        let written = sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO {table} (lane, target, paused_by, reason, paused_at)
             VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (lane, target) DO UPDATE SET paused_by = excluded.paused_by,
                 reason = excluded.reason, paused_at = excluded.paused_at"
        )))
        .bind(&pause.lane)
        .bind(&pause.target)
        .bind(&pause.paused_by)
        .bind(&pause.reason)
        .bind(now.as_millis())
        .execute(&mut *tx)
        .await
        .map(drop)
        .map_err(db(OP));
        self.finish(tx, written, OP).await?;
        Ok(pause)
    }

    pub(super) async fn lift_pause(
        &self,
        lane: &str,
        target: &str,
    ) -> Result<Option<LanePause>, StoreError> {
        const OP: StoreOp = StoreOp::ResumeLane;
        validate_lane(lane, target)?;
        let table = self.lane_control_table();
        let (_turn, mut tx) = self.begin_write(OP, Commit::Durable).await?;
        let lifted = sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM {table} WHERE lane = ?1 AND target = ?2
             RETURNING lane, target, paused_by, reason, paused_at"
        )))
        .bind(lane)
        .bind(target)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db(OP))
        .and_then(|row| row.map(|row| pause_of(&row, OP)).transpose());
        self.finish(tx, lifted, OP).await
    }

    pub(super) async fn all_pauses(&self) -> Result<Vec<LanePause>, StoreError> {
        const OP: StoreOp = StoreOp::LanePauses;
        let table = self.lane_control_table();
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT lane, target, paused_by, reason, paused_at FROM {table}
             ORDER BY lane, target"
        )))
        .fetch_all(&self.reader)
        .await
        .map_err(db(OP))?;
        rows.iter().map(|row| pause_of(row, OP)).collect()
    }
}

fn pause_of(row: &sqlx::sqlite::SqliteRow, op: StoreOp) -> Result<LanePause, StoreError> {
    Ok(LanePause {
        lane: row.try_get("lane").map_err(db(op))?,
        target: row.try_get("target").map_err(db(op))?,
        paused_by: row.try_get("paused_by").map_err(db(op))?,
        reason: row.try_get("reason").map_err(db(op))?,
        paused_at: UnixMillis::from_millis(row.try_get("paused_at").map_err(db(op))?),
    })
}
