//! Guards on the cost of a page of `GET /api/v1/messages` at 1,000,000 rows: for every
//! filter the API offers, every node of `EXPLAIN (ANALYZE, FORMAT JSON)` that reads the
//! messages table reads an index (no sequential scan) and at most a small multiple of the
//! page: the page plus one (each status range of a lane stops there), or the listing's scan
//! budget (`LIST_SCAN_PAGES` pages) when the filter has a time range or an error text. So
//! no node sorts a lane's rows or steps over another lane's. Checked on a fresh table and after ANALYZE, from the first page and from a
//! cursor in the middle.
//!
//! The rows: 90 % in lane `l` (the one listed), 10 % in lane `other` interleaved with them
//! (a page must not step over them); of lane `l`, the newest 1 % pending, one in 50,000
//! claimed, one in 1,000 dead-lettered ("timeout", one of them "needle"), the rest
//! delivered; 1,000 ordering keys.

use std::time::{Duration, SystemTime};

use outbox_relay::store::postgres::Explained;
use outbox_relay::store::{MessageFilter, PageRequest, LIST_SCAN_PAGES};
use outbox_relay::{Outbox, OutboxStatus};
use serde_json::Value;

use crate::{open, SchemaGuard};

const ROWS: i64 = 1_000_000;
const LIMIT: usize = 100;
/// Dead versions of rows an index still points to, and a few rows of lookahead.
const SLACK: f64 = 20.0;

/// Writes the rows in one `INSERT ... SELECT generate_series`, with the key-head trigger
/// skipped (as `plans.rs` fills): the listing reads no key head, and the trigger would cost
/// the fill minutes.
async fn fill(store: &Outbox) {
    let t = crate::pg(store).messages_table();
    let mut tx = crate::pg(store).pool().begin().await.expect("begin");
    sqlx::query("SET LOCAL session_replication_role = replica")
        .execute(&mut *tx)
        .await
        .expect("replica role");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO {t} (outbox_id, lane, target, payload, headers, ordering_key, status,
                          attempt_count, max_attempts, available_at, claimed_by, claim_token,
                          lease_expires_at, last_error, created_at, updated_at, delivered_at)
         SELECT gen_random_uuid(), CASE WHEN i % 10 = 0 THEN 'other' ELSE 'l' END, 'sink',
                jsonb_build_object('i', i), '{{}}', 'k' || (i % 1000), s.status, 1, 5, ts,
                CASE WHEN s.status = 'claimed' THEN 'elsewhere' END,
                CASE WHEN s.status = 'claimed' THEN gen_random_uuid() END,
                CASE WHEN s.status = 'claimed' THEN now() + interval '1 hour' END,
                CASE WHEN s.status = 'dead_letter'
                     THEN CASE WHEN i = 500001 THEN 'needle' ELSE 'timeout' END END,
                ts, ts, CASE WHEN s.status = 'delivered' THEN ts END
         FROM generate_series(1, $1::int8) AS i,
              LATERAL (SELECT now() - interval '1 hour' + i * interval '1 millisecond') AS n(ts),
              LATERAL (SELECT CASE
                  WHEN i > $1 * 99 / 100 THEN 'pending'
                  WHEN i % 50000 = 7 THEN 'claimed'
                  WHEN i % 1000 = 1 THEN 'dead_letter'
                  ELSE 'delivered' END) AS s(status)"
    )))
    .bind(ROWS)
    .execute(&mut *tx)
    .await
    .expect("fill");
    tx.commit().await.expect("commit fill");
}

/// Every node that reads the messages table, with the rows it read over all its loops.
fn scans(node: &Value, out: &mut Vec<(String, f64)>) {
    if let (Some(kind), Some(relation)) = (
        node.get("Node Type").and_then(Value::as_str),
        node.get("Index Name")
            .or_else(|| node.get("Relation Name"))
            .and_then(Value::as_str),
    ) {
        let num = |k: &str| node.get(k).and_then(Value::as_f64).unwrap_or(0.0);
        let read = (num("Actual Rows")
            + num("Rows Removed by Filter")
            + num("Rows Removed by Index Recheck"))
            * num("Actual Loops");
        out.push((format!("{kind} on {relation}"), read));
    }
    for child in ["Plan", "Plans"] {
        match node.get(child) {
            Some(Value::Array(items)) => items.iter().for_each(|n| scans(n, out)),
            Some(n @ Value::Object(_)) => scans(n, out),
            _ => {}
        }
    }
}

/// The most rows a page under `filter` may read in one node: the page and one more, or
/// the scan budget (each status range stops there).
fn bound(filter: &MessageFilter) -> f64 {
    let page = (LIMIT + 1) as f64;
    if filter.scans() {
        page * LIST_SCAN_PAGES as f64 + SLACK
    } else {
        page + SLACK
    }
}

