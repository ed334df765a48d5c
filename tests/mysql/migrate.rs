//! `MysqlOutboxStore::migrate` runs the files of `migrations/mysql/` under the migration
//! lock: processes migrating at once take turns and record each version once; a run cut
//! short is completed by the next; a run that fails leaves the lock free; a database at an
//! older version (as an older build or a DBA left it) gets only the files it lacks.

use outbox_relay::store::mysql::{MysqlConfig, MysqlOutboxStore};
use sqlx::{AssertSqlSafe, MySqlPool};

use crate::support::TestDatabase;

async fn versions(pool: &MySqlPool, prefix: &str) -> Vec<i64> {
    sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT version FROM `{prefix}_migrations` ORDER BY version"
    )))
    .fetch_all(pool)
    .await
    .expect("the recorded versions")
}

async fn tables(pool: &MySqlPool, prefix: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT CAST(table_name AS CHAR) FROM information_schema.tables \
         WHERE table_schema = DATABASE() AND table_name LIKE CONCAT(?, '\\_%') \
         ORDER BY table_name",
    )
    .bind(prefix)
    .fetch_all(pool)
    .await
    .expect("the tables")
}

/// Whether any session holds the migration lock of `prefix`.
async fn lock_free(pool: &MySqlPool, prefix: &str) -> bool {
    let free: Option<i64> = sqlx::query_scalar(
        "SELECT IS_FREE_LOCK(CONCAT('outbox-relay migrate ', DATABASE(), '.', ?))",
    )
    .bind(prefix)
    .fetch_one(pool)
    .await
    .expect("IS_FREE_LOCK");
    free == Some(1)
}

fn latest() -> Vec<i64> {
    (1..=MysqlOutboxStore::latest_schema_version()).collect()
}

#[tokio::test]
async fn processes_migrating_at_once_record_each_version_once() {
    let db = TestDatabase::create().await;
    let pool = db.pool(8).await;
    let config = MysqlConfig::default().table_prefix("shop");
    let runs: Vec<_> = (0..4)
        .map(|_| {
            let store = MysqlOutboxStore::new(pool.clone(), config.clone()).expect("store");
            tokio::spawn(async move { store.migrate().await })
        })
        .collect();
    for run in runs {
        run.await
            .expect("the task")
            .expect("every process's migrate succeeds");
    }
    assert_eq!(versions(&pool, "shop").await, latest());
    assert_eq!(
        tables(&pool, "shop").await,
        [
            "shop_keys",
            "shop_lane_control",
            "shop_messages",
            "shop_migrations",
            "shop_served_lanes"
        ]
    );
    assert!(
        tables(&pool, "outbox").await.is_empty(),
        "only the prefix's tables"
    );
    assert!(lock_free(&pool, "shop").await, "the lock is released");
    db.drop_now().await;
}

#[tokio::test]
async fn a_run_cut_short_is_completed_and_an_older_version_gets_what_it_lacks() {
    let db = TestDatabase::create().await;
    let pool = db.pool(2).await;
    // Migration 1 as a DBA ran it, then migration 2 cut short before its version: its table
    // is there, its version is not. One session runs both and then lets go of the named lock
    // the cut file took (on another session of the pool, the lock would stay held).
    let mut session = pool.acquire().await.expect("a connection");
    let first = MysqlOutboxStore::migration_sql("shop", 0, 1).expect("migration 1");
    sqlx::raw_sql(AssertSqlSafe(first))
        .execute(&mut *session)
        .await
        .expect("migration 1");
    let second = MysqlOutboxStore::migration_sql("shop", 1, 2).expect("migration 2");
    let cut = &second[..second.find("INSERT INTO").expect("the version's INSERT")];
    sqlx::raw_sql(AssertSqlSafe(cut.to_owned()))
        .execute(&mut *session)
        .await
        .expect("migration 2 without its version");
    sqlx::query("SELECT RELEASE_ALL_LOCKS()")
        .execute(&mut *session)
        .await
        .expect("release");
    drop(session);
    let store = MysqlOutboxStore::new(pool.clone(), MysqlConfig::default().table_prefix("shop"))
        .expect("store");
    assert_eq!(store.schema_version().await.expect("version"), Some(1));
    store.migrate().await.expect("migrate");
    assert_eq!(versions(&pool, "shop").await, latest());
    assert_eq!(
        store.schema_version().await.expect("version"),
        Some(MysqlOutboxStore::latest_schema_version())
    );
    store
        .migrate()
        .await
        .expect("a second migrate has nothing to do");
    assert_eq!(versions(&pool, "shop").await, latest());
    db.drop_now().await;
}

#[tokio::test]
async fn a_migration_that_fails_leaves_the_lock_free() {
    let db = TestDatabase::create().await;
    let pool = db.pool(2).await;
    // A migrations table the files cannot record a version in.
    sqlx::query("CREATE TABLE `shop_migrations` (version BIGINT NOT NULL PRIMARY KEY)")
        .execute(&pool)
        .await
        .expect("create");
    let store = MysqlOutboxStore::new(pool.clone(), MysqlConfig::default().table_prefix("shop"))
        .expect("store");
    let error = store
        .migrate()
        .await
        .expect_err("the version cannot be recorded");
    assert!(error.to_string().contains("applied_at"), "{error}");
    assert!(
        lock_free(&pool, "shop").await,
        "the lock is released after a failure"
    );
    db.drop_now().await;
}
