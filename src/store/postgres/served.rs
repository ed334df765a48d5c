//! The PostgreSQL store's record of served lanes (`store::served`): the
//! `{prefix}_served_lanes` table (migration 9), one row per (lane, target) with the time
//! until which a running relay serves it, on the database's clock (or the store's test
//! clock). The lanes nobody serves are read in one statement whose cost is the number of
//! (lane, target) pairs holding pending messages, never their messages, but for the
//! unserved pairs' counts ([`unserved_sql`]; `tests/postgres/plans.rs` pins its plan at
//! 1,000,000 rows).

use sqlx::{AssertSqlSafe, Row};

use super::row::{db_error, unsigned};
use super::schema::Names;
use super::sql::NOW;
use super::{to_i64, PostgresOutboxStore};
use crate::store::served::UNSERVED_COUNT_CAP;
use crate::store::{StoreError, StoreOp, UnservedLane};

/// The statement of the lanes nobody serves: `$1` the store's clock (or NULL), `$2` the
/// most pairs, `$3` the most messages counted per pair.
///
/// The pairs holding pending messages are found by a skip scan of `pending_idx`, one index
/// probe per pair (a recursive CTE: PostgreSQL has no loose index scan of its own), its
/// predicate repeated word for word so the planner may read it; a pair some relay serves is
/// one primary-key probe of the served table (`OFFSET 0` keeps the `NOT EXISTS` a probe,
/// not a hash of the table); only an unserved pair's messages are counted, at most `$3`,
/// in the index's order (which keeps the count on the index: without an order, a count of
/// up to `$3` rows reads the table whole before ANALYZE).
pub(super) fn unserved_sql(n: &Names) -> String {
    let (t, served) = (&n.messages, &n.served_lanes);
    // `pending_idx`'s predicate, word for word, so the planner may read it.
    let pending = "status = 'pending' AND created_at IS NOT NULL";
    let pending_m = "m.status = 'pending' AND m.created_at IS NOT NULL";
    format!(
        "WITH RECURSIVE pairs (lane, target) AS (
            (SELECT lane, target FROM {t}
             WHERE {pending} ORDER BY lane, target LIMIT 1)
            UNION ALL
            SELECT next.lane, next.target
            FROM pairs, LATERAL (
                SELECT m.lane, m.target FROM {t} AS m
                WHERE {pending_m} AND (m.lane, m.target) > (pairs.lane, pairs.target)
                ORDER BY m.lane, m.target LIMIT 1
            ) AS next
         )
         SELECT p.lane, p.target,
                (SELECT count(*) FROM (
                    SELECT 1 FROM {t} AS m
                    WHERE {pending_m} AND m.lane = p.lane AND m.target = p.target
                    ORDER BY m.created_at LIMIT $3
                 ) AS counted) AS pending
         FROM pairs AS p
         WHERE NOT EXISTS (
             SELECT 1 FROM {served} AS s
             WHERE s.lane = p.lane AND s.target = p.target AND s.served_until > {NOW}
             OFFSET 0
         )
         ORDER BY p.lane, p.target
         LIMIT $2"
    )
}

impl PostgresOutboxStore {
    pub(super) async fn record_served_lanes(
        &self,
        lanes: &[(String, String)],
        served_for: std::time::Duration,
    ) -> Result<(), StoreError> {
        const OP: StoreOp = StoreOp::RecordServed;
        let served = &self.names.served_lanes;
        let (names, targets): (Vec<&str>, Vec<&str>) = lanes
            .iter()
            .map(|(lane, target)| (lane.as_str(), target.as_str()))
            .unzip();
        let mut call = self.call(OP).await?;
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {served} AS s (lane, target, served_until)
             SELECT lane, target, {NOW} + $4::int8 * interval '1 millisecond'
             FROM unnest($2::text[], $3::text[]) AS l (lane, target)
             ON CONFLICT (lane, target) DO UPDATE
             SET served_until = greatest(s.served_until, excluded.served_until)"
        )))
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
        let rows = sqlx::query(AssertSqlSafe(unserved_sql(&self.names)))
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
}
