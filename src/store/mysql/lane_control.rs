//! The MySQL store's lane control: the `{prefix}_lane_control` table (migration 2), one row
//! per paused (lane, target), its time the store's clock. Each call commits at once.

use std::sync::Arc;

use sqlx::AssertSqlSafe;

use super::row::db_error;
use super::MysqlOutboxStore;
use crate::store::lane_control::validate_lane;
use crate::store::sql::lane_pause;
use crate::store::{LanePause, LanePauseRequest, StoreError, StoreOp};

impl MysqlOutboxStore {
    pub(super) async fn record_pause(
        &self,
        request: &LanePauseRequest,
    ) -> Result<LanePause, StoreError> {
        const OP: StoreOp = StoreOp::PauseLane;
        request.validate()?;
        let pause = LanePause {
            lane: request.lane.clone(),
            target: request.target.clone(),
            paused_by: request.paused_by.trim().to_owned(),
            reason: request.reason.clone(),
            paused_at: self.now(),
        };
        sqlx::query(AssertSqlSafe(Arc::clone(&self.names.sql.pause_lane)))
            .bind(&pause.lane)
            .bind(&pause.target)
            .bind(&pause.paused_by)
            .bind(&pause.reason)
            .bind(pause.paused_at.as_millis())
            .bind(&pause.paused_by)
            .bind(&pause.reason)
            .bind(pause.paused_at.as_millis())
            .execute(&self.pool)
            .await
            .map_err(|e| db_error(OP, e))?;
        Ok(pause)
    }

    pub(super) async fn lift_pause(
        &self,
        lane: &str,
        target: &str,
    ) -> Result<Option<LanePause>, StoreError> {
        const OP: StoreOp = StoreOp::ResumeLane;
        validate_lane(lane, target)?;
        let mut tx = self.begin(OP).await?;
        let row = sqlx::query(AssertSqlSafe(Arc::clone(&self.names.sql.lane_pause_locked)))
            .bind(lane)
            .bind(target)
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| db_error(OP, e))?;
        let Some(row) = row else {
            return Ok(None);
        };
        sqlx::query(AssertSqlSafe(Arc::clone(&self.names.sql.resume_lane)))
            .bind(lane)
            .bind(target)
            .execute(&mut *tx)
            .await
            .map_err(|e| db_error(OP, e))?;
        tx.commit().await.map_err(|e| db_error(OP, e))?;
        lane_pause(&row, OP, db_error).map(Some)
    }

    pub(super) async fn all_pauses(&self) -> Result<Vec<LanePause>, StoreError> {
        const OP: StoreOp = StoreOp::LanePauses;
        let rows = sqlx::query(AssertSqlSafe(Arc::clone(&self.names.sql.lane_pauses)))
            .fetch_all(&self.pool)
            .await
            .map_err(|e| db_error(OP, e))?;
        rows.iter()
            .map(|row| lane_pause(row, OP, db_error))
            .collect()
    }
}
