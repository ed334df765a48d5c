//! The web UI in a real browser: headless Chromium from Debian's packages, driven over
//! WebDriver (chromedriver), against `outbox-relay run` processes, on SQLite and on
//! PostgreSQL with two relays.
//!
//! Each test has its own directory, database (SQLite file or PostgreSQL schema),
//! listener port, chromedriver port and browser profile. Waits are on the page, the store
//! or the relay's own output, with a generous timeout, never a fixed sleep. A failing test
//! leaves a screenshot in `target/ui-screenshots/failed-<test>.png`.
//!
//! The guide's screenshots (`docs/src/images/ui-lanes.png`, `ui-message.png`) are taken by
//! `dead_letters_are_found_requeued_discarded_and_keys_unblocked_on_sqlite` into
//! `target/ui-screenshots/`; `OUTBOX_BLESS=1` also writes them to `docs/src/images/`.
//!
//! PostgreSQL: `OUTBOX_TEST_DATABASE_URL`, default `postgres://postgres@127.0.0.1:5432/test`;
//! an unreachable server fails the test.

#[path = "ui/postgres.rs"]
mod postgres;
#[path = "ui/sqlite.rs"]
mod sqlite;
#[path = "support/stderr.rs"]
mod stderr;
#[path = "ui/webdriver.rs"]
mod webdriver;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use outbox_relay::message::OutboxStatus;
use outbox_relay::store::{ClaimRequest, MessageFilter, Nack, NackDisposition, PageRequest};
use outbox_relay::{Outbox, OutboxMessageDraft};

use webdriver::Browser;

const BIN: &str = env!("CARGO_BIN_EXE_outbox-relay");
/// How long a test waits for a page, a delivery or a process before failing. Generous:
/// six builds and Chromium share two cores.
const WAIT: Duration = Duration::from_secs(60);
/// The listener's control token in every test.
const TOKEN: &str = "ui-test-control-token-0123456789";
const LANE: &str = "orders";
const TARGET: &str = "audit";

/// A port nobody listens on right now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

/// A relay's config: the lane `orders` → `audit` under `OrderingPolicy::Block`, the log
/// sink, the listener on `port` with the control token from `dir/control.token`.
fn relay_config(dir: &Path, database: &str, port: u16, consumer_id: &str) -> PathBuf {
    std::fs::write(dir.join("control.token"), TOKEN).expect("write the token file");
    let config = format!(
        r#"
{database}
metrics_listen = "127.0.0.1:{port}"
consumer_id = "{consumer_id}"
shutdown_timeout = "10s"
connect_timeout = "10s"

[listener]
control_token_file = "{token}"

[[lanes]]
lane = "{LANE}"
target = "{TARGET}"
ordering = "block"
max_poll_interval = "200ms"
sink = {{ kind = "log" }}
"#,
        token = dir.join("control.token").display(),
    );
    let path = dir.join(format!("{consumer_id}.toml"));
    std::fs::write(&path, config).expect("write the config");
    path
}

/// `outbox-relay run` as a child process: its delivery lines (the log sink's stdout) and
/// its stderr.
struct Relay {
    child: Child,
    lines: mpsc::Receiver<String>,
    delivered: Vec<String>,
    stderr: Arc<Mutex<String>>,
    port: u16,
}

impl Relay {
    fn start(dir: &Path, config: &Path, port: u16) -> Self {
        let mut child = Command::new(BIN)
            .arg("--config")
            .arg(config)
            .arg("run")
            .current_dir(dir)
            .env_remove("OUTBOX_CONFIG")
            .env_remove("OUTBOX_DATABASE_URL")
            .env_remove("OUTBOX_METRICS_LISTEN")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start outbox-relay run");
        let (send, lines) = mpsc::channel();
        let stdout = child.stdout.take().expect("stdout");
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if send.send(line).is_err() {
                    return;
                }
            }
        });
        let stderr = stderr::capture(child.stderr.take().expect("stderr"));
        let mut relay = Self {
            child,
            lines,
            delivered: Vec::new(),
            stderr,
            port,
        };
        relay.wait_for_log("relay running");
        relay
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The buffer stderr is read into, for a watcher on another thread.
    fn stderr_buffer(&self) -> Arc<Mutex<String>> {
        Arc::clone(&self.stderr)
    }

    /// The UI's address.
    fn ui(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Waits until stderr contains `text`.
    fn wait_for_log(&mut self, text: &str) {
        let started = Instant::now();
        while !self.stderr().contains(text) {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "the relay exited ({status}) before logging {text:?}:\n{}",
                    self.stderr()
                );
            }
            assert!(
                started.elapsed() < WAIT,
                "no {text:?} in the log within {WAIT:?}:\n{}",
                self.stderr()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until the log sink wrote message `id`.
    fn wait_for_delivery(&mut self, id: &str) {
        let started = Instant::now();
        while !self.delivered.iter().any(|line| line.contains(id)) {
            let left = WAIT.saturating_sub(started.elapsed());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.delivered.push(line),
                Err(_) => panic!(
                    "{id} not delivered within {WAIT:?}; delivered: {:?}\n{}",
                    self.delivered,
                    self.stderr()
                ),
            }
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        // A failed test must not leave a relay running.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `future` on the tests' runtime (the tests are synchronous: WebDriver blocks). One
/// runtime for the whole run, never dropped: a store's connections and its listener belong
/// to the runtime that opened them.
fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("a runtime")
        })
        .block_on(future)
}

