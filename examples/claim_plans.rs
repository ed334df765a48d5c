//! The cost of a claim, `next_due` and a lane's stats on PostgreSQL at 10 k, 100 k and 1 M
//! pending rows, for three key distributions (no keys, 1,000 keys, one hot key of N rows
//! among 1,000 cold keys): the "Execution Time" of `EXPLAIN (ANALYZE, FORMAT JSON)` of each
//! statement, as `PostgresOutboxStore::explain` runs it (`jit = off`, rolled back).
//!
//! ```text
//! cargo run --release --features postgres --example claim_plans -- [postgres-url] [max-rows]
//! ```
//!
//! Defaults: `postgres://postgres@127.0.0.1:5432/test`, 1,000,000. Each case fills a
//! schema of its own with one `INSERT ... SELECT generate_series` (the rows enqueue writes,
//! key-head markers included, as `tests/postgres/plans.rs` documents), runs VACUUM ANALYZE
//! (what autovacuum does), measures each statement 5 times and prints the median, then
//! drops the schema.

use std::time::Duration;

use outbox_relay::store::postgres::{Explained, PostgresConfig, PostgresOutboxStore};
use outbox_relay::store::{ClaimRequest, OrderingPolicy};

const LIMIT: usize = 100;
const RUNS: usize = 5;

#[derive(Debug, Clone, Copy)]
enum Keys {
    None,
    Thousand,
    Hot,
}

async fn fill(store: &PostgresOutboxStore, rows: i64, keys: Keys) -> Result<(), sqlx::Error> {
    let t = store.messages_table();
    let (key, head, total) = match keys {
        Keys::None => ("NULL".to_owned(), "true".to_owned(), rows),
        Keys::Thousand => ("'k' || (i % 1000)".to_owned(), "i <= 1000".to_owned(), rows),
        Keys::Hot => (
            format!("CASE WHEN i <= {rows} THEN 'hot' ELSE 'c' || i END"),
            format!("i = 1 OR i > {rows}"),
            rows + 1_000,
        ),
    };
    let mut tx = store.pool().begin().await?;
    // The deferred check_head trigger would leave every unmarked row unmarked (each has a
    // live head before it): skipping it writes the same rows.
    sqlx::query("SET LOCAL session_replication_role = replica")
        .execute(&mut *tx)
        .await?;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO {t} (outbox_id, lane, target, payload, headers, ordering_key, status,
                          attempt_count, max_attempts, available_at, created_at, updated_at,
                          key_head)
         SELECT gen_random_uuid(), 'l', 'sink', jsonb_build_object('i', i), '{{}}', {key},
                'pending', 0, 5, ts, ts, ts, {head}
         FROM generate_series(1, $1::int8) AS i,
              LATERAL (SELECT now() - interval '1 hour' + i * interval '1 millisecond') AS n(ts)"
    )))
    .bind(total)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("VACUUM ANALYZE {t}")))
        .execute(store.pool())
        .await?;
    Ok(())
}

/// The median "Execution Time" (ms) of `RUNS` explains of `statement`.
async fn median_ms(store: &PostgresOutboxStore, statement: &Explained) -> f64 {
    let mut times = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        match store.explain(statement).await {
            Ok(plan) => times.push(plan[0]["Execution Time"].as_f64().unwrap_or(f64::NAN)),
            Err(error) => {
                eprintln!("explain {statement:?}: {error}");
                return f64::NAN;
            }
        }
    }
    times.sort_by(f64::total_cmp);
    times[RUNS / 2]
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let max_rows: i64 = args.next().map_or(Ok(1_000_000), |s| s.parse())?;
    println!(
        "| rows | keys | claim Skip ms | claim Block ms | next_due Skip ms | next_due Block ms | stats ms |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|");
    for rows in [10_000_i64, 100_000, 1_000_000] {
        if rows > max_rows {
            break;
        }
        for keys in [Keys::None, Keys::Thousand, Keys::Hot] {
            let schema = format!("plans_{}", uuid::Uuid::new_v4().simple());
            let store = PostgresOutboxStore::connect_with(
                &url,
                // The 1 M fill and its VACUUM take longer than the default 30 s.
                PostgresConfig::default()
                    .with_schema(schema.clone())
                    .with_statement_timeout(Duration::from_secs(3_600)),
            )
            .await?;
            fill(&store, rows, keys).await?;
            let claim = |ordering| {
                Explained::Claim(
                    ClaimRequest::new("l", "sink", LIMIT, Duration::from_secs(60), "plans")
                        .with_ordering(ordering),
                )
            };
            let next_due = |ordering| Explained::NextDue {
                lane: "l".into(),
                target: "sink".into(),
                ordering,
            };
            let stats = Explained::LaneStats {
                lane: "l".into(),
                target: "sink".into(),
            };
            println!(
                "| {rows} | {keys:?} | {:.2} | {:.2} | {:.3} | {:.3} | {:.1} |",
                median_ms(&store, &claim(OrderingPolicy::Skip)).await,
                median_ms(&store, &claim(OrderingPolicy::Block)).await,
                median_ms(&store, &next_due(OrderingPolicy::Skip)).await,
                median_ms(&store, &next_due(OrderingPolicy::Block)).await,
                median_ms(&store, &stats).await,
            );
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "DROP SCHEMA \"{schema}\" CASCADE"
            )))
            .execute(store.pool())
            .await?;
        }
    }
    Ok(())
}
