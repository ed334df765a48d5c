//! Unit tests of the store's own settings: the builder's checks, the pragmas every
//! connection runs with, and the query plans of the hot statements.

use sqlx::{AssertSqlSafe, Row};

use super::*;

/// The SQLite store under an outbox, for its own API.
fn sqlite(outbox: &crate::store::Outbox) -> &SqliteOutboxStore {
    outbox
        .backend::<SqliteOutboxStore>()
        .expect("a SQLite outbox")
}

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
        (&sql.ack_first, "sqlite_autoindex_outbox_1"),
        (&sql.ack_delete, "sqlite_autoindex_outbox_1"),
        (&sql.ack_delete_first, "sqlite_autoindex_outbox_1"),
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

/// The number `sql` answers on the write connection (the store's only one).
async fn on_writer(store: &SqliteOutboxStore, sql: &'static str) -> i64 {
    sqlx::query(sql)
        .fetch_one(&store.writer)
        .await
        .unwrap()
        .get(0)
}

/// The writer's `PRAGMA synchronous` as the last transaction left it: 1 NORMAL, 2 FULL.
async fn writer_synchronous(store: &SqliteOutboxStore) -> i64 {
    on_writer(store, "PRAGMA synchronous").await
}

/// The relay's bookkeeping commits without syncing the WAL (as PostgreSQL's relay commits
/// asynchronously); a message's enqueue, the caller's own transaction and operators'
/// changes always sync, whatever ran on the write connection before them.
#[tokio::test]
async fn relay_commits_skip_the_wal_sync_and_enqueues_always_sync() {
    use crate::store::{ClaimRequest, MessageFilter};
    const NORMAL: i64 = 1;
    const FULL: i64 = 2;
    let dir = tempfile::tempdir().unwrap();
    let store = crate::store::Outbox::new(
        SqliteOutboxStore::open(dir.path().join("outbox.db"))
            .await
            .unwrap(),
    );
    let draft = || {
        crate::OutboxMessageDraft::new("orders", "billing", serde_json::json!({"n": 1})).unwrap()
    };
    let request = ClaimRequest::new("orders", "billing", 1, Duration::from_secs(60), "relay");

    store.enqueue(draft()).await.unwrap();
    assert_eq!(writer_synchronous(sqlite(&store)).await, FULL, "enqueue");
    let claimed = store.claim(&request).await.unwrap().messages;
    assert_eq!(writer_synchronous(sqlite(&store)).await, NORMAL, "claim");
    store.enqueue(draft()).await.unwrap();
    assert_eq!(
        writer_synchronous(sqlite(&store)).await,
        FULL,
        "enqueue after a claim"
    );
    store.ack(&[claimed[0].claim().unwrap()]).await.unwrap();
    assert_eq!(writer_synchronous(sqlite(&store)).await, NORMAL, "ack");

    let mut tx = store.begin().await.unwrap();
    let in_tx: i64 = sqlx::query("PRAGMA synchronous")
        .fetch_one(tx.connection())
        .await
        .unwrap()
        .get(0);
    assert_eq!(in_tx, FULL, "the caller's own transaction");
    tx.rollback().await.unwrap();
    store.claim(&request).await.unwrap();
    store
        .requeue_dead_letters(&MessageFilter::all())
        .await
        .unwrap();
    assert_eq!(writer_synchronous(sqlite(&store)).await, FULL, "requeue");

    let synced = crate::store::Outbox::new(
        SqliteOutboxStore::builder(dir.path().join("synced.db"))
            .synchronous_commit(true)
            .open()
            .await
            .unwrap(),
    );
    synced.enqueue(draft()).await.unwrap();
    synced.claim(&request).await.unwrap();
    assert_eq!(
        writer_synchronous(sqlite(&synced)).await,
        FULL,
        "synchronous_commit(true)"
    );
}

/// The writer's automatic checkpoint: SQLite's default without background checkpoints,
/// the fallback bound with them.
#[tokio::test]
async fn the_writer_checkpoints_only_past_the_fallback_bound_with_background_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let autocheckpoint = |store: SqliteOutboxStore| async move {
        let pages: i64 = sqlx::query("PRAGMA wal_autocheckpoint")
            .fetch_one(&store.writer)
            .await
            .unwrap()
            .get(0);
        pages
    };
    let background = SqliteOutboxStore::open(dir.path().join("a.db"))
        .await
        .unwrap();
    assert_eq!(
        autocheckpoint(background).await,
        i64::from(checkpoint::FALLBACK_AUTOCHECKPOINT)
    );
    let own = SqliteOutboxStore::builder(dir.path().join("b.db"))
        .background_checkpoints(false)
        .open()
        .await
        .unwrap();
    assert_eq!(autocheckpoint(own).await, 1000, "SQLite's default");
}

