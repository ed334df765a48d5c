//! The PostgreSQL store's record of served lanes (`store::served`): the
//! `{prefix}_served_lanes` table (migration 9), one row per (lane, target) with the time
//! until which a running relay serves it, on the database's clock (or the store's test
//! clock). The lanes nobody serves are read in one statement whose cost is the number of
//! (lane, target) pairs holding pending messages, never their messages, but for the
//! unserved pairs' counts (`sql/unserved.sql`; `tests/postgres/plans.rs` pins its plan at
//! 1,000,000 rows).

use sqlx::{AssertSqlSafe, Row};

use super::row::{db_error, unsigned};
use super::{to_i64, PostgresOutboxStore};
use crate::store::served::UNSERVED_COUNT_CAP;
use crate::store::{StoreError, StoreOp, UnservedLane};

impl PostgresOutboxStore {
    pub(super) async fn record_served_lanes(
        &self,
        lanes: &[(String, String)],
        served_for: std::time::Duration,
    ) -> Result<(), StoreError> {
        const OP: StoreOp = StoreOp::RecordServed;
        let (names, targets): (Vec<&str>, Vec<&str>) = lanes
            .iter()
            .map(|(lane, target)| (lane.as_str(), target.as_str()))
            .unzip();
        let mut call = self.call(OP).await?;
        sqlx::query(AssertSqlSafe(self.sql.record_served.clone()))
            .bind(self.now())
            .bind(&names)
            .bind(&targets)
            .bind(super::interval(served_for))
            .persistent(self.named_statements)
            .execute(&mut *call)
            .await
            .map_err(|e| db_error(OP, e))?;
        call.finish(OP).await
    }

    pub(super) async fn unserved(&self, limit: usize) -> Result<Vec<UnservedLane>, StoreError> {
        const OP: StoreOp = StoreOp::UnservedLanes;
        let mut call = self.call(OP).await?;
        let rows = sqlx::query(AssertSqlSafe(self.sql.unserved.clone()))
            .bind(self.now())
            .bind(to_i64(limit))
            .bind(i64::try_from(UNSERVED_COUNT_CAP).unwrap_or(i64::MAX))
            .persistent(self.named_statements)
            .fetch_all(&mut *call)
            .await
            .map_err(|e| db_error(OP, e))?;
        call.finish(OP).await?;
        rows.iter()
            .map(|row| {
                Ok(UnservedLane {
                    lane: row.try_get("lane").map_err(|e| db_error(OP, e))?,
                    target: row.try_get("target").map_err(|e| db_error(OP, e))?,
                    pending: unsigned(row.try_get("pending").map_err(|e| db_error(OP, e))?),
                })
            })
            .collect()
    }

    pub(super) async fn matching_lanes(
        &self,
        prefixes: &[(String, String)],
        limit: usize,
    ) -> Result<Vec<(String, String)>, StoreError> {
        const OP: StoreOp = StoreOp::PendingLanes;
        if prefixes.is_empty() {
            return Ok(Vec::new());
        }
        let (starts, targets): (Vec<&str>, Vec<&str>) = prefixes
            .iter()
            .map(|(prefix, target)| (prefix.as_str(), target.as_str()))
            .unzip();
        let mut call = self.call(OP).await?;
        let rows = sqlx::query(AssertSqlSafe(self.sql.pending_lanes.clone()))
            .bind(&starts)
            .bind(&targets)
            .bind(to_i64(limit))
            .persistent(self.named_statements)
            .fetch_all(&mut *call)
            .await
            .map_err(|e| db_error(OP, e))?;
        call.finish(OP).await?;
        rows.iter()
            .map(|row| {
                Ok((
                    row.try_get("lane").map_err(|e| db_error(OP, e))?,
                    row.try_get("target").map_err(|e| db_error(OP, e))?,
                ))
            })
            .collect()
    }
}
