//! The daemon's OTLP export: on when the config or the environment names an endpoint
//! (spans arrive at a collector written here as OTLP/HTTP protobuf, over plain http or
//! over https with a certificate signed by a CA made for the test), off without one. And
//! the webhook sink's https, which shares the export's TLS config (`outbox_relay::tls`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::{free_port, test_config, Daemon, Sandbox, WAIT};

/// One request the collector received.
#[derive(Debug, Clone)]
struct Request {
    path: String,
    /// Header names lowercased.
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What the collector saw: requests, and TLS handshakes that failed (why, as rustls says).
#[derive(Debug, Default)]
struct Seen {
    requests: Vec<Request>,
    handshake_errors: Vec<String>,
}

type Shared = Arc<Mutex<Seen>>;

/// A collector on port 0 that answers 200 to every request and keeps it: plain HTTP, or
/// HTTPS with `tls`.
fn collector(tls: Option<Arc<rustls::ServerConfig>>) -> (u16, Shared) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    let seen: Shared = Arc::default();
    let keep = seen.clone();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let (keep, tls) = (keep.clone(), tls.clone());
            thread::spawn(move || match tls {
                None => serve(stream, &keep),
                Some(config) => {
                    let mut connection =
                        rustls::ServerConnection::new(config).expect("a TLS connection");
                    while connection.is_handshaking() {
                        if let Err(error) = connection.complete_io(&mut stream) {
                            keep.lock()
                                .unwrap()
                                .handshake_errors
                                .push(error.to_string());
                            return;
                        }
                    }
                    serve(rustls::StreamOwned::new(connection, stream), &keep)
                }
            });
        }
    });
    (port, seen)
}

/// Requests on one connection, one after another (keep-alive).
fn serve(stream: impl Read + Write, keep: &Shared) {
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split(' ').nth(1).unwrap_or_default().to_owned();
        let mut headers = Vec::new();
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let Some((name, value)) = header.trim_end().split_once(':') else {
                break;
            };
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
        let length = headers
            .iter()
            .find(|(name, _)| name == "content-length")
            .and_then(|(_, value)| value.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        keep.lock().unwrap().requests.push(Request {
            path,
            headers,
            body,
        });
        let answer =
            b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
        let writer = reader.get_mut();
        if writer
            .write_all(answer)
            .and_then(|()| writer.flush())
            .is_err()
        {
            return;
        }
    }
}

