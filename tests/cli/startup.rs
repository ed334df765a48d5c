//! Signals during start-up: the relay stops at once instead of finishing its connect.

use std::net::TcpListener;

use crate::{free_port, test_config, Sandbox};

#[test]
fn sigterm_while_the_database_connect_hangs_stops_the_relay_at_once() {
    // A listener that never accepts: the kernel completes the TCP handshake, and the
    // PostgreSQL start-up message is never answered, as with a database that hangs.
    let black_hole = TcpListener::bind("127.0.0.1:0").expect("bind a black hole");
    let port = black_hole.local_addr().unwrap().port();
    let sandbox = Sandbox::new();
    // Far longer than the test waits for the exit: a relay that waits its connect out fails.
    let config = test_config(
        &format!("postgres://postgres@127.0.0.1:{port}/test"),
        "",
        free_port(),
    )
    .replace("connect_timeout = \"5s\"", "connect_timeout = \"600s\"");
    sandbox.write("relay.toml", &config);
    let mut daemon = sandbox.start(&["--config", "relay.toml", "run"]);
    // Logged right before the store is opened.
    daemon.wait_for_log("serving Prometheus metrics");
    let (status, stderr) = daemon.terminate();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("stopped during start-up"), "{stderr}");
    drop(black_hole);
}

/// A broker that never answers: a loopback listener that accepts every connection, holds
/// it open and never writes a byte (an AMQP or Redis client waits for the server to speak
/// first, or for its reply). Each accepted connection is reported on the channel.
struct SilentBroker {
    port: u16,
    accepted: std::sync::mpsc::Receiver<()>,
}

impl SilentBroker {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a silent broker");
        let port = listener.local_addr().unwrap().port();
        let (report, accepted) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                held.push(stream);
                if report.send(()).is_err() {
                    return;
                }
            }
        });
        Self { port, accepted }
    }

    /// Waits until the relay has connected.
    fn wait_for_a_connection(&self, daemon: &crate::Daemon) {
        self.accepted.recv_timeout(crate::WAIT).unwrap_or_else(|_| {
            panic!(
                "the relay never connected to the silent broker:\n{}",
                daemon.stderr()
            )
        });
    }
}

/// Sends SIGTERM and waits for the exit: the exit status, how long it took from before the
/// signal, and the log.
fn terminate_timed(
    daemon: crate::Daemon,
) -> (std::process::ExitStatus, std::time::Duration, String) {
    let started = std::time::Instant::now();
    let (status, log) = daemon.terminate();
    (status, started.elapsed(), log)
}

const SHUTDOWN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

fn amqp_lane(target: &str, port: u16, connect_timeout: &str) -> String {
    format!(
        r#"
[[lanes]]
lane = "orders"
target = "{target}"
sink = {{ kind = "rabbitmq", url = "amqp://127.0.0.1:{port}/%2f", routing_key = "k", connect_timeout = "{connect_timeout}" }}
"#
    )
}

#[test]
fn sigterm_while_an_amqp_sink_connects_at_start_stops_the_relay_within_shutdown_timeout() {
    let broker = SilentBroker::start();
    let sandbox = Sandbox::new();
    // The connect would wait ten minutes: only the signal can end the start in time.
    let config = test_config("sqlite:relay.db", "", free_port())
        + &amqp_lane("shipping", broker.port, "600s");
    sandbox.write("relay.toml", &config);
    let daemon = sandbox.start(&["--config", "relay.toml", "run"]);
    broker.wait_for_a_connection(&daemon);
    let (status, took, log) = terminate_timed(daemon);
    println!("exited {took:?} after SIGTERM (shutdown_timeout {SHUTDOWN_TIMEOUT:?})");
    assert!(
        took <= SHUTDOWN_TIMEOUT,
        "exited {took:?} after SIGTERM, shutdown_timeout is {SHUTDOWN_TIMEOUT:?}:\n{log}"
    );
    assert_eq!(status.code(), Some(0), "after {took:?}:\n{log}");
    assert!(
        log.contains("stopped during start-up, while the sinks were being built"),
        "{log}"
    );
}

#[test]
fn sigterm_while_a_reload_connects_an_amqp_sink_stops_the_relay_within_shutdown_timeout() {
    let broker = SilentBroker::start();
    let sandbox = Sandbox::new();
    let config = test_config("sqlite:relay.db", "", free_port());
    sandbox.write("relay.toml", &config);
    let mut daemon = sandbox.start(&["--config", "relay.toml", "run"]);
    daemon.wait_for_log("relay running");
    sandbox.write(
        "relay.toml",
        &(config + &amqp_lane("shipping", broker.port, "600s")),
    );
    let hangup = std::process::Command::new("kill")
        .args(["-HUP", &daemon.child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(hangup.success(), "kill -HUP failed");
    broker.wait_for_a_connection(&daemon);
    let (status, took, log) = terminate_timed(daemon);
    println!("exited {took:?} after SIGTERM (shutdown_timeout {SHUTDOWN_TIMEOUT:?})");
    assert!(
        took <= SHUTDOWN_TIMEOUT,
        "exited {took:?} after SIGTERM, shutdown_timeout is {SHUTDOWN_TIMEOUT:?}:\n{log}"
    );
    assert_eq!(status.code(), Some(0), "after {took:?}:\n{log}");
    assert!(log.contains("reload abandoned"), "{log}");
    assert!(log.contains("relay stopped"), "{log}");
}

/// `connect_timeout` bounds the AMQP and Redis connects: a broker that accepts and never
/// answers fails the start (exit 2, naming the field and the timeout) instead of hanging it.
#[test]
fn a_silent_broker_fails_the_start_after_connect_timeout() {
    let sandbox = Sandbox::new();
    for (kind, sink) in [
        (
            "rabbitmq",
            r#"{ kind = "rabbitmq", url = "amqp://127.0.0.1:PORT/%2f", routing_key = "k", connect_timeout = "1s" }"#,
        ),
        (
            "redis",
            r#"{ kind = "redis", url = "redis://127.0.0.1:PORT", stream = "s", connect_timeout = "1s" }"#,
        ),
    ] {
        let broker = SilentBroker::start();
        let config = test_config("sqlite:relay.db", "", free_port()).replace(
            r#"sink = { kind = "log" }"#,
            &format!("sink = {}", sink.replace("PORT", &broker.port.to_string())),
        );
        sandbox.write("relay.toml", &config);
        let started = std::time::Instant::now();
        let out = sandbox.run(&["--config", "relay.toml", "run"]);
        let took = started.elapsed();
        assert_eq!(out.code, Some(2), "{kind} after {took:?}: {out:#?}");
        assert!(
            out.stderr.contains("lanes[orders/audit].sink.url")
                && out.stderr.contains("no answer within 1s"),
            "{kind} after {took:?}: {out:#?}"
        );
        assert!(
            broker.accepted.try_recv().is_ok(),
            "{kind}: the relay never reached the broker: {out:#?}"
        );
    }
}
