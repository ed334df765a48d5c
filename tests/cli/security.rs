//! The one table of `docs/src/security.md`, cell by cell: who may read and change what,
//! with and without a token, on loopback and on other addresses. Each cell is driven
//! against `outbox-relay run` (one daemon per setup the columns need), and every column
//! but the second against `http::router` mounted in a service's own axum server.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

use crate::{free_port, Daemon, Sandbox, WAIT};

const DOC: &str = "docs/src/security.md";
/// The control token of the setups that have one.
const TOKEN: &str = "security-table-token-0123456789";
/// A host the listener does not serve.
const FOREIGN: &str = "attacker.example";

/// The columns the table must have, in order.
const COLUMNS: [&str; 5] = [
    "no token, loopback",
    "no token, other address",
    "token, without it",
    "token, with it",
    "token, with it, foreign Host",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Column {
    NoTokenLoopback,
    NoTokenOther,
    TokenWithout,
    TokenWith,
    TokenForeignHost,
}

const ALL: [Column; 5] = [
    Column::NoTokenLoopback,
    Column::NoTokenOther,
    Column::TokenWithout,
    Column::TokenWith,
    Column::TokenForeignHost,
];

impl Column {
    fn token(self) -> bool {
        !matches!(self, Column::NoTokenLoopback | Column::NoTokenOther)
    }
}

/// What a cell says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Status(u16),
    RefusedAtStart,
}

/// One row: its request and what each column answers.
#[derive(Debug, Clone)]
struct Row {
    method: String,
    path: String,
    open_lane_reads: bool,
    cells: Vec<Expect>,
}

/// The table, read from the page between its markers.
fn table() -> Vec<Row> {
    let page = std::fs::read_to_string(format!("{}/{DOC}", env!("CARGO_MANIFEST_DIR")))
        .unwrap_or_else(|e| panic!("{DOC}: {e}"));
    let start = page
        .find("<!-- security-table:start -->")
        .expect("the table's start marker");
    let end = page
        .find("<!-- security-table:end -->")
        .expect("the table's end marker");
    let mut lines = page[start..end]
        .lines()
        .filter(|line| line.starts_with('|'));
    let header: Vec<String> = cells(lines.next().expect("a header row"));
    assert_eq!(header[1..], COLUMNS, "{DOC}: the columns this test drives");
    lines.next().expect("the separator row");
    let rows: Vec<Row> = lines
        .map(|line| {
            let cells = cells(line);
            let request = cells[0]
                .split('`')
                .nth(1)
                .unwrap_or_else(|| panic!("{DOC}: no `METHOD PATH` in {line}"));
            let (method, path) = request
                .split_once(' ')
                .unwrap_or_else(|| panic!("{DOC}: {request:?} is not METHOD PATH"));
            let expects = cells[1..]
                .iter()
                .map(|cell| {
                    if cell == "refused at start" {
                        return Expect::RefusedAtStart;
                    }
                    let code: String = cell.chars().take_while(char::is_ascii_digit).collect();
                    Expect::Status(
                        code.parse()
                            .unwrap_or_else(|_| panic!("{DOC}: cell {cell:?} in {line}")),
                    )
                })
                .collect::<Vec<_>>();
            assert_eq!(expects.len(), COLUMNS.len(), "{DOC}: {line}");
            Row {
                method: method.to_owned(),
                path: path.to_owned(),
                open_lane_reads: cells[0].contains("open_lane_reads = true"),
                cells: expects,
            }
        })
        .collect();
    assert!(rows.len() >= 10, "{DOC}: the table lost rows: {rows:?}");
    rows
}

fn cells(line: &str) -> Vec<String> {
    line.trim()
        .trim_matches('|')
        .split('|')
        .map(|cell| cell.trim().to_owned())
        .collect()
}

/// One answer: status, head, body.
struct Answer {
    status: u16,
    head: String,
    body: String,
}

/// One HTTP/1.1 exchange on a connection of its own.
fn exchange(port: u16, method: &str, path: &str, headers: &[(&str, String)], body: &str) -> Answer {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to the listener");
    stream.set_read_timeout(Some(WAIT)).unwrap();
    let mut request = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(name, _)| *name == "Host") {
        request.push_str(&format!("Host: 127.0.0.1:{port}\r\n"));
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response
        .split_once("\r\n\r\n")
        .map(|(head, body)| (head.to_owned(), body.to_owned()))
        .unwrap_or((response.clone(), String::new()));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {response:?}"));
    Answer { status, head, body }
}

/// The value of cookie `name` an answer sets.
fn cookie(answer: &Answer, name: &str) -> Option<String> {
    answer.head.lines().find_map(|line| {
        let (header, value) = line.split_once(':')?;
        if !header.eq_ignore_ascii_case("set-cookie") {
            return None;
        }
        let value = value.trim().strip_prefix(&format!("{name}="))?;
        Some(value.split(';').next().unwrap_or_default().to_owned())
    })
}

