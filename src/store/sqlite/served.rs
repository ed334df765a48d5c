//! The SQLite store's record of served lanes (`store::served`): the
//! `{table}_served_lanes` table (migration 7), one row per (lane, target) with the time
//! (milliseconds, the store's clock) until which a running relay serves it. The lanes
//! nobody serves are read as on PostgreSQL: a skip scan of the `{table}_pending` index, one
//! probe per (lane, target) holding pending messages, and only the unserved pairs' messages
//! counted.

use std::time::Duration;

use sqlx::Row;

use super::row::db;
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
        let table = &self.sql.table;
        let (_turn, mut tx) = self.begin_write(OP, Commit::Relay).await?;
        let until = self.clock.now_millis().saturating_add(served_for);
        let mut written = Ok(());
        for (lane, target) in lanes {
            written = sqlx::query(sqlx::AssertSqlSafe(format!(
                "INSERT INTO {table}_served_lanes (lane, target, served_until) VALUES (?1, ?2, ?3)
                 ON CONFLICT (lane, target) DO UPDATE
                 SET served_until = max(served_until, excluded.served_until)"
            )))
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
        let t = &self.sql.table;
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "WITH RECURSIVE pairs (lane, target) AS (
                SELECT lane, target FROM (
                    SELECT lane, target FROM {t} WHERE status = 'pending'
                    ORDER BY lane, target LIMIT 1)
                UNION ALL
                SELECT n.lane, n.target FROM pairs AS p
                JOIN {t} AS n ON n.seq = (
                    SELECT m.seq FROM {t} AS m
                    WHERE m.status = 'pending' AND (m.lane, m.target) > (p.lane, p.target)
                    ORDER BY m.lane, m.target LIMIT 1)
             )
             SELECT p.lane, p.target,
                    (SELECT count(*) FROM (
                        SELECT 1 FROM {t} AS m
                        WHERE m.status = 'pending' AND m.lane = p.lane AND m.target = p.target
                        LIMIT ?3)) AS pending
             FROM pairs AS p
             WHERE NOT EXISTS (
                 SELECT 1 FROM {t}_served_lanes AS s
                 WHERE s.lane = p.lane AND s.target = p.target AND s.served_until > ?1)
             ORDER BY p.lane, p.target
             LIMIT ?2"
        )))
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
}
