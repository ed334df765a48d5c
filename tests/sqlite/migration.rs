//! Migration 2 (key heads, counts) on a file written by a build that knew only version 1:
//! the backfill marks each key's first live row and counts every status, so the file
//! claims and reports as if it had always had them.

use std::sync::Arc;
use std::time::Duration;

use outbox_relay::store::sqlite::SqliteOutboxStore;
use outbox_relay::store::{ClaimRequest, MessageFilter, OrderingPolicy};
use outbox_relay::time::ManualClock;
use outbox_relay::time::UnixMillis;
use outbox_relay::Outbox;
use sqlx::Connection;

/// The table as version 1 of the schema made it (copied, since migrations are never edited).
const VERSION_1: &[&str] = &[
    "CREATE TABLE outbox_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)",
    "INSERT INTO outbox_migrations VALUES (1, 0)",
    "CREATE TABLE outbox (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        outbox_id TEXT NOT NULL UNIQUE,
        lane TEXT NOT NULL,
        target TEXT NOT NULL,
        payload TEXT NOT NULL,
        headers TEXT NOT NULL,
        ordering_key TEXT,
        dedupe_key TEXT,
        status TEXT NOT NULL
            CHECK (status IN ('pending', 'claimed', 'delivered', 'dead_letter')),
        attempt_count INTEGER NOT NULL,
        max_attempts INTEGER NOT NULL,
        available_at INTEGER NOT NULL,
        claimed_by TEXT,
        claim_token TEXT,
        lease_expires_at INTEGER,
        last_error TEXT,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        delivered_at INTEGER
    ) STRICT",
    "CREATE UNIQUE INDEX outbox_dedupe
        ON outbox (lane, target, dedupe_key) WHERE dedupe_key IS NOT NULL",
    "CREATE INDEX outbox_claimable
        ON outbox (lane, target, status, available_at) WHERE status IN ('pending', 'claimed')",
    "CREATE INDEX outbox_key_order
        ON outbox (lane, target, ordering_key, status) WHERE ordering_key IS NOT NULL",
    "CREATE INDEX outbox_finished
        ON outbox (updated_at) WHERE status IN ('delivered', 'dead_letter')",
];

const NOW: i64 = 1_700_000_000_000;

/// Rows of lane orders/billing: (ordering_key, status, lease_expires_at).
const ROWS: &[(Option<&str>, &str, Option<i64>)] = &[
    (Some("k"), "delivered", None),
    (Some("k"), "claimed", Some(NOW + 60_000)), // k's head, in flight
    (Some("k"), "pending", None),
    (Some("d"), "dead_letter", None), // d is blocked under Block
    (Some("d"), "pending", None),
    (None, "pending", None),
    (Some("m"), "pending", None), // m's head
    (Some("m"), "pending", None),
];

#[tokio::test]
async fn a_version_1_file_migrates_with_heads_and_counts_backfilled() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox.db");
    let url = format!("sqlite://{}?mode=rwc", path.display());
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    for statement in VERSION_1 {
        sqlx::query(*statement).execute(&mut conn).await.unwrap();
    }
    for (i, (key, status, lease)) in ROWS.iter().enumerate() {
        sqlx::query(
            "INSERT INTO outbox (outbox_id, lane, target, payload, headers, ordering_key,
                 status, attempt_count, max_attempts, available_at, claim_token,
                 lease_expires_at, created_at, updated_at)
             VALUES (?1, 'orders', 'billing', '{}', '{}', ?2, ?3, ?4, 5, ?5, ?6, ?7, ?5, ?5)",
        )
        .bind(uuid::Uuid::now_v7().to_string())
        .bind(key)
        .bind(status)
        .bind(i64::from(*status == "claimed"))
        .bind(NOW - 1_000 + i as i64)
        .bind(lease.map(|_| uuid::Uuid::new_v4().to_string()))
        .bind(lease)
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
    let stats = store
        .stats(&MessageFilter::lane("orders", "billing"))
        .await
        .unwrap();
    assert_eq!(
        (
            stats[0].pending,
            stats[0].claimed,
            stats[0].delivered,
            stats[0].dead_letter
        ),
        (5, 1, 1, 1),
        "{stats:?}"
    );
    assert_eq!(stats[0].blocked_keys, 1, "{stats:?}");
    assert_eq!(
        stats[0].oldest_pending_age,
        Some(Duration::from_millis(998))
    );

    let seqs = |batch: &outbox_relay::store::ClaimBatch| -> Vec<i64> {
        batch.messages.iter().map(|m| m.seq).collect()
    };
    let block = ClaimRequest::new("orders", "billing", 10, Duration::from_secs(5), "r")
        .with_ordering(OrderingPolicy::Block);
    // k is in flight, d is behind its dead head: the unkeyed row and m's head.
    assert_eq!(seqs(&store.claim(&block).await.unwrap()), [6, 7]);
    let skip = block.clone().with_ordering(OrderingPolicy::Skip);
    assert_eq!(
        seqs(&store.claim(&skip).await.unwrap()),
        [5],
        "d moves on under Skip"
    );
    assert!(store.claim(&skip).await.unwrap().messages.is_empty());
}
