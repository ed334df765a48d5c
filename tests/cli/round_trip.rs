//! The operator's round trip: `run`, `enqueue`, the deliveries on the log sink, `status`,
//! dead letters listed, shown and requeued, `purge`, and a graceful stop by signal; on
//! SQLite with a config, on PostgreSQL in a schema of its own, and with no config at all.

use serde_json::Value;

use crate::{
    dead_letter_through_the_store, free_port, lane_status, postgres_url, scrape, test_config,
    Sandbox, Schema,
};

#[test]
fn sqlite_run_enqueue_deliver_dead_letter_requeue_and_sigterm() {
    let sandbox = Sandbox::new();
    let port = free_port();
    sandbox.write("relay.toml", &test_config("sqlite:relay.db", "", port));
    let cfg = ["--config", "relay.toml"];

    // A poison message, dead-lettered before the relay starts.
    let poison = sandbox.enqueue(
        &cfg,
        "orders",
        "audit",
        &["--payload", r#"{"poison":true}"#, "--max-attempts", "1"],
    );
    dead_letter_through_the_store(&sandbox.path("relay.db"), "orders", 1);

    let mut relay = sandbox.start(&["--config", "relay.toml", "run"]);
    let mut ids = Vec::new();
    for n in 1..=3 {
        let payload = format!(r#"{{"n":{n}}}"#);
        ids.push(sandbox.enqueue(
            &cfg,
            "orders",
            "audit",
            &[
                "--payload",
                &payload,
                "--ordering-key",
                "customer-7",
                "--header",
                "x-trace=t1",
            ],
        ));
    }
    for (n, id) in ids.iter().enumerate() {
        let line = relay.delivery();
        assert_eq!(line["outbox_id"], id.as_str(), "per-key order");
        assert_eq!(line["lane"], "orders");
        assert_eq!(line["target"], "audit");
        assert_eq!(line["ordering_key"], "customer-7");
        assert_eq!(line["attempt"], 1);
        assert_eq!(line["headers"]["x-trace"], "t1");
        assert_eq!(line["payload"]["n"], n + 1);
    }

    let status = sandbox.status(&cfg);
    let row = lane_status(&status, "orders", "audit");
    assert_eq!(row["delivered"], 3, "{row}");
    assert_eq!(row["dead_letter"], 1, "{row}");
    assert_eq!(row["pending"], 0, "{row}");
    assert_eq!(row["claimed"], 0, "{row}");
    let table = sandbox.ok(&["--config", "relay.toml", "status"]);
    assert!(
        table.contains("DEAD_LETTER") && table.contains("orders"),
        "{table}"
    );

    // The dead letter, as an operator finds it.
    let listed: Vec<Value> = serde_json::from_str(&sandbox.ok(&[
        "--config",
        "relay.toml",
        "dead-letters",
        "list",
        "--lane",
        "orders",
        "--json",
    ]))
    .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["outbox_id"], poison.as_str());
    let shown: Value = serde_json::from_str(&sandbox.ok(&[
        "--config",
        "relay.toml",
        "dead-letters",
        "show",
        &poison,
    ]))
    .unwrap();
    assert_eq!(shown["status"], "dead_letter");
    assert!(
        shown["last_error"].as_str().unwrap().contains("poison"),
        "{shown}"
    );
    // Timestamps in JSON are RFC 3339, UTC, to the millisecond.
    let at = |field: &str| {
        let text = shown[field]
            .as_str()
            .unwrap_or_else(|| panic!("{field}: {shown}"));
        assert!(text.ends_with('Z') && text.len() == 24, "{field}: {text}");
        text.parse::<outbox_relay::time::UnixMillis>()
            .unwrap_or_else(|e| panic!("{field}: {text}: {e}"))
    };
    assert!(at("created_at") <= at("updated_at"), "{shown}");
    at("available_at");
    assert!(shown["delivered_at"].is_null(), "{shown}");

    // No selector is never "all".
    let refused = sandbox.fails(2, &["--config", "relay.toml", "dead-letters", "requeue"]);
    assert!(refused.contains("--all"), "{refused}");
    let refused = sandbox.fails(2, &["--config", "relay.toml", "dead-letters", "discard"]);
    assert!(refused.contains("--all"), "{refused}");
    assert_eq!(
        lane_status(&sandbox.status(&cfg), "orders", "audit")["dead_letter"],
        1
    );

    let requeued = sandbox.ok(&["--config", "relay.toml", "dead-letters", "requeue", &poison]);
    assert!(requeued.contains("requeued 1 dead letter"), "{requeued}");
    let line = relay.delivery();
    assert_eq!(line["outbox_id"], poison.as_str());
    assert_eq!(line["payload"]["poison"], true);
    assert_eq!(line["attempt"], 1, "a requeue resets the attempts");

    // The metrics endpoint serves the relay's counters.
    let page = scrape(port);
    assert!(page.contains("outbox_delivered_total"), "{page}");

    // A burst, then SIGTERM at once: every message ends delivered or pending, none claimed.
    let burst: Vec<String> = (0..8)
        .map(|n| sandbox.enqueue(&cfg, "orders", "audit", &["--payload", &n.to_string()]))
        .collect();
    let (status, log) = relay.terminate();
    assert!(status.success(), "exit {status}:\n{log}");
    assert!(log.contains("relay stopped"), "{log}");
    let row = lane_status(&sandbox.status(&cfg), "orders", "audit").clone();
    assert_eq!(row["claimed"], 0, "nothing stuck claimed: {row}");
    assert_eq!(row["dead_letter"], 0, "{row}");
    let delivered = row["delivered"].as_u64().unwrap();
    let pending = row["pending"].as_u64().unwrap();
    assert_eq!(
        delivered + pending,
        4 + burst.len() as u64,
        "nothing lost: {row}"
    );

    // A dry run counts and deletes nothing; purge leaves young rows alone.
    let dry = sandbox.ok(&[
        "--config",
        "relay.toml",
        "purge",
        "--older-than",
        "1ms",
        "--dry-run",
    ]);
    assert!(
        dry.contains(&format!("would purge {delivered} ")),
        "every delivered row counted: {dry}"
    );
    assert_eq!(
        lane_status(&sandbox.status(&cfg), "orders", "audit")["delivered"],
        delivered,
        "a dry run deletes nothing"
    );
    let purged = sandbox.ok(&["--config", "relay.toml", "purge", "--older-than", "1h"]);
    assert!(purged.contains("purged 0"), "{purged}");
}

#[test]
fn run_without_a_config_uses_outbox_db_and_the_default_log_lane() {
    let sandbox = Sandbox::new();
    assert!(sandbox.files().is_empty());
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut relay = sandbox.start(&["run", "--metrics-listen", &metrics]);
    relay.wait_for_log("relay running");
    assert!(sandbox.path("outbox.db").exists(), "{:?}", sandbox.files());

    let id = sandbox.enqueue(
        &[],
        "default",
        "log",
        &["--payload", r#"{"hello":"world"}"#],
    );
    let line = relay.delivery();
    assert_eq!(line["outbox_id"], id.as_str());
    assert_eq!(line["payload"]["hello"], "world");
    assert_eq!(line["lane"], "default");
    assert_eq!(line["target"], "log");

    // Ctrl-C stops it as gracefully as SIGTERM.
    let (status, log) = relay.signal("INT");
    assert!(status.success(), "exit {status}:\n{log}");
    assert!(
        log.contains("SIGINT") && log.contains("relay stopped"),
        "{log}"
    );
    let status = sandbox.status(&[]);
    assert_eq!(lane_status(&status, "default", "log")["delivered"], 1);
}

fn relay_stopped_cleanly(log: &str) -> bool {
    log.contains("SIGTERM") && log.contains("relay stopped")
}

#[test]
fn postgres_run_enqueue_deliver_and_sigterm() {
    let url = postgres_url();
    let schema = Schema {
        name: format!("cli_{}", uuid::Uuid::new_v4().simple()),
    };
    let sandbox = Sandbox::new();
    let extra = format!("schema = \"{}\"", schema.name);
    sandbox.write("relay.toml", &test_config(&url, &extra, free_port()));
    let cfg = ["--config", "relay.toml"];

    let mut relay = sandbox.start(&["--config", "relay.toml", "run"]);
    relay.wait_for_log("relay running");
    let ids: Vec<String> = (1..=3)
        .map(|n| {
            let payload = format!(r#"{{"n":{n}}}"#);
            sandbox.enqueue(
                &cfg,
                "orders",
                "audit",
                &["--payload", &payload, "--ordering-key", "k"],
            )
        })
        .collect();
    for id in &ids {
        assert_eq!(relay.delivery()["outbox_id"], id.as_str());
    }
    let status = sandbox.status(&cfg);
    let row = lane_status(&status, "orders", "audit");
    assert_eq!(row["delivered"], 3, "{row}");
    assert_eq!(row["pending"], 0, "{row}");

    let (status, log) = relay.terminate();
    assert!(status.success(), "exit {status}:\n{log}");
    assert!(relay_stopped_cleanly(&log), "{log}");
    assert_eq!(
        lane_status(&sandbox.status(&cfg), "orders", "audit")["claimed"],
        0
    );
    // Nothing was written outside the schema's sandbox: no SQLite file appeared.
    assert_eq!(sandbox.files(), vec!["relay.toml"]);
}

/// The daemon through PgBouncer in transaction mode: `run` with `pooler = "transaction"`
/// and a direct `listen_url` in its file, the admin commands with `OUTBOX_PG_POOLER` over a
/// file that names only the pooled URL. Without the setting, PgBouncer refuses the
/// connection (its startup parameters), and the command says so.
#[test]
fn postgres_run_through_pgbouncer_in_transaction_mode() {
    let url = postgres_url();
    let bouncer = crate::pgbouncer_process::PgBouncer::start(&url, 2);
    let pooled = bouncer.url_like(&url);
    let schema = Schema {
        name: format!("cli_{}", uuid::Uuid::new_v4().simple()),
    };
    let sandbox = Sandbox::new();
    let relay_extra = format!(
        "schema = \"{}\"\n[postgres]\npooler = \"transaction\"\nlisten_url = \"{url}\"",
        schema.name
    );
    sandbox.write(
        "relay.toml",
        &test_config(&pooled, &relay_extra, free_port()),
    );
    let admin_extra = format!("schema = \"{}\"", schema.name);
    sandbox.write(
        "admin.toml",
        &test_config(&pooled, &admin_extra, free_port()),
    );
    let admin = ["--config", "admin.toml"];

    let refused = sandbox.run(&["--config", "admin.toml", "status", "--json"]);
    assert_ne!(refused.code, Some(0), "{refused:#?}");
    assert!(
        refused.stderr.contains("unsupported startup parameter"),
        "{refused:#?}"
    );

    let mut relay = sandbox.start(&["--config", "relay.toml", "run"]);
    relay.wait_for_log("relay running");
    let pooled_admin = |args: &[&str]| -> String {
        let mut all = admin.to_vec();
        all.extend(args);
        let out = sandbox.output(sandbox.command(&all).env("OUTBOX_PG_POOLER", "transaction"));
        assert_eq!(out.code, Some(0), "outbox-relay {all:?}: {out:#?}");
        out.stdout
    };
    let ids: Vec<String> = (1..=3)
        .map(|n| {
            let payload = format!(r#"{{"n":{n}}}"#);
            let answer: Value = serde_json::from_str(&pooled_admin(&[
                "enqueue",
                "--lane",
                "orders",
                "--target",
                "audit",
                "--json",
                "--payload",
                &payload,
                "--ordering-key",
                "k",
            ]))
            .expect("enqueue --json");
            answer["outbox_id"].as_str().unwrap().to_owned()
        })
        .collect();
    for id in &ids {
        assert_eq!(relay.delivery()["outbox_id"], id.as_str());
    }
    let status: Vec<Value> =
        serde_json::from_str(&pooled_admin(&["status", "--json"])).expect("status --json");
    let row = lane_status(&status, "orders", "audit");
    assert_eq!(row["delivered"], 3, "{row}");
    let (status, log) = relay.terminate();
    assert!(status.success(), "exit {status}:\n{log}");
    assert!(relay_stopped_cleanly(&log), "{log}");
}

#[test]
fn a_lane_pattern_serves_a_lane_first_written_while_the_daemon_runs() {
    let sandbox = Sandbox::new();
    let port = free_port();
    let pattern = r#"
[[lane_patterns]]
lane = "tenant-*"
target = "billing"
max_lanes = 10
max_poll_interval = "200ms"
sink = { kind = "log" }
"#;
    sandbox.write("relay.toml", &test_config("sqlite:relay.db", pattern, port));
    let cfg = ["--config", "relay.toml"];
    let mut relay = sandbox.start(&["--config", "relay.toml", "run"]);
    relay.wait_for_log("relay running");

    let id = sandbox.enqueue(&cfg, "tenant-1041", "billing", &["--payload", "{}"]);
    let line = relay.delivery();
    assert_eq!(line["outbox_id"], id.as_str());
    assert_eq!(line["lane"], "tenant-1041");
    assert_eq!(line["target"], "billing");
    let (status, stderr) = relay.terminate();
    assert!(status.success(), "{stderr}");
    assert!(
        stderr.contains("starting a lane of a lane pattern"),
        "{stderr}"
    );
}