/// A CA (`ca.pem` in `dir`), and the collector's TLS config with a certificate it signed
/// for localhost and 127.0.0.1. The CA is the test's own: no system trusts it.
fn collector_tls(dir: &Path) -> Arc<rustls::ServerConfig> {
    crate::certificates::make_certificates(dir, "outbox-relay OTLP test CA", "collector");
    let chain = CertificateDer::pem_file_iter(dir.join("collector.pem"))
        .expect("collector.pem")
        .collect::<Result<Vec<_>, _>>()
        .expect("PEM certificates");
    let key = PrivateKeyDer::from_pem_file(dir.join("collector.key")).expect("collector.key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("the collector's certificate");
    Arc::new(config)
}

/// The daemon, with no OTLP variable inherited from the environment running the tests.
fn command(sandbox: &Sandbox) -> Command {
    let mut command = sandbox.command(&["--config", "relay.toml", "run"]);
    for name in [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_CERTIFICATE",
        "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    ] {
        command.env_remove(name);
    }
    command
}

/// Delivers one message through `daemon`, stops it (the shutdown flushes the batch), and
/// waits for the request that carries the delivery's span.
fn delivery_span(sandbox: &Sandbox, mut daemon: Daemon, seen: &Shared) -> Request {
    daemon.wait_for_log("exporting spans over OTLP");
    let id = sandbox.enqueue(
        &["--config", "relay.toml"],
        "orders",
        "audit",
        &["--payload", "1"],
    );
    assert_eq!(daemon.delivery()["outbox_id"], id.as_str());
    let (status, log) = daemon.terminate();
    assert!(status.success(), "exit {status}:\n{log}");
    let deadline = Instant::now() + WAIT;
    let needle: &[u8] = b"process orders/audit";
    loop {
        let requests = seen.lock().unwrap().requests.clone();
        let delivery = requests
            .iter()
            .find(|request| request.body.windows(needle.len()).any(|w| w == needle));
        if let Some(request) = delivery {
            assert_eq!(request.path, "/v1/traces");
            assert_eq!(
                request.header("content-type"),
                Some("application/x-protobuf")
            );
            return request.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no delivery span reached the collector; requests: {:?}, TLS errors: {:?}\n{log}",
            requests
                .iter()
                .map(|r| (&r.path, r.body.len()))
                .collect::<Vec<_>>(),
            seen.lock().unwrap().handshake_errors
        );
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_daemon_exports_spans_over_otlp_only_when_configured() {
    let (collector_port, seen) = collector(None);
    let sandbox = Sandbox::new();
    let extra = format!(r#"otlp_endpoint = "http://127.0.0.1:{collector_port}""#);
    sandbox.write(
        "relay.toml",
        &test_config("sqlite:relay.db", &extra, free_port()),
    );
    let daemon = Daemon::start(command(&sandbox));
    delivery_span(&sandbox, daemon, &seen);

    // Without an endpoint: off, and said so.
    let sandbox = Sandbox::new();
    sandbox.write(
        "relay.toml",
        &test_config("sqlite:relay.db", "", free_port()),
    );
    let mut daemon = Daemon::start(command(&sandbox));
    daemon.wait_for_log("OTLP export off");
    let (status, log) = daemon.terminate();
    assert!(status.success(), "exit {status}:\n{log}");

    // A bad endpoint is a config error naming the field.
    let sandbox = Sandbox::new();
    let extra = r#"otlp_endpoint = "127.0.0.1:4318""#;
    sandbox.write(
        "relay.toml",
        &test_config("sqlite:relay.db", extra, free_port()),
    );
    let refused = sandbox.fails(2, &["--config", "relay.toml", "run"]);
    assert!(refused.contains("otlp_endpoint"), "{refused}");
}

#[test]
fn spans_go_over_https_to_a_collector_signed_by_the_configured_ca() {
    let sandbox = Sandbox::new();
    let (port, seen) = collector(Some(collector_tls(&sandbox.path(""))));
    let extra = format!("otlp_endpoint = \"https://127.0.0.1:{port}\"\notlp_ca_file = \"ca.pem\"");
    sandbox.write(
        "relay.toml",
        &test_config("sqlite:relay.db", &extra, free_port()),
    );
    let daemon = Daemon::start(command(&sandbox));
    delivery_span(&sandbox, daemon, &seen);
    assert_eq!(seen.lock().unwrap().handshake_errors, Vec::<String>::new());
}

#[test]
fn the_sdk_reads_the_standard_variables_endpoint_certificate_and_headers() {
    let sandbox = Sandbox::new();
    let (port, seen) = collector(Some(collector_tls(&sandbox.path(""))));
    sandbox.write(
        "relay.toml",
        &test_config("sqlite:relay.db", "", free_port()),
    );
    let mut command = command(&sandbox);
    command
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("https://localhost:{port}"),
        )
        .env("OTEL_EXPORTER_OTLP_CERTIFICATE", sandbox.path("ca.pem"))
        .env("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=relay-secret");
    let request = delivery_span(&sandbox, Daemon::start(command), &seen);
    assert_eq!(request.header("x-api-key"), Some("relay-secret"));
}

#[test]
fn an_https_collector_signed_by_an_unknown_ca_gets_no_spans() {
    let sandbox = Sandbox::new();
    let (port, seen) = collector(Some(collector_tls(&sandbox.path(""))));
    // The system's roots only: the test's CA is not among them.
    let extra = format!(r#"otlp_endpoint = "https://127.0.0.1:{port}""#);
    sandbox.write(
        "relay.toml",
        &test_config("sqlite:relay.db", &extra, free_port()),
    );
    let mut daemon = Daemon::start(command(&sandbox));
    daemon.wait_for_log("exporting spans over OTLP");
    sandbox.enqueue(
        &["--config", "relay.toml"],
        "orders",
        "audit",
        &["--payload", "1"],
    );
    daemon.delivery();
    // Delivery goes on whatever the export does; the shutdown's flush tries once more.
    let (status, log) = daemon.terminate();
    assert!(status.success(), "exit {status}:\n{log}");
    let deadline = Instant::now() + WAIT;
    loop {
        let errors = seen.lock().unwrap().handshake_errors.clone();
        if !errors.is_empty() {
            assert!(
                errors
                    .iter()
                    .all(|e| e.contains("UnknownCA") || e.contains("BadCertificate")),
                "{errors:?}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the relay never tried the collector\n{log}"
        );
        thread::sleep(Duration::from_millis(20));
    }
    assert!(seen.lock().unwrap().requests.is_empty());
}

#[test]
fn an_unreadable_ca_file_is_a_config_error_naming_it() {
    let sandbox = Sandbox::new();
    let extra = "otlp_endpoint = \"https://127.0.0.1:4318\"\notlp_ca_file = \"missing.pem\"";
    sandbox.write(
        "relay.toml",
        &test_config("sqlite:relay.db", extra, free_port()),
    );
    let refused = sandbox.fails(2, &["--config", "relay.toml", "run"]);
    assert!(
        refused.contains("otlp_ca_file") && refused.contains("missing.pem"),
        "{refused}"
    );
    sandbox.write("empty.pem", "not a certificate\n");
    sandbox.write(
        "relay.toml",
        &test_config(
            "sqlite:relay.db",
            "otlp_endpoint = \"https://127.0.0.1:4318\"\notlp_ca_file = \"empty.pem\"",
            free_port(),
        ),
    );
    let refused = sandbox.fails(2, &["--config", "relay.toml", "run"]);
    assert!(refused.contains("holds no PEM certificate"), "{refused}");
}

/// The webhook sink trusts the system's certificate store, which `SSL_CERT_FILE` points at
/// the test's CA here: a POST over https reaches the endpoint with the message's body.
#[test]
fn a_webhook_lane_posts_over_https_to_an_endpoint_the_system_store_trusts() {
    let sandbox = Sandbox::new();
    let (port, seen) = collector(Some(collector_tls(&sandbox.path(""))));
    let config = test_config("sqlite:relay.db", "", free_port()).replace(
        r#"sink = { kind = "log" }"#,
        &format!(r#"sink = {{ kind = "webhook", url = "https://localhost:{port}/hook" }}"#),
    );
    sandbox.write("relay.toml", &config);
    let mut command = command(&sandbox);
    command
        .env("SSL_CERT_FILE", sandbox.path("ca.pem"))
        .env_remove("SSL_CERT_DIR");
    let daemon = Daemon::start(command);
    let id = sandbox.enqueue(
        &["--config", "relay.toml"],
        "orders",
        "audit",
        &["--payload", "1"],
    );
    let deadline = Instant::now() + WAIT;
    let request = loop {
        if let Some(request) = seen.lock().unwrap().requests.first().cloned() {
            break request;
        }
        assert!(
            Instant::now() < deadline,
            "no webhook request arrived; TLS errors: {:?}",
            seen.lock().unwrap().handshake_errors
        );
        thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(request.path, "/hook");
    assert_eq!(request.body, b"1");
    assert_eq!(request.header("webhook-id"), Some(id.as_str()));
    let (status, log) = daemon.terminate();
    assert!(status.success(), "exit {status}:\n{log}");
    assert_eq!(seen.lock().unwrap().handshake_errors, Vec::<String>::new());
}
