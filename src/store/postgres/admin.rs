//! The operator's side of the store: stats, list, get, requeue, discard and purge. The
//! relay's own path (claim, ack, nack, the cycle) is in `claim.rs` and `cycle.rs`.

use std::time::Duration;

use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::Query;
use sqlx::{AssertSqlSafe, Postgres, Row};
use uuid::Uuid;

use crate::message::OutboxMessage;
use crate::store::admin::sort_lanes;
use crate::store::StoreOp;
use crate::store::{LaneCount, LaneStats, MessageFilter, PurgeRequest, StoreError};
use crate::time::UnixMillis;

use super::row::{db_error, unsigned};
use super::{interval, to_i64, PostgresOutboxStore};

/// The stats in `rows` (of `stats` or `lanes_stats`), lanes without messages left out,
/// sorted by lane and target.
fn stats_rows(rows: &[PgRow]) -> Result<Vec<LaneStats>, StoreError> {
    let op = StoreOp::Stats;
    let get = |row: &PgRow, column: &str| -> Result<u64, StoreError> {
        row.try_get::<i64, _>(column)
            .map(unsigned)
            .map_err(|e| db_error(op, e))
    };
    let mut lanes: Vec<LaneStats> = rows
        .iter()
        .map(|row| {
            let oldest: Option<i64> = row
                .try_get("oldest_pending_ms")
                .map_err(|e| db_error(op, e))?;
            Ok(LaneStats {
                lane: row.try_get("lane").map_err(|e| db_error(op, e))?,
                target: row.try_get("target").map_err(|e| db_error(op, e))?,
                pending: get(row, "pending")?,
                claimed: get(row, "claimed")?,
                delivered: get(row, "delivered")?,
                dead_letter: get(row, "dead_letter")?,
                oldest_pending_age: oldest.map(|ms| Duration::from_millis(unsigned(ms))),
                blocked_keys: get(row, "blocked_keys")?,
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    // `lanes_stats` answers for an empty lane too; a lane without messages is absent.
    lanes.retain(|l| l.pending + l.claimed + l.delivered + l.dead_letter > 0);
    sort_lanes(&mut lanes);
    Ok(lanes)
}

/// Binds `filter`'s seven values in the order `sql/stats.sql`, `requeue.sql` and `discard.sql`
/// read them.
fn bind_filter<'q>(
    query: Query<'q, Postgres, PgArguments>,
    filter: &'q MessageFilter,
) -> Query<'q, Postgres, PgArguments> {
    let (after, before) = filter.enqueued_millis();
    query
        .bind(&filter.lane)
        .bind(&filter.target)
        .bind(&filter.ordering_key)
        .bind(&filter.ids)
        .bind(after.map(UnixMillis::as_millis))
        .bind(before.map(UnixMillis::as_millis))
        .bind(&filter.error_contains)
}

impl PostgresOutboxStore {
    pub(super) async fn stats_of(
        &self,
        filter: &MessageFilter,
    ) -> Result<Vec<LaneStats>, StoreError> {
        match (&filter.lane, &filter.target) {
            // One lane (what the admin tools ask most): every figure from an index.
            (Some(lane), Some(target))
                if filter.ordering_key.is_none() && filter.ids.is_empty() && !filter.scans() =>
            {
                self.lanes_stats_of(&[(lane.clone(), target.clone())]).await
            }
            _ => {
                let op = StoreOp::Stats;
                let mut call = self.call(op).await?;
                let rows = bind_filter(
                    sqlx::query(AssertSqlSafe(self.sql.stats.clone()))
                        .persistent(self.named_statements)
                        .bind(self.now()),
                    filter,
                )
                .fetch_all(&mut *call)
                .await
                .map_err(|e| db_error(op, e))?;
                call.finish(op).await?;
                stats_rows(&rows)
            }
        }
    }

    /// The stats of each of `lanes` in one statement, one index descent per lane and
    /// figure (`sql/lanes_stats.sql`).
    pub(super) async fn lanes_stats_of(
        &self,
        lanes: &[(String, String)],
    ) -> Result<Vec<LaneStats>, StoreError> {
        let op = StoreOp::Stats;
        let (names, targets): (Vec<&str>, Vec<&str>) = lanes
            .iter()
            .map(|(lane, target)| (lane.as_str(), target.as_str()))
            .unzip();
        let mut call = self.call(op).await?;
        let rows = sqlx::query(AssertSqlSafe(self.sql.lanes_stats.clone()))
            .persistent(self.named_statements)
            .bind(self.now())
            .bind(&names)
            .bind(&targets)
            .fetch_all(&mut *call)
            .await
            .map_err(|e| db_error(op, e))?;
        call.finish(op).await?;
        stats_rows(&rows)
    }

    pub(super) async fn get_one(
        &self,
        outbox_id: Uuid,
    ) -> Result<Option<OutboxMessage>, StoreError> {
        let mut call = self.call(StoreOp::Get).await?;
        let row = sqlx::query(AssertSqlSafe(self.sql.get.clone()))
            .persistent(self.named_statements)
            .bind(outbox_id)
            .fetch_optional(&mut *call)
            .await
            .map_err(|e| db_error(StoreOp::Get, e))?;
        call.finish(StoreOp::Get).await?;
        row.as_ref().map(super::row::message).transpose()
    }

    pub(super) async fn requeue_dead(
        &self,
        filter: &MessageFilter,
    ) -> Result<Vec<LaneCount>, StoreError> {
        let op = StoreOp::RequeueDeadLetters;
        let mut call = self.call(op).await?;
        let rows = bind_filter(
            sqlx::query(AssertSqlSafe(self.sql.requeue.clone()))
                .persistent(self.named_statements)
                .bind(self.now()),
            filter,
        )
        .bind(&self.names.channel)
        .fetch_all(&mut *call)
        .await
        .map_err(|e| db_error(op, e))?;
        call.finish(op).await?;
        // One row per (lane, target) requeued; none when nothing was.
        let mut per_lane = Vec::with_capacity(rows.len());
        for row in &rows {
            let lane: String = row.try_get("lane").map_err(|e| db_error(op, e))?;
            let target: String = row.try_get("target").map_err(|e| db_error(op, e))?;
            let requeued: i64 = row.try_get("requeued").map_err(|e| db_error(op, e))?;
            per_lane.push(LaneCount {
                lane,
                target,
                count: unsigned(requeued),
            });
        }
        Ok(per_lane)
    }

    pub(super) async fn discard_dead(&self, filter: &MessageFilter) -> Result<u64, StoreError> {
        let op = StoreOp::DiscardDeadLetters;
        let mut call = self.call(op).await?;
        let done = bind_filter(
            sqlx::query(AssertSqlSafe(self.sql.discard.clone())).persistent(self.named_statements),
            filter,
        )
        .execute(&mut *call)
        .await
        .map_err(|e| db_error(op, e))?;
        call.finish(op).await?;
        Ok(done.rows_affected())
    }

    /// The purge under the [purge lock](Self::purge_lock_key), held on a connection of its
    /// own: when another relay holds it, purges nothing and returns no counts. A dry run takes
    /// no lock.
    pub(super) async fn purge_locked(
        &self,
        request: &PurgeRequest,
    ) -> Result<Vec<LaneCount>, StoreError> {
        if request.dry_run {
            // Counting deletes nothing: it needs no turn, and must not report 0 because
            // another relay happens to be purging.
            return self.purge_batches(request).await;
        }
        if !self.named_statements {
            // Through a transaction pooler a session lock would stay on a server connection
            // that other clients then use: each batch takes a transaction-level lock.
            return self.purge_batches(request).await;
        }
        // Detached from the pool: if this purge is dropped half-way (a shutdown), the
        // connection closes with it and PostgreSQL releases the lock; a pooled connection
        // would go back to the pool still holding it.
        let mut lock = self
            .pool
            .acquire()
            .await
            .map_err(|e| db_error(StoreOp::Purge, e))?
            .detach();
        let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(self.purge_lock_key())
            .fetch_one(&mut lock)
            .await
            .map_err(|e| db_error(StoreOp::Purge, e))?;
        if !locked {
            tracing::debug!(
                table = %self.names.messages,
                "another relay is purging this outbox; skipping this purge"
            );
            return Ok(Vec::new());
        }
        let purged = self.purge_batches(request).await;
        // Closing the session releases the lock, also when the purge failed.
        let _ = sqlx::Connection::close(lock).await;
        purged
    }

    async fn purge_batches(&self, request: &PurgeRequest) -> Result<Vec<LaneCount>, StoreError> {
        let batch_size = request.batch_size.max(1);
        let (lanes, targets): (Vec<&str>, Vec<&str>) = request
            .lanes
            .iter()
            .map(|(lane, target)| (lane.as_str(), target.as_str()))
            .unzip();
        let mut purged = Vec::new();
        for (status, older_than) in request.ages() {
            if request.dry_run {
                let mut call = self.call(StoreOp::Purge).await?;
                let rows = sqlx::query(AssertSqlSafe(self.sql.purge_count.clone()))
                    .persistent(self.named_statements)
                    .bind(self.now())
                    .bind(interval(older_than))
                    .bind(status.as_str())
                    .bind(&lanes)
                    .bind(&targets)
                    .bind(request.keeps_keyed(status))
                    .fetch_all(&mut *call)
                    .await
                    .map_err(|e| db_error(StoreOp::Purge, e))?;
                call.finish(StoreOp::Purge).await?;
                purged.extend(lane_counts(&rows)?);
                continue;
            }
            loop {
                // One statement per batch, each its own transaction: no lock outlives a
                // batch.
                let mut call = self.call(StoreOp::Purge).await?;
                if !self.named_statements {
                    // Through a transaction pooler: the purge lock for this batch only
                    // (`purge_locked`); another relay's batch holds it, so this purge stops.
                    let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)")
                        .persistent(false)
                        .bind(self.purge_lock_key())
                        .fetch_one(&mut *call)
                        .await
                        .map_err(|e| db_error(StoreOp::Purge, e))?;
                    if !locked {
                        return Ok(LaneCount::sum(purged));
                    }
                }
                let rows = sqlx::query(AssertSqlSafe(self.sql.purge.clone()))
                    .persistent(self.named_statements)
                    .bind(self.now())
                    .bind(interval(older_than))
                    .bind(to_i64(batch_size))
                    .bind(status.as_str())
                    .bind(&lanes)
                    .bind(&targets)
                    .bind(request.keeps_keyed(status))
                    .fetch_all(&mut *call)
                    .await
                    .map_err(|e| db_error(StoreOp::Purge, e))?;
                call.finish(StoreOp::Purge).await?;
                let batch = lane_counts(&rows)?;
                let deleted = LaneCount::total(&batch);
                purged.extend(batch);
                if deleted < batch_size as u64 {
                    break;
                }
            }
        }
        Ok(LaneCount::sum(purged))
    }
}

/// The `(lane, target, n)` rows of `purge` or `purge_count`.
fn lane_counts(rows: &[PgRow]) -> Result<Vec<LaneCount>, StoreError> {
    let get = |row: &PgRow| -> Result<LaneCount, sqlx::Error> {
        Ok(LaneCount {
            lane: row.try_get("lane")?,
            target: row.try_get("target")?,
            count: unsigned(row.try_get::<i64, _>("n")?),
        })
    };
    rows.iter()
        .map(|row| get(row).map_err(|e| db_error(StoreOp::Purge, e)))
        .collect()
}