/// Enqueues a message of the lane: its id.
fn enqueue(
    store: &Outbox,
    key: Option<&str>,
    payload: serde_json::Value,
    delay: Option<Duration>,
) -> String {
    enqueue_text(store, key, &payload.to_string(), delay)
}

/// Enqueues a message of the lane whose payload is the JSON text `payload`, byte for
/// byte: its id.
fn enqueue_text(
    store: &Outbox,
    key: Option<&str>,
    payload: &str,
    delay: Option<Duration>,
) -> String {
    let mut draft = OutboxMessageDraft::from_json(LANE, TARGET, payload).expect("a draft");
    if let Some(key) = key {
        draft = draft.with_ordering_key(key);
    }
    if let Some(delay) = delay {
        draft = draft.with_delay(delay);
    }
    block_on(store.enqueue(draft))
        .expect("enqueue")
        .message
        .outbox_id
        .to_string()
}

/// Claims every claimable message of the lane and nacks it for good, until none is left:
/// dead letters, as deliveries that failed for good make them. Runs before any relay
/// claims the lane.
fn dead_letter_everything(store: &Outbox, error: &str) -> usize {
    let mut dead = 0;
    loop {
        let request = ClaimRequest::new(LANE, TARGET, 100, Duration::from_secs(60), "seed");
        let claimed = block_on(store.claim(&request)).expect("claim").messages;
        if claimed.is_empty() {
            return dead;
        }
        let nacks: Vec<Nack> = claimed
            .iter()
            .map(|message| Nack {
                claim: message.claim().expect("claimed"),
                error: error.to_owned(),
                disposition: NackDisposition::Permanent,
            })
            .collect();
        block_on(store.nack(&nacks)).expect("nack");
        dead += claimed.len();
    }
}

/// The messages of the lane with `status` (and `key`), by id.
fn ids_with(store: &Outbox, status: OutboxStatus, key: Option<&str>) -> Vec<String> {
    let filter = MessageFilter {
        status: Some(status),
        ordering_key: key.map(str::to_owned),
        ..MessageFilter::lane(LANE, TARGET)
    };
    block_on(store.list(
        &filter,
        PageRequest {
            after: None,
            limit: 500,
        },
    ))
    .expect("list")
    .messages
    .iter()
    .map(|message| message.outbox_id.to_string())
    .collect()
}

/// Logs in through the login form (the browser is on any UI page that redirected to it).
fn log_in(browser: &Browser, relay: &Relay) {
    browser.goto(&relay.ui("/ui/lanes"));
    assert!(
        browser.url().contains("/ui/login"),
        "not sent to the login page: {}",
        browser.url()
    );
    browser.find("#token").send_keys(TOKEN);
    browser.find("#token").send_keys(webdriver::ENTER);
    browser.find("section#lanes");
    assert!(browser.url().ends_with("/ui/lanes"), "{}", browser.url());
}

/// One raw HTTP/1.1 request to the listener: status, headers and body.
fn http(port: u16, request: &str) -> (u16, String, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to the listener");
    stream.set_read_timeout(Some(WAIT)).expect("a read timeout");
    stream.write_all(request.as_bytes()).expect("send");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("read the answer");
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {response:?}"));
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    (status, head.to_owned(), body.to_owned())
}

/// A form POST to the listener with `cookie` and `extra` headers.
fn post_form(
    port: u16,
    path: &str,
    cookie: Option<&str>,
    extra: &str,
    form: &str,
) -> (u16, String, String) {
    let cookie = cookie.map_or(String::new(), |cookie| format!("Cookie: {cookie}\r\n"));
    http(
        port,
        &format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{cookie}{extra}Content-Type: application/x-www-form-urlencoded\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{form}",
            form.len()
        ),
    )
}

/// A GET to the listener with `cookie`.
fn get_page(port: u16, path: &str, cookie: Option<&str>) -> (u16, String, String) {
    let cookie = cookie.map_or(String::new(), |cookie| format!("Cookie: {cookie}\r\n"));
    http(
        port,
        &format!(
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{cookie}Connection: close\r\n\r\n"
        ),
    )
}

/// The value of `name="csrf"` in a page.
fn csrf_in(page: &str) -> String {
    let at = page
        .find("name=\"csrf\" value=\"")
        .unwrap_or_else(|| panic!("no CSRF field in {page}"));
    page[at + 19..]
        .chars()
        .take_while(|c| c.is_ascii_hexdigit())
        .collect()
}

/// The `name=value` of a `Set-Cookie` header named `name`.
fn set_cookie(head: &str, name: &str) -> Option<String> {
    head.lines()
        .filter_map(|line| line.strip_prefix("set-cookie: "))
        .find(|cookie| cookie.starts_with(&format!("{name}=")))
        .and_then(|cookie| cookie.split(';').next())
        .map(str::to_owned)
}
