//! The read operations. They run on the read pool; in WAL mode they see the last commit and
//! never wait for the writer.

use std::collections::BTreeMap;
use std::time::Duration;

use sqlx::sqlite::{SqlitePool, SqliteRow};
use sqlx::Row;
use uuid::Uuid;

use crate::message::{OutboxMessage, OutboxStatus, UnixMillis};
use crate::store::admin::{list_budget, LIST_SCAN_PAGES};
use crate::store::StoreOp;
use crate::store::{
    LaneCount, LaneStats, MessageFilter, OrderingPolicy, Page, PageRequest, StoreError,
};

use super::row::{db, db_error, decode, uuid_text};
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

/// Messages after the cursor, in seq order: [`list_sql`] read at most its budget of
/// rows, matches and the last row read.
pub(super) async fn list(
    sql: &Statements,
    pool: &SqlitePool,
    filter: &MessageFilter,
    page: PageRequest,
) -> Result<Page, StoreError> {
    let list = list_sql(&sql.table, filter, page);
    let rows = bind(dynamic(list.text), list.values)
        .fetch_all(pool)
        .await
        .map_err(db(StoreOp::List))?;
    let hit = |row: &SqliteRow| row.try_get("list_hit");
    crate::store::sql::scanned_page(&rows, list.budget, page, db_error, hit, decode)
}

/// A listing's statement, its values, and the most rows it reads.
pub(super) struct ListSql {
    pub(super) text: String,
    pub(super) values: Vec<Value>,
    pub(super) budget: usize,
}

/// A listing's statement. With a lane and target it reads one index from the cursor in seq
/// order (the rowid, seq, ends every entry), named, not left to the planner (without
/// statistics it reads a key's rows off the lane's index, stepping over every other key's):
/// the lane's or the key's range of `list` or `list_key`, which hold no status, so a claim or
/// an ack never writes them. A status is read from an index of its own where one holds
/// exactly its rows of the lane or key (`pending`, `list_dead`, `key_live`, `dead_keys`);
/// otherwise (claimed rows of a lane, delivered ones) it is checked on the rows read, like the
/// scanned terms (time range, error text, `list_hit`), and the read stops at the scanning
/// budget ([`LIST_SCAN_PAGES`] pages). The answer holds the matches and the last row read,
/// each with how many rows were read (`list_read`).
pub(super) fn list_sql(table: &str, filter: &MessageFilter, page: PageRequest) -> ListSql {
    use OutboxStatus::{Claimed, DeadLetter, Pending};
    let start = page.after.map_or(i64::MIN, |after| after.saturating_add(1));
    let one_lane = filter.ids.is_empty() && filter.lane.is_some() && filter.target.is_some();
    let keyed = filter.ordering_key.is_some();
    // The index read, the terms that make it usable (SQLite reads a partial index only
    // where the query repeats its predicate), and whether the status is checked on the rows.
    let (index, terms, status_scanned) = match (one_lane, keyed, filter.status) {
        (false, _, _) => (None, "seq > 0".to_owned(), false),
        (true, false, Some(Pending)) => (Some("pending"), "status = 'pending'".to_owned(), false),
        (true, false, Some(DeadLetter)) => (
            Some("list_dead"),
            "status = 'dead_letter'".to_owned(),
            false,
        ),
        (true, true, Some(DeadLetter)) => (
            Some("dead_keys"),
            "status = 'dead_letter' AND ordering_key IS NOT NULL".to_owned(),
            false,
        ),
        (true, true, Some(status @ (Pending | Claimed))) => (
            Some("key_live"),
            format!(
                "status = '{}' AND ordering_key IS NOT NULL \
                 AND status IN ('pending', 'claimed')",
                status.as_str()
            ),
            false,
        ),
        (true, false, status) => (Some("list"), "seq > 0".to_owned(), status.is_some()),
        (true, true, status) => (
            Some("list_key"),
            "seq > 0 AND ordering_key IS NOT NULL".to_owned(),
            status.is_some(),
        ),
    };
    let indexed_filter = MessageFilter {
        status: if one_lane { None } else { filter.status },
        ..filter.clone()
    };
    let indexed = filter_where(&indexed_filter, "", Terms::Indexed);
    let mut scanned = filter_where(filter, "", Terms::Scanned);
    if let Some(status) = filter.status.filter(|_| status_scanned) {
        scanned.clause.push_str(" AND status = ?");
        scanned.values.push(Value::Text(status.as_str().to_owned()));
    }
    let page_rows = page.limit.saturating_add(1);
    let budget = if status_scanned {
        page_rows.saturating_mul(LIST_SCAN_PAGES)
    } else {
        list_budget(filter, page.limit)
    };
    let index = index.map_or_else(String::new, |name| format!(" INDEXED BY {table}_{name}"));
    // The cursor's term before `seq > 0`: of two lower bounds on seq, SQLite seeks by the
    // first, and by `seq > 0` a page at the middle of a million-row lane read its first
    // half (0.4 s against 2 ms).
    let mut values = scanned.values;
    values.push(Value::Int(start));
    values.extend(indexed.values);
    values.push(Value::Int(i64::try_from(budget).unwrap_or(i64::MAX)));
    values.push(Value::Int(i64::try_from(page_rows).unwrap_or(i64::MAX)));
    let text = format!(
        "WITH scanned AS MATERIALIZED (
             SELECT {COLUMNS}, CASE WHEN {hit} THEN 1 ELSE 0 END AS list_hit
             FROM {table}{index}
             WHERE seq >= ? AND {terms} AND {indexed}
             ORDER BY seq LIMIT ?)
         SELECT *, (SELECT COUNT(*) FROM scanned) AS list_read FROM scanned
         WHERE list_hit OR seq = (SELECT MAX(seq) FROM scanned)
         ORDER BY seq LIMIT ?",
        hit = scanned.clause,
        indexed = indexed.clause,
    );
    ListSql {
        text,
        values,
        budget,
    }
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

/// How many `status` rows last changed before `cutoff` (of the lanes in `lanes`, a JSON
/// array of pairs, or of any; keyed ones left out with `keep_keyed`) a purge would delete,
/// per lane.
pub(super) async fn purge_count(
    sql: &Statements,
    pool: &SqlitePool,
    status: OutboxStatus,
    cutoff: UnixMillis,
    lanes: Option<&str>,
    keep_keyed: bool,
) -> Result<Vec<LaneCount>, StoreError> {
    let rows = query(&sql.purge_count)
        .bind(cutoff)
        .bind(status.as_str())
        .bind(lanes)
        .bind(keep_keyed)
        .fetch_all(pool)
        .await
        .map_err(db(StoreOp::Purge))?;
    rows.iter()
        .map(|row| {
            let count: i64 = row.try_get(2)?;
            Ok(LaneCount {
                lane: row.try_get(0)?,
                target: row.try_get(1)?,
                count: u64::try_from(count).unwrap_or(0),
            })
        })
        .collect::<Result<_, sqlx::Error>>()
        .map_err(db(StoreOp::Purge))
}
