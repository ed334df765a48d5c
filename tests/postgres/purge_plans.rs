//! The purge's plan over many lanes at 300,000 rows: one batch reads purge's index oldest
//! first, the lanes a filter on it, and deletes the batch by primary key, in the custom
//! plan and in the generic one a prepared statement switches to after five executions
//! (where a plain `IN` once hashed the batch against a scan of the whole table). Pinned
//! with `EXPLAIN (ANALYZE, FORMAT JSON)` before and after ANALYZE (before, a batch reads
//! every old finished row once: see the test), as `plans.rs` pins the
//! claim; then the purge itself deletes exactly the old finished rows of its lanes.

use std::time::Duration;

use outbox_relay::store::postgres::Explained;
use outbox_relay::store::PurgeRequest;
use outbox_relay::Outbox;

use crate::plans::check_within;
use crate::{open, SchemaGuard};

const ROWS: i64 = 300_000;
/// Lanes of the table, round-robin; the purge names every fourth, so a batch reads rows of
/// the others between its own. Prime to ten, so each lane holds every kind of row of the
/// fill.
const LANES: i64 = 2_001;
/// The lanes one purge names, as automatic retention asks for them
/// ([`PURGE_LANES_PER_REQUEST`](outbox_relay::retention::PURGE_LANES_PER_REQUEST)).
const PURGED_LANES: usize = 500;
const BATCH: usize = 100;
/// Rows one scan node may read: the lanes named are a quarter of the old rows, interleaved,
/// so a batch reads about four rows of purge's index per row it deletes.
const MAX_READ: f64 = (10 * BATCH) as f64;
/// The old delivered rows of the fill, every lane: what a batch reads before ANALYZE.
const OLD_ROWS: f64 = (ROWS / 10 * 8) as f64;

/// Fills [`LANES`] lanes of target `sink` round-robin, one row every millisecond from two
/// days ago: of every ten rows one pending, one delivered just now, eight delivered two
/// days ago (the rows a purge of a day's age deletes). Triggers skipped as `plans::fill`
/// skips them.
async fn fill(store: &Outbox) {
    let t = crate::pg(store).messages_table();
    let mut tx = crate::pg(store).pool().begin().await.expect("begin");
    sqlx::query("SET LOCAL session_replication_role = replica")
        .execute(&mut *tx)
        .await
        .expect("replica role");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO {t} (outbox_id, lane, target, payload, headers, status, attempt_count,
                          max_attempts, available_at, created_at, updated_at, delivered_at,
                          key_head)
         SELECT gen_random_uuid(), 'lane-' || (i % $2::int8), 'sink', '{{}}', '{{}}',
                CASE i % 10 WHEN 0 THEN 'pending' ELSE 'delivered' END,
                CASE i % 10 WHEN 0 THEN 0 ELSE 1 END, 5, ts, ts,
                CASE i % 10 WHEN 1 THEN now() ELSE ts END,
                CASE i % 10 WHEN 0 THEN NULL WHEN 1 THEN now() ELSE ts END, true
         FROM generate_series(1, $1::int8) AS i,
              LATERAL (SELECT now() - interval '2 days' + i * interval '1 millisecond') AS n(ts)"
    )))
    .bind(ROWS)
    .bind(LANES)
    .execute(&mut *tx)
    .await
    .expect("fill");
    tx.commit().await.expect("commit fill");
}

/// Rows of `status` in the purged lanes (every fourth), old enough (`old`) or not.
async fn count(store: &Outbox, status: &str, old: bool) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FROM {} WHERE status = $1
             AND (updated_at < now() - interval '1 day') = $2
             AND substr(lane, 6)::int8 % 4 = 0 AND substr(lane, 6)::int8 < $3",
        crate::pg(store).messages_table()
    )))
    .bind(status)
    .bind(old)
    .bind(4 * PURGED_LANES as i64)
    .fetch_one(crate::pg(store).pool())
    .await
    .expect("count")
}

#[tokio::test]
async fn purge_plan_reads_the_purge_index_over_500_lanes() {
    let schema = SchemaGuard::new();
    let store = open(schema.config()).await;
    fill(&store).await;
    let request = PurgeRequest {
        delivered_older_than: Some(Duration::from_secs(86_400)),
        dead_letter_older_than: None,
        lanes: (0..PURGED_LANES)
            .map(|n| (format!("lane-{}", 4 * n), "sink".to_owned()))
            .collect(),
        batch_size: BATCH,
        dry_run: false,
        keep_keyed_dead_letters: false,
    };
    for label in ["before ANALYZE", "after ANALYZE"] {
        if label == "after ANALYZE" {
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "VACUUM ANALYZE {}",
                crate::pg(&store).messages_table()
            )))
            .execute(crate::pg(&store).pool())
            .await
            .expect("analyze");
        }
        for generic in [false, true] {
            let plan = crate::pg(&store)
                .explain(&Explained::Purge {
                    request: request.clone(),
                    generic,
                })
                .await
                .expect("explain purge");
            let what = format!("purge, generic {generic}, {label}");
            // Before ANALYZE the planner, knowing nothing of the rows, sorts the old finished
            // rows of a bitmap of purge's index: each batch reads them all once, but not
            // the table, and not the live rows.
            let max_read = if label == "before ANALYZE" {
                OLD_ROWS
            } else {
                MAX_READ
            };
            check_within(&what, &plan, true, max_read);
            let text = plan.to_string();
            assert!(
                text.contains("_purge_idx\""),
                "{what}: the batch is not read from purge's index\n{text}"
            );
        }
    }

    // The statement explained is the one purge runs: it deletes the old delivered rows of
    // its lanes, batch after batch, and nothing else.
    let old = count(&store, "delivered", true).await;
    let recent = count(&store, "delivered", false).await;
    let pending = count(&store, "pending", true).await;
    assert!(
        old > ROWS / 6,
        "the fill's old rows of the purged lanes: {old}"
    );
    // In batches of 1,000 rather than 100: each batch steps over the old rows of the lanes
    // not named that the batches before it read, so 600 small ones take a while.
    let purged = store
        .purge(&PurgeRequest {
            batch_size: 10 * BATCH,
            ..request
        })
        .await
        .expect("purge");
    assert_eq!(purged.len(), PURGED_LANES, "a count per lane: {purged:?}");
    assert_eq!(
        purged.iter().map(|c| c.count).sum::<u64>(),
        u64::try_from(old).expect("a count")
    );
    assert_eq!(count(&store, "delivered", true).await, 0);
    assert_eq!(count(&store, "delivered", false).await, recent);
    assert_eq!(count(&store, "pending", true).await, pending);
    let left: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FROM {}",
        crate::pg(&store).messages_table()
    )))
    .fetch_one(crate::pg(&store).pool())
    .await
    .expect("count");
    assert_eq!(left, ROWS - old, "other lanes untouched");
    schema.drop().await;
}