async fn check(store: &Outbox, label: &str, filter: &MessageFilter, after: Option<i64>) {
    let page = PageRequest {
        after,
        limit: LIMIT,
    };
    let plan = crate::pg(store)
        .explain(&Explained::List {
            filter: filter.clone(),
            page,
        })
        .await
        .expect("explain list");
    let root = &plan[0];
    let pretty = serde_json::to_string_pretty(root).unwrap_or_default();
    let mut nodes = Vec::new();
    scans(root, &mut nodes);
    assert!(!nodes.is_empty(), "{label}: no scan in\n{pretty}");
    let most = bound(filter);
    for (node, read) in &nodes {
        assert!(
            !node.starts_with("Seq Scan"),
            "{label}: {node} reads the whole table\n{pretty}"
        );
        assert!(
            *read <= most,
            "{label}: {node} read {read} rows, over {most} for a page of {LIMIT}\n{pretty}"
        );
    }
}

/// Every filter the API offers, by lane `l` (and by ids).
async fn filters(store: &Outbox) -> Vec<(String, MessageFilter)> {
    let lane = MessageFilter::lane("l", "sink");
    let an_hour_ago = SystemTime::now() - Duration::from_secs(3600);
    // A minute in the middle of the rows (they are a millisecond apart).
    let minute = lane.clone().enqueued_between(
        Some(an_hour_ago + Duration::from_secs(600)),
        Some(an_hour_ago + Duration::from_secs(660)),
    );
    let ids: Vec<uuid::Uuid> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT outbox_id FROM {} WHERE seq % 9973 = 0 LIMIT {LIMIT}",
        crate::pg(store).messages_table()
    )))
    .fetch_all(crate::pg(store).pool())
    .await
    .expect("some ids");
    let mut all = vec![
        ("lane".to_owned(), lane.clone()),
        (
            "key".to_owned(),
            MessageFilter {
                ordering_key: Some("k5".into()),
                ..lane.clone()
            },
        ),
        ("time range".to_owned(), minute.clone()),
        (
            "error".to_owned(),
            lane.clone().with_error_containing("needle"),
        ),
        ("ids".to_owned(), MessageFilter::all().with_ids(ids)),
    ];
    for status in OutboxStatus::ALL {
        let by_status = lane.clone().with_status(status);
        all.push((format!("status {status:?}"), by_status.clone()));
        all.push((
            format!("key and status {status:?}"),
            MessageFilter {
                ordering_key: Some("k1".into()),
                ..by_status.clone()
            },
        ));
        all.push((
            format!("time range and status {status:?}"),
            minute.clone().with_status(status),
        ));
        all.push((
            format!("error and status {status:?}"),
            by_status.with_error_containing("needle"),
        ));
    }
    all
}

async fn check_all(store: &Outbox, label: &str) {
    let middle: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT max(seq) / 2 FROM {}",
        crate::pg(store).messages_table()
    )))
    .fetch_one(crate::pg(store).pool())
    .await
    .expect("middle seq");
    for (name, filter) in filters(store).await {
        for after in [None, Some(middle)] {
            check(
                store,
                &format!("{label}: {name}, after {after:?}"),
                &filter,
                after,
            )
            .await;
        }
    }
}

#[tokio::test]
async fn every_listing_filter_reads_an_index_a_page_at_a_time() {
    let schema = SchemaGuard::new();
    let store = open(schema.config()).await;
    fill(&store).await;
    check_all(&store, "before ANALYZE").await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "VACUUM ANALYZE {}",
        crate::pg(&store).messages_table()
    )))
    .execute(crate::pg(&store).pool())
    .await
    .expect("analyze");
    check_all(&store, "after ANALYZE").await;

    // What the plans promise, the pages keep: the one "needle" among the dead letters is
    // found, and a page of the lane holds the lane's own rows in order.
    let needle = MessageFilter::lane("l", "sink")
        .with_status(OutboxStatus::DeadLetter)
        .with_error_containing("needle");
    let (mut found, mut after, mut calls) = (Vec::new(), None, 0);
    loop {
        let page = store
            .list(
                &needle,
                PageRequest {
                    after,
                    limit: LIMIT,
                },
            )
            .await
            .expect("list");
        calls += 1;
        found.extend(page.messages.iter().map(|m| m.last_error.clone()));
        match page.next_cursor {
            Some(cursor) => after = Some(cursor),
            None => break,
        }
    }
    assert_eq!(found, [Some("needle".to_owned())], "after {calls} calls");
    let page = store
        .list(
            &MessageFilter::lane("l", "sink"),
            PageRequest {
                after: None,
                limit: LIMIT,
            },
        )
        .await
        .expect("list");
    assert_eq!(page.messages.len(), LIMIT);
    assert!(page.messages.iter().all(|m| m.lane == "l"));
    assert!(page.messages.windows(2).all(|w| w[0].seq < w[1].seq));
    schema.drop().await;
}
