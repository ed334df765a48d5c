//! The read operations. They run on the read pool; in WAL mode they see the last commit and
//! never wait for the writer.

use std::collections::BTreeMap;
use std::time::Duration;

use sqlx::sqlite::{SqlitePool, SqliteRow};
use sqlx::Row;
use uuid::Uuid;

use crate::message::{OutboxMessage, OutboxStatus, UnixMillis};
use crate::store::admin::list_budget;
use crate::store::StoreOp;
use crate::store::{LaneStats, MessageFilter, OrderingPolicy, Page, PageRequest, StoreError};

use super::row::{db, decode, store_error, uuid_text};
use super::schema::{Statements, COLUMNS};
use super::statement::{bind, dynamic, filter_where, query};
use crate::store::sql::{Terms, Value};

/// How long until the next row of a lane may be claimable (see the trait's `next_due`). On
/// the read pool, or on the writer inside a claim's transaction (which answers it too).
pub(super) async fn next_due<'c>(
    sql: &Statements,
    executor: impl sqlx::SqliteExecutor<'c>,
    lane: &str,
    target: &str,
    ordering: OrderingPolicy,
    now: UnixMillis,
) -> Result<Option<Duration>, StoreError> {
    const OP: StoreOp = StoreOp::NextDue;
    let row = query(&sql.policy(ordering).next_due)
        .bind(now)
        .bind(lane)
        .bind(target)
        .fetch_one(executor)
        .await
        .map_err(db(OP))?;
    let earliest: Option<UnixMillis> = row.try_get(0).map_err(db(OP))?;
    Ok(earliest.map(|at| at.saturating_duration_since(now)))
}

/// [`next_due`] of each of `lanes`, in order, in one read transaction on `pool`: every
/// answer as of one snapshot, one connection for all of them.
pub(super) async fn lanes_next_due(
    sql: &Statements,
    pool: &SqlitePool,
    lanes: &[(String, String, OrderingPolicy)],
    now: UnixMillis,
) -> Result<Vec<Option<Duration>>, StoreError> {
    let mut tx = pool.begin().await.map_err(db(StoreOp::NextDue))?;
    let mut due = Vec::with_capacity(lanes.len());
    for (lane, target, ordering) in lanes {
        due.push(next_due(sql, &mut *tx, lane, target, *ordering, now).await?);
    }
    Ok(due)
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
        .map_err(db(StoreOp::Get))?;
    row.as_ref().map(decode).transpose()
}

/// Messages after the cursor, in seq order: [`list_sql`] read at most
/// [`list_budget`] rows, matches and the last row read.
pub(super) async fn list(
    sql: &Statements,
    pool: &SqlitePool,
    filter: &MessageFilter,
    page: PageRequest,
) -> Result<Page, StoreError> {
    let (text, values) = list_sql(&sql.table, filter, page);
    let rows = bind(dynamic(text), values)
        .fetch_all(pool)
        .await
        .map_err(db(StoreOp::List))?;
    let hit = |row: &SqliteRow| row.try_get("list_hit");
    crate::store::sql::scanned_page(&rows, filter, page, store_error, hit, decode)
}

