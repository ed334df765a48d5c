//! What the daemon's listener answers besides the metrics: liveness, readiness, the API,
//! 404 for any other path, and only the route groups `[listener] routes` names.

use serde_json::Value;

use crate::{free_port, http_get, test_config, Sandbox};

#[test]
fn the_metrics_listener_answers_liveness_readiness_and_404() {
    let sandbox = Sandbox::new();
    let port = free_port();
    sandbox.write("relay.toml", &test_config("sqlite:relay.db", "", port));
    let mut relay = sandbox.start(&["--config", "relay.toml", "run"]);
    relay.wait_for_log("relay running");

    assert_eq!(http_get(port, "/healthz"), (200, "ok\n".to_owned()));
    let (status, body) = http_get(port, "/readyz");
    assert_eq!(status, 200, "{body}");
    let ready: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(ready, serde_json::json!({ "ready": true }));
    let (status, body) = http_get(port, "/metrics");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("# TYPE outbox_pending gauge"), "{body}");
    assert_eq!(http_get(port, "/").0, 404);
    assert_eq!(http_get(port, "/anything").0, 404);

    let (status, log) = relay.terminate();
    assert!(status.success(), "exit {status}:\n{log}");
}

#[test]
fn the_listener_serves_only_the_route_groups_its_config_names() {
    let sandbox = Sandbox::new();
    let port = free_port();
    let routes = "[listener]\nroutes = [\"probes\", \"api\"]";
    sandbox.write("relay.toml", &test_config("sqlite:relay.db", routes, port));
    let mut relay = sandbox.start(&["--config", "relay.toml", "run"]);
    relay.wait_for_log("relay running");

    assert_eq!(http_get(port, "/healthz"), (200, "ok\n".to_owned()));
    let (status, body) = http_get(port, "/api/v1/lanes");
    assert_eq!(status, 200, "{body}");
    let lanes: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(lanes["lanes"][0]["lane"]["lane"], "orders", "{body}");
    assert_eq!(http_get(port, "/metrics").0, 404);

    let (status, log) = relay.terminate();
    assert!(status.success(), "exit {status}:\n{log}");
}
