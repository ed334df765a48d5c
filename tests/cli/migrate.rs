//! PostgreSQL DDL only where asked for: read-only admin commands never create the schema
//! (a mistyped one is reported, not created), `migrate` creates it, and `run --no-migrate`
//! runs a relay whose role cannot write DDL.

use crate::{free_port, postgres_url, test_config, Sandbox, Schema};

fn schema_exists(name: &str) -> bool {
    let url = postgres_url();
    let name = name.to_owned();
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(async move {
            use sqlx::Connection;
            let mut conn = sqlx::PgConnection::connect(&url).await?;
            sqlx::query_scalar::<_, bool>(
                "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)",
            )
            .bind(name)
            .fetch_one(&mut conn)
            .await
        })
        .expect("PostgreSQL answers")
}

#[test]
fn read_only_commands_write_no_ddl_and_migrate_does_on_postgres() {
    let schema = Schema {
        name: format!("cli_{}", uuid::Uuid::new_v4().simple()),
    };
    let sandbox = Sandbox::new();
    let extra = format!("schema = \"{}\"", schema.name);
    sandbox.write(
        "relay.toml",
        &test_config(&postgres_url(), &extra, free_port()),
    );
    let cfg = ["--config", "relay.toml"];
    let with =
        |args: &[&'static str]| -> Vec<&'static str> { cfg.iter().chain(args).copied().collect() };

    for args in [
        &["status"][..],
        &["dead-letters", "list"],
        &["purge", "--older-than", "1d"],
        &["run", "--no-migrate"],
    ] {
        let stderr = sandbox.fails(2, &with(args));
        assert!(
            stderr.contains("outbox-relay migrate") && stderr.contains(&schema.name),
            "{args:?}: {stderr}"
        );
        assert!(!schema_exists(&schema.name), "{args:?} created the schema");
    }

    let out = sandbox.ok(&with(&["migrate"]));
    assert!(out.contains("up to date"), "{out}");
    assert!(schema_exists(&schema.name));
    assert!(sandbox.ok(&with(&["status"])).contains("no messages"));

    let mut relay = sandbox.start(&with(&["run", "--no-migrate"]));
    relay.wait_for_log("relay running");
    let (status, log) = relay.terminate();
    assert!(status.success(), "exit {status}:\n{log}");
}

/// Runs one statement on the test database.
fn execute(sql: String) {
    let url = postgres_url();
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(async move {
            use sqlx::Connection;
            let mut conn = sqlx::PgConnection::connect(&url).await?;
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                .execute(&mut conn)
                .await
        })
        .expect("PostgreSQL answers");
}

/// What a deploy pipeline and a DBA ask of `migrate`: the SQL for this schema without
/// connecting, an exit code for "behind" (3) and "ahead" (4), and a relay that refuses a
/// schema newer than it knows, naming both versions.
#[test]
fn migrate_prints_its_sql_checks_the_version_and_a_newer_schema_is_refused_on_postgres() {
    let schema = Schema {
        name: format!("cli_{}", uuid::Uuid::new_v4().simple()),
    };
    let sandbox = Sandbox::new();
    let extra = format!(
        "schema = \"{}\"\n[postgres]\nlock_timeout = \"2s\"",
        schema.name
    );
    sandbox.write(
        "relay.toml",
        &test_config(&postgres_url(), &extra, free_port()),
    );
    let cfg = ["--config", "relay.toml"];
    let with =
        |args: &[&'static str]| -> Vec<&'static str> { cfg.iter().chain(args).copied().collect() };

    let sql = sandbox.ok(&with(&["migrate", "--print-sql"]));
    assert_eq!(sql.matches("\nBEGIN;\n").count(), 10, "{sql}");
    assert!(sql.contains(&format!("CREATE SCHEMA IF NOT EXISTS \"{}\"", schema.name)));
    assert!(
        sql.contains("SET LOCAL lock_timeout = 2000;"),
        "the configured lock_timeout"
    );
    assert!(
        !schema_exists(&schema.name),
        "--print-sql connects to nothing"
    );
    let tail = sandbox.ok(&with(&[
        "migrate",
        "--print-sql",
        "--from",
        "3",
        "--to",
        "4",
    ]));
    assert!(
        tail.contains("migration 4:") && !tail.contains("migration 3:"),
        "{tail}"
    );
    assert!(!tail.contains("migration 5:"), "{tail}");
    let error = sandbox.fails(2, &with(&["migrate", "--print-sql", "--to", "11"]));
    assert!(error.contains("to") && error.contains("10"), "{error}");

    let behind = sandbox.fails(3, &with(&["migrate", "--check"]));
    assert!(behind.contains("no outbox schema"), "{behind}");
    assert!(!schema_exists(&schema.name), "--check writes no DDL");
    sandbox.ok(&with(&["migrate"]));
    let current = sandbox.ok(&with(&["migrate", "--check"]));
    assert!(
        current.contains("schema version 10") && current.contains("up to date"),
        "{current}"
    );
    execute(format!(
        "DELETE FROM \"{}\".outbox_migrations WHERE version = 10",
        schema.name
    ));
    let behind = sandbox.fails(3, &with(&["migrate", "--check"]));
    assert!(
        behind.contains("schema version 9, behind this build's 10"),
        "{behind}"
    );
    sandbox.ok(&with(&["migrate"]));

    // A newer build migrated it.
    execute(format!(
        "INSERT INTO \"{}\".outbox_migrations (version, name) VALUES (11, 'from a newer build')",
        schema.name
    ));
    let ahead = sandbox.fails(4, &with(&["migrate", "--check"]));
    assert!(
        ahead.contains("schema version 11, newer than the version this build knows (10)"),
        "{ahead}"
    );
    // Refused before anything is written, with or without migrating: exit 2, as for
    // any outbox this build cannot open.
    for args in [&["run"][..], &["run", "--no-migrate"], &["status"]] {
        let refused = sandbox.fails(2, &with(args));
        assert!(
            refused.contains("schema version 11, newer than the version this build")
                && refused.contains("knows (10)"),
            "{args:?}: {refused}"
        );
    }
}

#[test]
fn migrate_check_on_a_sqlite_file() {
    let sandbox = Sandbox::new();
    sandbox.write(
        "relay.toml",
        &test_config("sqlite:relay.db", "", free_port()),
    );
    let cfg = ["--config", "relay.toml"];
    let with =
        |args: &[&'static str]| -> Vec<&'static str> { cfg.iter().chain(args).copied().collect() };
    let missing = sandbox.fails(3, &with(&["migrate", "--check"]));
    assert!(missing.contains("no outbox schema"), "{missing}");
    assert!(
        !sandbox.files().contains(&"relay.db".to_owned()),
        "--check creates nothing"
    );
    let sql = sandbox.ok(&with(&["migrate", "--print-sql"]));
    assert!(
        sql.contains("BEGIN IMMEDIATE;") && sql.contains("CREATE TABLE IF NOT EXISTS outbox (")
    );
    sandbox.ok(&with(&["migrate"]));
    let current = sandbox.ok(&with(&["migrate", "--check"]));
    assert!(current.contains("up to date"), "{current}");
}
