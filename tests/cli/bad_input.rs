//! Bad input: a config, a database URL, an address, a port, an enqueue or an admin command
//! that is wrong exits 2 naming what is wrong, and writes nothing.

use std::io::Write;
use std::net::TcpListener;
use std::process::Stdio;

use crate::{dead_letter_through_the_store, free_port, lane_status, test_config, Sandbox};

/// A config error: exit 2, a message naming the file and what is wrong, nothing created.
fn assert_config_error(config: &str, args: &[&str], needles: &[&str]) {
    let sandbox = Sandbox::new();
    sandbox.write("relay.toml", config);
    for command in [
        &["run"][..],
        &["status"][..],
        &[
            "enqueue",
            "--lane",
            "orders",
            "--target",
            "audit",
            "--payload",
            "1",
        ][..],
    ] {
        let mut full = vec!["--config", "relay.toml"];
        full.extend(args);
        full.extend(command);
        let stderr = sandbox.fails(2, &full);
        for needle in needles {
            assert!(stderr.contains(needle), "{needle:?} not in: {stderr}");
        }
        assert_eq!(
            sandbox.files(),
            vec!["relay.toml"],
            "nothing may be written"
        );
    }
}

#[test]
fn bad_configs_exit_2_naming_the_problem_and_write_nothing() {
    let good = test_config("sqlite:relay.db", "", free_port());

    let unknown = good.replace("retry_base", "bogus_field = 1\nretry_base");
    assert_config_error(
        &unknown,
        &[],
        &["relay.toml", "line 12", "unknown field `bogus_field`"],
    );

    let missing_lane = good.replace("lane = \"orders\"\n", "");
    assert_config_error(&missing_lane, &[], &["relay.toml", "missing field `lane`"]);

    let bad_duration = good.replace("retry_max = \"1s\"", "retry_max = \"soon\"");
    assert_config_error(
        &bad_duration,
        &[],
        &["relay.toml", "field `retry_max`", "\"soon\""],
    );

    let bad_url = good.replace("sqlite:relay.db", "mongodb://db/app");
    assert_config_error(&bad_url, &[], &["relay.toml", "database_url", "mongodb"]);

    let bad_value = good.replace("retry_max = \"1s\"", "retry_max = \"1s\"\nconcurrency = 0");
    assert_config_error(
        &bad_value,
        &[],
        &["relay.toml", "lanes[orders/audit].concurrency"],
    );

    // The flag overrides the file, and is checked the same way.
    assert_config_error(
        &good,
        &["--database-url", "redis://x"],
        &["--database-url", "redis"],
    );
}

#[test]
fn the_database_url_from_the_environment_wins_and_is_checked() {
    let sandbox = Sandbox::new();
    sandbox.write(
        "relay.toml",
        &test_config("sqlite:relay.db", "", free_port()),
    );
    let out = sandbox.output(
        sandbox
            .command(&["--config", "relay.toml", "status"])
            .env("OUTBOX_DATABASE_URL", "ftp://nowhere"),
    );
    assert_eq!(out.code, Some(2), "{out:#?}");
    assert!(out.stderr.contains("OUTBOX_DATABASE_URL"), "{out:#?}");

    let out = sandbox.output(
        sandbox
            .command(&[
                "--config",
                "relay.toml",
                "enqueue",
                "--lane",
                "orders",
                "--target",
                "audit",
                "--payload",
                "1",
            ])
            .env("OUTBOX_DATABASE_URL", "sqlite:from-env.db"),
    );
    assert_eq!(out.code, Some(0), "{out:#?}");
    let files = sandbox.files();
    assert!(files.contains(&"from-env.db".to_owned()), "{files:?}");
    assert!(
        !files.iter().any(|f| f.starts_with("relay.db")),
        "{files:?}"
    );
}

#[test]
fn an_unreachable_database_exits_2_naming_its_address() {
    let sandbox = Sandbox::new();
    let config = test_config("postgres://127.0.0.1:1/x", "", free_port())
        .replace("connect_timeout = \"5s\"", "connect_timeout = \"1s\"");
    sandbox.write("relay.toml", &config);
    for command in [&["run"][..], &["status"][..]] {
        let mut args = vec!["--config", "relay.toml"];
        args.extend(command);
        let stderr = sandbox.fails(2, &args);
        assert!(stderr.contains("127.0.0.1:1"), "{stderr}");
    }

    // A SQLite file in a directory that does not exist: named too.
    let stderr = sandbox.fails(
        2,
        &[
            "--database-url",
            "sqlite:no/such/dir/x.db",
            "enqueue",
            "--lane",
            "a",
            "--target",
            "b",
            "--payload",
            "1",
        ],
    );
    assert!(stderr.contains("no/such/dir/x.db"), "{stderr}");
    // An admin command does not create a missing SQLite file.
    let stderr = sandbox.fails(2, &["--database-url", "sqlite:typo.db", "status"]);
    assert!(stderr.contains("no SQLite database at typo.db"), "{stderr}");
    assert_eq!(sandbox.files(), vec!["relay.toml"]);
}

#[test]
fn a_taken_metrics_port_exits_2_naming_it() {
    let sandbox = Sandbox::new();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    sandbox.write("relay.toml", &test_config("sqlite:relay.db", "", port));
    let stderr = sandbox.fails(2, &["--config", "relay.toml", "run"]);
    assert!(stderr.contains(&format!("127.0.0.1:{port}")), "{stderr}");
}

