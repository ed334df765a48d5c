//! The claim's plans at a backlog of 100 000 messages with one hot key: every statement a
//! claim and `next_due` run reads an index by range or key (no full table or index scan),
//! with no filesort, and estimates far fewer rows than the lane holds. The claim then
//! really runs and returns one head per key.

use std::time::Duration;

use outbox_relay::store::mysql::{ClaimPlan, Explain, MysqlConfig};
use outbox_relay::store::{ClaimRequest, OrderingPolicy};
use outbox_relay::{Outbox, OutboxMessageDraft};
use serde_json::{json, Value};

use crate::support::{open, TestDatabase};

const BACKLOG: usize = 100_000;
const COLD_KEYS: usize = 1_000;

/// A table the optimizer answered from the index alone, with one dive while planning
/// (`MIN(seq)` over a key's index range).
const ANSWERED_BY_ONE_INDEX_DIVE: [&str; 2] =
    ["No matching min/max row", "Select tables optimized away"];

/// Every `(access_type, key, rows)` of the plan's tables, and whether it sorts. A table
/// answered while planning counts as one row read by index.
fn tables(plan: &Value, out: &mut Vec<(String, String, u64)>, sorts: &mut Vec<String>) {
    match plan {
        Value::Object(map) => {
            if map.contains_key("filesort") {
                sorts.push(plan.to_string());
            }
            if let Some(message) = map.get("message").and_then(Value::as_str) {
                if ANSWERED_BY_ONE_INDEX_DIVE.contains(&message) {
                    out.push(("min_max".into(), "by_key".into(), 1));
                }
            }
            if let Some(access) = map.get("access_type").and_then(Value::as_str) {
                out.push((
                    access.to_owned(),
                    map.get("key")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned(),
                    // Rows really read (ANALYZE), else the estimate.
                    map.get("r_rows")
                        .and_then(Value::as_f64)
                        .map(|r| r.ceil() as u64)
                        .or_else(|| map.get("rows").and_then(Value::as_u64))
                        .unwrap_or(0),
                ));
            }
            for value in map.values() {
                tables(value, out, sorts);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| tables(v, out, sorts)),
        _ => {}
    }
}

/// `max_rows`: the most rows one table of the statement may read.
fn check(plan: &ClaimPlan, max_rows: u64) {
    let mut found = Vec::new();
    let mut sorts = Vec::new();
    tables(&plan.plan, &mut found, &mut sorts);
    let shown = serde_json::to_string_pretty(&plan.plan).unwrap_or_default();
    assert!(
        !found.is_empty(),
        "{}: no table in the plan:\n{shown}",
        plan.statement
    );
    for (access, key, rows) in &found {
        assert!(
            !matches!(access.as_str(), "ALL" | "index"),
            "{}: a full scan ({access}) over the lane:\n{}\n{shown}",
            plan.statement,
            plan.sql
        );
        assert!(
            !key.is_empty(),
            "{}: no index used:\n{shown}",
            plan.statement
        );
        assert!(
            *rows <= max_rows,
            "{}: reads {rows} rows of {BACKLOG} (at most {max_rows} expected):\n{shown}",
            plan.statement
        );
    }
    assert!(
        sorts.is_empty(),
        "{}: sorts instead of reading in index order:\n{}\n{shown}",
        plan.statement,
        plan.sql
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_reads_indexes_in_order_at_100k_with_a_hot_key() {
    let db = TestDatabase::create().await;
    let store = Outbox::new(open(&db, MysqlConfig::default()).await);
    // 99 000 messages of one hot key, interleaved with one message of each of 1 000 cold keys.
    let hot = BACKLOG - COLD_KEYS;
    let per_cold = hot / COLD_KEYS;
    let mut drafts = Vec::with_capacity(5_000);
    let mut written = 0;
    for i in 0..hot {
        drafts.push(
            OutboxMessageDraft::new("orders", "sink", json!({ "i": i }))
                .unwrap()
                .with_ordering_key("hot"),
        );
        if i % per_cold == 0 && i / per_cold < COLD_KEYS {
            drafts.push(
                OutboxMessageDraft::new("orders", "sink", json!({ "cold": i }))
                    .unwrap()
                    .with_ordering_key(format!("cold-{}", i / per_cold)),
            );
        }
        if drafts.len() >= 5_000 {
            written += drafts.len();
            store
                .enqueue_many(std::mem::take(&mut drafts))
                .await
                .unwrap();
        }
    }
    written += drafts.len();
    store.enqueue_many(drafts).await.unwrap();
    assert_eq!(written, BACKLOG);
    let mysql: &outbox_relay::MysqlOutboxStore = store.backend().unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "ANALYZE TABLE {}",
        mysql.messages_table()
    )))
    .execute(mysql.pool())
    .await
    .unwrap();

    for ordering in [OrderingPolicy::Skip, OrderingPolicy::Block] {
        let request = ClaimRequest::new("orders", "sink", 64, Duration::from_secs(30), "relay")
            .with_ordering(ordering)
            .with_key_run(16);
        // The plan: index ranges in order, nothing sorted.
        let plans = mysql.explain_claim(&request, Explain::Plan).await.unwrap();
        assert_eq!(plans.len(), 8);
        for plan in &plans {
            check(plan, BACKLOG as u64);
        }
        // What it really reads: a page (64 rows), a run (15 rows) per key, one index dive
        // per key for the gates, never the hot key's 99 000 rows.
        for plan in mysql
            .explain_claim(&request, Explain::Analyze)
            .await
            .unwrap()
        {
            check(&plan, 64);
        }
    }

    // The claim itself: the hot key's head comes with its run, each cold key once.
    let request = ClaimRequest::new("orders", "sink", 64, Duration::from_secs(30), "relay");
    let batch = store.claim(&request).await.unwrap();
    assert_eq!(batch.messages.len(), 64);
    let keys: std::collections::HashSet<_> = batch
        .messages
        .iter()
        .map(|m| m.ordering_key.clone())
        .collect();
    assert_eq!(keys.len(), 64, "one head per key");
    db.drop_now().await;
}
