//! The SQLite store's lane control: the `{table}_lane_control` table (migration 5), one
//! row per paused (lane, target). Writes take the write turn like every other write.

use super::row::{db, db_error};
use super::statement::query;
use super::{Commit, SqliteOutboxStore};
use crate::store::lane_control::validate_lane;
use crate::store::sql::lane_pause;
use crate::store::{LanePause, LanePauseRequest, StoreError, StoreOp};

impl SqliteOutboxStore {
    pub(super) async fn record_pause(
        &self,
        request: &LanePauseRequest,
    ) -> Result<LanePause, StoreError> {
        const OP: StoreOp = StoreOp::PauseLane;
        request.validate()?;
        let (_turn, mut tx) = self.begin_write(OP, Commit::Durable).await?;
        let now = self.clock.now_millis();
        let pause = LanePause {
            lane: request.lane.clone(),
            target: request.target.clone(),
            paused_by: request.paused_by.trim().to_owned(),
            reason: request.reason.clone(),
            paused_at: now,
        };
        let written = query(&self.sql.pause_lane)
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
        let (_turn, mut tx) = self.begin_write(OP, Commit::Durable).await?;
        let lifted = query(&self.sql.resume_lane)
            .bind(lane)
            .bind(target)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db(OP))
            .and_then(|row| row.map(|row| lane_pause(&row, OP, db_error)).transpose());
        self.finish(tx, lifted, OP).await
    }

    pub(super) async fn all_pauses(&self) -> Result<Vec<LanePause>, StoreError> {
        const OP: StoreOp = StoreOp::LanePauses;
        let rows = query(&self.sql.lane_pauses)
            .fetch_all(&self.reader)
            .await
            .map_err(db(OP))?;
        rows.iter()
            .map(|row| lane_pause(row, OP, db_error))
            .collect()
    }
}
