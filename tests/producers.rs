//! The producer contract from another language: a Python service (psycopg) enqueues
//! through `"{schema}"."{prefix}_enqueue"(…)` in its own transactions, commits and rolls
//! back; the relay delivers what committed, in order per key, and nothing else; invalid
//! input gets the error the Rust API gives for the same draft.
//!
//! Needs PostgreSQL at `OUTBOX_TEST_DATABASE_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`) and `python3` with `psycopg` (`.ci/run`
//! installs it); the test panics otherwise.
#![cfg(feature = "postgres")]

use std::collections::HashMap;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use outbox_relay::message::DraftLimits;
use outbox_relay::store::postgres::{PostgresConfig, PostgresOutboxStore};
use outbox_relay::store::StoreError;
use outbox_relay::{
    handler_fn, DeliveryError, LaneConfig, OutboxMessage, OutboxMessageDraft, OutboxRelay,
    OutboxStore,
};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use uuid::Uuid;

fn database_url() -> String {
    std::env::var("OUTBOX_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// Runs the Python service; its JSON report.
fn run_python_service(schema: &str, prefix: &str) -> Value {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/producers/postgres_service.py"
    );
    let output = Command::new("python3")
        .args([script, &database_url(), schema, prefix])
        .output()
        .expect("python3 runs");
    assert!(
        output.status.success(),
        "the Python service failed (is psycopg installed? .ci/run installs it):\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("the service prints JSON")
}

/// The error the Rust API gives for the draft `case` describes.
fn rust_error(case: &str, existing: Uuid) -> String {
    let draft = OutboxMessageDraft::new("orders", "billing", json!({"n": 1})).unwrap();
    let invalid = |mut draft: OutboxMessageDraft, change: &dyn Fn(&mut OutboxMessageDraft)| {
        change(&mut draft);
        draft
            .validate(&DraftLimits::default())
            .expect_err("the Rust API refuses it too")
            .to_string()
    };
    match case {
        "lane_empty" => invalid(draft, &|d| d.lane = String::new()),
        "lane_slash" => invalid(draft, &|d| d.lane = "or/ders".into()),
        "target_long" => invalid(draft, &|d| d.target = "t".repeat(65)),
        "ordering_key_blank" => invalid(draft, &|d| d.ordering_key = Some("   ".into())),
        "dedupe_key_long" => invalid(draft, &|d| d.dedupe_key = Some("d".repeat(257))),
        "max_attempts_zero" => invalid(draft, &|d| d.max_attempts = 0),
        "header_name" => invalid(draft.with_header("bad name", "v"), &|_| {}),
        "header_value" => invalid(draft.with_header("x-a", "a\nb"), &|_| {}),
        "payload_size" => invalid(
            OutboxMessageDraft::new("orders", "billing", json!("x".repeat(1024 * 1024))).unwrap(),
            &|_| {},
        ),
        "dedupe_conflict" => StoreError::Conflict {
            lane: "orders".into(),
            target: "billing".into(),
            dedupe_key: "order-20".into(),
            existing,
        }
        .to_string(),
        other => panic!("no Rust counterpart for {other}"),
    }
}

#[tokio::test]
async fn a_python_service_enqueues_in_its_own_transactions_and_only_commits_are_delivered() {
    let schema = format!("t_{}", Uuid::new_v4().simple());
    let config = PostgresConfig::default().with_schema(schema.clone());
    let store = Arc::new(
        PostgresOutboxStore::connect_with(&database_url(), config)
            .await
            .expect("PostgreSQL at OUTBOX_TEST_DATABASE_URL"),
    );
    let report = run_python_service(&schema, "outbox");

    let committed: Vec<Uuid> = report["committed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap().parse().unwrap())
        .collect();
    let rolled_back: Uuid = report["rolled_back"][0].as_str().unwrap().parse().unwrap();
    assert_eq!(store.get(rolled_back).await.unwrap(), None, "rolled back");
    let dedupe = &report["dedupe"];
    assert_eq!(
        dedupe[0][0], dedupe[1][0],
        "the same message answers: {dedupe}"
    );
    assert_eq!(
        (dedupe[0][1].as_bool(), dedupe[1][1].as_bool()),
        (Some(false), Some(true))
    );

    // What the function wrote is what the Rust API writes.
    let headed: OutboxMessage = store.get(committed[3]).await.unwrap().unwrap();
    assert_eq!(headed.payload.as_str(), r#"{"n": 10}"#, "the bytes as sent");
    assert_eq!(headed.max_attempts, 3);
    assert_eq!(
        headed.headers.get("content-type").map(String::as_str),
        Some("application/json")
    );
    let delayed: Uuid = report["delayed"].as_str().unwrap().parse().unwrap();
    let delayed = store.get(delayed).await.unwrap().unwrap();
    let due_in = delayed.available_at.as_millis() - delayed.created_at.as_millis();
    assert!(
        (3_599_000..=3_601_000).contains(&due_in),
        "due in {due_in} ms"
    );

    // Every invalid call failed as the Rust API would: same words, nothing written.
    let errors: HashMap<String, Value> = serde_json::from_value(report["errors"].clone()).unwrap();
    assert_eq!(errors.len(), 10, "{errors:?}");
    for (case, error) in &errors {
        let [sqlstate, message] = [&error[0], &error[1]];
        let expected = rust_error(case, committed[6]);
        assert_eq!(message.as_str(), Some(expected.as_str()), "{case}");
        let code = if case == "dedupe_conflict" {
            "23505"
        } else {
            "22023"
        };
        assert_eq!(sqlstate.as_str(), Some(code), "{case}");
    }

    // The relay delivers the committed messages, the keyed ones in enqueue order.
    let (tx, mut rx) = mpsc::unbounded_channel();
    let relay = OutboxRelay::builder(store.clone())
        .lane(
            LaneConfig::new("orders", "billing").concurrency(4),
            handler_fn(move |message: OutboxMessage| {
                let tx = tx.clone();
                async move {
                    let _ = tx.send(message);
                    Ok::<(), DeliveryError>(())
                }
            }),
        )
        .start()
        .await
        .expect("relay");
    let mut delivered = Vec::new();
    while delivered.len() < committed.len() {
        let message = tokio::time::timeout(Duration::from_secs(60), rx.recv())
            .await
            .unwrap_or_else(|_| panic!("only {} of {} delivered", delivered.len(), committed.len()))
            .unwrap();
        delivered.push(message);
    }
    let report_shutdown = relay.shutdown(Duration::from_secs(10)).await.unwrap();
    assert!(report_shutdown.is_clean());
    let mut ids: Vec<Uuid> = delivered.iter().map(|m| m.outbox_id).collect();
    ids.sort();
    let mut expected = committed.clone();
    expected.sort();
    assert_eq!(
        ids, expected,
        "the committed messages, each once, nothing else"
    );
    let keyed: Vec<i64> = delivered
        .iter()
        .filter(|m| m.ordering_key.as_deref() == Some("c-7"))
        .map(|m| {
            m.payload.deserialize::<Value>().unwrap()["n"]
                .as_i64()
                .unwrap()
        })
        .collect();
    assert_eq!(keyed, [1, 2, 3, 4, 5], "per-key order");
    assert!(
        rx.try_recv().is_err(),
        "nothing more: not the rolled back nor the delayed"
    );

    drop(store);
    let pool = sqlx::PgPool::connect(&database_url()).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA \"{schema}\" CASCADE"
    )))
    .execute(&pool)
    .await
    .unwrap();
}
