//! The producer contract from another language: a Python service (psycopg) enqueues
//! through `"{schema}"."{prefix}_enqueue"(…)` in its own transactions, commits and rolls
//! back; the relay delivers what committed, in order per key, and nothing else; invalid
//! input gets the error the Rust API gives for the same draft.
//!
//! The same for SQLite: a plain INSERT into the view `{prefix}outbox_enqueue` from
//! Python's `sqlite3` module, whose trigger validates, deduplicates and writes the row.
//!
//! And the guide's Go snippet (`docs/src/producers.md`), compiled and run against PostgreSQL.
//!
//! Needs PostgreSQL at `OUTBOX_TEST_DATABASE_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`), `python3` with `psycopg`, and Go with pgx
//! (`.ci/run` installs them); the tests panic otherwise.
#![cfg(all(feature = "postgres", feature = "sqlite"))]

use std::collections::HashMap;
use std::process::Command;
use std::time::Duration;

use outbox_relay::message::DraftLimits;
use outbox_relay::store::postgres::{PostgresConfig, PostgresOutboxStore};
use outbox_relay::store::StoreError;
use outbox_relay::{
    handler_fn, DeliveryError, LaneConfig, Outbox, OutboxMessage, OutboxMessageDraft, OutboxRelay,
};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use uuid::Uuid;

fn database_url() -> String {
    std::env::var("OUTBOX_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// Runs the Python service `script` (under tests/producers/) with `args`; its JSON report.
fn run_python_service(script: &str, args: &[&str]) -> Value {
    let script = format!("{}/tests/producers/{script}", env!("CARGO_MANIFEST_DIR"));
    let output = Command::new("python3")
        .arg(script)
        .args(args)
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
    let config = PostgresConfig::default().schema(schema.clone());
    let store = Outbox::new(
        PostgresOutboxStore::connect_with(&database_url(), config)
            .await
            .expect("PostgreSQL at OUTBOX_TEST_DATABASE_URL"),
    );
    let report = run_python_service("postgres_service.py", &[&database_url(), &schema, "outbox"]);

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
    let delivered = deliver(store.clone(), committed.len()).await;
    let mut ids: Vec<Uuid> = delivered.iter().map(|m| m.outbox_id).collect();
    ids.sort();
    let mut expected = committed.clone();
    expected.sort();
    assert_eq!(
        ids, expected,
        "the committed messages, each once, nothing else"
    );
    assert_eq!(keyed_values(&delivered), [1, 2, 3, 4, 5], "per-key order");

    drop(store);
    let pool = sqlx::PgPool::connect(&database_url()).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA \"{schema}\" CASCADE"
    )))
    .execute(&pool)
    .await
    .unwrap();
}

/// The Go program around the guide's PostgreSQL Go snippet: the snippet, verbatim, is the
/// body of `enqueue`, which `main` calls on a pool for the URL in its first argument.
const GO_PROGRAM: &str = r#"package main

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v4/pgxpool"
)

func enqueue(ctx context.Context, pool *pgxpool.Pool) error {
SNIPPET
}

func main() {
	ctx := context.Background()
	pool, err := pgxpool.Connect(ctx, os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "connect:", err)
		os.Exit(1)
	}
	defer pool.Close()
	if err := enqueue(ctx, pool); err != nil {
		fmt.Fprintln(os.Stderr, "enqueue:", err)
		os.Exit(1)
	}
}
"#;

/// The first Go block of the guide's page "Producers in other languages" (PostgreSQL's).
fn go_snippet() -> String {
    let path = format!("{}/docs/src/producers.md", env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(&path).expect("docs/src/producers.md");
    let section = page
        .split("\n## PostgreSQL\n")
        .nth(1)
        .expect("docs/src/producers.md has a \"PostgreSQL\" section");
    let block = section
        .split("```go\n")
        .nth(1)
        .expect("the section has a Go snippet");
    block
        .split("```")
        .next()
        .expect("the Go snippet ends")
        .to_owned()
}

/// The guide's Go snippet, compiled and run by Debian's Go against pgx (`.ci/run` installs
/// `golang-go` and `golang-github-jackc-pgx-v4-dev`; the snippet's calls are the same in pgx
/// v4 and v5), in a database of its own whose `public` schema holds the default outbox and
/// an `orders` table: it writes its business row and its message in one transaction, and
/// the relay delivers the message.
#[tokio::test]
async fn the_guides_go_snippet_enqueues_in_its_own_transaction() {
    use sqlx::{Connection, Executor};
    let database = format!("t_{}", Uuid::new_v4().simple());
    let mut admin = sqlx::PgConnection::connect(&database_url()).await.unwrap();
    admin
        .execute(sqlx::AssertSqlSafe(format!(
            "CREATE DATABASE \"{database}\""
        )))
        .await
        .unwrap();
    let (base, _) = database_url()
        .rsplit_once('/')
        .map(|(base, db)| (base.to_owned(), db.to_owned()))
        .unwrap();
    let url = format!("{base}/{database}");
    let store = Outbox::new(
        PostgresOutboxStore::connect_with(&url, PostgresConfig::default())
            .await
            .expect("the default outbox in the database of its own"),
    );
    let pg: &PostgresOutboxStore = store.backend().unwrap();
    sqlx::raw_sql("CREATE TABLE orders (id int8 PRIMARY KEY)")
        .execute(pg.pool())
        .await
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let program = dir.path().join("main.go");
    std::fs::write(&program, GO_PROGRAM.replace("SNIPPET", &go_snippet())).unwrap();
    let cache = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("go-build-cache");
    let output = Command::new("go")
        .arg("run")
        .arg(&program)
        .arg(&url)
        // Debian's Go libraries live in a GOPATH, not in a module cache.
        .env("GO111MODULE", "off")
        .env("GOPATH", "/usr/share/gocode")
        .env("GOCACHE", &cache)
        .env("GOFLAGS", "")
        .output()
        .expect("go runs (.ci/run installs golang-go)");
    assert!(
        output.status.success(),
        "the guide's Go snippet failed (are golang-go and golang-github-jackc-pgx-v4-dev \
         installed? .ci/run installs them):\n{}",
        String::from_utf8_lossy(&output.stderr)
    );

    let order: i64 = sqlx::query_scalar("SELECT id FROM orders")
        .fetch_one(pg.pool())
        .await
        .unwrap();
    assert_eq!(order, 42, "the business row committed with the message");
    let delivered = deliver(store.clone(), 1).await;
    assert_eq!(delivered[0].payload.as_str(), r#"{"order":42}"#);
    assert_eq!(delivered[0].ordering_key.as_deref(), Some("customer-7"));
    drop(store);
    admin
        .execute(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE \"{database}\" WITH (FORCE)"
        )))
        .await
        .unwrap();
}

