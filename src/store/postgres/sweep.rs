//! Sweeping stray key-head marks: a pending row marked a head while an earlier live row of
//! its key exists (schema/heads.rs says where they come from: enqueues of one new key
//! racing in concurrent transactions, requeues).
//!
//! Why: a stray mark is harmless to order (the claim checks per-key order on every head it
//! meets) but not to cost. Its row sits in `head_idx` among the true heads, often at the
//! front (it was enqueued early), and every claim steps over it again, with a heap visit and
//! a probe of the key indexes, until its key's earlier rows are gone. Measured on a 10 k
//! backlog filled by three concurrent writers over 1,000 keys: the median claim stepped over
//! 304 stray heads to find its 8, a quarter of its time.
//!
//! How, per (lane, target), at most once per [`SWEEP_EVERY`] and in the background (the
//! relay's claims start it): in one transaction,
//! 1. read the first [`SWEEP_LIMIT`] due heads of `head_idx` in claim order, keep the stray
//!    ones, and take each one's key lock (`pg_try_advisory_xact_lock`, the exclusive lock
//!    `promote_heads` takes), skipping a key whose lock is held: the sweep never waits, so
//!    it cannot deadlock;
//! 2. in a statement of its own, so with a snapshot taken after the locks, clear the mark of
//!    each row that is still pending, marked and behind a live row of its key.
//!
//! Why that keeps the invariant (the lowest live row of each key is marked): a row is
//! unmarked only while, in a snapshot taken under its key's lock, an earlier live row
//! exists. Whoever takes that earlier row out of live calls `promote_heads`, which takes
//! the same lock and looks after the sweep committed, so it sees the mark cleared and marks
//! the lowest live row again; a writer that committed before the lock was taken is in the
//! snapshot, and its row is not earlier-and-live any more. An enqueue's `check_head` only
//! ever marks its own row.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::postgres::PgPool;
use sqlx::AssertSqlSafe;
use uuid::Uuid;

use crate::message::UnixMillis;
use crate::store::StoreError;
use crate::store::StoreOp;

use super::row::db_error;
use super::schema::{for_names, Names};
use super::{to_i64, PostgresOutboxStore};

/// How often a lane's claims start a sweep at most.
pub(super) const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// The due heads one sweep reads, from the front of `head_idx`.
pub(super) const SWEEP_LIMIT: usize = 1024;

/// The two statements of a sweep.
#[derive(Debug, Clone)]
pub(super) struct SweepSql {
    /// `$1` now, `$2` lane, `$3` target, `$4` limit: the ids of the stray heads among the
    /// first due heads whose key lock this transaction took.
    find: Arc<str>,
    /// `$1` ids: clears the mark of those still stray; answers how many.
    clear: Arc<str>,
    /// How a sweep's transaction begins (with the session settings under a transaction
    /// pooler).
    begin: Arc<str>,
    /// Whether its statements may be named prepared statements (`PostgresConfig::pooler`).
    named: bool,
}

impl SweepSql {
    pub(super) fn new(names: &Names, config: &super::PostgresConfig) -> Self {
        Self {
            find: for_names(names, include_str!("sql/sweep_find.sql")).into(),
            clear: for_names(names, include_str!("sql/sweep_clear.sql")).into(),
            // READ COMMITTED whatever the session's default: the second statement must see
            // what committed while the first took the locks.
            begin: config
                .begin()
                .replacen("BEGIN", "BEGIN ISOLATION LEVEL READ COMMITTED", 1)
                .into(),
            named: config.named_statements(),
        }
    }
}

/// When each lane was last swept, and whether a sweep of this store is running.
#[derive(Debug, Default)]
pub(super) struct Sweeps {
    last: Mutex<HashMap<(String, String), Instant>>,
    running: Arc<AtomicBool>,
}

impl Sweeps {
    /// Whether (lane, target) is due a sweep now; if so, notes it as swept.
    fn due(&self, lane: &str, target: &str, now: Instant) -> bool {
        let Ok(mut last) = self.last.lock() else {
            return false;
        };
        let key = (lane.to_owned(), target.to_owned());
        match last.get(&key) {
            Some(at) if now.duration_since(*at) < SWEEP_EVERY => false,
            _ => {
                last.insert(key, now);
                true
            }
        }
    }
}

/// One sweep of (lane, target) on `pool`; the number of marks cleared.
async fn sweep(
    pool: &PgPool,
    sql: &SweepSql,
    now: Option<UnixMillis>,
    lane: &str,
    target: &str,
) -> Result<u64, StoreError> {
    let op = StoreOp::Maintenance;
    let mut tx = pool
        .begin_with(AssertSqlSafe(sql.begin.to_string()))
        .await
        .map_err(|e| db_error(op, e))?;
    let ids: Vec<Uuid> = sqlx::query_scalar(AssertSqlSafe(sql.find.to_string()))
        .bind(now)
        .bind(lane)
        .bind(target)
        .bind(to_i64(SWEEP_LIMIT))
        .persistent(sql.named)
        .fetch_all(&mut *tx)
        .await
        .map_err(|e| db_error(op, e))?;
    let cleared = if ids.is_empty() {
        0
    } else {
        sqlx::query(AssertSqlSafe(sql.clear.to_string()))
            .bind(&ids)
            .persistent(sql.named)
            .execute(&mut *tx)
            .await
            .map_err(|e| db_error(op, e))?
            .rows_affected()
    };
    tx.commit().await.map_err(|e| db_error(op, e))?;
    Ok(cleared)
}

impl PostgresOutboxStore {
    /// Clears stray key-head marks among the first due heads of (lane, target) and answers
    /// how many it cleared (see `sweep.rs`). A relay's claims run it in the background, at
    /// most once a second per lane; it is public for maintenance and tests. It waits for no
    /// lock: a key another transaction holds is left for the next sweep.
    pub async fn sweep_heads(&self, lane: &str, target: &str) -> Result<u64, StoreError> {
        sweep(&self.pool, &self.sweep_sql, self.now(), lane, target).await
    }

    /// Starts a sweep of (lane, target) in the background when one is due and none of this
    /// store's is running; returns at once.
    pub(super) fn sweep_soon(&self, lane: &str, target: &str) {
        let running = self.sweeps.running.clone();
        if running
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        if !self.sweeps.due(lane, target, Instant::now()) {
            running.store(false, Ordering::Release);
            return;
        }
        let (pool, sql, now) = (self.pool.clone(), self.sweep_sql.clone(), self.now());
        let (lane, target) = (lane.to_owned(), target.to_owned());
        tokio::spawn(async move {
            match sweep(&pool, &sql, now, &lane, &target).await {
                Ok(cleared) if cleared > 0 => {
                    tracing::debug!(%lane, %target, cleared, "stray key-head marks cleared")
                }
                Ok(_) => {}
                Err(error) => tracing::debug!(%lane, %target, %error, "key-head sweep failed"),
            }
            running.store(false, Ordering::Release);
        });
    }
}
