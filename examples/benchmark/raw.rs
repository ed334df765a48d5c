//! The raw ceiling: the least a relay could do per message, on one connection. Claim 100
//! rows (`FOR UPDATE SKIP LOCKED` on PostgreSQL; one write transaction on SQLite), then ack
//! them with one statement, until the lane is empty. It runs on a table the store's own
//! migration made, so columns and indexes are the store's, in the same process and moments
//! before the relay drains the same backlog.

use std::path::Path;
use std::time::{Duration, Instant};

use sqlx::{AssertSqlSafe, Connection, Row};

use outbox_relay::store::postgres::DEFAULT_VACUUM_EVERY;

use crate::stores::TARGET;

/// Rows per claim of the raw loop.
pub const RAW_BATCH: i64 = 100;

/// What a raw loop did.
#[derive(Debug, Clone, Copy)]
pub struct Ceiling {
    pub rows: usize,
    pub took: Duration,
    pub timed_out: bool,
}

impl Ceiling {
    pub fn rate(&self) -> f64 {
        self.rows as f64 / self.took.as_secs_f64().max(1e-9)
    }
}

/// With `delete`, the deleting twin: the ack deletes the claimed rows instead of marking
/// them delivered, as a lane with `keep_delivered = false` does, so a deleting relay is
/// compared with a ceiling that writes what it writes.
pub async fn postgres(
    pool: &sqlx::PgPool,
    table: &str,
    lane: &str,
    timeout: Duration,
    delete: bool,
) -> Result<Ceiling, String> {
    let err = |what: &'static str| move |e: sqlx::Error| format!("raw ceiling {what}: {e}");
    let mut conn = pool.acquire().await.map_err(err("connect"))?;
    // The relay's own statements run without JIT (`PostgresConfig::session_options`: JIT
    // compilation cost 417 of 560 ms of a claim at 20,000 rows), so the ceiling does too.
    // ...and its claims and acks commit without waiting for the disk
    // (`PostgresConfig::synchronous_commit`, false by default), so the ceiling's do too.
    sqlx::raw_sql("SET jit = off; SET synchronous_commit = off")
        .execute(&mut *conn)
        .await
        .map_err(err("set jit"))?;
    // Read due pending rows through the narrowest index the table has for them: with the
    // key-head marker (migration 2), `head_idx` holds only pending rows, so a scan does not
    // step over the dead entries of rows this loop already claimed and acked, which PostgreSQL
    // cannot prune while other sessions hold older snapshots. Without it, `claimable_idx`.
    let schema = table
        .split('.')
        .next()
        .unwrap_or_default()
        .trim_matches('"');
    let relation = table
        .split('.')
        .nth(1)
        .unwrap_or_default()
        .trim_matches('"');
    let has_key_head: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM information_schema.columns
             WHERE table_schema = $1 AND table_name = $2 AND column_name = 'key_head')",
    )
    .bind(schema)
    .bind(relation)
    .fetch_one(&mut *conn)
    .await
    .map_err(err("look for key_head"))?;
    let head = if has_key_head { " AND key_head" } else { "" };
    // The UPDATE finds its rows by `outbox_id = ANY (ARRAY(...))`, as the store's claim does:
    // joined with the CTE, on a table filled moments ago (no statistics yet) the planner
    // hash-joined the picked rows against a scan of the whole table, which made this loop
    // fall from 46 k rows/s at 10 k to 6 k at 100 k.
    let claim = format!(
        "WITH picked AS (
             SELECT outbox_id FROM {table}
             WHERE lane = $1 AND target = $2 AND status = 'pending'{head} AND available_at <= now()
             ORDER BY available_at, seq
             LIMIT $3
             FOR UPDATE SKIP LOCKED)
         UPDATE {table} AS m
         SET status = 'claimed', attempt_count = m.attempt_count + 1, claimed_by = 'raw',
             claim_token = gen_random_uuid(), lease_expires_at = now() + interval '30 seconds',
             updated_at = now()
         WHERE m.outbox_id = ANY (ARRAY(SELECT outbox_id FROM picked))
         RETURNING m.outbox_id, m.seq, m.payload, m.headers, m.ordering_key, m.attempt_count,
             m.claim_token"
    );
    let ack = if delete {
        format!("DELETE FROM {table} WHERE outbox_id = ANY($1) AND status = 'claimed'")
    } else {
        format!(
            "UPDATE {table}
             SET status = 'delivered', delivered_at = now(), updated_at = now(),
                 claimed_by = NULL, claim_token = NULL, lease_expires_at = NULL
             WHERE outbox_id = ANY($1) AND status = 'claimed'"
        )
    };
    // Statistics first (not timed): on a table filled moments ago the planner has none,
    // and this plain statement then sorted every pending row for each claim (6 k rows/s at
    // 100 k against 46 k at 10 k). The store's claims keep their index plans without
    // statistics (tests/postgres/plans.rs); this loop is a ceiling, so it gets the help.
    sqlx::raw_sql(AssertSqlSafe(format!("ANALYZE {table}")))
        .execute(&mut *conn)
        .await
        .map_err(err("analyze"))?;
    let started = Instant::now();
    let mut rows = 0;
    let mut since_vacuum = 0u64;
    let mut vacuum: Option<tokio::task::JoinHandle<()>> = None;
    loop {
        if started.elapsed() > timeout {
            return Ok(Ceiling {
                rows,
                took: started.elapsed(),
                timed_out: true,
            });
        }
        let claimed = sqlx::query(AssertSqlSafe(claim.clone()))
            .bind(lane)
            .bind(TARGET)
            .bind(RAW_BATCH)
            .fetch_all(&mut *conn)
            .await
            .map_err(err("claim"))?;
        if claimed.is_empty() {
            break;
        }
        let ids = claimed
            .iter()
            .map(|row| row.try_get::<uuid::Uuid, _>(0))
            .collect::<Result<Vec<_>, _>>()
            .map_err(err("decode"))?;
        sqlx::query(AssertSqlSafe(ack.clone()))
            .bind(&ids)
            .execute(&mut *conn)
            .await
            .map_err(err("ack"))?;
        rows += ids.len();
        since_vacuum += ids.len() as u64;
        // As the store does (`PostgresConfig::vacuum_every`): a background VACUUM after every
        // so many acked rows, so this loop's claims do not step over the dead index entries
        // of everything it already drained either.
        if since_vacuum >= DEFAULT_VACUUM_EVERY && vacuum.as_ref().is_none_or(|v| v.is_finished()) {
            since_vacuum = 0;
            let (pool, sql) = (
                pool.clone(),
                format!("VACUUM (INDEX_CLEANUP ON, SKIP_LOCKED) {table}"),
            );
            vacuum = Some(tokio::spawn(async move {
                if let Err(error) = sqlx::raw_sql(AssertSqlSafe(sql)).execute(&pool).await {
                    eprintln!("benchmark: raw ceiling vacuum: {error}");
                }
            }));
        }
    }
    Ok(Ceiling {
        rows,
        took: started.elapsed(),
        timed_out: false,
    })
}