/// A UI session opened with the token: the cookie and its CSRF token.
struct Session {
    cookie: String,
    csrf: String,
}

fn log_in(port: u16) -> Session {
    let page = exchange(port, "GET", "/ui/login", &[], "");
    assert_eq!(page.status, 200, "the login page: {}", page.body);
    let value = cookie(&page, "outbox_ui_login").expect("the login form's cookie");
    let form = format!("csrf={value}&next=%2Fui%2Flanes&token={TOKEN}");
    let login = exchange(
        port,
        "POST",
        "/ui/login",
        &[
            ("Cookie", format!("outbox_ui_login={value}")),
            (
                "Content-Type",
                "application/x-www-form-urlencoded".to_owned(),
            ),
        ],
        &form,
    );
    assert_eq!(login.status, 303, "the login: {}", login.body);
    let id = cookie(&login, "outbox_ui_session").expect("a session cookie");
    let cookie = format!("outbox_ui_session={id}");
    let lanes = exchange(port, "GET", "/ui/lanes", &[("Cookie", cookie.clone())], "");
    let csrf = lanes
        .body
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the lanes page's forms carry the CSRF token")
        .to_owned();
    Session { cookie, csrf }
}

/// Sends `row`'s request as `column` sends it; `id` fills `{id}`. The status.
fn drive(port: u16, row: &Row, column: Column, id: &str, session: Option<&Session>) -> u16 {
    let path = row.path.replace("{id}", id);
    let mut headers: Vec<(&str, String)> = Vec::new();
    let with_it = matches!(column, Column::TokenWith | Column::TokenForeignHost);
    if column == Column::TokenForeignHost {
        headers.push(("Host", format!("{FOREIGN}:{port}")));
    }
    let ui = path.starts_with("/ui");
    if with_it {
        if ui {
            let session = session.expect("a session for the UI");
            headers.push(("Cookie", session.cookie.clone()));
        } else {
            headers.push(("Authorization", format!("Bearer {TOKEN}")));
        }
    }
    let body = match (row.method.as_str(), path.as_str()) {
        ("POST", "/api/v1/dead-letters/requeue") => {
            headers.push(("Content-Type", "application/json".to_owned()));
            r#"{"lane": "orders", "target": "audit", "dry_run": true}"#.to_owned()
        }
        ("POST", p) if p.starts_with("/api/") => {
            headers.push(("Content-Type", "application/json".to_owned()));
            r#"{"reason": "the security table"}"#.to_owned()
        }
        ("POST", _) => {
            headers.push((
                "Content-Type",
                "application/x-www-form-urlencoded".to_owned(),
            ));
            let csrf = session.map_or("none", |session| session.csrf.as_str());
            format!("lane_target=orders%2Faudit&action=pause&reason=table&csrf={csrf}")
        }
        _ => String::new(),
    };
    exchange(port, &row.method, &path, &headers, &body).status
}

/// A listener config for `column`: where it binds, its token, its routes.
fn listener(port: u16, column: Column, open_lane_reads: bool, probes_only: bool) -> String {
    let address = match column {
        Column::NoTokenOther => "0.0.0.0",
        _ => "127.0.0.1",
    };
    let mut text = format!("[listener]\naddress = \"{address}:{port}\"\n");
    if column.token() {
        text.push_str("token_file = \"control.token\"\n");
    }
    if open_lane_reads {
        text.push_str("open_lane_reads = true\n");
    }
    if probes_only {
        text.push_str("routes = [\"metrics\", \"probes\"]\n");
    }
    text
}

fn config(listener: &str) -> String {
    format!(
        "database_url = \"sqlite://outbox.db\"\nshutdown_timeout = \"10s\"\n{listener}\n\
         [[lanes]]\nlane = \"orders\"\ntarget = \"audit\"\nmax_poll_interval = \"200ms\"\n\
         sink = {{ kind = \"log\" }}\n"
    )
}

/// A daemon for one setup, with a message whose id fills `{id}`.
struct Setup {
    _sandbox: Sandbox,
    daemon: Daemon,
    port: u16,
    id: String,
}