/// Under a steady stream of relay commits the background checkpoints start the WAL over
/// once it holds `restart_pages`, so it stays small although the writer's own automatic
/// checkpoint waits for 10,000 pages (40 MiB). Without the checkpoints' second pass the WAL
/// of these 3,000 commits grew to 41 MB (to that bound); with it, 1–2 MB on a quiet
/// machine, and up to 26 MB with every library test of every feature running beside it
/// (the WAL grows by what the writer commits while a checkpoint's first pass copies and
/// syncs, and a loaded disk syncs slowly). The bound, 32 MiB, stays under the fallback's
/// 40 MiB that the WAL reaches without the second pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_checkpoints_keep_the_wal_small_under_steady_relay_commits() {
    use crate::store::ClaimRequest;
    const COMMITS: usize = 3_000;
    const WAL_BOUND: u64 = 32 << 20;
    let dir = tempfile::tempdir().unwrap();
    let store = crate::store::Outbox::new(
        SqliteOutboxStore::builder(dir.path().join("outbox.db"))
            .restart_pages(64)
            .open()
            .await
            .unwrap(),
    );
    let drafts = (0..COMMITS)
        .map(|n| {
            crate::OutboxMessageDraft::new("orders", "billing", serde_json::json!({ "n": n }))
                .unwrap()
        })
        .collect();
    store.enqueue_many(drafts).await.unwrap();
    let request = ClaimRequest::new("orders", "billing", 1, Duration::from_secs(60), "relay");
    let started = std::time::Instant::now();
    let mut held = store.claim(&request).await.unwrap().messages;
    let mut cycles = 0;
    while let Some(message) = held.pop() {
        let next = store
            .ack_and_claim(&[message.claim().unwrap()], &request)
            .await
            .unwrap();
        held = next.claimed.unwrap().messages;
        cycles += 1;
    }
    let wal = dir.path().join("outbox.db-wal");
    let wal_size = std::fs::metadata(&wal).map_or(0, |m| m.len());
    assert_eq!(cycles, COMMITS, "one ack_and_claim per message");
    println!(
        "WAL {wal_size} bytes after {COMMITS} relay commits in {:?}",
        started.elapsed()
    );
    assert!(
        wal_size <= WAL_BOUND,
        "the WAL grew to {wal_size} bytes over {COMMITS} relay commits in {:?}: \
         the background checkpoints did not start it over",
        started.elapsed()
    );
}

/// Rows the write connection changed since it opened, the triggers' changes included.
async fn writer_changes(store: &SqliteOutboxStore) -> i64 {
    on_writer(store, "SELECT total_changes()").await
}

/// Acking a key run hands the head mark on once, past the run, not along it row by row:
/// the ack of 8 rows of one key changes fewer rows than the ack of 8 rows without a key
/// (each of which clears its own mark), and the key's next row is its head and claimable
/// after.
#[tokio::test]
async fn acking_a_key_run_hands_the_head_mark_on_once() {
    use crate::store::ClaimRequest;
    const RUN: usize = 8;
    let dir = tempfile::tempdir().unwrap();
    let store = crate::store::Outbox::new(
        SqliteOutboxStore::open(dir.path().join("outbox.db"))
            .await
            .unwrap(),
    );
    let draft = |lane: &str, n: usize, key: Option<&str>| {
        let draft =
            crate::OutboxMessageDraft::new(lane, "billing", serde_json::json!({ "n": n })).unwrap();
        match key {
            Some(key) => draft.with_ordering_key(key),
            None => draft,
        }
    };
    for n in 0..=RUN {
        store.enqueue(draft("keyed", n, Some("k"))).await.unwrap();
        store.enqueue(draft("plain", n, None)).await.unwrap();
    }
    let mut changed = Vec::new();
    for lane in ["keyed", "plain"] {
        let request = ClaimRequest::new(lane, "billing", RUN, Duration::from_secs(60), "relay")
            .with_key_run(RUN);
        let claimed = store.claim(&request).await.unwrap().messages;
        assert_eq!(claimed.len(), RUN, "{lane}: one claim takes the run");
        let claims: Vec<_> = claimed.iter().map(|m| m.claim().unwrap()).collect();
        let before = writer_changes(sqlite(&store)).await;
        let outcomes = store.ack(&claims).await.unwrap();
        changed.push(writer_changes(sqlite(&store)).await - before);
        assert!(
            outcomes
                .iter()
                .all(|o| *o == crate::store::ClaimOutcome::Applied),
            "{lane}: {outcomes:?}"
        );
    }
    let (keyed, plain) = (changed[0], changed[1]);
    // Without a key, each row's ack clears its own mark (a trigger write per row). Handed
    // along the run, the mark cost a clear and a mark per keyed row (40 against 32); acked
    // behind its head, only the head clears its mark and marks the key's next row.
    assert!(
        keyed < plain,
        "rows changed by acking a run of {RUN}: {keyed} with a key, {plain} without"
    );
    let request = ClaimRequest::new("keyed", "billing", RUN, Duration::from_secs(60), "relay");
    let next = store.claim(&request).await.unwrap().messages;
    assert_eq!(next.len(), 1, "the key's last row is its head now");
    assert_eq!(next[0].payload.as_str(), format!("{{\"n\":{RUN}}}"));
}

