//! What the daemon's log says about deliveries: each event once, at its level, without
//! ractor's `Actor{id=…}` span.

use crate::{free_port, test_config, Sandbox};

/// One lane that delivers (the log sink) and one that cannot (a webhook to a port nobody
/// listens on), at `RUST_LOG=info,outbox_relay=debug`: the delivery is one DEBUG line, the
/// dead letter one WARN line, and no line carries an actor's span.
#[test]
fn a_dead_letter_is_one_warn_and_a_delivery_one_debug_line_without_actor_spans() {
    let sandbox = Sandbox::new();
    let nobody = free_port();
    let config = test_config("sqlite:relay.db", "", free_port())
        + &format!(
            r#"
[[lanes]]
lane = "orders"
target = "hook"
max_poll_interval = "200ms"
sink = {{ kind = "webhook", url = "http://127.0.0.1:{nobody}/in" }}
"#
        );
    sandbox.write("relay.toml", &config);
    let cfg = ["--config", "relay.toml"];
    let good = sandbox.enqueue(&cfg, "orders", "audit", &["--payload", "1"]);
    let doomed = sandbox.enqueue(
        &cfg,
        "orders",
        "hook",
        &["--payload", "2", "--max-attempts", "1"],
    );

    let mut command = sandbox.command(&["--config", "relay.toml", "run"]);
    command.env("RUST_LOG", "info,outbox_relay=debug");
    let mut daemon = crate::Daemon::start(command);
    let delivered = daemon.delivery();
    assert_eq!(delivered["outbox_id"], good.as_str(), "{delivered}");
    daemon.wait_for_log("dead-lettered");
    daemon.wait_for_log(&format!("{good} attempt=1"));
    let (status, log) = daemon.terminate();
    assert!(status.success(), "{status}:\n{log}");

    let lines_about = |id: &str, what: &str| -> Vec<&str> {
        log.lines()
            .filter(|line| line.contains(id) && line.contains(what))
            .collect()
    };
    let dead = lines_about(&doomed, "dead-lettered");
    assert_eq!(dead.len(), 1, "one line for the dead letter:\n{log}");
    assert!(dead[0].contains("WARN"), "at WARN: {}", dead[0]);
    assert!(
        dead[0].contains("lane=orders") && dead[0].contains("target=hook"),
        "{}",
        dead[0]
    );
    assert!(
        lines_about(&doomed, "delivery failed")
            .iter()
            .all(|line| line.contains("dead-lettered")),
        "no second line for the failure:\n{log}"
    );
    let delivered = lines_about(&good, "delivered");
    assert_eq!(delivered.len(), 1, "one line for the delivery:\n{log}");
    assert!(delivered[0].contains("DEBUG"), "{}", delivered[0]);
    assert!(
        !log.contains("Actor{"),
        "no line carries ractor's actor span:\n{log}"
    );
}
