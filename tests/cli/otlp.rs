//! The daemon's OTLP export: on when the config names an endpoint (spans arrive at a fake
//! collector as OTLP/HTTP protobuf), off without one.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::{free_port, test_config, Daemon, Sandbox, WAIT};

/// What the fake collector received: (path, content-type, body) per request.
type Requests = Arc<Mutex<Vec<(String, String, Vec<u8>)>>>;

/// An HTTP server on port 0 that answers 200 to every request and keeps it.
fn collector() -> (u16, Requests) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    let requests: Requests = Arc::default();
    let keep = requests.clone();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let keep = keep.clone();
            thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                let mut writer = stream;
                // Requests on one connection, one after another (keep-alive).
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let path = line.split(' ').nth(1).unwrap_or_default().to_owned();
                    let (mut length, mut content_type) = (0usize, String::new());
                    loop {
                        let mut header = String::new();
                        if reader.read_line(&mut header).unwrap_or(0) == 0 {
                            return;
                        }
                        let Some((name, value)) = header.trim_end().split_once(':') else {
                            break;
                        };
                        match name.trim().to_ascii_lowercase().as_str() {
                            "content-length" => length = value.trim().parse().unwrap_or(0),
                            "content-type" => content_type = value.trim().to_owned(),
                            _ => {}
                        }
                    }
                    let mut body = vec![0; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    keep.lock().unwrap().push((path, content_type, body));
                    let answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
                    if writer.write_all(answer).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (port, requests)
}

fn start(sandbox: &Sandbox) -> Daemon {
    let mut command = sandbox.command(&["--config", "relay.toml", "run"]);
    command
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    Daemon::start(command)
}

#[test]
fn the_daemon_exports_spans_over_otlp_only_when_configured() {
    let (collector_port, requests) = collector();
    let sandbox = Sandbox::new();
    let extra = format!(r#"otlp_endpoint = "http://127.0.0.1:{collector_port}""#);
    sandbox.write(
        "relay.toml",
        &test_config("sqlite:relay.db", &extra, free_port()),
    );
    let mut daemon = start(&sandbox);
    daemon.wait_for_log("exporting spans over OTLP");
    let id = sandbox.enqueue(
        &["--config", "relay.toml"],
        "orders",
        "audit",
        &["--payload", "1"],
    );
    assert_eq!(daemon.delivery()["outbox_id"], id.as_str());
    // The shutdown flushes the batch.
    let (status, log) = daemon.terminate();
    assert!(status.success(), "exit {status}:\n{log}");
    let deadline = Instant::now() + WAIT;
    let needle: &[u8] = b"process orders/audit";
    loop {
        let seen = requests.lock().unwrap().clone();
        let delivery = seen
            .iter()
            .find(|(_, _, body)| body.windows(needle.len()).any(|window| window == needle));
        if let Some((path, content_type, _)) = delivery {
            assert_eq!(path, "/v1/traces");
            assert_eq!(content_type, "application/x-protobuf");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no delivery span reached the collector; requests: {:?}\n{log}",
            seen.iter()
                .map(|(path, _, body)| (path, body.len()))
                .collect::<Vec<_>>()
        );
        thread::sleep(Duration::from_millis(20));
    }

    // Without an endpoint: off, and said so.
    let sandbox = Sandbox::new();
    sandbox.write(
        "relay.toml",
        &test_config("sqlite:relay.db", "", free_port()),
    );
    let mut daemon = start(&sandbox);
    daemon.wait_for_log("OTLP export off");
    let (status, log) = daemon.terminate();
    assert!(status.success(), "exit {status}:\n{log}");

    // A bad endpoint is a config error naming the field.
    let sandbox = Sandbox::new();
    let extra = r#"otlp_endpoint = "https://collector:4318""#;
    sandbox.write(
        "relay.toml",
        &test_config("sqlite:relay.db", extra, free_port()),
    );
    let refused = sandbox.fails(2, &["--config", "relay.toml", "run"]);
    assert!(refused.contains("otlp_endpoint"), "{refused}");
}