/// A listing's statement and its values. The rows are read in seq order by the filter's
/// indexed terms: with a lane and target but no status, one arm per status over the `list`
/// index (lane, target, status; the rowid, seq, ends every entry) or, by key, the
/// `list_key` index, each arm read in seq order as far as the merge pulls it (at most the
/// budget). The scanned terms (time range, error text) are only checked on the rows
/// read (`list_hit`). The answer holds the matches and the last row read, each with how many
/// rows were read (`list_read`).
pub(super) fn list_sql(
    table: &str,
    filter: &MessageFilter,
    page: PageRequest,
) -> (String, Vec<Value>) {
    let start = page.after.map_or(i64::MIN, |after| after.saturating_add(1));
    let budget = list_budget(filter, page.limit);
    let scanned = filter_where(filter, "", Terms::Scanned);
    let one_lane = filter.ids.is_empty() && filter.lane.is_some() && filter.target.is_some();
    let by_status = filter.status.is_none() && one_lane;
    let statuses: Vec<Option<OutboxStatus>> = if by_status {
        OutboxStatus::ALL.iter().copied().map(Some).collect()
    } else {
        vec![filter.status]
    };
    // Named, not left to the planner: without statistics it reads a key's rows off the
    // lane's index, stepping over every other key's.
    let index = match (&filter.ordering_key, one_lane) {
        (Some(_), true) => format!(" INDEXED BY {table}_list_key"),
        (None, true) => format!(" INDEXED BY {table}_list"),
        _ => String::new(),
    };
    let mut arms = Vec::new();
    let mut values = Vec::new();
    for status in statuses {
        let indexed = filter_where(
            &MessageFilter {
                status,
                ..filter.clone()
            },
            "",
            Terms::Indexed,
        );
        arms.push(format!(
            "SELECT {COLUMNS}, CASE WHEN {hit} THEN 1 ELSE 0 END AS list_hit
             FROM {table}{index}
             WHERE seq > 0 AND seq >= ? AND {indexed}",
            hit = scanned.clause,
            indexed = indexed.clause,
        ));
        values.extend(scanned.values.iter().cloned());
        values.push(Value::Int(start));
        values.extend(indexed.values);
    }
    values.push(Value::Int(i64::try_from(budget).unwrap_or(i64::MAX)));
    values.push(Value::Int(
        i64::try_from(page.limit.saturating_add(1)).unwrap_or(i64::MAX),
    ));
    let text = format!(
        "WITH scanned AS MATERIALIZED ({arms} ORDER BY seq LIMIT ?)
         SELECT *, (SELECT COUNT(*) FROM scanned) AS list_read FROM scanned
         WHERE list_hit OR seq = (SELECT MAX(seq) FROM scanned)
         ORDER BY seq LIMIT ?",
        arms = arms.join(" UNION ALL "),
    );
    (text, values)
}

/// Counts per (lane, target), read in one transaction so the counts and the blocked keys
/// describe the same moment. A filter of lanes and targets only (what a relay asks) reads the
/// counts table and one index probe per lane; a filter by key or ids counts its rows.
pub(super) async fn stats(
    sql: &Statements,
    pool: &SqlitePool,
    filter: &MessageFilter,
    now: UnixMillis,
) -> Result<Vec<LaneStats>, StoreError> {
    const OP: StoreOp = StoreOp::Stats;
    let filter = MessageFilter {
        status: None,
        ..filter.clone()
    };
    let by_lane_only = filter.ordering_key.is_none() && filter.ids.is_empty() && !filter.scans();
    let mut tx = pool.begin().await.map_err(db(OP))?;

    let counted = filter_where(&filter, "", Terms::All);
    let statement = if by_lane_only {
        dynamic(counts_sql(sql, &counted.clause))
    } else {
        dynamic(format!(
            "SELECT lane, target, status, COUNT(*),
                 MIN(CASE WHEN available_at <= ? THEN created_at END) FROM {}
             WHERE {} GROUP BY lane, target, status",
            sql.table, counted.clause
        ))
        .bind(now)
    };
    let rows = bind(statement, counted.values)
        .fetch_all(&mut *tx)
        .await
        .map_err(db(OP))?;
    let mut lanes: BTreeMap<(String, String), LaneStats> = BTreeMap::new();
    for row in rows {
        let lane: String = row.try_get(0).map_err(db(OP))?;
        let target: String = row.try_get(1).map_err(db(OP))?;
        let status: String = row.try_get(2).map_err(db(OP))?;
        let count: i64 = row.try_get(3).map_err(db(OP))?;
        let mut oldest_due_created: Option<UnixMillis> = row.try_get(4).map_err(db(OP))?;
        let status = status
            .parse::<OutboxStatus>()
            .map_err(|e| StoreError::Corrupt {
                id: "?".into(),
                reason: format!("{OP}: {e}"),
            })?;
        if by_lane_only && status == OutboxStatus::Pending {
            oldest_due_created = query(&sql.oldest_due)
                .bind(now)
                .bind(&lane)
                .bind(&target)
                .fetch_optional(&mut *tx)
                .await
                .and_then(|row| row.map(|row| row.try_get(0)).transpose())
                .map_err(db(OP))?;
        }
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
                stats.oldest_pending_age =
                    oldest_due_created.map(|at| now.saturating_duration_since(at));
            }
            OutboxStatus::Claimed => stats.claimed = count,
            OutboxStatus::Delivered => stats.delivered = count,
            OutboxStatus::DeadLetter => stats.dead_letter = count,
        }
    }

    // A key is blocked when its first dead letter comes before its head (its first live
    // row). Driven by the keys that have dead letters, one probe each: a long live queue is
    // never read.
    let dead = filter_where(&filter, "", Terms::All);
    let live = filter_where(&filter, "l.", Terms::All);
    let statement = dynamic(blocked_keys_sql(sql, &dead.clause, &live.clause));
    let values = [dead.values, live.values.clone(), live.values].concat();
    let rows = bind(statement, values)
        .fetch_all(&mut *tx)
        .await
        .map_err(db(OP))?;
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

