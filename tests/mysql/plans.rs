//! The claim's plans at a backlog of 100 000 messages with one hot key, on both dialects
//! (MariaDB's and MySQL's plans are read by `ClaimPlan::reads`): every statement a claim
//! and `next_due` run reads an index by range or key (no full table or index scan), with no
//! filesort, and estimates far fewer rows than the lane holds. The claim then really runs
//! and returns one head per key.

use std::time::Duration;

use outbox_relay::store::mysql::{Access, ClaimPlan, Explain, MysqlConfig};
use outbox_relay::store::{ClaimRequest, OrderingPolicy};
use outbox_relay::{Outbox, OutboxMessageDraft};
use serde_json::json;

use crate::support::{open, Server, TestDatabase};

const BACKLOG: usize = 100_000;
const COLD_KEYS: usize = 1_000;

/// `max_rows`: the most rows one table of the statement may read.
fn check(plan: &ClaimPlan, max_rows: u64) {
    let reads = plan.reads();
    let shown = serde_json::to_string_pretty(&plan.plan).unwrap_or_default();
    assert!(
        !reads.is_empty(),
        "{}: no table in the plan:\n{shown}",
        plan.statement
    );
    for read in &reads {
        assert!(
            !matches!(read.access, Access::FullTableScan | Access::FullIndexScan),
            "{}: a full scan ({:?}) over the lane:\n{}\n{shown}",
            plan.statement,
            read.access,
            plan.sql
        );
        assert!(
            read.index.is_some() || read.access == Access::OneIndexDive,
            "{}: no index used:\n{shown}",
            plan.statement
        );
        assert!(
            read.rows <= max_rows,
            "{}: reads {} rows of {BACKLOG} (at most {max_rows} expected):\n{shown}",
            plan.statement,
            read.rows
        );
    }
    assert!(
        !plan.sorts(),
        "{}: sorts instead of reading in index order:\n{}\n{shown}",
        plan.statement,
        plan.sql
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_reads_indexes_in_order_at_100k_with_a_hot_key() {
    claim_reads_indexes_in_order_at_100k_with_a_hot_key_on(Server::Main).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_reads_indexes_in_order_at_100k_with_a_hot_key_on_oracle_mysql() {
    claim_reads_indexes_in_order_at_100k_with_a_hot_key_on(Server::OracleMysql).await;
}

async fn claim_reads_indexes_in_order_at_100k_with_a_hot_key_on(server: Server) {
    let db = TestDatabase::create_on(server).await;
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
        let analyzed = mysql
            .explain_claim(&request, Explain::Analyze)
            .await
            .unwrap();
        for plan in &analyzed {
            check(plan, 64);
        }
        // The due heads are a range of `ready`, read a page's worth: the plan is read, on
        // either server's JSON, not passed for want of the keys it looks for.
        let ready = analyzed.iter().find(|p| p.statement == "ready").unwrap();
        assert!(
            ready
                .reads()
                .iter()
                .any(|read| read.access == Access::IndexRange
                    && read.index.as_deref() == Some("ready")
                    && read.rows == 64),
            "ready: {:?}\n{}",
            ready.reads(),
            serde_json::to_string_pretty(&ready.plan).unwrap_or_default()
        );
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
