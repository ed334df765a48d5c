//! Guards on the cost of a listing whose filter scans (an enqueue time range or an error
//! text) at 100 000 rows: the statement reads at most the listing's budget of rows
//! ([`LIST_SCAN_PAGES`] pages' worth) from the messages table, never a full scan of it,
//! checked with `ANALYZE FORMAT=JSON` (the rows really read) from the first page and from a
//! cursor in the middle; and paging with a rare match finds it and ends.
//!
//! The rows: 90 % in lane `l` (the one listed), 10 % in lane `other` interleaved with them;
//! of lane `l`, the newest 1 % pending, one in 1,000 dead-lettered ("timeout", one of them
//! "needle"), the rest delivered; 1,000 ordering keys.

use std::time::{Duration, SystemTime};

use outbox_relay::store::mysql::{Explain, MysqlConfig, MysqlOutboxStore};
use outbox_relay::store::{MessageFilter, PageRequest, LIST_SCAN_PAGES};
use outbox_relay::{Outbox, OutboxStatus};
use serde_json::Value;

use crate::support::{open, Server, TestDatabase};

const ROWS: i64 = 100_000;
const LIMIT: usize = 100;
/// The first row's `created_at` (Unix ms); row `i` is enqueued `i` ms after it.
const BASE_MILLIS: i64 = 1_700_000_000_000;
/// Rows of lane `other` stepped over, and a few rows of lookahead.
const SLACK: u64 = 2;

/// Writes the rows in one `INSERT ... SELECT` over a cross join of digits (portable to
/// MySQL 8, which has no sequence tables).
async fn fill(store: &MysqlOutboxStore) {
    let t = store.messages_table();
    let digits = "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 \
                  UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 \
                  UNION ALL SELECT 8 UNION ALL SELECT 9)";
    let sql = format!(
        "INSERT INTO {t} (outbox_id, lane, target, payload, headers, ordering_key, status, \
             attempt_count, max_attempts, available_at, last_error, created_at, updated_at, \
             delivered_at) \
         SELECT UNHEX(REPLACE(UUID(), '-', '')), IF(i % 10 = 0, 'other', 'l'), 'sink', \
             CONCAT('{{\"i\":', i, '}}'), '{{}}', CONCAT('k', i % 1000), st, 1, 5, \
             {BASE_MILLIS} + i, \
             IF(st = 'dead_letter', IF(i = 50001, 'needle', 'timeout'), NULL), \
             {BASE_MILLIS} + i, {BASE_MILLIS} + i, IF(st = 'delivered', {BASE_MILLIS} + i, NULL) \
         FROM (SELECT i, CASE WHEN i > {ROWS} * 99 / 100 THEN 'pending' \
                   WHEN i % 1000 = 1 THEN 'dead_letter' ELSE 'delivered' END AS st \
               FROM (SELECT 1 + a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d AS i \
                     FROM {digits} a, {digits} b, {digits} c, {digits} e, {digits} f) n) r"
    );
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .execute(store.pool())
        .await
        .expect("fill");
    sqlx::query(sqlx::AssertSqlSafe(format!("ANALYZE TABLE {t}")))
        .execute(store.pool())
        .await
        .expect("analyze");
}

/// Every table of the plan that reads the messages table: `(access_type, rows read)`.
fn reads(plan: &Value, table: &str, out: &mut Vec<(String, u64)>) {
    match plan {
        Value::Object(map) => {
            let name = map.get("table_name").and_then(Value::as_str);
            // MySQL's second format says `index` for any index access and names which
            // in `index_access_type` (`index_range_scan`, `index_lookup`, `index_scan`).
            let access = map
                .get("index_access_type")
                .or_else(|| map.get("access_type"))
                .and_then(Value::as_str);
            if let (Some(name), Some(access)) = (name, access) {
                if name == table || name == "m" {
                    let number = |keys: [&str; 2]| {
                        keys.iter()
                            .find_map(|k| map.get(*k).and_then(Value::as_f64))
                    };
                    let loops = number(["r_loops", "actual_loops"]).unwrap_or(1.0);
                    let rows = number(["r_rows", "actual_rows"])
                        .or_else(|| map.get("rows").and_then(Value::as_f64))
                        .unwrap_or(0.0);
                    out.push((access.to_owned(), (rows * loops).ceil() as u64));
                }
            }
            for value in map.values() {
                reads(value, table, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| reads(v, table, out)),
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scanning_listing_reads_at_most_its_budget_at_100k() {
    a_scanning_listing_reads_at_most_its_budget_at_100k_on(Server::Main).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scanning_listing_reads_at_most_its_budget_at_100k_on_oracle_mysql() {
    a_scanning_listing_reads_at_most_its_budget_at_100k_on(Server::OracleMysql).await;
}

async fn a_scanning_listing_reads_at_most_its_budget_at_100k_on(server: Server) {
    let db = TestDatabase::create_on(server).await;
    let mysql = open(&db, MysqlConfig::default()).await;
    fill(&mysql).await;
    let table = mysql.messages_table().trim_matches('`').to_owned();
    let at = |ms: i64| SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap());
    let lane = || MessageFilter::lane("l", "sink");
    let filters = [
        ("error text", lane().with_error_containing("needle")),
        (
            "dead letters by error text",
            lane()
                .with_status(OutboxStatus::DeadLetter)
                .with_error_containing("timeout"),
        ),
        (
            "time range",
            lane().enqueued_between(
                Some(at(BASE_MILLIS + 60_000)),
                Some(at(BASE_MILLIS + 60_500)),
            ),
        ),
        (
            "every lane, error text",
            MessageFilter::all().with_error_containing("needle"),
        ),
    ];
    let budget = ((LIMIT + 1) * LIST_SCAN_PAGES) as u64;
    for (what, filter) in &filters {
        for after in [None, Some(ROWS / 2)] {
            let page = PageRequest {
                after,
                limit: LIMIT,
            };
            let plan = mysql
                .explain_list(filter, page, Explain::Analyze)
                .await
                .unwrap();
            let shown = serde_json::to_string_pretty(&plan.plan).unwrap_or_default();
            let mut found = Vec::new();
            reads(&plan.plan, &table, &mut found);
            assert!(!found.is_empty(), "{what}: no read of the table:\n{shown}");
            for (access, rows) in &found {
                assert!(
                    !matches!(access.as_str(), "ALL" | "index" | "index_scan" | "table"),
                    "{what} after {after:?}: a full scan ({access}) of the table:\n{}\n{shown}",
                    plan.sql
                );
                assert!(
                    *rows <= budget * SLACK,
                    "{what} after {after:?}: reads {rows} rows of {ROWS} (budget {budget}):\n{}\n{shown}",
                    plan.sql
                );
            }
        }
    }

    // Paging with the rare match: short pages with a cursor until it is found, then the end.
    let store = Outbox::new(mysql);
    let filter = lane().with_error_containing("needle");
    let (mut found, mut calls, mut after) = (Vec::new(), 0, None);
    loop {
        calls += 1;
        let page = store
            .list(
                &filter,
                PageRequest {
                    after,
                    limit: LIMIT,
                },
            )
            .await
            .unwrap();
        assert!(page.messages.len() <= LIMIT);
        found.extend(page.messages.iter().map(|m| m.last_error.clone()));
        match page.next_cursor {
            Some(cursor) => after = Some(cursor),
            None => break,
        }
        assert!(calls < 200, "the listing does not end");
    }
    assert_eq!(found, vec![Some("needle".to_owned())]);
    assert!(
        calls > 1,
        "one call read the whole lane: {calls} call(s) for {ROWS} rows"
    );
    db.drop_now().await;
}
