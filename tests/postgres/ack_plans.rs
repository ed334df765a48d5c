//! The ack's plan at 100,000 rows: each acked row is found by its primary key, never by a
//! scan of the table, whether the ack marks the row delivered or deletes it (a lane that
//! keeps no history, `keep_delivered = false`). Pinned with `EXPLAIN (ANALYZE, FORMAT
//! JSON)` before and after ANALYZE, and with 1,000 keys, as `plans.rs` pins the claim.

use std::time::Duration;

use outbox_relay::message::ClaimRef;
use outbox_relay::store::postgres::Explained;
use outbox_relay::store::{AckMode, ClaimOutcome, ClaimRequest};
use outbox_relay::Outbox;
use serde_json::Value;

use crate::plans::{fill, Keys};
use crate::{open, SchemaGuard};

const ROWS: i64 = 100_000;
/// The claims one ack carries, as a busy lane at concurrency 64 acks them.
const ACKS: usize = 64;

/// Every node of the plan that reads a table or an index: (node type, relation or index,
/// rows it read over all its loops).
fn reads(node: &Value, out: &mut Vec<(String, String, f64)>) {
    let kind = node.get("Node Type").and_then(Value::as_str).unwrap_or("");
    let relation = node
        .get("Index Name")
        .or_else(|| node.get("Relation Name"))
        .and_then(Value::as_str);
    if let (Some(relation), true) = (relation, kind.ends_with("Scan")) {
        let num = |k: &str| node.get(k).and_then(Value::as_f64).unwrap_or(0.0);
        let read = (num("Actual Rows") + num("Rows Removed by Filter")) * num("Actual Loops");
        out.push((kind.to_owned(), relation.to_owned(), read));
    }
    for child in ["Plan", "Plans"] {
        match node.get(child) {
            Some(Value::Array(items)) => items.iter().for_each(|n| reads(n, out)),
            Some(n @ Value::Object(_)) => reads(n, out),
            _ => {}
        }
    }
}

/// Asserts that the messages table is read only through its primary key, one probe per
/// acked claim, and that the ack applied to every claim. Prints the plan on failure.
fn check(what: &str, store: &Outbox, plan: &Value, acks: usize) {
    let table = crate::pg(store).messages_table();
    let table = table.rsplit('.').next().unwrap_or(table).trim_matches('"');
    let root = &plan[0];
    let pretty = serde_json::to_string_pretty(root).unwrap_or_default();
    let mut nodes = Vec::new();
    reads(&root["Plan"], &mut nodes);
    let on_table: Vec<_> = nodes
        .iter()
        .filter(|(_, relation, _)| relation.starts_with(table))
        .collect();
    assert!(
        !on_table.is_empty(),
        "{what}: no read of {table} found\n{pretty}"
    );
    for (kind, relation, read) in on_table {
        assert!(
            kind == "Index Scan" && relation.ends_with("_pkey"),
            "{what}: {kind} on {relation}, where each acked row must be found by its primary \
             key\n{pretty}"
        );
        assert!(
            *read <= acks as f64,
            "{what}: {relation} read {read} rows for {acks} acks\n{pretty}"
        );
    }
    let applied = root["Plan"]["Actual Rows"].as_f64().unwrap_or(-1.0);
    assert_eq!(
        applied, acks as f64,
        "{what}: the ack applied to {applied} of {acks} claims\n{pretty}"
    );
}

async fn pin(store: &Outbox, label: &str, claims: &[ClaimRef]) {
    for delete in [true, false] {
        let plan = crate::pg(store)
            .explain(&Explained::Ack {
                claims: claims.to_vec(),
                delete,
            })
            .await
            .expect("explain the ack");
        let what = format!(
            "{label}: ack, {}",
            if delete { "deleting" } else { "keeping" }
        );
        check(&what, store, &plan, claims.len());
    }
}

async fn guard(keys: Keys) {
    let schema = SchemaGuard::new();
    let store = open(schema.config()).await;
    fill(&store, ROWS, keys).await;
    let request = ClaimRequest::new("l", "sink", ACKS, Duration::from_secs(60), "guard");
    let claimed = store.claim(&request).await.expect("claim");
    let claims: Vec<ClaimRef> = claimed
        .messages
        .iter()
        .map(|m| m.claim().expect("claimed"))
        .collect();
    assert_eq!(claims.len(), ACKS, "{keys:?}: a full claim to ack");
    pin(&store, &format!("{keys:?}, before ANALYZE"), &claims).await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "VACUUM ANALYZE {}",
        crate::pg(&store).messages_table()
    )))
    .execute(crate::pg(&store).pool())
    .await
    .expect("analyze");
    pin(&store, &format!("{keys:?}"), &claims).await;
    // The explained acks were rolled back: the claims are still held, and acked for real
    // they apply (the plan's statement is the store's).
    let deleted = store
        .ack_with(&claims, AckMode::Delete)
        .await
        .expect("ack deleting");
    assert!(
        deleted.iter().all(|o| *o == ClaimOutcome::Applied),
        "{keys:?}: {deleted:?}"
    );
    schema.drop().await;
}

#[tokio::test]
async fn the_ack_finds_its_rows_by_primary_key_without_keys() {
    guard(Keys::None).await;
}

#[tokio::test]
async fn the_ack_finds_its_rows_by_primary_key_with_a_thousand_keys() {
    guard(Keys::Thousand).await;
}
