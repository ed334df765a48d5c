//! The relay's connections (`jit = off`, the statement timeout) and migrations 2 and 3 on a
//! table that already holds messages.

use outbox_relay::store::OutboxBackend as _;
use std::time::Duration;

use outbox_relay::store::postgres::{PostgresConfig, PostgresOutboxStore};
use outbox_relay::store::{ClaimRequest, OrderingPolicy};
use outbox_relay::{Outbox, OutboxMessageDraft};
use serde_json::json;

use crate::{database_url, open, SchemaGuard};

#[tokio::test]
async fn connections_run_without_jit_and_with_the_statement_timeout() {
    let schema = SchemaGuard::new();
    let store = PostgresOutboxStore::connect_with(
        &database_url(),
        schema
            .config()
            .statement_timeout(Duration::from_millis(1_500)),
    )
    .await
    .expect("connect");
    // Several connections of the pool at once: each has the settings.
    let mut conns = Vec::new();
    for _ in 0..3 {
        conns.push(store.pool().acquire().await.expect("acquire"));
    }
    for conn in &mut conns {
        let jit: String = sqlx::query_scalar("SHOW jit")
            .fetch_one(&mut **conn)
            .await
            .expect("jit");
        assert_eq!(jit, "off");
        let timeout: String = sqlx::query_scalar("SHOW statement_timeout")
            .fetch_one(&mut **conn)
            .await
            .expect("statement_timeout");
        assert_eq!(timeout, "1500ms");
    }
    // A statement running past it is cancelled, not left to commit later.
    let slow = sqlx::query("SELECT pg_sleep(5)")
        .execute(&mut *conns[0])
        .await
        .expect_err("cancelled");
    assert!(slow.to_string().contains("statement timeout"), "{slow}");
    drop(conns);
    schema.drop().await;
}

#[test]
fn the_statement_timeout_is_validated() {
    for bad in [
        Duration::ZERO,
        Duration::from_micros(500),
        Duration::from_secs(1 << 32),
    ] {
        let error = PostgresConfig::default()
            .statement_timeout(bad)
            .validate()
            .expect_err("invalid");
        assert_eq!(error.field, "statement_timeout", "{bad:?}");
    }
    PostgresConfig::default()
        .validate()
        .expect("the default is valid");
}

/// Migration 2 on a table written before it: every row then had the column's default
/// (marked), and the backfill unmarks the rows queued behind their key's head.
#[tokio::test]
async fn migration_2_backfills_the_head_marker() {
    let schema = SchemaGuard::new();
    let store = crate::open(schema.config()).await;
    let t = crate::pg(&store).messages_table().to_owned();
    for i in 0..3 {
        store
            .enqueue(
                OutboxMessageDraft::new("l", "sink", json!({ "i": i }))
                    .expect("draft")
                    .with_ordering_key("k"),
            )
            .await
            .expect("enqueue");
    }
    // Back to what a version-1 table holds, then migrate again.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "UPDATE {t} SET key_head = true;
         DELETE FROM \"{}\".outbox_migrations WHERE version = 2;",
        schema.0
    )))
    .execute(crate::pg(&store).pool())
    .await
    .expect("version 1");
    crate::pg(&store).migrate().await.expect("migrate");
    let marks: Vec<bool> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT key_head FROM {t} ORDER BY seq"
    )))
    .fetch_all(crate::pg(&store).pool())
    .await
    .expect("marks");
    assert_eq!(marks, vec![true, false, false]);
    let request = ClaimRequest::new("l", "sink", 10, Duration::from_secs(60), "r")
        .with_ordering(OrderingPolicy::Skip);
    let batch = store.claim(&request).await.expect("claim");
    assert_eq!(batch.messages.len(), 1);
    assert_eq!(batch.messages[0].payload, json!({ "i": 0 }));
    schema.drop().await;
}

