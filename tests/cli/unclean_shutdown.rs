//! A shutdown that cannot record its acks says so, and exits 1: the database refuses the
//! relay's connections while a delivery runs, so its ack is never recorded and the message
//! will be delivered again.

use std::time::{Duration, Instant};

use crate::refusal::{sql, TestRole};
use crate::{free_port, lane_status, postgres_url, test_config, Sandbox, Schema, WAIT};

#[test]
fn a_shutdown_whose_acks_postgres_cannot_record_exits_1_and_says_so() {
    let schema = Schema {
        name: format!("cli_{}", uuid::Uuid::new_v4().simple()),
    };
    let sandbox = Sandbox::new();
    let extra = format!("schema = \"{}\"", schema.name);
    // Each delivery takes 2 s: long enough to cut the database away under it.
    let config = test_config(&postgres_url(), &extra, free_port())
        .replace("shutdown_timeout = \"10s\"", "shutdown_timeout = \"5s\"")
        .replace(
            "sink = { kind = \"log\" }",
            "sink = { kind = \"log\", delay = \"2s\" }",
        );
    sandbox.write("relay.toml", &config);
    let cfg = ["--config", "relay.toml"];
    sandbox.ok(&["--config", "relay.toml", "migrate"]);

    let role = TestRole {
        name: format!("relay_{}", uuid::Uuid::new_v4().simple()),
    };
    let (name, schema_name) = (&role.name, &schema.name);
    sql(&[
        format!("CREATE ROLE {name} LOGIN"),
        format!("GRANT USAGE ON SCHEMA {schema_name} TO {name}"),
        format!(
            "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema_name} TO {name}"
        ),
        format!("GRANT USAGE ON ALL SEQUENCES IN SCHEMA {schema_name} TO {name}"),
    ]);
    let url = format!("postgres://{name}@127.0.0.1:5432/test");
    let relay = sandbox.start(&[
        "--config",
        "relay.toml",
        "--database-url",
        &url,
        "run",
        "--no-migrate",
    ]);
    sandbox.enqueue(&cfg, "orders", "audit", &["--payload", "1"]);
    let deadline = Instant::now() + WAIT;
    while lane_status(&sandbox.status(&cfg), "orders", "audit")["claimed"] != 1 {
        assert!(
            Instant::now() < deadline,
            "never claimed:\n{}",
            relay.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The database refuses the relay from now on: its ack cannot be recorded.
    sql(&[
        format!("ALTER ROLE {name} NOLOGIN"),
        format!("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{name}'"),
    ]);
    let (status, stderr) = relay.terminate();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("shutdown incomplete") && stderr.contains("delivered again"),
        "{stderr}"
    );
    assert!(stderr.contains("not everything was recorded"), "{stderr}");
}