/// The values `n` of the delivered messages of key `c-7`, in delivery order.
fn keyed_values(delivered: &[OutboxMessage]) -> Vec<i64> {
    delivered
        .iter()
        .filter(|m| m.ordering_key.as_deref() == Some("c-7"))
        .map(|m| {
            m.payload.deserialize::<Value>().unwrap()["n"]
                .as_i64()
                .unwrap()
        })
        .collect()
}

/// Runs a relay on lane orders/billing until it delivered `count` messages; what it
/// delivered, in delivery order. Fails when it delivers more (the rolled back, the delayed)
/// before it shuts down.
async fn deliver(store: Outbox, count: usize) -> Vec<OutboxMessage> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let relay = OutboxRelay::builder(store)
        .lane(
            LaneConfig::new("orders", "billing")
                .concurrency(4)
                .max_poll_interval(Duration::from_millis(100)),
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
    while delivered.len() < count {
        let message = tokio::time::timeout(Duration::from_secs(60), rx.recv())
            .await
            .unwrap_or_else(|_| panic!("only {} of {count} delivered", delivered.len()))
            .unwrap();
        delivered.push(message);
    }
    let report = relay.shutdown(Duration::from_secs(10)).await.unwrap();
    assert!(report.is_clean());
    assert!(
        rx.try_recv().is_err(),
        "nothing more: not the rolled back nor the delayed"
    );
    delivered
}

/// The SQLite contract: Python's `sqlite3` module inserts into the view in its own
/// transactions; only what committed is delivered, in order per key, a duplicate of a
/// dedupe key is one row, and invalid input is refused naming the field the Rust API names
/// (word for word where the message holds no value).
#[tokio::test]
async fn a_python_service_inserts_into_the_sqlite_view_and_only_commits_are_delivered() {
    use outbox_relay::store::sqlite::SqliteOutboxStore;
    use outbox_relay::store::MessageFilter;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox.db");
    let store = Outbox::new(SqliteOutboxStore::open(&path).await.unwrap());
    let report = run_python_service("sqlite_service.py", &[path.to_str().unwrap(), ""]);

    let errors: HashMap<String, Value> = serde_json::from_value(report["errors"].clone()).unwrap();
    assert_eq!(errors.len(), 10, "{errors:?}");
    for (case, error) in &errors {
        let message = error
            .as_str()
            .unwrap_or_else(|| panic!("{case} was accepted"));
        let rust = rust_error(case, Uuid::nil());
        if case == "dedupe_conflict" {
            assert!(
                message.starts_with("conflict: the dedupe_key"),
                "{case}: {message}"
            );
            continue;
        }
        // "invalid FIELD: …" names the same field ("headers" for "headers.NAME": a fixed
        // message cannot carry the header's name).
        let field = |text: &str| text.split([':', '.']).next().unwrap().to_owned();
        assert_eq!(field(message), field(&rust), "{case}: {message} / {rust}");
        if ["lane_empty", "ordering_key_blank", "max_attempts_zero"].contains(&case.as_str()) {
            assert_eq!(message, rust, "{case}");
        }
    }
    // 5 keyed, 1 with headers, 1 delayed, 1 deduplicated; the rolled back one is absent.
    let stats = store.stats(&MessageFilter::default()).await.unwrap();
    assert_eq!(stats.iter().map(|s| s.pending).sum::<u64>(), 8, "{stats:?}");

    let delivered = deliver(store.clone(), 7).await;
    assert_eq!(keyed_values(&delivered), [1, 2, 3, 4, 5], "per-key order");
    let headed = delivered
        .iter()
        .find(|m| m.payload.as_str() == r#"{"n": 10}"#)
        .expect("the message with headers, its bytes as sent");
    assert_eq!(headed.max_attempts, 3);
    assert_eq!(
        headed.headers.get("content-type").map(String::as_str),
        Some("application/json")
    );
    assert!(delivered
        .iter()
        .all(|m| m.payload.as_str() != r#"{"n": 99}"#));
}
