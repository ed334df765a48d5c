//! The SQLite store's record of served lanes (`store::served`): the
//! `{table}_served_lanes` table (migration 7), one row per (lane, target) with the time
//! (milliseconds, the store's clock) until which a running relay serves it. The lanes
//! nobody serves are read as on PostgreSQL: a skip scan of the `{table}_pending` index, one
//! probe per (lane, target) holding pending messages, and only the unserved pairs' messages
//! counted.

use std::time::Duration;

use sqlx::Row;

use super::row::db;
use super::statement::query;
use super::{Commit, SqliteOutboxStore};
use crate::store::served::UNSERVED_COUNT_CAP;
use crate::store::{StoreError, StoreOp, UnservedLane};

impl SqliteOutboxStore {
    pub(super) async fn record_served_lanes(
        &self,
        lanes: &[(String, String)],
        served_for: Duration,
    ) -> Result<(), StoreError> {
        const OP: StoreOp = StoreOp::RecordServed;
        let (_turn, mut tx) = self.begin_write(OP, Commit::Relay).await?;
        let until = self.clock.now_millis().saturating_add(served_for);
        let mut written = Ok(());
        for (lane, target) in lanes {
            written = query(&self.sql.record_served)
                .bind(lane)
                .bind(target)
                .bind(until.as_millis())
                .execute(&mut *tx)
                .await
                .map(drop)
                .map_err(db(OP));
            if written.is_err() {
                break;
            }
        }
        self.finish(tx, written, OP).await
    }

    pub(super) async fn unserved(&self, limit: usize) -> Result<Vec<UnservedLane>, StoreError> {
        const OP: StoreOp = StoreOp::UnservedLanes;
        let rows = query(&self.sql.unserved)
            .bind(self.clock.now_millis().as_millis())
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .bind(i64::try_from(UNSERVED_COUNT_CAP).unwrap_or(i64::MAX))
            .fetch_all(&self.reader)
            .await
            .map_err(db(OP))?;
        rows.iter()
            .map(|row| {
                Ok(UnservedLane {
                    lane: row.try_get("lane").map_err(db(OP))?,
                    target: row.try_get("target").map_err(db(OP))?,
                    pending: u64::try_from(row.try_get::<i64, _>("pending").map_err(db(OP))?)
                        .unwrap_or(0),
                })
            })
            .collect()
    }

    /// Every pair holding pending messages is read (one index probe each, in process) and
    /// matched here: SQLite binds no arrays.
    pub(super) async fn matching_lanes(
        &self,
        prefixes: &[(String, String)],
        limit: usize,
    ) -> Result<Vec<(String, String)>, StoreError> {
        const OP: StoreOp = StoreOp::PendingLanes;
        if prefixes.is_empty() {
            return Ok(Vec::new());
        }
        let rows = query(&self.sql.pending_lanes)
            .fetch_all(&self.reader)
            .await
            .map_err(db(OP))?;
        let pairs = rows
            .iter()
            .map(|row| {
                Ok((
                    row.try_get("lane").map_err(db(OP))?,
                    row.try_get("target").map_err(db(OP))?,
                ))
            })
            .collect::<Result<Vec<(String, String)>, StoreError>>()?;
        Ok(crate::store::served::matching(pairs, prefixes, limit))
    }
}
