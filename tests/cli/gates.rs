//! `status` shows each lane's claim gates: what the config sets up, and the live breaker
//! state the running relay reports on its metrics endpoint.

use crate::{free_port, lane_status, test_config, Sandbox};

#[test]
fn status_shows_the_configured_gates_and_the_running_relays_breaker_state() {
    let sandbox = Sandbox::new();
    let port = free_port();
    let config = test_config("sqlite:relay.db", "", port).replace(
        "sink = { kind = \"log\" }",
        "rate_limit = \"100/s\"\nbreaker = { consecutive_failures = 3 }\nsink = { kind = \"log\" }",
    );
    sandbox.write("relay.toml", &config);
    let cfg = ["--config", "relay.toml"];
    sandbox.enqueue(&cfg, "orders", "audit", &["--payload", "{}"]);

    // No relay running: the configured gates, no live state.
    let status = sandbox.status(&cfg);
    let gates = &lane_status(&status, "orders", "audit")["gates"];
    assert_eq!(gates["rate_limit"], "100/1s (burst 100)", "{gates}");
    assert_eq!(gates["breaker"], true, "{gates}");
    assert!(gates["breaker_state"].is_null(), "{gates}");

    let mut relay = sandbox.start(&["--config", "relay.toml", "run"]);
    relay.wait_for_log("relay running");
    relay.delivery();
    let status = sandbox.status(&cfg);
    let gates = &lane_status(&status, "orders", "audit")["gates"];
    assert_eq!(gates["breaker_state"], "closed", "{gates}");
    let table = sandbox.ok(&["--config", "relay.toml", "status"]);
    assert!(
        table.contains("GATES") && table.contains("rate 100/1s (burst 100), breaker closed"),
        "{table}"
    );
    let (status, log) = relay.terminate();
    assert!(status.success(), "exit {status}:\n{log}");
}
