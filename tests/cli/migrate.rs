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
fn read_only_commands_write_no_ddl_and_migrate_does() {
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
