//! The PostgreSQL store's lane control: the `{prefix}_lane_control` table (migration 6),
//! one row per paused (lane, target), its time the database's clock (or the store's test
//! clock). Each call is one statement that commits at once, and a pause or a resume
//! notifies the store's channel (`wake.rs`'s `LANE_CONTROL_PAYLOAD`) in it, so relays
//! apply it within a round trip; their poll stays as the fallback.

use sqlx::AssertSqlSafe;

use super::row::db_error;
use super::wake::LANE_CONTROL_PAYLOAD;
use super::PostgresOutboxStore;
use crate::store::lane_control::validate_lane;
use crate::store::sql::lane_pause;
use crate::store::{LanePause, LanePauseRequest, StoreError, StoreOp};

impl PostgresOutboxStore {
    pub(super) async fn record_pause(
        &self,
        request: &LanePauseRequest,
    ) -> Result<LanePause, StoreError> {
        const OP: StoreOp = StoreOp::PauseLane;
        request.validate()?;
        let mut call = self.call(OP).await?;
        let row = sqlx::query(AssertSqlSafe(self.sql.pause_lane.clone()))
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
        let mut call = self.call(OP).await?;
        let row = sqlx::query(AssertSqlSafe(self.sql.resume_lane.clone()))
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
        let mut call = self.call(OP).await?;
        let rows = sqlx::query(AssertSqlSafe(self.sql.lane_pauses.clone()))
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