fn start(column: Column, open_lane_reads: bool, probes_only: bool) -> Setup {
    let sandbox = Sandbox::new();
    sandbox.write("control.token", TOKEN);
    let port = free_port();
    let file = config(&listener(port, column, open_lane_reads, probes_only));
    sandbox.write("relay.toml", &file);
    let id = sandbox.enqueue(
        &["--config", "relay.toml"],
        "orders",
        "audit",
        &["--payload", r#"{"card": "4111 1111 1111 1111"}"#],
    );
    let mut daemon = sandbox.start(&["--config", "relay.toml", "run"]);
    daemon.wait_for_log("relay running");
    Setup {
        _sandbox: sandbox,
        daemon,
        port,
        id,
    }
}

#[test]
fn every_cell_of_the_security_table_holds_against_the_binary() {
    let rows = table();
    for open_lane_reads in [false, true] {
        // Every cell is driven; the cells that do not hold are reported together.
        let mut wrong = Vec::new();
        let rows: Vec<&Row> = rows
            .iter()
            .filter(|row| row.open_lane_reads == open_lane_reads)
            .collect();
        for column in ALL {
            let at = ALL.iter().position(|c| *c == column).unwrap();
            let refused: Vec<&&Row> = rows
                .iter()
                .filter(|row| row.cells[at] == Expect::RefusedAtStart)
                .collect();
            if !refused.is_empty() {
                // The default routes there: the daemon refuses to start, naming the setting.
                let sandbox = Sandbox::new();
                let port = free_port();
                sandbox.write(
                    "relay.toml",
                    &config(&listener(port, column, open_lane_reads, false)),
                );
                let mut daemon = sandbox.start(&["--config", "relay.toml", "run"]);
                let (status, stderr) = daemon_exit(&mut daemon);
                if status != Some(2)
                    || !(stderr.contains("listener.address") && stderr.contains("token"))
                {
                    for row in &refused {
                        wrong.push(format!(
                            "{} {} (open_lane_reads {open_lane_reads}) in column {:?}: \
                             expected refused at start, the daemon {}",
                            row.method,
                            row.path,
                            COLUMNS[at],
                            status.map_or("started".to_owned(), |code| format!("exited {code}"))
                        ));
                    }
                }
            }
            let answered: Vec<&&Row> = rows
                .iter()
                .filter(|row| row.cells[at] != Expect::RefusedAtStart)
                .collect();
            if answered.is_empty() {
                continue;
            }
            // Where the defaults are refused, the probes-only listener serves the rest.
            let setup = start(column, open_lane_reads, !refused.is_empty());
            let session = (column.token()).then(|| log_in(setup.port));
            for row in answered {
                let Expect::Status(expected) = row.cells[at] else {
                    unreachable!()
                };
                let got = drive(setup.port, row, column, &setup.id, session.as_ref());
                if got != expected {
                    wrong.push(format!(
                        "{} {} (open_lane_reads {open_lane_reads}) in column {:?}: expected {expected}, got {got}",
                        row.method, row.path, COLUMNS[at]
                    ));
                }
            }
            let (status, log) = setup.daemon.terminate();
            assert!(status.success(), "exit {status}:\n{log}");
        }
        assert!(
            wrong.is_empty(),
            "{} cells of {DOC} do not hold:\n{}",
            wrong.len(),
            wrong.join("\n")
        );
    }
}

/// Waits for a daemon expected to refuse its config: its exit code (`None` when it is
/// still running once it logged that it serves) and its log.
fn daemon_exit(daemon: &mut Daemon) -> (Option<i32>, String) {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        if let Some(status) = daemon.child.try_wait().expect("wait for the relay") {
            // The stderr reader ends with the pipe; give it the last bytes.
            std::thread::sleep(std::time::Duration::from_millis(50));
            return (status.code(), daemon.stderr());
        }
        if daemon.stderr().contains("relay running") {
            return (None, daemon.stderr());
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the relay neither refused nor ran:\n{}",
            daemon.stderr()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `http::router` mounted in a service's own axum server, on a runtime of its own: the
/// same cells but the second column's (the service chooses its address).
#[test]
fn every_cell_of_the_security_table_holds_for_a_mounted_router() {
    use outbox_relay::config::ControlToken;
    use outbox_relay::http::{router, RelaySlot, RouterConfig};
    use outbox_relay::{handler_fn, InMemoryOutboxStore, LaneConfig, Outbox, OutboxRelay};

    let rows = table();
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    for open_lane_reads in [false, true] {
        for column in ALL {
            if column == Column::NoTokenOther {
                continue;
            }
            let at = ALL.iter().position(|c| *c == column).unwrap();
            let (port, id, relay) = runtime.block_on(async {
                let store = Outbox::new(InMemoryOutboxStore::new());
                let draft = outbox_relay::OutboxMessageDraft::new(
                    "orders",
                    "audit",
                    serde_json::json!({"n": 1}),
                )
                .expect("a draft");
                let id = store
                    .enqueue(draft)
                    .await
                    .expect("enqueue")
                    .message
                    .outbox_id;
                let relay = OutboxRelay::builder(&store)
                    .lane(
                        LaneConfig::new("orders", "audit"),
                        handler_fn(|_| async { Ok(()) }),
                    )
                    .start()
                    .await
                    .expect("start the relay");
                let relay = Arc::new(relay);
                let slot = RelaySlot::new();
                slot.set(
                    relay.clone(),
                    store.clone(),
                    tokio::runtime::Handle::current(),
                );
                let recorder =
                    metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
                let readiness = outbox_relay::http::Readiness::new();
                readiness.set(
                    outbox_relay::http::RelayReadiness::new(store, relay.clone()),
                    tokio::runtime::Handle::current(),
                    outbox_relay::http::health::DEFAULT_READINESS_TIMEOUT,
                );
                let mut routes = RouterConfig::new()
                    .relay(slot)
                    .metrics(recorder.handle())
                    .readiness(readiness)
                    .open_lane_reads(open_lane_reads);
                if column.token() {
                    routes = routes.token(ControlToken::new(TOKEN).expect("a token"));
                }
                // The service's own server, its own app around the router.
                let app = axum::Router::new()
                    .route("/service", axum::routing::get(|| async { "the service" }))
                    .merge(router(routes));
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind");
                let port = listener.local_addr().expect("its address").port();
                tokio::spawn(async move { axum::serve(listener, app).await });
                (port, id.to_string(), relay)
            });
            let session = column.token().then(|| log_in(port));
            for row in rows
                .iter()
                .filter(|row| row.open_lane_reads == open_lane_reads)
            {
                let Expect::Status(expected) = row.cells[at] else {
                    panic!("{DOC}: the mounted router never refuses to start: {row:?}")
                };
                let got = drive(port, row, column, &id, session.as_ref());
                assert_eq!(
                    got, expected,
                    "mounted: {} {} (open_lane_reads {open_lane_reads}) in column {:?}",
                    row.method, row.path, COLUMNS[at]
                );
            }
            runtime
                .block_on(relay.shutdown(WAIT))
                .expect("the relay stops");
        }
    }
}

/// Sends SIG`name` to the daemon, which keeps running.
fn signal(daemon: &Daemon, name: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{name}"), &daemon.child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{name} failed");
}

#[test]
fn sighup_reads_the_token_file_again_and_the_old_token_stops_working() {
    let sandbox = Sandbox::new();
    sandbox.write("control.token", TOKEN);
    let port = free_port();
    sandbox.write(
        "relay.toml",
        &config(&listener(port, Column::TokenWith, false, false)),
    );
    let mut daemon = sandbox.start(&["--config", "relay.toml", "run"]);
    daemon.wait_for_log("relay running");
    let lanes = |token: &str| {
        exchange(
            port,
            "GET",
            "/api/v1/lanes",
            &[("Authorization", format!("Bearer {token}"))],
            "",
        )
        .status
    };
    assert_eq!(lanes(TOKEN), 200);
    let rotated = "security-table-rotated-token-9876543210";
    sandbox.write("control.token", rotated);
    assert_eq!(lanes(TOKEN), 200, "the file alone changes nothing");
    signal(&daemon, "HUP");
    daemon.wait_for_log("SIGHUP: the control token was read again");
    assert_eq!(lanes(TOKEN), 401, "the old token stopped working");
    assert_eq!(lanes(rotated), 200);
    // A file that no longer holds a token keeps the one in use, and says why.
    sandbox.write("control.token", "short");
    signal(&daemon, "HUP");
    daemon.wait_for_log("SIGHUP: the control token cannot be read");
    assert_eq!(lanes(rotated), 200);
    let (status, log) = daemon.terminate();
    assert!(status.success(), "exit {status}:\n{log}");
    assert!(
        !log.contains(TOKEN) && !log.contains(rotated),
        "a token in the log:\n{log}"
    );
}

#[test]
fn the_start_up_log_names_the_payload_routes_and_the_ui() {
    for (column, names) in [
        (
            Column::TokenWith,
            &[
                "GET /api/v1/lanes (with the token)",
                "GET /api/v1/messages and /api/v1/messages/{id} (payloads and headers, with the token)",
                "POST /api/v1/lanes/…/pause|resume and /api/v1/dead-letters/… (with the token)",
                "the web UI at /ui (a login with the token)",
            ][..],
        ),
        (
            Column::NoTokenLoopback,
            &[
                "GET /api/v1/lanes (open)",
                "GET /api/v1/messages… (off: no token)",
                "POST /api/v1/… (off: no token)",
                "the web UI at /ui (the lanes page only: no token)",
            ][..],
        ),
    ] {
        let sandbox = Sandbox::new();
        sandbox.write("control.token", TOKEN);
        let port = free_port();
        sandbox.write("relay.toml", &config(&listener(port, column, false, false)));
        let mut daemon = sandbox.start(&["--config", "relay.toml", "run"]);
        daemon.wait_for_log("relay running");
        let log = daemon.stderr();
        for name in names {
            assert!(log.contains(name), "{column:?}: {name:?} not in the start-up log:\n{log}");
        }
        let (status, log) = daemon.terminate();
        assert!(status.success(), "exit {status}:\n{log}");
    }
}
