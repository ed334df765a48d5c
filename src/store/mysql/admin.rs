//! The admin side: list, get, stats, requeue, discard, purge.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use sqlx::mysql::{MySqlArguments, MySqlRow};
use sqlx::query::Query;
use sqlx::{AssertSqlSafe, MySql, Row};
use uuid::Uuid;

use crate::message::{OutboxMessage, OutboxStatus};
use crate::store::{
    LaneCount, LaneStats, MessageFilter, Page, PageRequest, PurgeRequest, StoreError, StoreOp,
};

use super::heads::{self, Key};
use super::in_list::InList;
use super::row::{db_error, decode, opt_text, status_of, status_word, text, COLUMNS};
use super::MysqlOutboxStore;
use crate::store::admin::{sort_lanes, StatsTally};
use crate::store::sql::{self, Value, Where};
use crate::time::UnixMillis;

/// MySQL's words for a filter.
const DIALECT: sql::Dialect = sql::Dialect {
    numbered: false,
    instant: |p| p.to_owned(),
    // A plain substring, case-sensitive: `last_error` has a binary collation, and INSTR
    // reads no pattern characters.
    contains: "INSTR",
    ids: sql::IdList::Marks,
    status_literal: true,
    indexed_text: |p| p.to_owned(),
};

/// `filter`'s `terms` as a `WHERE` clause over the messages table, unaliased.
pub(super) fn filter_where(filter: &MessageFilter, terms: sql::Terms) -> Where {
    Where::of(&DIALECT, filter, "", terms, 0)
}

/// `values` bound to `query`, in order.
pub(super) fn bind<'q>(
    mut query: Query<'q, MySql, MySqlArguments>,
    values: &'q [Value],
) -> Query<'q, MySql, MySqlArguments> {
    for value in values {
        query = match value {
            Value::Text(text) => query.bind(text.as_str()),
            Value::Int(n) => query.bind(*n),
            Value::Id(id) => query.bind(*id),
            Value::Ids(ids) => ids.iter().fold(query, |query, id| query.bind(*id)),
        };
    }
    query
}