/// The permission bits of `path`.
#[cfg(unix)]
fn mode_of(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .unwrap_or_else(|error| panic!("{}: {error}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// A new database file, and the WAL beside it, are readable by their owner only: the
/// outbox holds the payloads. A file that already exists keeps the mode it was given.
#[cfg(unix)]
#[tokio::test]
async fn a_new_database_file_is_created_0600_and_an_existing_one_keeps_its_mode() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox.db");
    let store = crate::store::Outbox::new(SqliteOutboxStore::builder(&path).open().await.unwrap());
    store
        .enqueue(crate::OutboxMessageDraft::new("l", "t", serde_json::json!({})).unwrap())
        .await
        .unwrap();
    let wal = dir.path().join("outbox.db-wal");
    assert_eq!(
        (mode_of(&path), mode_of(&wal)),
        (0o600, 0o600),
        "database file and WAL"
    );
    drop(store);

    // An operator's own choice (a group that backs the file up) is left alone.
    let shared = dir.path().join("shared.db");
    std::fs::write(&shared, b"").unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o640)).unwrap();
    SqliteOutboxStore::builder(&shared).open().await.unwrap();
    assert_eq!(mode_of(&shared), 0o640);
}

/// Lane control and served lanes under a table prefix: the statements read from files name
/// the prefixed tables, and a pause is recorded, listed and lifted.
#[tokio::test]
async fn lane_control_and_served_lanes_use_the_prefixed_tables() {
    use crate::store::LanePauseRequest;
    let dir = tempfile::tempdir().unwrap();
    let store = crate::store::Outbox::new(
        SqliteOutboxStore::builder(dir.path().join("outbox.db"))
            .table_prefix("app_")
            .open()
            .await
            .unwrap(),
    );
    let pause = store
        .pause_lane(&LanePauseRequest::new("l", "t", "ops"))
        .await
        .unwrap();
    assert_eq!(store.lane_pauses().await.unwrap(), vec![pause.clone()]);
    let paused: i64 = sqlx::query_scalar("SELECT count(*) FROM app_outbox_lane_control")
        .fetch_one(&sqlite(&store).reader)
        .await
        .unwrap();
    assert_eq!(paused, 1);
    assert_eq!(store.resume_lane("l", "t").await.unwrap(), Some(pause));
    assert!(store.lane_pauses().await.unwrap().is_empty());

    let draft = crate::OutboxMessageDraft::new("l", "t", serde_json::json!({})).unwrap();
    store.enqueue(draft).await.unwrap();
    let unserved = store.unserved_lanes(10).await.unwrap();
    assert_eq!((unserved.len(), unserved[0].pending), (1, 1));
    store
        .record_served(
            &[("l".to_owned(), "t".to_owned())],
            std::time::Duration::from_secs(60),
        )
        .await
        .unwrap();
    assert!(store.unserved_lanes(10).await.unwrap().is_empty());
}

/// A page after a cursor seeks to it: the listing's one index seek is the cursor's
/// `seq >= ?` (`SeekGE`), never the partial index's `seq > 0` (`SeekGT`), which SQLite
/// takes when that term comes first and which reads the lane from its start up to the
/// cursor. Its query plan names the same range either way.
#[tokio::test]
async fn listing_pages_seek_to_their_cursor() {
    use crate::message::OutboxStatus;
    use crate::store::{MessageFilter, PageRequest};
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteOutboxStore::open(dir.path().join("outbox.db"))
        .await
        .unwrap();
    let lane = MessageFilter::lane("orders", "billing");
    let keyed = MessageFilter {
        ordering_key: Some("k".into()),
        ..lane.clone()
    };
    let mut filters = vec![lane.clone(), keyed.clone()];
    for status in OutboxStatus::ALL {
        filters.push(lane.clone().with_status(status));
        filters.push(keyed.clone().with_status(status));
    }
    for filter in filters {
        let page = PageRequest {
            after: Some(3_000),
            limit: 50,
        };
        let list = read::list_sql(&store.sql.table, &filter, page);
        let program: Vec<String> = statement::bind(
            statement::dynamic(format!("EXPLAIN {}", list.text)),
            list.values,
        )
        .fetch_all(&store.reader)
        .await
        .unwrap()
        .iter()
        .map(|row| row.get::<String, _>(1))
        .collect();
        let seeks: Vec<&String> = program.iter().filter(|op| op.starts_with("Seek")).collect();
        assert!(
            seeks.iter().any(|op| *op == "SeekGE") && !seeks.iter().any(|op| *op == "SeekGT"),
            "{filter:?}: {seeks:?}"
        );
    }
}
