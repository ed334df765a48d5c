//! The read operations. They run on the read pool; in WAL mode they see the last commit and
//! never wait for the writer.

use std::collections::BTreeMap;
use std::time::Duration;

use sqlx::sqlite::SqlitePool;
use sqlx::Row;
use uuid::Uuid;

use crate::message::{OutboxMessage, OutboxStatus, UnixMillis};
use crate::store::{
    millis_until, LaneStats, MessageFilter, OrderingPolicy, Page, PageRequest, StoreError,
};

use super::filter::FilterSql;
use super::row::{db, decode, int, uuid_text};
use super::schema::{Statements, COLUMNS};
use super::write::{dynamic, query};

/// How long until the next row of a lane may be claimable (see the trait's `next_due`).
pub(super) async fn next_due(
    sql: &Statements,
    pool: &SqlitePool,
    lane: &str,
    target: &str,
    ordering: OrderingPolicy,
    now: UnixMillis,
) -> Result<Option<Duration>, StoreError> {
    const OP: &str = "next_due";
    let row = query(&sql.next_due)
        .bind(now)
        .bind(ordering == OrderingPolicy::Block)
        .bind(lane)
        .bind(target)
        .fetch_one(pool)
        .await
        .map_err(db(OP))?;
    let earliest: Option<i64> = row.try_get(0).map_err(db(OP))?;
    Ok(earliest.map(|at| millis_until(now, at)))
}

/// One message by id.
pub(super) async fn get(
    sql: &Statements,
    pool: &SqlitePool,
    outbox_id: Uuid,
) -> Result<Option<OutboxMessage>, StoreError> {
    let row = query(&sql.get)
        .bind(uuid_text(outbox_id))
        .fetch_optional(pool)
        .await
        .map_err(db("get"))?;
    row.as_ref().map(decode).transpose()
}

/// Messages after the cursor, in seq order. One more than asked is read to learn whether
/// another page follows.
pub(super) async fn list(
    sql: &Statements,
    pool: &SqlitePool,
    filter: &MessageFilter,
    page: PageRequest,
) -> Result<Page, StoreError> {
    let start = page.after.map_or(i64::MIN, |after| after.saturating_add(1));
    let filter = FilterSql::new(filter, "");
    let mut statement = dynamic(format!(
        "SELECT {COLUMNS} FROM {} WHERE seq >= ? AND {} ORDER BY seq LIMIT ?",
        sql.table, filter.clause
    ))
    .bind(start);
    for value in filter.binds {
        statement = statement.bind(value);
    }
    let rows = statement
        .bind(int(page.limit.saturating_add(1)))
        .fetch_all(pool)
        .await
        .map_err(db("list"))?;
    let messages = rows.iter().map(decode).collect::<Result<Vec<_>, _>>()?;
    Ok(Page::from_overfetch(messages, page.limit))
}

/// Counts per (lane, target), read in one transaction so the counts and the blocked keys
/// describe the same moment.
pub(super) async fn stats(
    sql: &Statements,
    pool: &SqlitePool,
    filter: &MessageFilter,
    now: UnixMillis,
) -> Result<Vec<LaneStats>, StoreError> {
    const OP: &str = "stats";
    let filter = MessageFilter {
        status: None,
        ..filter.clone()
    };
    let mut tx = pool.begin().await.map_err(db(OP))?;

    let counted = FilterSql::new(&filter, "");
    let mut statement = dynamic(format!(
        "SELECT lane, target, status, COUNT(*),
             MIN(CASE WHEN available_at <= ? THEN created_at END) FROM {}
         WHERE {} GROUP BY lane, target, status",
        sql.table, counted.clause
    ))
    .bind(now);
    for value in counted.binds {
        statement = statement.bind(value);
    }
    let rows = statement.fetch_all(&mut *tx).await.map_err(db(OP))?;
    let mut lanes: BTreeMap<(String, String), LaneStats> = BTreeMap::new();
    for row in rows {
        let lane: String = row.try_get(0).map_err(db(OP))?;
        let target: String = row.try_get(1).map_err(db(OP))?;
        let status: String = row.try_get(2).map_err(db(OP))?;
        let count: i64 = row.try_get(3).map_err(db(OP))?;
        let oldest_due_created: Option<i64> = row.try_get(4).map_err(db(OP))?;
        let status = status
            .parse::<OutboxStatus>()
            .map_err(|e| StoreError::Corrupt {
                id: "?".into(),
                reason: format!("{OP}: {e}"),
            })?;
        let stats = lanes
            .entry((lane.clone(), target.clone()))
            .or_insert_with(|| LaneStats {
                lane,
                target,
                ..LaneStats::default()
            });
        let count = u64::try_from(count).unwrap_or(0);
        match status {
            OutboxStatus::Pending => {
                stats.pending = count;
                stats.oldest_pending_age = oldest_due_created.map(|at| millis_until(at, now));
            }
            OutboxStatus::Claimed => stats.claimed = count,
            OutboxStatus::Delivered => stats.delivered = count,
            OutboxStatus::DeadLetter => stats.dead_letter = count,
        }
    }

    // A key is blocked when a live row of it waits behind one of its dead letters.
    let live = FilterSql::new(&filter, "l.");
    let dead = FilterSql::new(&filter, "d.");
    let mut statement = dynamic(format!(
        "SELECT l.lane, l.target, COUNT(DISTINCT l.ordering_key) FROM {t} l
         WHERE l.status IN ('pending', 'claimed') AND l.ordering_key IS NOT NULL AND {live}
           AND EXISTS (SELECT 1 FROM {t} d
               WHERE d.lane = l.lane AND d.target = l.target
                 AND d.ordering_key = l.ordering_key AND d.status = 'dead_letter'
                 AND d.seq < l.seq AND {dead})
         GROUP BY l.lane, l.target",
        t = sql.table,
        live = live.clause,
        dead = dead.clause,
    ));
    for value in live.binds.into_iter().chain(dead.binds) {
        statement = statement.bind(value);
    }
    let rows = statement.fetch_all(&mut *tx).await.map_err(db(OP))?;
    for row in rows {
        let lane: String = row.try_get(0).map_err(db(OP))?;
        let target: String = row.try_get(1).map_err(db(OP))?;
        let blocked: i64 = row.try_get(2).map_err(db(OP))?;
        if let Some(stats) = lanes.get_mut(&(lane, target)) {
            stats.blocked_keys = u64::try_from(blocked).unwrap_or(0);
        }
    }
    tx.commit().await.map_err(db(OP))?;
    Ok(lanes.into_values().collect())
}
