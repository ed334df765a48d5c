//! Migration 8 (listing indexes without the status) on a file written by a build that knew
//! version 7: the file upgrades in place, its listing indexes hold no status, and a listing
//! of every status, by lane and by key, still answers each status's rows in enqueue order.

use std::sync::Arc;

use outbox_relay::store::sqlite::SqliteOutboxStore;
use outbox_relay::store::{MessageFilter, PageRequest};
use outbox_relay::time::{ManualClock, UnixMillis};
use outbox_relay::{Outbox, OutboxStatus};
use sqlx::{AssertSqlSafe, Connection, Row};

const NOW: i64 = 1_700_000_000_000;

/// Rows of lane orders/billing, seq 1, 2, …: (ordering_key, status).
const ROWS: &[(Option<&str>, &str)] = &[
    (Some("k"), "delivered"),
    (Some("k"), "dead_letter"),
    (Some("k"), "claimed"),
    (Some("k"), "pending"),
    (None, "delivered"),
    (None, "dead_letter"),
    (None, "claimed"),
    (None, "pending"),
    (Some("j"), "pending"),
];

#[tokio::test]
async fn a_version_7_file_upgrades_to_listing_indexes_without_the_status() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox.db");
    let url = format!("sqlite://{}?mode=rwc", path.display());
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let version_7 = SqliteOutboxStore::migration_sql("", 0, 7).unwrap();
    sqlx::raw_sql(AssertSqlSafe(version_7))
        .execute(&mut conn)
        .await
        .unwrap();
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
            .clock(Arc::new(clock))
            .open()
            .await
            .unwrap(),
    );

    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let indexes: Vec<(String, String)> = sqlx::query(
        "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND name LIKE 'outbox_list%'",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap()
    .iter()
    .map(|row| (row.get(0), row.get(1)))
    .collect();
    conn.close().await.unwrap();
    let sql_of = |name: &str| {
        indexes
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, sql)| sql.clone())
            .unwrap_or_else(|| panic!("no {name}: {indexes:?}"))
    };
    for name in ["outbox_list", "outbox_list_key"] {
        let sql = sql_of(name);
        let columns = sql.split_once("WHERE").map_or(sql.as_str(), |(c, _)| c);
        assert!(!columns.contains("status"), "{name}: {sql}");
    }
    assert!(
        sql_of("outbox_list_dead").contains("status = 'dead_letter'"),
        "{indexes:?}"
    );

    let lane = MessageFilter::lane("orders", "billing");
    let keyed = MessageFilter {
        ordering_key: Some("k".into()),
        ..lane.clone()
    };
    let seqs = |filter: &MessageFilter| {
        let (store, filter) = (&store, filter.clone());
        async move {
            let page = store
                .list(
                    &filter,
                    PageRequest {
                        after: None,
                        limit: 50,
                    },
                )
                .await
                .unwrap();
            assert_eq!(page.next_cursor, None, "{filter:?}");
            page.messages.iter().map(|m| m.seq).collect::<Vec<_>>()
        }
    };
    assert_eq!(seqs(&lane).await, (1..=9).collect::<Vec<_>>());
    assert_eq!(seqs(&keyed).await, [1, 2, 3, 4]);
    for status in OutboxStatus::ALL {
        let expected: Vec<i64> = (1..)
            .zip(ROWS)
            .filter(|(_, (_, s))| *s == status.as_str())
            .map(|(seq, _)| seq)
            .collect();
        assert_eq!(
            seqs(&lane.clone().with_status(status)).await,
            expected,
            "{status:?}"
        );
        let expected_keyed: Vec<i64> = (1..)
            .zip(ROWS)
            .filter(|(_, (key, s))| *key == Some("k") && *s == status.as_str())
            .map(|(seq, _)| seq)
            .collect();
        assert_eq!(
            seqs(&keyed.clone().with_status(status)).await,
            expected_keyed,
            "{status:?} of k"
        );
    }
}
