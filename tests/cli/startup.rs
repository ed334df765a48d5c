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
