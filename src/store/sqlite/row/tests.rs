use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Connection};

use super::*;

/// A read-only database answers every write with SQLITE_READONLY: permanent, so a relay
/// gives up instead of backing off forever.
#[tokio::test]
async fn a_read_only_database_is_a_permanent_refusal() {
    let mut conn = SqliteConnectOptions::new()
        .in_memory(true)
        .connect()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    sqlx::raw_sql("CREATE TABLE t (x integer); PRAGMA query_only = ON")
        .execute(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let error = sqlx::raw_sql("INSERT INTO t VALUES (1)")
        .execute(&mut conn)
        .await
        .expect_err("the write is refused");
    let mapped = db_error(StoreOp::Claim, error);
    assert!(mapped.is_permanent(), "{mapped:?}");
    assert!(!mapped.is_retryable(), "{mapped:?}");
    let _ = conn.close().await;
}
