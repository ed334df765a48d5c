//! Unit tests of the store's own settings: the builder's checks, the pragmas every
//! connection runs with, and the query plans of the hot statements.

use sqlx::{AssertSqlSafe, Row};

use super::*;

#[test]
fn page_cache_and_memory_map_sizes_are_checked() {
    let builder = SqliteOutboxStore::builder("outbox.db");
    assert!(builder.validate().is_ok());
    for bad in [0, MIN_CACHE_SIZE - 1, MAX_MEMORY_SIZE + 1] {
        let err = builder.clone().cache_size(bad).validate().unwrap_err();
        assert_eq!(err.field, "cache_size", "{bad}");
    }
    let err = builder
        .clone()
        .mmap_size(MAX_MEMORY_SIZE + 1)
        .validate()
        .unwrap_err();
    assert_eq!(err.field, "mmap_size");
    assert!(builder
        .cache_size(MIN_CACHE_SIZE)
        .mmap_size(0)
        .validate()
        .is_ok());
}

/// Every connection, the writer and each reader, runs with the configured sizes.
#[tokio::test]
async fn connections_get_the_page_cache_and_memory_map() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteOutboxStore::builder(dir.path().join("outbox.db"))
        .cache_size(3 * 1024 * 1024 + 1)
        .mmap_size(1 << 20)
        .open()
        .await
        .unwrap();
    for pool in [&store.writer, &store.reader] {
        let cache: i64 = sqlx::query("PRAGMA cache_size")
            .fetch_one(pool)
            .await
            .unwrap()
            .get(0);
        assert_eq!(cache, -(3 * 1024 + 1), "KiB, rounded up");
        let map: i64 = sqlx::query("PRAGMA mmap_size")
            .fetch_one(pool)
            .await
            .unwrap()
            .get(0);
        assert_eq!(map, 1 << 20);
    }
    let default = SqliteOutboxStore::open(dir.path().join("default.db"))
        .await
        .unwrap();
    let cache: i64 = sqlx::query("PRAGMA cache_size")
        .fetch_one(&default.writer)
        .await
        .unwrap()
        .get(0);
    assert_eq!(cache, -((DEFAULT_CACHE_SIZE / 1024) as i64));
}

/// The hot statements must find their rows through an index: a full scan would make
/// every claim slower as the delivered tail grows.
#[tokio::test]
async fn hot_statements_use_their_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteOutboxStore::open(dir.path().join("outbox.db"))
        .await
        .unwrap();
    let sql = &store.sql;
    for (statement, index) in [
        (&sql.skip.claim_doomed, "outbox_leases"),
        (&sql.block.claim_lapsed, "outbox_leases"),
        (&sql.skip.claim_ready, "outbox_ready"),
        (&sql.block.claim_ready, "outbox_ready"),
        (&sql.skip.claim_runs, "outbox_ready"),
        (&sql.block.claim_runs, "outbox_ready"),
        (&sql.block.next_due, "outbox_ready"),
        (&sql.oldest_due, "outbox_pending"),
        (&sql.purge_batch, "outbox_finished"),
        (&sql.find_dedupe, "outbox_dedupe"),
        (&sql.ack, "sqlite_autoindex_outbox_1"),
        (&sql.nack, "sqlite_autoindex_outbox_1"),
        (&sql.extend, "sqlite_autoindex_outbox_1"),
        (&sql.release, "sqlite_autoindex_outbox_1"),
        (&sql.mark_claimed, "INTEGER PRIMARY KEY"),
        (&sql.dead_letter_lapsed, "INTEGER PRIMARY KEY"),
    ] {
        let plan: Vec<String> =
            sqlx::query(AssertSqlSafe(format!("EXPLAIN QUERY PLAN {statement}")))
                .fetch_all(&store.reader)
                .await
                .unwrap()
                .iter()
                .map(|row| row.get(3))
                .collect();
        assert!(
            plan.iter().any(|step| step.contains(index)),
            "{index} unused: {plan:#?}"
        );
        assert!(
            !plan
                .iter()
                .any(|step| step.starts_with("SCAN outbox") || step.starts_with("SCAN c")),
            "full scan: {plan:#?}"
        );
    }
}