impl MysqlOutboxStore {
    pub(super) async fn get_one(
        &self,
        outbox_id: Uuid,
    ) -> Result<Option<OutboxMessage>, StoreError> {
        let row = sqlx::query(AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM {} WHERE outbox_id = ?",
            self.names.messages
        )))
        .bind(outbox_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| db_error(StoreOp::Get, e))?;
        row.as_ref().map(decode).transpose()
    }

    pub(super) async fn list_of(
        &self,
        filter: &MessageFilter,
        page: PageRequest,
    ) -> Result<Page, StoreError> {
        if filter.scans() {
            return self.list_scanning(filter, page).await;
        }
        let filter_sql = filter_where(filter, sql::Terms::All);
        let sql = format!(
            "SELECT {COLUMNS} FROM {} WHERE {} AND seq > ? ORDER BY seq LIMIT ?",
            self.names.messages, filter_sql.clause
        );
        let query = bind(sqlx::query(AssertSqlSafe(sql)), &filter_sql.values)
            .bind(page.after.unwrap_or(i64::MIN))
            .bind(u64::try_from(page.limit.saturating_add(1)).unwrap_or(u64::MAX));
        let rows = query
            .fetch_all(&self.pool)
            .await
            .map_err(|e| db_error(StoreOp::List, e))?;
        let messages = rows.iter().map(decode).collect::<Result<Vec<_>, _>>()?;
        Ok(Page::from_overfetch(messages, page.limit))
    }

    pub(super) async fn stats_of(
        &self,
        filter: &MessageFilter,
    ) -> Result<Vec<LaneStats>, StoreError> {
        if filter.ordering_key.is_some() || !filter.ids.is_empty() || filter.scans() {
            return self.stats_by_rows(filter).await;
        }
        let lanes = match (&filter.lane, &filter.target) {
            (Some(lane), Some(target)) => vec![(lane.clone(), target.clone())],
            _ => self.lanes_with_messages(filter).await?,
        };
        self.lanes_stats_of(&lanes).await
    }

    /// The (lane, target) pairs with messages under `filter`'s lane and target, from the
    /// `pending` index alone (lane and target lead it).
    async fn lanes_with_messages(
        &self,
        filter: &MessageFilter,
    ) -> Result<Vec<(String, String)>, StoreError> {
        const OP: StoreOp = StoreOp::Stats;
        let lane_filter = filter_where(
            &MessageFilter {
                lane: filter.lane.clone(),
                target: filter.target.clone(),
                ..MessageFilter::default()
            },
            sql::Terms::All,
        );
        let sql = format!(
            "SELECT DISTINCT lane, target FROM {} FORCE INDEX (pending) WHERE {}",
            self.names.messages, lane_filter.clause
        );
        let rows = bind(sqlx::query(AssertSqlSafe(sql)), &lane_filter.values)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| db_error(OP, e))?;
        let corrupt = |bad| StoreError::Corrupt {
            id: "?".into(),
            reason: format!("{OP}: {bad:?}"),
        };
        rows.iter()
            .map(|row| {
                Ok((
                    text(row, "lane").map_err(corrupt)?,
                    text(row, "target").map_err(corrupt)?,
                ))
            })
            .collect()
    }

    /// The stats of each of `lanes` with messages, sorted, in one statement whatever their
    /// number (`sql/lanes_stats.sql`): the lanes go as one JSON array bound to one
    /// placeholder, so a relay's thousand lanes are one statement, not three per lane.
    pub(super) async fn lanes_stats_of(
        &self,
        lanes: &[(String, String)],
    ) -> Result<Vec<LaneStats>, StoreError> {
        const OP: StoreOp = StoreOp::Stats;
        if lanes.is_empty() {
            return Ok(Vec::new());
        }
        // Each lane once; a pair serializes as a JSON array `[lane, target]`.
        let asked: BTreeSet<(&str, &str)> = lanes
            .iter()
            .map(|(lane, target)| (lane.as_str(), target.as_str()))
            .collect();
        let asked = serde_json::to_string(&asked).map_err(|e| StoreError::database(OP, e))?;
        let now = self.now().as_millis();
        let rows = sqlx::query(AssertSqlSafe(Arc::clone(&self.names.sql.lanes_stats)))
            .bind(now)
            .bind(asked)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| db_error(OP, e))?;
        let corrupt = |bad| StoreError::Corrupt {
            id: "?".into(),
            reason: format!("{OP}: {bad:?}"),
        };
        let count = |row: &MySqlRow, column: &str| -> Result<u64, StoreError> {
            let n: i64 = row.try_get(column).map_err(|e| db_error(OP, e))?;
            Ok(u64::try_from(n).unwrap_or(0))
        };
        let mut stats = Vec::with_capacity(rows.len());
        for row in &rows {
            let oldest: Option<i64> = row
                .try_get("oldest_created_at")
                .map_err(|e| db_error(OP, e))?;
            let lane = LaneStats {
                lane: text(row, "lane").map_err(corrupt)?,
                target: text(row, "target").map_err(corrupt)?,
                pending: count(row, "pending")?,
                claimed: count(row, "claimed")?,
                delivered: count(row, "delivered")?,
                dead_letter: count(row, "dead_letter")?,
                oldest_pending_age: oldest.map(|created| {
                    Duration::from_millis(u64::try_from(now - created).unwrap_or(0))
                }),
                blocked_keys: count(row, "blocked_keys")?,
            };
            // A lane asked for answers a row even without messages; such a lane is absent.
            if lane.pending + lane.claimed + lane.delivered + lane.dead_letter > 0 {
                stats.push(lane);
            }
        }
        sort_lanes(&mut stats);
        Ok(stats)
    }

    /// Stats of the messages a key or id filter picks, counted from their rows.
    async fn stats_by_rows(&self, filter: &MessageFilter) -> Result<Vec<LaneStats>, StoreError> {
        const OP: StoreOp = StoreOp::Stats;
        let now = self.now();
        let filter_sql = filter_where(
            &MessageFilter {
                status: None,
                ..filter.clone()
            },
            sql::Terms::All,
        );
        let sql = format!(
            "SELECT lane, target, status, ordering_key, available_at, created_at FROM {} \
             WHERE {} ORDER BY seq",
            self.names.messages, filter_sql.clause
        );
        let rows = bind(sqlx::query(AssertSqlSafe(sql)), &filter_sql.values)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| db_error(OP, e))?;
        let corrupt = |bad| StoreError::Corrupt {
            id: "?".into(),
            reason: format!("{OP}: {bad:?}"),
        };
        let mut tally = StatsTally::default();
        for row in &rows {
            let status: String = row.try_get("status").map_err(|e| db_error(OP, e))?;
            let millis = |column| {
                row.try_get(column)
                    .map(UnixMillis::from_millis)
                    .map_err(|e| db_error(OP, e))
            };
            tally.add(
                &text(row, "lane").map_err(corrupt)?,
                &text(row, "target").map_err(corrupt)?,
                opt_text(row, "ordering_key").map_err(corrupt)?.as_deref(),
                status_of(&status).map_err(corrupt)?,
                millis("available_at")?,
                millis("created_at")?,
                now,
            );
        }
        Ok(tally.finish())
    }

    pub(super) async fn requeue_once(
        &self,
        filter: &MessageFilter,
    ) -> Result<Vec<LaneCount>, StoreError> {
        const OP: StoreOp = StoreOp::RequeueDeadLetters;
        let now = self.now().as_millis();
        let filter = filter.clone().with_status(OutboxStatus::DeadLetter);
        let filter_sql = filter_where(&filter, sql::Terms::All);
        let mut tx = self.begin(OP).await?;
        let sql = format!(
            "SELECT seq, lane, target, ordering_key FROM {} WHERE {} ORDER BY seq FOR UPDATE",
            self.names.messages, filter_sql.clause
        );
        let rows = bind(sqlx::query(AssertSqlSafe(sql)), &filter_sql.values)
            .fetch_all(&mut *tx)
            .await
            .map_err(|e| db_error(OP, e))?;
        let corrupt = |bad| StoreError::Corrupt {
            id: "?".into(),
            reason: format!("{OP}: {bad:?}"),
        };
        let mut lanes = Vec::with_capacity(rows.len());
        let mut keys: BTreeSet<Key> = BTreeSet::new();
        let mut seqs = Vec::with_capacity(rows.len());
        for row in &rows {
            let lane = text(row, "lane").map_err(corrupt)?;
            let target = text(row, "target").map_err(corrupt)?;
            if let Some(key) = opt_text(row, "ordering_key").map_err(corrupt)? {
                keys.insert((lane.clone(), target.clone(), key));
            }
            seqs.push(row.try_get::<i64, _>("seq").map_err(|e| db_error(OP, e))?);
            lanes.push((lane, target));
        }
        let locked = heads::lock(&mut tx, &self.names, &keys, OP).await?;
        InList::new(&self.names.sql.requeue)
            .bind(now)
            .bind(now)
            .execute(&mut tx, &seqs, OP)
            .await?;
        heads::refresh(&mut tx, &self.names, &locked, OP).await?;
        tx.commit().await.map_err(|e| db_error(OP, e))?;
        Ok(LaneCount::tally(lanes))
    }

    pub(super) async fn discard_once(&self, filter: &MessageFilter) -> Result<u64, StoreError> {
        const OP: StoreOp = StoreOp::DiscardDeadLetters;
        let filter = filter.clone().with_status(OutboxStatus::DeadLetter);
        let filter_sql = filter_where(&filter, sql::Terms::All);
        let sql = format!(
            "DELETE FROM {} WHERE {}",
            self.names.messages, filter_sql.clause
        );
        let done = bind(sqlx::query(AssertSqlSafe(sql)), &filter_sql.values)
            .execute(&self.pool)
            .await
            .map_err(|e| db_error(OP, e))?;
        Ok(done.rows_affected())
    }

    /// Deletes finished rows in batches of at most `batch_size`, each a transaction of its
    /// own that reads the `finished` index (status, updated_at) in order: it locks the
    /// batch's rows (noting each one's lane, which MySQL's `DELETE` cannot answer) and
    /// deletes them. The request's lanes go in as a row-constructor list, at most
    /// [`in_list::CHUNK`](super::in_list::CHUNK) lanes per statement.
    pub(super) async fn purge_rows(
        &self,
        request: &PurgeRequest,
    ) -> Result<Vec<LaneCount>, StoreError> {
        const OP: StoreOp = StoreOp::Purge;
        let batch = request.batch_size.max(1);
        let table = &self.names.messages;
        let delete = format!("DELETE FROM {table} WHERE seq IN (?)");
        // No lanes: every lane, in one pass without a lane term.
        let lane_chunks: Vec<&[(String, String)]> = if request.lanes.is_empty() {
            vec![&[]]
        } else {
            request.lanes.chunks(super::in_list::CHUNK).collect()
        };
        let corrupt = |bad| StoreError::Corrupt {
            id: "?".into(),
            reason: format!("{OP}: {bad:?}"),
        };
        let mut purged = Vec::new();
        for (status, older_than) in request.ages() {
            let cutoff = self.now().saturating_sub(older_than).as_millis();
            for lanes in &lane_chunks {
                let mut clause = format!(
                    "status = '{}' AND updated_at < {cutoff}",
                    status_word(status)
                );
                if request.keeps_keyed(status) {
                    clause.push_str(" AND ordering_key IS NULL");
                }
                if !lanes.is_empty() {
                    clause.push_str(" AND (lane, target) IN (");
                    clause.push_str(&vec!["(?, ?)"; lanes.len()].join(", "));
                    clause.push(')');
                }
                let bind_lanes = |sql: String| {
                    lanes
                        .iter()
                        .fold(sqlx::query(AssertSqlSafe(sql)), |query, (lane, target)| {
                            query.bind(lane.as_str()).bind(target.as_str())
                        })
                };
                if request.dry_run {
                    let sql = format!(
                        "SELECT lane, target, COUNT(*) AS n FROM {table} FORCE INDEX (finished) \
                         WHERE {clause} GROUP BY lane, target"
                    );
                    let rows = bind_lanes(sql)
                        .fetch_all(&self.pool)
                        .await
                        .map_err(|e| db_error(OP, e))?;
                    for row in &rows {
                        let n: i64 = row.try_get("n").map_err(|e| db_error(OP, e))?;
                        purged.push(LaneCount {
                            lane: text(row, "lane").map_err(corrupt)?,
                            target: text(row, "target").map_err(corrupt)?,
                            count: u64::try_from(n).unwrap_or(0),
                        });
                    }
                    continue;
                }
                let select = format!(
                    "SELECT seq, lane, target FROM {table} FORCE INDEX (finished) \
                     WHERE {clause} ORDER BY updated_at LIMIT {batch} FOR UPDATE"
                );
                loop {
                    let mut tx = self.begin(OP).await?;
                    let rows = bind_lanes(select.clone())
                        .fetch_all(&mut *tx)
                        .await
                        .map_err(|e| db_error(OP, e))?;
                    let mut seqs = Vec::with_capacity(rows.len());
                    let mut gone = Vec::with_capacity(rows.len());
                    for row in &rows {
                        seqs.push(row.try_get::<i64, _>("seq").map_err(|e| db_error(OP, e))?);
                        let lane = text(row, "lane").map_err(corrupt)?;
                        gone.push((lane, text(row, "target").map_err(corrupt)?));
                    }
                    // The rows are locked: each is deleted, none changed since it was read.
                    InList::new(&delete).execute(&mut tx, &seqs, OP).await?;
                    tx.commit().await.map_err(|e| db_error(OP, e))?;
                    purged.extend(LaneCount::tally(gone));
                    if seqs.len() < batch {
                        break;
                    }
                }
            }
        }
        Ok(LaneCount::sum(purged))
    }
}