/// The counts of the lanes `filter` (a lane and target filter, no alias) selects, from the
/// counts table.
pub(super) fn counts_sql(sql: &Statements, filter: &str) -> String {
    format!(
        "SELECT lane, target, status, n, NULL FROM {} WHERE n > 0 AND {filter}",
        sql.counts_table
    )
}

/// Blocked keys per lane among the rows the filters select (`dead` without an alias, `live`
/// over alias `l.`; `live` is bound twice).
pub(super) fn blocked_keys_sql(sql: &Statements, dead: &str, live: &str) -> String {
    format!(
        "SELECT d.lane, d.target, COUNT(*) FROM (
             SELECT lane, target, ordering_key, MIN(seq) AS first_dead FROM {t}
             WHERE status = 'dead_letter' AND ordering_key IS NOT NULL AND {dead}
             GROUP BY lane, target, ordering_key) d
         WHERE EXISTS (SELECT 1 FROM {t} l INDEXED BY {t}_key_live
                 WHERE l.lane = d.lane AND l.target = d.target
                   AND l.ordering_key = d.ordering_key AND l.status IN ('pending', 'claimed')
                   AND l.seq > d.first_dead AND {live})
           AND NOT EXISTS (SELECT 1 FROM {t} l INDEXED BY {t}_key_live
                 WHERE l.lane = d.lane AND l.target = d.target
                   AND l.ordering_key = d.ordering_key AND l.status IN ('pending', 'claimed')
                   AND l.seq < d.first_dead AND {live})
         GROUP BY d.lane, d.target",
        t = sql.table,
    )
}

/// How many `status` rows last changed before `cutoff` (of one lane, or any; keyed ones
/// left out with `keep_keyed`) a purge would delete.
pub(super) async fn purge_count(
    sql: &Statements,
    pool: &SqlitePool,
    status: OutboxStatus,
    cutoff: UnixMillis,
    lane: Option<&(String, String)>,
    keep_keyed: bool,
) -> Result<u64, StoreError> {
    let count: i64 = query(&sql.purge_count)
        .bind(cutoff)
        .bind(status.as_str())
        .bind(lane.map(|(lane, _)| lane.as_str()))
        .bind(lane.map(|(_, target)| target.as_str()))
        .bind(keep_keyed)
        .fetch_one(pool)
        .await
        .map_err(db(StoreOp::Purge))?
        .try_get(0)
        .map_err(db(StoreOp::Purge))?;
    Ok(u64::try_from(count).unwrap_or(0))
}
