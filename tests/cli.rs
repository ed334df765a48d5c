//! The `outbox-relay` binary, driven as an operator drives it: `run` as a child process,
//! admin commands as separate processes against the same database, SIGTERM to stop.
//!
//! Each test has its own temporary directory (so its own SQLite file), its own metrics port
//! and, on PostgreSQL, its own schema. Deliveries are observed as the log sink's JSON lines
//! on the daemon's stdout, waited for with a generous timeout, never with sleeps.
//!
//! PostgreSQL: `OUTBOX_TEST_DATABASE_URL`, default `postgres://postgres@127.0.0.1:5432/test`.
//! MySQL/MariaDB: `OUTBOX_TEST_MYSQL_URL`, default `mysql://root@127.0.0.1:3306/test`.
//! An unreachable server fails the test; nothing is skipped.
//!
//! Here: the sandbox, the daemon and what several tests share. The tests are in `cli/`, one
//! subject a file.

#[path = "cli/bad_input.rs"]
mod bad_input;
#[path = "support/certificates.rs"]
mod certificates;
#[path = "cli/control.rs"]
mod control;
#[path = "cli/database_file.rs"]
mod database_file;
#[path = "cli/gates.rs"]
mod gates;
#[path = "cli/listener.rs"]
mod listener;
#[path = "cli/logging.rs"]
mod logging;
#[path = "cli/migrate.rs"]
mod migrate;
#[path = "cli/mysql.rs"]
mod mysql;
#[path = "cli/otlp.rs"]
mod otlp;
#[path = "cli/payload.rs"]
mod payload;
#[path = "support/pgbouncer.rs"]
mod pgbouncer_process;
#[path = "cli/refusal.rs"]
mod refusal;
#[path = "cli/round_trip.rs"]
mod round_trip;
#[path = "cli/runbook.rs"]
mod runbook;
#[path = "cli/secrets.rs"]
mod secrets;
#[path = "cli/security.rs"]
mod security;
#[path = "cli/simulate.rs"]
mod simulate;
#[path = "cli/startup.rs"]
mod startup;
#[path = "support/stderr.rs"]
mod stderr;
#[path = "cli/unclean_shutdown.rs"]
mod unclean_shutdown;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use tempfile::TempDir;

const BIN: &str = env!("CARGO_BIN_EXE_outbox-relay");
/// How long a test waits for a delivery, a status or an exit before failing.
const WAIT: Duration = Duration::from_secs(60);

/// A temporary working directory with its own database.
struct Sandbox {
    dir: TempDir,
}

/// What a finished command printed.
#[derive(Debug)]
struct Output {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Sandbox {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("a temporary directory"),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, text).expect("write a file in the sandbox");
        path
    }

    /// The file names in the sandbox, sorted.
    fn files(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// The binary, run in the sandbox, with no inherited outbox settings.
    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(BIN);
        command
            .args(args)
            .current_dir(self.dir.path())
            .env_remove("OUTBOX_CONFIG")
            .env_remove("OUTBOX_DATABASE_URL")
            .env_remove("OUTBOX_METRICS_LISTEN")
            .env_remove("OUTBOX_LOG_FORMAT")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null());
        command
    }

    fn output(&self, command: &mut Command) -> Output {
        let output = command.output().expect("run outbox-relay");
        Output {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    fn run(&self, args: &[&str]) -> Output {
        self.output(&mut self.command(args))
    }

    /// Runs a command that must succeed; returns its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert_eq!(out.code, Some(0), "outbox-relay {args:?} failed: {out:#?}");
        out.stdout
    }

    /// Runs a command that must fail with `code`; returns its stderr.
    fn fails(&self, code: i32, args: &[&str]) -> String {
        let out = self.run(args);
        assert_eq!(out.code, Some(code), "outbox-relay {args:?}: {out:#?}");
        out.stderr
    }

    /// Enqueues through the CLI; returns the new message's id.
    fn enqueue(&self, config: &[&str], lane: &str, target: &str, extra: &[&str]) -> String {
        let mut args = config.to_vec();
        args.extend(["enqueue", "--lane", lane, "--target", target, "--json"]);
        args.extend(extra);
        let answer: Value = serde_json::from_str(&self.ok(&args)).expect("enqueue --json");
        assert_eq!(answer["duplicate"], false);
        answer["outbox_id"].as_str().unwrap().to_owned()
    }

    fn status(&self, config: &[&str]) -> Vec<Value> {
        let mut args = config.to_vec();
        args.extend(["status", "--json"]);
        serde_json::from_str(&self.ok(&args)).expect("status --json")
    }

    fn start(&self, args: &[&str]) -> Daemon {
        Daemon::start(self.command(args))
    }
}

/// `outbox-relay run` as a child process.
struct Daemon {
    child: Child,
    lines: mpsc::Receiver<String>,
    stderr: Arc<Mutex<String>>,
}

