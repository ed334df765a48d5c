//! Controlling a running daemon: the lane control routes of its listener,
//! `outbox-relay pause|resume` through the store (fleet-wide), and SIGHUP reloading its
//! lanes from the config file.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::{free_port, http_get, test_config, Daemon, Sandbox, WAIT};

/// Sends SIGHUP to the daemon, which keeps running.
fn hangup(daemon: &Daemon) {
    let status = Command::new("kill")
        .args(["-HUP", &daemon.child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -HUP failed");
}

/// Waits until the daemon's log contains `text` `times` times.
fn wait_for_log_count(daemon: &mut Daemon, text: &str, times: usize) {
    let deadline = Instant::now() + WAIT;
    while daemon.stderr().matches(text).count() < times {
        if let Ok(Some(status)) = daemon.child.try_wait() {
            panic!("the relay exited ({status}):\n{}", daemon.stderr());
        }
        assert!(
            Instant::now() < deadline,
            "{text:?} not {times} times in the log:\n{}",
            daemon.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The `outbox_lane_state` gauge of `orders/{target}` in `state`.
fn lane_state(port: u16, target: &str, state: &str) -> Option<f64> {
    let (_, page) = http_get(port, "/metrics");
    page.lines()
        .find(|line| {
            line.starts_with("outbox_lane_state{")
                && line.contains("lane=\"orders\"")
                && line.contains(&format!("target=\"{target}\""))
                && line.contains(&format!("state=\"{state}\""))
        })
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
}

/// Waits until the `outbox_lane_state` gauge of `orders/{target}` says `state`: a
/// fleet-wide pause reaches the daemon within its lane-control poll (500 ms).
fn wait_for_lane_state(daemon: &Daemon, port: u16, target: &str, state: &str) {
    let deadline = Instant::now() + WAIT;
    while lane_state(port, target, state) != Some(1.0) {
        assert!(
            Instant::now() < deadline,
            "orders/{target} not {state} within {WAIT:?}:\n{}",
            daemon.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn second_lane() -> &'static str {
    r#"
[[lanes]]
lane = "orders"
target = "second"
max_poll_interval = "200ms"
sink = { kind = "log" }
"#
}

/// The control token, in a file the daemon and the CLI read from the sandbox.
const TOKEN: &str = "cli-test-control-token-0123456789";
const WITH_TOKEN: &str = "[listener]\ncontrol_token_file = \"control.token\"";

/// POSTs `path` with `authorization` (a header value) to the listener: status and body.
fn http_post(port: u16, path: &str, authorization: Option<&str>) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream.set_read_timeout(Some(WAIT)).unwrap();
    let authorization = authorization
        .map(|value| format!("Authorization: {value}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\n{authorization}Content-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {response:?}"));
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}

#[test]
fn a_pause_without_the_control_token_is_refused_and_changes_nothing() {
    let sandbox = Sandbox::new();
    sandbox.write("control.token", &format!("{TOKEN}\n"));
    let port = free_port();
    sandbox.write(
        "relay.toml",
        &test_config("sqlite:relay.db", WITH_TOKEN, port),
    );
    let mut daemon = sandbox.start(&["--config", "relay.toml", "run"]);
    daemon.wait_for_log("relay running");
    for authorization in [None, Some("Bearer not-the-control-token-at-all")] {
        let (status, body) = http_post(port, "/api/v1/lanes/orders/audit/pause", authorization);
        assert_eq!(status, 401, "{authorization:?}: {body}");
    }
    assert_eq!(lane_state(port, "audit", "paused"), Some(0.0));
    let (status, body) = http_post(
        port,
        "/api/v1/lanes/orders/audit/pause",
        Some(&format!("Bearer {TOKEN}")),
    );
    assert_eq!(status, 200, "{body}");
    wait_for_lane_state(&daemon, port, "audit", "paused");
    let (status, log) = daemon.terminate();
    assert!(status.success(), "exit {status}:\n{log}");

    // Without a token configured, the mutating routes are off (a database of its own: the
    // pause above holds in relay.db).
    let port = free_port();
    sandbox.write("relay.toml", &test_config("sqlite:second.db", "", port));
    let mut daemon = sandbox.start(&["--config", "relay.toml", "run"]);
    daemon.wait_for_log("relay running");
    assert!(
        daemon.stderr().contains("POST /api/v1/… (off: no token)"),
        "{}",
        daemon.stderr()
    );
    let (status, body) = http_post(
        port,
        "/api/v1/lanes/orders/audit/pause",
        Some(&format!("Bearer {TOKEN}")),
    );
    assert_eq!(status, 403, "{body}");
    assert_eq!(lane_state(port, "audit", "paused"), Some(0.0));
    let (status, log) = daemon.terminate();
    assert!(status.success(), "exit {status}:\n{log}");
}

#[test]
fn pause_and_resume_a_running_daemon_and_reload_its_lanes_on_sighup() {
    let sandbox = Sandbox::new();
    sandbox.write("control.token", &format!("{TOKEN}\n"));
    let port = free_port();
    let config = test_config("sqlite:relay.db", WITH_TOKEN, port);
    sandbox.write("relay.toml", &config);
    let cfg = ["--config", "relay.toml"];
    let mut daemon = sandbox.start(&["--config", "relay.toml", "run"]);
    daemon.wait_for_log("relay running");

    // Pause orders/audit in the store: the daemon applies it within a second.
    let pause = [
        "--config",
        "relay.toml",
        "pause",
        "--lane",
        "orders",
        "--target",
    ];
    let resume = [
        "--config",
        "relay.toml",
        "resume",
        "--lane",
        "orders",
        "--target",
    ];
    let out = sandbox.ok(&[&pause[..], &["audit", "--reason", "test"]].concat());
    assert!(
        out.starts_with("paused orders/audit for every relay on sqlite:relay.db (by cli:"),
        "{out}"
    );
    wait_for_lane_state(&daemon, port, "audit", "paused");
    let held = sandbox.enqueue(&cfg, "orders", "audit", &["--payload", "1"]);
    // A paused lane delivers nothing; the lane polls every 200 ms, so 2 s would show it.
    // (Under heavy load this check can only pass wrongly, never fail wrongly.)
    assert!(
        daemon.lines.recv_timeout(Duration::from_secs(2)).is_err(),
        "a paused lane delivered:\n{}",
        daemon.stderr()
    );
    let out = sandbox.ok(&[&resume[..], &["audit"]].concat());
    assert!(
        out.starts_with("resumed orders/audit for every relay on sqlite:relay.db (paused by cli:"),
        "{out}"
    );
    assert_eq!(daemon.delivery()["outbox_id"], held.as_str());
    wait_for_lane_state(&daemon, port, "audit", "running");
    let out = sandbox.ok(&[&resume[..], &["audit"]].concat());
    assert_eq!(out.trim(), "orders/audit was not paused on sqlite:relay.db");

    // An empty target is refused, naming the field.
    let refused = sandbox.fails(2, &[&pause[..], &[""]].concat());
    assert!(refused.contains("target"), "{refused}");
    // The control routes take POST only.
    assert_eq!(http_get(port, "/api/v1/lanes/orders/audit/pause").0, 405);

    // SIGHUP with a lane added.
    sandbox.write("relay.toml", &(config.clone() + second_lane()));
    hangup(&daemon);
    wait_for_log_count(&mut daemon, "lanes reloaded", 1);
    assert!(
        daemon.stderr().contains(r#"added=["orders/second"]"#),
        "{}",
        daemon.stderr()
    );
    let second = sandbox.enqueue(&cfg, "orders", "second", &["--payload", "2"]);
    assert_eq!(daemon.delivery()["outbox_id"], second.as_str());

    // SIGHUP with that lane removed and the other one changed, while paused: it stays
    // paused.
    sandbox.ok(&[&pause[..], &["audit"]].concat());
    wait_for_lane_state(&daemon, port, "audit", "paused");
    sandbox.write(
        "relay.toml",
        &config.replace(
            r#"max_poll_interval = "200ms""#,
            r#"max_poll_interval = "300ms""#,
        ),
    );
    hangup(&daemon);
    wait_for_log_count(&mut daemon, "lanes reloaded", 2);
    let log = daemon.stderr();
    assert!(log.contains(r#"removed=["orders/second"]"#), "{log}");
    assert!(log.contains(r#"changed=["orders/audit"]"#), "{log}");
    assert_eq!(lane_state(port, "audit", "paused"), Some(1.0));
    sandbox.ok(&[&resume[..], &["audit"]].concat());
    let after = sandbox.enqueue(&cfg, "orders", "audit", &["--payload", "3"]);
    assert_eq!(daemon.delivery()["outbox_id"], after.as_str());

    // SIGHUP with a broken file: refused, nothing changes.
    sandbox.write("relay.toml", "[[lanes]\nnot toml");
    hangup(&daemon);
    wait_for_log_count(&mut daemon, "config file was refused", 1);
    sandbox.write("relay.toml", &config);
    let last = sandbox.enqueue(&cfg, "orders", "audit", &["--payload", "4"]);
    assert_eq!(daemon.delivery()["outbox_id"], last.as_str());

    let (status, log) = daemon.terminate();
    assert!(status.success(), "exit {status}:\n{log}");
}

#[test]
fn pause_and_resume_read_the_config_file_that_outbox_config_names() {
    let sandbox = Sandbox::new();
    sandbox.write(
        "relay.toml",
        &test_config("sqlite:relay.db", "", free_port()),
    );
    sandbox.ok(&["--config", "relay.toml", "migrate"]);
    let args = ["pause", "--lane", "orders", "--target", "audit"];
    // Without it, the embedded default's ./outbox.db, which does not exist.
    let refused = sandbox.fails(2, &args);
    assert!(refused.contains("outbox.db"), "{refused}");
    let out = sandbox.output(sandbox.command(&args).env("OUTBOX_CONFIG", "relay.toml"));
    assert_eq!(out.code, Some(0), "{out:#?}");
    assert!(
        out.stdout
            .starts_with("paused orders/audit for every relay on sqlite:relay.db"),
        "{out:#?}"
    );
}
