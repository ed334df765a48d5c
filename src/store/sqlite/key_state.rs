//! The operator's reads of dead letters, each from an index of dead letters alone: how many a
//! filter selects (what a requeue or a discard would change), and the keys a dead head holds
//! (one statement over the lane's keyed dead letters, then one read of both messages by id,
//! `store::key_state::blocked_keys_from_pairs`),
//! where the trait's provided methods count every status and the blocked keys again
//! ([`stats`](super::read::stats)), and page through the lane's dead letters asking each
//! key's state in three more reads.

use sqlx::sqlite::SqlitePool;
use sqlx::Row;
use uuid::Uuid;

use super::row::{db, parse_uuid};
use super::schema::Statements;
use super::statement::{bind, dynamic, filter_where, query};
use crate::store::sql::{Terms, Value};
use crate::store::{MessageFilter, StoreError, StoreOp};

/// The count of the dead letters `filter` selects (its status ignored), and its values.
/// It reads the dead letters' index that holds the filter's rows: a key's
/// (`dead_keys`), else a lane's (`list_dead`, which holds every dead letter); a lookup by
/// ids reads the id index instead. Named, not left to the planner: SQLite reads a partial
/// index only where the statement repeats its predicate, and with statistics it may judge a
/// common lane unselective.
pub(super) fn count_dead_sql(table: &str, filter: &MessageFilter) -> (String, Vec<Value>) {
    let filter = MessageFilter {
        status: None,
        ..filter.clone()
    };
    let (index, terms) = match (filter.ids.is_empty(), filter.ordering_key.is_some()) {
        (false, _) => (String::new(), ""),
        (true, true) => (
            format!(" INDEXED BY {table}_dead_keys"),
            " AND ordering_key IS NOT NULL",
        ),
        (true, false) => (format!(" INDEXED BY {table}_list_dead"), ""),
    };
    let counted = filter_where(&filter, "", Terms::All);
    let text = format!(
        "SELECT COUNT(*) FROM {table}{index} WHERE status = 'dead_letter'{terms} AND {}",
        counted.clause
    );
    (text, counted.values)
}

/// How many dead letters `filter` selects (its status ignored).
pub(super) async fn count_dead_letters(
    sql: &Statements,
    pool: &SqlitePool,
    filter: &MessageFilter,
) -> Result<u64, StoreError> {
    const OP: StoreOp = StoreOp::Stats;
    let (text, values) = count_dead_sql(&sql.table, filter);
    let count: i64 = bind(dynamic(text), values)
        .fetch_one(pool)
        .await
        .and_then(|row| row.try_get(0))
        .map_err(db(OP))?;
    Ok(u64::try_from(count).unwrap_or(0))
}

/// The keys of (lane, target) a dead head holds, whose earliest dead letter comes after
/// `after`, by the enqueue order of that dead letter, at most `limit` (`blocked_keys.sql`);
/// as (dead head, held message) id pairs, and the cursor of the next page.
pub(super) async fn blocked_key_pairs(
    sql: &Statements,
    pool: &SqlitePool,
    lane: &str,
    target: &str,
    after: Option<i64>,
    limit: usize,
) -> Result<(Vec<(Uuid, Uuid)>, Option<i64>), StoreError> {
    const OP: StoreOp = StoreOp::List;
    let limit = limit.max(1);
    let rows = query(&sql.blocked_keys)
        .bind(lane)
        .bind(target)
        .bind(after)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(pool)
        .await
        .map_err(db(OP))?;
    let mut pairs = Vec::with_capacity(rows.len());
    let mut last_seq = None;
    for row in &rows {
        let seq: i64 = row.try_get("seq").map_err(db(OP))?;
        let id = |column: &str| -> Result<Uuid, StoreError> {
            let text: String = row.try_get(column).map_err(db(OP))?;
            parse_uuid(&text, column, &seq.to_string())
        };
        pairs.push((id("dead_id")?, id("held_id")?));
        last_seq = Some(seq);
    }
    Ok((pairs, if rows.len() == limit { last_seq } else { None }))
}