/// Migration 3 on a table written before it: `jsonb` payloads become `json`, the rows stay
/// readable (with the normalised text `jsonb` gave them), and payloads enqueued from then
/// on keep their bytes.
#[tokio::test]
async fn migration_3_turns_jsonb_payloads_into_json_text() {
    let schema = SchemaGuard::new();
    let store = crate::open(schema.config()).await;
    let t = crate::pg(&store).messages_table().to_owned();
    let sent = r#"{"b":1,  "a":18446744073709551616}"#;
    let draft = || OutboxMessageDraft::from_json("l", "sink", sent).expect("draft");
    store.enqueue(draft()).await.expect("enqueue");
    // Back to what a version-2 table holds, then migrate again.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "ALTER TABLE {t} ALTER COLUMN payload TYPE jsonb USING payload::jsonb;
         DELETE FROM \"{}\".outbox_migrations WHERE version = 3;",
        schema.0
    )))
    .execute(crate::pg(&store).pool())
    .await
    .expect("version 2");
    crate::pg(&store).migrate().await.expect("migrate");
    let column_type: String = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute
         WHERE attrelid = '{t}'::regclass AND attname = 'payload'"
    )))
    .fetch_one(crate::pg(&store).pool())
    .await
    .expect("column type");
    assert_eq!(column_type, "json");
    store
        .enqueue(draft())
        .await
        .expect("enqueue after migration 3");
    let request = ClaimRequest::new("l", "sink", 10, Duration::from_secs(60), "r");
    let batch = store.claim(&request).await.expect("claim");
    let payloads: Vec<&str> = batch.messages.iter().map(|m| m.payload.as_str()).collect();
    assert_eq!(
        payloads,
        [r#"{"a": 18446744073709551616, "b": 1}"#, sent],
        "the old row as jsonb stored it, the new one as sent"
    );
    schema.drop().await;
}

/// The number of vacuums PostgreSQL counted for the store's messages table.
async fn vacuums(store: &Outbox) -> i64 {
    let table = crate::pg(store).messages_table().to_owned();
    sqlx::query_scalar(
        "SELECT vacuum_count FROM pg_stat_user_tables WHERE relid = $1::text::regclass",
    )
    .bind(table)
    .fetch_one(crate::pg(store).pool())
    .await
    .expect("vacuum_count")
}

/// Enqueues six messages, claims them and acks four, then two: what crosses a
/// `vacuum_every` of 5 on the second ack.
async fn ack_six(store: &Outbox) {
    for i in 0..6 {
        store
            .enqueue(OutboxMessageDraft::new("l", "sink", json!({ "i": i })).expect("draft"))
            .await
            .expect("enqueue");
    }
    let batch = store
        .claim(&ClaimRequest::new(
            "l",
            "sink",
            10,
            Duration::from_secs(30),
            "r",
        ))
        .await
        .expect("claim");
    assert_eq!(batch.messages.len(), 6);
    let claims: Vec<_> = batch.messages.iter().filter_map(|m| m.claim()).collect();
    store.ack(&claims[..4]).await.expect("ack");
    store.ack(&claims[4..]).await.expect("ack");
}

/// After `vacuum_every` acked rows the store vacuums its table in the background (so a long
/// drain's claims do not step over the index entries of every row already drained), and
/// with `None` it leaves the table to autovacuum (which the test table never reaches).
///
/// The store without vacuums acks first; the one with them acks after it, and its vacuum
/// is waited for. A vacuum the first had started at its acks, earlier, would have been
/// counted by then too.
#[tokio::test]
async fn acked_rows_bring_a_vacuum_of_the_table_after_every_n() {
    let without = SchemaGuard::new();
    let without_store = open(without.config().vacuum_every(None)).await;
    ack_six(&without_store).await;

    let with = SchemaGuard::new();
    let with_store = open(with.config().vacuum_every(Some(5))).await;
    let before = vacuums(&with_store).await;
    let acked = std::time::Instant::now();
    ack_six(&with_store).await;
    while vacuums(&with_store).await == before {
        assert!(
            acked.elapsed() < Duration::from_secs(30),
            "no vacuum after 6 acked rows with vacuum_every 5 (count {before})"
        );
        // Polling a condition under a deadline.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = acked.elapsed();
    assert_eq!(
        vacuums(&without_store).await,
        0,
        "vacuum_every None vacuumed (the other store's vacuum was counted {took:?} after \
         its acks)"
    );
    with.drop().await;
    without.drop().await;
}

/// The pool pings a connection only after it sat idle for `PING_IF_IDLE_FOR` (sqlx's
/// default pings on every acquire, a round trip per claim): a connection the server closed
/// while it was in busy use fails one statement and is dropped (so a relay that backs off
/// recovers within one failure per connection, and after a second the ping takes over),
/// and one that sat idle longer is found dead by the ping and replaced before any
/// statement fails.
#[tokio::test]
async fn a_dead_pooled_connection_fails_at_most_one_call_and_an_idle_one_none() {
    use outbox_relay::store::postgres::PING_IF_IDLE_FOR;

    let schema = SchemaGuard::new();
    let store = PostgresOutboxStore::connect_with(&database_url(), schema.config())
        .await
        .expect("connect");
    let request = ClaimRequest::new("l", "sink", 10, Duration::from_secs(30), "r");
    let admin = crate::pool().await;
    // Every connection the pool holds now, ended by the server.
    let kill_pool = || async {
        // Every connection of the pool, the ones still on their way back to it included
        // (a connection returns to the pool in a task of its own after a call).
        let mut conns = Vec::new();
        while conns.len() < store.pool().size() as usize {
            let conn = tokio::time::timeout(Duration::from_secs(30), store.pool().acquire())
                .await
                .expect("the pool's connections came back within 30 s")
                .expect("acquire");
            conns.push(conn);
        }
        let mut pids = Vec::new();
        for conn in &mut conns {
            let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
                .fetch_one(&mut **conn)
                .await
                .expect("pid");
            pids.push(pid);
        }
        drop(conns);
        for pid in &pids {
            let _: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
                .bind(pid)
                .fetch_one(&admin)
                .await
                .expect("terminate");
        }
        pids.len()
    };
    store
        .claim(std::slice::from_ref(&request))
        .await
        .expect("claim");
    let killed = kill_pool().await;
    assert!(killed > 0, "the pool held no connection");
    // Used at once, without a ping: each dead connection fails one call and is dropped,
    // so within one call per connection the store works again.
    let mut results = Vec::new();
    while results.len() <= killed {
        let result = store.claim(std::slice::from_ref(&request)).await;
        let ok = result.is_ok();
        results.push(result);
        if ok {
            break;
        }
    }
    assert!(
        results.last().is_some_and(|r| r.is_ok()) && results.len() <= killed + 1,
        "{killed} connections killed: {results:?}"
    );

    assert!(kill_pool().await > 0, "the pool held no connection");
    tokio::time::sleep(PING_IF_IDLE_FOR + Duration::from_millis(200)).await;
    // Idle long enough: the ping finds it dead, and the call gets a fresh connection.
    store
        .claim(std::slice::from_ref(&request))
        .await
        .expect("a claim after the pool's connections died while idle");
    schema.drop().await;
}

/// What a subscriber on this thread wrote, for the tests that read the library's warnings.
#[derive(Clone, Default)]
struct Log(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl Log {
    /// Logs of this thread go here (at WARN and above) until the guard drops.
    fn capture() -> (Self, tracing::subscriber::DefaultGuard) {
        let log = Self::default();
        let writer = log.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::WARN)
            .finish();
        (log, tracing::subscriber::set_default(subscriber))
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("not poisoned")).into_owned()
    }
}