impl Daemon {
    fn start(mut command: Command) -> Self {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start outbox-relay run");
        let (send, lines) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if send.send(line).is_err() {
                    return;
                }
            }
        });
        let stderr = stderr::capture(child.stderr.take().unwrap());
        Self {
            child,
            lines,
            stderr,
        }
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The next line the log sink wrote, as JSON.
    fn delivery(&mut self) -> Value {
        let line = self.delivery_line();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not a log-sink line ({e}): {line}"))
    }

    /// The next line the log sink wrote, as written.
    fn delivery_line(&mut self) -> String {
        match self.lines.recv_timeout(WAIT) {
            Ok(line) => line,
            Err(_) => panic!(
                "no delivery within {WAIT:?}; exit {:?}; stderr:\n{}",
                self.child.try_wait(),
                self.stderr()
            ),
        }
    }

    /// Waits until stderr contains `text`.
    fn wait_for_log(&mut self, text: &str) {
        let deadline = Instant::now() + WAIT;
        while !self.stderr().contains(text) {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "the relay exited ({status}) before logging {text:?}:\n{}",
                    self.stderr()
                );
            }
            assert!(
                Instant::now() < deadline,
                "no {text:?} in the log:\n{}",
                self.stderr()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the relay to exit by itself.
    fn wait_for_exit(mut self) -> (ExitStatus, String) {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for the relay") {
                // The stderr reader ends with the pipe; give it the last bytes.
                thread::sleep(Duration::from_millis(50));
                return (status, self.stderr());
            }
            assert!(
                Instant::now() < deadline,
                "the relay did not exit by itself:\n{}",
                self.stderr()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends SIGTERM and waits for the exit.
    fn terminate(self) -> (ExitStatus, String) {
        self.signal("TERM")
    }

    /// Sends SIG`name` and waits for the exit.
    fn signal(mut self, name: &str) -> (ExitStatus, String) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{name} failed");
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for the relay") {
                // The stderr reader ends with the pipe; give it the last bytes.
                thread::sleep(Duration::from_millis(50));
                return (status, self.stderr());
            }
            assert!(
                Instant::now() < deadline,
                "the relay did not stop:\n{}",
                self.stderr()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // A failed test must not leave a relay running.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port nobody listens on right now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

/// GETs the metrics page.
fn scrape(port: u16) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to metrics");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut page = String::new();
    stream.read_to_string(&mut page).unwrap();
    page
}

/// GETs `path` from the metrics listener: the status code and the body.
fn http_get(port: u16, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to metrics");
    stream.set_read_timeout(Some(WAIT)).unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
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

fn lane_status<'a>(status: &'a [Value], lane: &str, target: &str) -> &'a Value {
    status
        .iter()
        .find(|row| row["lane"] == lane && row["target"] == target)
        .unwrap_or_else(|| panic!("no status row for {lane}/{target}: {status:?}"))
}

/// A relay config for tests: fast polls, short timeouts, one lane `orders` → `audit`.
fn test_config(database_url: &str, extra: &str, metrics_port: u16) -> String {
    format!(
        r#"
database_url = "{database_url}"
metrics_listen = "127.0.0.1:{metrics_port}"
shutdown_timeout = "10s"
connect_timeout = "5s"
{extra}

[[lanes]]
lane = "orders"
target = "audit"
max_poll_interval = "200ms"
retry_base = "100ms"
retry_max = "1s"
sink = {{ kind = "log" }}
"#
    )
}

/// Turns the `count` pending messages of `lane`/audit into dead letters, through the store
/// API, as deliveries that failed for good would.
fn dead_letter_through_the_store(db: &Path, lane: &str, count: usize) {
    use outbox_relay::store::sqlite::SqliteOutboxStore;
    use outbox_relay::store::{ClaimRequest, Nack, NackDisposition, NackOutcome};

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let store = std::sync::Arc::new(SqliteOutboxStore::open(db).await.unwrap());
        let outbox = outbox_relay::Outbox::from_arc(store.clone());
        let request = ClaimRequest::new(lane, "audit", 100, Duration::from_secs(30), "test");
        let claimed = outbox.claim(&request).await.unwrap().messages;
        assert_eq!(claimed.len(), count);
        let nacks: Vec<Nack> = claimed
            .iter()
            .map(|message| Nack {
                claim: message.claim().unwrap(),
                error: "poison: the target refused it".to_owned(),
                disposition: NackDisposition::Permanent,
            })
            .collect();
        assert_eq!(
            outbox.nack(&nacks).await.unwrap(),
            vec![NackOutcome::DeadLettered; count]
        );
        store.close().await;
    });
}

/// The PostgreSQL server the tests use.
fn postgres_url() -> String {
    std::env::var("OUTBOX_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// Drops the test's schema when the test ends, pass or fail.
struct Schema {
    name: String,
}

impl Drop for Schema {
    fn drop(&mut self) {
        let name = self.name.clone();
        let url = postgres_url();
        let dropped = tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(async move {
                use sqlx::Connection;
                let mut conn = sqlx::PgConnection::connect(&url).await?;
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "DROP SCHEMA IF EXISTS {name} CASCADE"
                )))
                .execute(&mut conn)
                .await
                .map(drop)
            });
        if let Err(error) = dropped {
            eprintln!("could not drop schema {}: {error}", self.name);
        }
    }
}