/// With `delete`, the deleting twin (see [`postgres`]).
pub async fn sqlite(
    path: &Path,
    table: &str,
    lane: &str,
    timeout: Duration,
    delete: bool,
) -> Result<Ceiling, String> {
    use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
    let err = |what: &'static str| move |e: sqlx::Error| format!("raw ceiling {what}: {e}");
    // The store's own settings: WAL, and the relay's commits (`synchronous = NORMAL`
    // unless `OUTBOX_BENCH_SQLITE_SYNC=full`, as `SqliteStoreBuilder::synchronous_commit`).
    let synchronous = if std::env::var("OUTBOX_BENCH_SQLITE_SYNC").is_ok_and(|v| v == "full") {
        SqliteSynchronous::Full
    } else {
        SqliteSynchronous::Normal
    };
    let options = SqliteConnectOptions::new()
        .filename(path)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(synchronous)
        .busy_timeout(Duration::from_secs(5));
    let mut conn = sqlx::SqliteConnection::connect_with(&options)
        .await
        .map_err(err("connect"))?;
    // The narrowest index for due pending rows in order, with its WHERE term word for word
    // (SQLite's condition for using a partial index): `_ready` once the table has the
    // key-head marker (migration 2 dropped `_claimable`), `_claimable` before.
    let has_key_head: bool = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT EXISTS (SELECT 1 FROM pragma_table_info('{table}') WHERE name = 'key_head')"
    )))
    .fetch_one(&mut conn)
    .await
    .map_err(err("look for key_head"))?;
    let due = if has_key_head {
        "status = 'pending' AND key_head = 1"
    } else {
        "status IN ('pending', 'claimed') AND status = 'pending'"
    };
    // One statement is one write transaction: the claim picks and marks in one go.
    let claim = format!(
        "UPDATE {table}
         SET status = 'claimed', attempt_count = attempt_count + 1, claimed_by = 'raw',
             claim_token = lower(hex(randomblob(16))), lease_expires_at = ?3 + 30000,
             updated_at = ?3
         WHERE seq IN (
             SELECT seq FROM {table}
             WHERE lane = ?1 AND target = ?2 AND {due} AND available_at <= ?3
             ORDER BY available_at, seq
             LIMIT ?4)
         RETURNING outbox_id, seq, payload, headers, ordering_key, attempt_count, claim_token"
    );
    // The deleting twin binds the time too (`?2 IS NOT NULL`), so both take one call shape.
    let ack = if delete {
        format!(
            "DELETE FROM {table}
             WHERE seq IN (SELECT value FROM json_each(?1)) AND status = 'claimed'
                 AND ?2 IS NOT NULL"
        )
    } else {
        format!(
            "UPDATE {table}
             SET status = 'delivered', delivered_at = ?2, updated_at = ?2,
                 claimed_by = NULL, claim_token = NULL, lease_expires_at = NULL
             WHERE seq IN (SELECT value FROM json_each(?1)) AND status = 'claimed'"
        )
    };
    let started = Instant::now();
    let mut rows = 0;
    loop {
        if started.elapsed() > timeout {
            return Ok(Ceiling {
                rows,
                took: started.elapsed(),
                timed_out: true,
            });
        }
        let now = now_millis();
        let claimed = sqlx::query(AssertSqlSafe(claim.clone()))
            .bind(lane)
            .bind(TARGET)
            .bind(now)
            .bind(RAW_BATCH)
            .fetch_all(&mut conn)
            .await
            .map_err(err("claim"))?;
        if claimed.is_empty() {
            break;
        }
        let seqs = claimed
            .iter()
            .map(|row| row.try_get::<i64, _>(1))
            .collect::<Result<Vec<_>, _>>()
            .map_err(err("decode"))?;
        sqlx::query(AssertSqlSafe(ack.clone()))
            .bind(serde_json::json!(seqs).to_string())
            .bind(now_millis())
            .execute(&mut conn)
            .await
            .map_err(err("ack"))?;
        rows += seqs.len();
    }
    let took = started.elapsed();
    conn.close().await.map_err(err("close"))?;
    Ok(Ceiling {
        rows,
        took,
        timed_out: false,
    })
}