#[test]
fn bad_enqueue_input_exits_2() {
    let sandbox = Sandbox::new();
    let cfg = ["--database-url", "sqlite:relay.db"];
    let cases: [(&[&str], &str); 4] = [
        (&["--payload", "{not json"], "--payload is not valid JSON"),
        (&["--payload", "1", "--header", "novalue"], "NAME=VALUE"),
        (&["--payload", "1", "--delay", "soon"], "invalid duration"),
        (&["--payload", "1", "--max-attempts", "0"], "max_attempts"),
    ];
    for (extra, needle) in cases {
        let mut args = cfg.to_vec();
        args.extend(["enqueue", "--lane", "orders", "--target", "audit"]);
        args.extend(extra);
        let stderr = sandbox.fails(2, &args);
        assert!(stderr.contains(needle), "{needle:?} not in {stderr}");
    }
    assert!(sandbox.files().is_empty(), "{:?}", sandbox.files());

    // Payload from stdin.
    let mut command = sandbox.command(&[
        "--database-url",
        "sqlite:relay.db",
        "enqueue",
        "--lane",
        "orders",
        "--target",
        "audit",
    ]);
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(br#"{"from":"stdin"}"#)
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("enqueued "));
}

#[test]
fn dead_letters_show_refuses_a_message_that_is_not_dead() {
    let sandbox = Sandbox::new();
    let db = ["--database-url", "sqlite:relay.db"];
    let dead = sandbox.enqueue(&db, "orders", "audit", &["--payload", "{}"]);
    dead_letter_through_the_store(&sandbox.path("relay.db"), "orders", 1);
    let pending = sandbox.enqueue(&db, "orders", "audit", &["--payload", "{}"]);

    let mut args = db.to_vec();
    args.extend(["dead-letters", "show", &pending]);
    let refused = sandbox.fails(2, &args);
    assert!(
        refused.contains(&pending) && refused.contains("is pending, not a dead letter"),
        "{refused}"
    );

    let mut args = db.to_vec();
    args.extend(["dead-letters", "show", &dead]);
    let shown: serde_json::Value = serde_json::from_str(&sandbox.ok(&args)).unwrap();
    assert_eq!(shown["outbox_id"], dead.as_str());
    assert_eq!(shown["status"], "dead_letter");
}

#[test]
fn requeue_and_discard_take_ids_a_lane_or_all_and_never_nothing() {
    let sandbox = Sandbox::new();
    let db = ["--database-url", "sqlite:relay.db"];
    for lane in ["orders", "orders", "orders", "refunds", "refunds"] {
        sandbox.enqueue(&db, lane, "audit", &["--payload", "{}"]);
    }
    dead_letter_through_the_store(&sandbox.path("relay.db"), "orders", 3);
    dead_letter_through_the_store(&sandbox.path("relay.db"), "refunds", 2);
    let dead = |lane: &str| -> u64 {
        let status = sandbox.status(&db);
        lane_status(&status, lane, "audit")["dead_letter"]
            .as_u64()
            .unwrap()
    };

    let mut args = db.to_vec();
    args.extend(["dead-letters", "discard", "--target", "audit"]);
    sandbox.fails(2, &args); // --target alone selects nothing
    let mut args = db.to_vec();
    args.extend(["dead-letters", "requeue", "--lane", "orders", "--all"]);
    sandbox.fails(2, &args); // one selector at a time
    assert_eq!((dead("orders"), dead("refunds")), (3, 2));

    let mut args = db.to_vec();
    args.extend([
        "dead-letters",
        "discard",
        "--lane",
        "orders",
        "--target",
        "audit",
    ]);
    assert!(sandbox.ok(&args).contains("discarded 3 dead letters"));
    let status = sandbox.status(&db);
    assert!(
        status.iter().all(|row| row["lane"] != "orders"),
        "{status:?}"
    );

    let mut args = db.to_vec();
    args.extend(["dead-letters", "list", "--limit", "1"]);
    let table = sandbox.ok(&args);
    assert!(
        table.contains("refunds") && table.contains("poison"),
        "{table}"
    );
    assert!(table.contains("more: raise --limit"), "{table}");

    let mut args = db.to_vec();
    args.extend(["dead-letters", "requeue", "--all"]);
    assert!(sandbox.ok(&args).contains("requeued 2 dead letters"));
    let status = sandbox.status(&db);
    let row = lane_status(&status, "refunds", "audit");
    assert_eq!(
        (row["dead_letter"].as_u64(), row["pending"].as_u64()),
        (Some(0), Some(2))
    );

    let mut args = db.to_vec();
    args.extend(["dead-letters", "requeue", "--all"]);
    assert!(sandbox.ok(&args).contains("requeued 0 dead letters"));
}

#[test]
fn a_sink_secret_missing_from_the_environment_exits_2_naming_it() {
    let sandbox = Sandbox::new();
    let config = test_config("sqlite:relay.db", "", free_port()).replace(
        r#"sink = { kind = "log" }"#,
        r#"sink = { kind = "webhook", url = "http://127.0.0.1:9/{lane}", secret_env = "OUTBOX_CLI_TEST_WEBHOOK_SECRET" }"#,
    );
    sandbox.write("relay.toml", &config);
    let stderr = sandbox.fails(2, &["--config", "relay.toml", "run"]);
    for needle in [
        "lanes[orders/audit].sink.secret_env",
        "OUTBOX_CLI_TEST_WEBHOOK_SECRET is not set",
    ] {
        assert!(stderr.contains(needle), "{needle:?} not in: {stderr}");
    }
    // Sinks are built before the store is opened: no database file appeared.
    assert_eq!(sandbox.files(), vec!["relay.toml"]);
}