impl std::io::Write for Log {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .expect("not poisoned")
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A relay of two lanes on `store`, started and stopped.
async fn start_and_stop(store: &Outbox) {
    let sink = || outbox_relay::sinks::LogSink::new(std::io::sink());
    let relay = outbox_relay::OutboxRelay::builder(store)
        .lane(outbox_relay::LaneConfig::new("a", "sink"), sink())
        .lane(outbox_relay::LaneConfig::new("b", "sink"), sink())
        .start()
        .await
        .expect("the relay starts");
    relay
        .shutdown(Duration::from_secs(10))
        .await
        .expect("shutdown");
}

/// The service's own pool, built the plain way: the store says what its connections lack of
/// the relay's settings, and a relay whose lanes may hold more connections at once than the
/// pool has says so, with both numbers (a warning: the relay runs). A pool built as the
/// store's docs say gets neither warning.
#[tokio::test]
async fn a_bare_pool_is_warned_about_naming_what_it_lacks_and_the_connections_needed() {
    let schema = SchemaGuard::new();
    let (log, _guard) = Log::capture();
    let bare = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect(&database_url())
        .await
        .expect("a pool");
    let store = PostgresOutboxStore::new(bare, schema.config())
        .await
        .expect("a store on the bare pool");
    store.migrate().await.expect("migrate");
    let store = Outbox::new(store);
    start_and_stop(&store).await;
    let warnings = log.text();
    for lack in [
        "jit is on, not off",
        "statement_timeout is 0 ms, not 30000 ms",
        "it pings every connection it hands out",
        // Two lanes, each two claims in flight (PostgreSQL's default) and one lease
        // extension: six.
        "the store's pool holds 4 connections, fewer than the 6 its 2 lanes may hold at once",
    ] {
        assert!(warnings.contains(lack), "no {lack:?} in:\n{warnings}");
    }

    let (log, _guard) = Log::capture();
    let config = schema.config();
    let pool = outbox_relay::store::postgres::pool_options(Duration::from_secs(5))
        .max_connections(6)
        .connect_with(config.connect_options(&database_url()).expect("options"))
        .await
        .expect("a pool with the relay's settings");
    let store = Outbox::new(
        PostgresOutboxStore::new(pool, config)
            .await
            .expect("a store"),
    );
    start_and_stop(&store).await;
    assert_eq!(
        log.text(),
        "",
        "no warning for a pool built as the docs say"
    );
    schema.drop().await;
}