pub fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The MySQL ceiling: one transaction per claim (select 100 due rows through the `ready`
/// index with `FOR UPDATE SKIP LOCKED`, mark them claimed by primary key, commit), then one
/// ack statement by primary key, as the store does, without its per-key bookkeeping (the
/// ceiling's backlog has no keys). With `delete`, the ack deletes the rows instead, as a
/// lane with `keep_delivered = false` does.
pub async fn mysql(
    pool: &sqlx::MySqlPool,
    table: &str,
    lane: &str,
    timeout: Duration,
    delete: bool,
) -> Result<Ceiling, String> {
    let err = |what: &'static str| move |e: sqlx::Error| format!("raw ceiling {what}: {e}");
    let mut conn = pool.acquire().await.map_err(err("connect"))?;
    let now = "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)";
    let pick = format!(
        "SELECT seq, outbox_id, payload, headers FROM {table} FORCE INDEX (`ready`)
         WHERE lane = ? AND target = ? AND ready_at <= {now}
         ORDER BY ready_at, seq LIMIT {RAW_BATCH} FOR UPDATE SKIP LOCKED"
    );
    let started = Instant::now();
    let mut rows = 0;
    loop {
        if started.elapsed() > timeout {
            return Ok(Ceiling {
                rows,
                took: started.elapsed(),
                timed_out: true,
            });
        }
        let mut tx = conn.begin().await.map_err(err("begin"))?;
        let picked = sqlx::query(AssertSqlSafe(pick.clone()))
            .bind(lane)
            .bind(TARGET)
            .fetch_all(&mut *tx)
            .await
            .map_err(err("claim"))?;
        if picked.is_empty() {
            tx.commit().await.map_err(err("commit"))?;
            break;
        }
        let seqs = picked
            .iter()
            .map(|row| row.try_get::<i64, _>(0))
            .collect::<Result<Vec<_>, _>>()
            .map_err(err("decode"))?;
        let list = seqs
            .iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        sqlx::query(AssertSqlSafe(format!(
            "UPDATE {table} SET status = 'claimed', attempt_count = attempt_count + 1,
             claimed_by = 'raw', claim_token = UNHEX(REPLACE(UUID(), '-', '')),
             lease_expires_at = {now} + 30000, updated_at = {now} WHERE seq IN ({list})"
        )))
        .execute(&mut *tx)
        .await
        .map_err(err("claim update"))?;
        tx.commit().await.map_err(err("commit"))?;
        let ack = if delete {
            format!("DELETE FROM {table} WHERE seq IN ({list}) AND status = 'claimed'")
        } else {
            format!(
                "UPDATE {table} SET status = 'delivered', delivered_at = {now}, updated_at = {now},
                 claimed_by = NULL, claim_token = NULL, lease_expires_at = NULL
                 WHERE seq IN ({list}) AND status = 'claimed'"
            )
        };
        sqlx::query(AssertSqlSafe(ack))
            .execute(&mut *conn)
            .await
            .map_err(err("ack"))?;
        rows += seqs.len();
    }
    Ok(Ceiling {
        rows,
        took: started.elapsed(),
        timed_out: false,
    })
}
