use super::*;

#[test]
fn table_prefix_rules() {
    for ok in ["", "app_", "A1_", "_x"] {
        assert!(validate_table_prefix(ok).is_ok(), "{ok:?}");
    }
    for bad in [
        "1app",
        "app-",
        "a b",
        "x\"; DROP TABLE t; --",
        &"x".repeat(33),
    ] {
        let err = validate_table_prefix(bad).unwrap_err();
        assert_eq!(err.field, "table_prefix", "{bad:?}");
    }
}

#[test]
fn statements_name_the_prefixed_table() {
    let sql = Statements::new("app_");
    assert_eq!(sql.table, "app_outbox");
    for statement in [&sql.skip.claim_ready, &sql.block.next_due] {
        assert!(statement.contains("FROM app_outbox c"), "{statement}");
        assert!(!statement.contains('{'), "{statement}");
    }
    assert!(sql.block.claim_ready.contains("'dead_letter'"));
    assert!(!sql.skip.claim_ready.contains("'dead_letter'"));
}

/// Only the names the migrations create are renamed: a column that merely starts
/// with the default name (`outbox_id`), a word that contains it, a string and a comment
/// keep it.
#[test]
fn for_table_renames_only_the_created_names() {
    let sql = "-- outbox_counts of outbox\nSELECT outbox_id, 'outbox', \"outbox\", xoutbox, \
                   outbox_idx, outbox_counts.n FROM outbox JOIN outbox_counts \
                   INDEXED BY outbox_key_live WHERE outbox.seq > 0 -- outbox\n\
                   AND x = 'it''s outbox' -- é\nAND y = 'é outbox'";
    assert_eq!(
        for_table(sql, "app_outbox"),
        "-- outbox_counts of outbox\nSELECT outbox_id, 'outbox', \"outbox\", xoutbox, \
             outbox_idx, app_outbox_counts.n FROM app_outbox JOIN app_outbox_counts \
             INDEXED BY app_outbox_key_live WHERE app_outbox.seq > 0 -- outbox\n\
             AND x = 'it''s outbox' -- é\nAND y = 'é outbox'"
    );
    assert_eq!(for_table(sql, "outbox"), sql);
    for name in [
        "outbox",
        "outbox_migrations",
        "outbox_counts",
        "outbox_enqueue_insert",
    ] {
        assert!(CREATED.contains(name), "{name}: {CREATED:?}");
    }
    assert!(
        CREATED.iter().all(|name| name.starts_with("outbox")),
        "{CREATED:?}"
    );
    assert!(!CREATED.contains("outbox_id"));
}

/// No name the migrations create is also a column's, so no column is ever renamed.
#[tokio::test]
async fn no_created_name_is_a_column() {
    use sqlx::{AssertSqlSafe, Connection};
    let mut conn = sqlx::SqliteConnection::connect("sqlite::memory:")
        .await
        .unwrap();
    sqlx::raw_sql(AssertSqlSafe(script("outbox", 0, latest_version())))
        .execute(&mut conn)
        .await
        .unwrap();
    let columns: Vec<String> = sqlx::query_scalar(
        "SELECT p.name FROM sqlite_master m, pragma_table_info(m.name) p
             WHERE m.type IN ('table', 'view')",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert!(columns.iter().any(|c| c == "outbox_id"), "{columns:?}");
    for column in &columns {
        assert!(
            !CREATED.contains(column.as_str()),
            "{column} is also a created name"
        );
    }
    let objects: Vec<String> =
        sqlx::query_scalar("SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")
            .fetch_all(&mut conn)
            .await
            .unwrap();
    for object in &objects {
        assert!(CREATED.contains(object.as_str()), "{object}: {CREATED:?}");
    }
}

/// Every migration made for a prefixed table names that table's objects only.
#[test]
fn the_migrations_for_a_prefix_name_only_its_objects() {
    let script = script("app_outbox", 0, latest_version());
    for (word, piece) in pieces(&script) {
        if word && CREATED.contains(piece) {
            panic!("{piece} left unrenamed");
        }
    }
    assert!(script.contains("CREATE TABLE IF NOT EXISTS app_outbox_migrations"));
    assert!(script.contains("outbox_id TEXT NOT NULL UNIQUE"));
}

/// The statements that read messages select the columns `row::decode` reads, in order.
#[test]
fn message_statements_select_the_columns_decode_reads() {
    let sql = Statements::new("");
    let flat = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    for statement in [&sql.find_dedupe, &sql.get, &sql.mark_claimed] {
        assert!(flat(statement).contains(&flat(COLUMNS)), "{statement}");
    }
}

#[test]
fn sqlite_reserved_prefixes_are_refused() {
    for bad in ["sqlite_", "SQLite_x", "sqlite_app_"] {
        let err = validate_table_prefix(bad).unwrap_err();
        assert_eq!(err.field, "table_prefix", "{bad:?}");
        assert!(err.reason.contains("reserves"), "{bad:?}: {err}");
    }
    assert!(validate_table_prefix("sqlite").is_ok());
}
