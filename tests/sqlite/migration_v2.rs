//! Migration 3 (the live-only key index) on a file written by a build at schema version 2,
//! with live keyed rows: the key index is replaced, the head triggers are re-created over
//! it, and the file still claims every key in order and hands each key's head on.

use std::sync::Arc;
use std::time::Duration;

use outbox_relay::store::sqlite::SqliteOutboxStore;
use outbox_relay::store::{ClaimBatch, ClaimRequest};
use outbox_relay::time::ManualClock;
use outbox_relay::time::UnixMillis;
use outbox_relay::Outbox;
use sqlx::{Connection, Row};

/// The schema as versions 1 and 2 made it: `sqlite_master` of a file those migrations
/// made, copied (migrations are never edited, so neither is this).
const VERSION_2: &str = include_str!("version_2.sql");

const NOW: i64 = 1_700_000_000_000;

/// Rows of lane orders/billing, in seq order from 1: (ordering_key, status).
const ROWS: &[(Option<&str>, &str)] = &[
    (Some("a"), "claimed"), // 1: a's head, in flight until its lease lapses
    (Some("a"), "pending"), // 2
    (Some("b"), "pending"), // 3: b's head
    (Some("b"), "pending"), // 4
    (None, "pending"),      // 5
    (Some("c"), "delivered"),
    (Some("c"), "pending"), // 7: c's head
    (Some("a"), "pending"), // 8
];

fn seqs(batch: &ClaimBatch) -> Vec<i64> {
    batch.messages.iter().map(|m| m.seq).collect()
}

#[tokio::test]
async fn a_version_2_file_with_live_keys_migrates_and_claims_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox.db");
    let url = format!("sqlite://{}?mode=rwc", path.display());
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    sqlx::raw_sql(VERSION_2).execute(&mut conn).await.unwrap();
    sqlx::raw_sql(
        "CREATE TABLE outbox_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL);
         INSERT INTO outbox_migrations VALUES (1, 0), (2, 0);",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    // Through version 2's triggers, which mark the heads and count.
    for (i, (key, status)) in ROWS.iter().enumerate() {
        let claimed = *status == "claimed";
        sqlx::query(
            "INSERT INTO outbox (outbox_id, lane, target, payload, headers, ordering_key,
                 status, attempt_count, max_attempts, available_at, claim_token,
                 lease_expires_at, created_at, updated_at)
             VALUES (?1, 'orders', 'billing', '{}', '{}', ?2, ?3, ?4, 5, ?5, ?6, ?7, ?5, ?5)",
        )
        .bind(uuid::Uuid::now_v7().to_string())
        .bind(key)
        .bind(status)
        .bind(i64::from(claimed))
        .bind(NOW - 1_000 + i as i64)
        .bind(claimed.then(|| uuid::Uuid::new_v4().to_string()))
        .bind(claimed.then_some(NOW + 60_000))
        .execute(&mut conn)
        .await
        .unwrap();
    }
    conn.close().await.unwrap();

    let clock = ManualClock::new(UnixMillis::from_millis(NOW));
    let store = Outbox::new(
        SqliteOutboxStore::builder(&path)
            .clock(Arc::new(clock.clone()))
            .open()
            .await
            .unwrap(),
    );

    // The schema moved on: the live index in, the old one out, no trigger naming it.
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let version: i64 = sqlx::query("SELECT MAX(version) FROM outbox_migrations")
        .fetch_one(&mut conn)
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, 8);
    let schema: Vec<(String, String)> =
        sqlx::query("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL")
            .fetch_all(&mut conn)
            .await
            .unwrap()
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
    conn.close().await.unwrap();
    assert!(schema.iter().any(|(name, _)| name == "outbox_key_live"));
    for (name, sql) in &schema {
        assert!(!sql.contains("key_order"), "{name} still names it: {sql}");
    }
    let head_triggers = schema
        .iter()
        .filter(|(name, sql)| name.starts_with("outbox_head_on_") && sql.contains("key_live"))
        .count();
    assert_eq!(head_triggers, 4, "{schema:#?}");

    let claim = ClaimRequest::new("orders", "billing", 10, Duration::from_secs(5), "r");
    let claim_and_ack = |expected: &'static [i64], why: &'static str| {
        let (store, claim) = (&store, &claim);
        async move {
            let batch = store.claim(claim).await.unwrap();
            assert_eq!(seqs(&batch), expected, "{why}");
            let acks: Vec<_> = batch.messages.iter().filter_map(|m| m.claim()).collect();
            store.ack(&acks).await.unwrap();
        }
    };
    claim_and_ack(
        &[3, 5, 7],
        "a is in flight: the heads of b, c and the unkeyed row",
    )
    .await;
    claim_and_ack(&[4], "b's head handed on by the ack").await;
    assert!(store.claim(&claim).await.unwrap().messages.is_empty());
    clock.advance(Duration::from_secs(120)); // a's lease lapses
    claim_and_ack(&[1], "a's lapsed claim, retaken").await;
    claim_and_ack(&[2], "a's next").await;
    claim_and_ack(&[8], "a's last").await;
    assert!(store.claim(&claim).await.unwrap().messages.is_empty());
}
