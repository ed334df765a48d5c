//! The MySQL store's record of served lanes (`store::served`): the `{prefix}_served_lanes`
//! table (migration 3), one row per (lane, target) with the time (milliseconds, the store's
//! clock) until which a running relay serves it.
//!
//! The lanes nobody serves are found by walking the (lane, target) pairs of the messages
//! table through its `pending` index, two index dives per pair (the next target of the
//! lane, else the next lane; a pending message of the pair?), rather than with one
//! statement: a `GROUP BY` or a row comparison is a loose index scan on one server and a
//! walk of every row on the other. Only the unserved pairs' messages are counted.
//!
//! The lanes lane patterns match are found otherwise: a prefix of a byte string bounds one
//! range of `pending`, and for one target the lanes with a pending message in it are one
//! `GROUP BY lane` that MariaDB reads as a loose index scan, two dives per lane of the
//! range (`sql/pending_lanes.sql`).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use sqlx::{AssertSqlSafe, Row};

use super::row::db_error;
use super::MysqlOutboxStore;
use crate::store::served::UNSERVED_COUNT_CAP;
use crate::store::{StoreError, StoreOp, UnservedLane};

impl MysqlOutboxStore {
    pub(super) async fn record_served_lanes(
        &self,
        lanes: &[(String, String)],
        served_for: Duration,
    ) -> Result<(), StoreError> {
        const OP: StoreOp = StoreOp::RecordServed;
        let until = self.now().saturating_add(served_for).as_millis();
        let mut tx = self.begin(OP).await?;
        for (lane, target) in lanes {
            sqlx::query(AssertSqlSafe(Arc::clone(&self.names.sql.serve_lane)))
                .bind(lane.as_bytes())
                .bind(target.as_bytes())
                .bind(until)
                .bind(until)
                .execute(&mut *tx)
                .await
                .map_err(|e| db_error(OP, e))?;
        }
        tx.commit().await.map_err(|e| db_error(OP, e))
    }

    pub(super) async fn unserved(&self, limit: usize) -> Result<Vec<UnservedLane>, StoreError> {
        const OP: StoreOp = StoreOp::UnservedLanes;
        let served: HashSet<(Vec<u8>, Vec<u8>)> =
            sqlx::query(AssertSqlSafe(Arc::clone(&self.names.sql.served_lanes)))
                .bind(self.now().as_millis())
                .fetch_all(&self.pool)
                .await
                .map_err(|e| db_error(OP, e))?
                .iter()
                .map(|row| Ok((row.try_get("lane")?, row.try_get("target")?)))
                .collect::<Result<_, sqlx::Error>>()
                .map_err(|e| db_error(OP, e))?;
        let mut unserved = Vec::new();
        let mut at: Option<(Vec<u8>, Vec<u8>)> = None;
        while unserved.len() < limit {
            let next = match &at {
                None => {
                    sqlx::query(AssertSqlSafe(Arc::clone(&self.names.sql.first_pair)))
                        .fetch_optional(&self.pool)
                        .await
                }
                Some((lane, target)) => {
                    let same_lane =
                        sqlx::query(AssertSqlSafe(Arc::clone(&self.names.sql.next_target)))
                            .bind(lane)
                            .bind(target)
                            .fetch_optional(&self.pool)
                            .await;
                    match same_lane {
                        Ok(None) => {
                            sqlx::query(AssertSqlSafe(Arc::clone(&self.names.sql.next_lane)))
                                .bind(lane)
                                .fetch_optional(&self.pool)
                                .await
                        }
                        other => other,
                    }
                }
            }
            .map_err(|e| db_error(OP, e))?;
            let Some(row) = next else {
                break;
            };
            let pair: (Vec<u8>, Vec<u8>) = (
                row.try_get("lane").map_err(|e| db_error(OP, e))?,
                row.try_get("target").map_err(|e| db_error(OP, e))?,
            );
            if !served.contains(&pair) {
                let pending: i64 =
                    sqlx::query_scalar(AssertSqlSafe(Arc::clone(&self.names.sql.pending_in_pair)))
                        .bind(&pair.0)
                        .bind(&pair.1)
                        .bind(i64::try_from(UNSERVED_COUNT_CAP).unwrap_or(i64::MAX))
                        .fetch_one(&self.pool)
                        .await
                        .map_err(|e| db_error(OP, e))?;
                if pending > 0 {
                    unserved.push(UnservedLane {
                        lane: String::from_utf8_lossy(&pair.0).into_owned(),
                        target: String::from_utf8_lossy(&pair.1).into_owned(),
                        pending: u64::try_from(pending).unwrap_or(0),
                    });
                }
            }
            at = Some(pair);
        }
        Ok(unserved)
    }

    /// One statement per prefix (`sql/pending_lanes.sql`), each a walk of the prefix's lanes
    /// only; the answers merged in name order.
    pub(super) async fn matching_lanes(
        &self,
        prefixes: &[(String, String)],
        limit: usize,
    ) -> Result<Vec<(String, String)>, StoreError> {
        const OP: StoreOp = StoreOp::PendingLanes;
        let mut pending = Vec::new();
        for (prefix, target) in prefixes {
            let lanes: Vec<Vec<u8>> =
                sqlx::query_scalar(AssertSqlSafe(Arc::clone(&self.names.sql.pending_lanes)))
                    .bind(like_prefix(prefix))
                    .bind(target.as_bytes())
                    .bind(i64::try_from(limit).unwrap_or(i64::MAX))
                    .fetch_all(&self.pool)
                    .await
                    .map_err(|e| db_error(OP, e))?;
            pending.extend(
                lanes
                    .into_iter()
                    .map(|lane| (String::from_utf8_lossy(&lane).into_owned(), target.clone())),
            );
        }
        pending.sort();
        pending.dedup();
        pending.truncate(limit);
        Ok(pending)
    }
}

/// The LIKE pattern of the names `prefix` begins, `!` its escape character.
fn like_prefix(prefix: &str) -> Vec<u8> {
    let mut pattern = Vec::with_capacity(prefix.len() + 1);
    for byte in prefix.bytes() {
        if matches!(byte, b'!' | b'%' | b'_') {
            pattern.push(b'!');
        }
        pattern.push(byte);
    }
    pattern.push(b'%');
    pattern
}
