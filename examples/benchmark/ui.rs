//! The web UI's pages against a 1 M-row PostgreSQL or SQLite table: each page requested one after
//! another through `http::router` (in process, no network: what is measured is the
//! handler, the store's reads and the HTML), with a relay running on the lane, as the
//! daemon serves them. The table looks like a long-lived outbox: mostly delivered history,
//! a tail of dead letters (some holding their key), and pending messages due later.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use outbox_relay::config::ControlToken;
use outbox_relay::http::{router, RelaySlot, RouterConfig};
use outbox_relay::OutboxRelay;
use tower::ServiceExt;

use crate::drain::{lane_config, CountingHandler, Progress};
use crate::options::{Keys, StoreKind};
use crate::stores::{fill, BenchStore, Location, TARGET};

const LANE: &str = "ui";
/// The ordering keys the rows are spread over.
const KEYS: usize = 1_000;
/// One row in this many is a dead letter; one in `PENDING_EVERY` waits, due in a day.
const DEAD_EVERY: usize = 200;
const PENDING_EVERY: usize = 100;
const TOKEN: &str = "benchmark-ui-token-0123456789";

/// One page's timings.
#[derive(Debug, Clone)]
pub struct PageRow {
    pub page: &'static str,
    pub p50: Duration,
    pub p95: Duration,
    pub max: Duration,
}

/// The UI row: the table it ran on and each page's timings.
#[derive(Debug, Clone, Default)]
pub struct UiRow {
    /// The store's name.
    pub store: &'static str,
    pub rows: usize,
    pub dead_letters: u64,
    pub pending: u64,
    pub requests: usize,
    pub pages: Vec<PageRow>,
}

impl UiRow {
    pub fn markdown(&self, w: &mut String) {
        let _ = writeln!(
            w,
            "## Web UI pages, {}, {} rows\n\n{} dead letters, {} pending (due in a day), the rest \
             delivered, over {KEYS} ordering keys; a relay runs on the lane. Each page requested {} \
             times one after another through `http::router` in process (handler, store reads, HTML; \
             no network). Bound: p95 under 100 ms.\n",
            self.store,
            crate::report::size(self.rows),
            self.dead_letters,
            self.pending,
            self.requests
        );
        let _ = writeln!(
            w,
            "| page | p50 ms | p95 ms | max ms |\n|---|---:|---:|---:|"
        );
        for page in &self.pages {
            let _ = writeln!(
                w,
                "| {} | {:.1} | {:.1} | {:.1} |",
                page.page,
                page.p50.as_secs_f64() * 1e3,
                page.p95.as_secs_f64() * 1e3,
                page.max.as_secs_f64() * 1e3
            );
        }
        let _ = writeln!(w);
    }
}

/// Sends one request through the router: status, `Set-Cookie` values, body.
async fn send(
    app: &axum::Router,
    request: Request<Body>,
) -> Result<(StatusCode, Vec<String>, String), String> {
    let response = app
        .clone()
        .oneshot(request)
        .await
        .map_err(|e| format!("router: {e}"))?;
    let status = response.status();
    let cookies = response
        .headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.split(';').next())
        .map(str::to_owned)
        .collect();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .map_err(|e| format!("body: {e}"))?;
    Ok((status, cookies, String::from_utf8_lossy(&body).into_owned()))
}

fn csrf_in(page: &str) -> Result<String, String> {
    let at = page
        .find("name=\"csrf\" value=\"")
        .ok_or("no CSRF field on the page")?;
    Ok(page[at + 19..]
        .chars()
        .take_while(char::is_ascii_hexdigit)
        .collect())
}

fn get(path: &str, cookie: &str) -> Request<Body> {
    Request::get(path)
        .header(header::HOST, "127.0.0.1:9464")
        .header(header::COOKIE, cookie)
        .body(Body::empty())
        .expect("a request")
}

fn post(path: &str, cookie: &str, form: String) -> Request<Body> {
    Request::post(path)
        .header(header::HOST, "127.0.0.1:9464")
        .header(header::COOKIE, cookie)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(form))
        .expect("a request")
}

/// Payload `n` is the row's number: most are delivered, one in DEAD_EVERY dead, one in
/// PENDING_EVERY pending but due in a day (so the relay claims nothing meanwhile).
async fn shape_postgres(pool: &sqlx::PgPool, t: &str) -> Result<(), String> {
    let shape = format!(
        "UPDATE {t} SET
            status = CASE WHEN (payload->>'n')::int8 % {DEAD_EVERY} = 0 THEN 'dead_letter'
                          WHEN (payload->>'n')::int8 % {PENDING_EVERY} = 1 THEN 'pending'
                          ELSE 'delivered' END,
            attempt_count = 1,
            last_error = CASE WHEN (payload->>'n')::int8 % {DEAD_EVERY} = 0
                              THEN 'target answered 422: unknown customer' END,
            delivered_at = CASE WHEN (payload->>'n')::int8 % {DEAD_EVERY} <> 0
                                 AND (payload->>'n')::int8 % {PENDING_EVERY} <> 1 THEN now() END,
            available_at = now() + interval '1 day'"
    );
    // One connection without the pool's statement timeout: a 1 M-row update and its
    // VACUUM take longer than a relay's statement may.
    let mut conn = pool
        .acquire()
        .await
        .map_err(|e| format!("a connection: {e}"))?;
    for statement in [
        "SET statement_timeout = 0".to_owned(),
        shape,
        format!("VACUUM ANALYZE {t}"),
        "RESET statement_timeout".to_owned(),
    ] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(statement.clone()))
            .execute(&mut *conn)
            .await
            .map_err(|e| format!("shape the table ({statement}): {e}"))?;
    }
    Ok(())
}

/// The same shape on SQLite, through a connection of its own to the store's file (the
/// store's triggers keep its key heads and counts), then `ANALYZE`.
async fn shape_sqlite(path: &std::path::Path, t: &str) -> Result<(), String> {
    use sqlx::Connection as _;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|e| format!("clock: {e}"))?
        .as_millis();
    let day = 86_400_000;
    let n = "json_extract(payload, '$.n')";
    let shape = format!(
        "UPDATE {t} SET
            status = CASE WHEN {n} % {DEAD_EVERY} = 0 THEN 'dead_letter'
                          WHEN {n} % {PENDING_EVERY} = 1 THEN 'pending'
                          ELSE 'delivered' END,
            attempt_count = 1,
            last_error = CASE WHEN {n} % {DEAD_EVERY} = 0
                              THEN 'target answered 422: unknown customer' END,
            delivered_at = CASE WHEN {n} % {DEAD_EVERY} <> 0
                                 AND {n} % {PENDING_EVERY} <> 1 THEN {now} END,
            available_at = {now} + {day}"
    );
    let url = format!("sqlite://{}", path.display());
    let mut conn = sqlx::SqliteConnection::connect(&url)
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    for statement in [
        "PRAGMA busy_timeout = 60000".to_owned(),
        shape,
        "ANALYZE".to_owned(),
    ] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(statement.clone()))
            .execute(&mut conn)
            .await
            .map_err(|e| format!("shape the table ({statement}): {e}"))?;
    }
    conn.close().await.map_err(|e| format!("close: {e}"))
}

fn store_name(kind: StoreKind) -> &'static str {
    match kind {
        StoreKind::Postgres => "PostgreSQL",
        StoreKind::Sqlite => "SQLite",
        StoreKind::Mysql => "MySQL",
        StoreKind::Memory => "memory",
    }
}

/// Fills the store, starts a relay, logs in and times every page `requests` times.
pub async fn run(bench: &BenchStore, rows: usize, requests: usize) -> Result<UiRow, String> {
    let kind = bench.kind;
    let filled = fill(&bench.store, kind, LANE, Keys::Many(KEYS), rows).await?;
    match (&bench.pg_pool, &bench.location) {
        (Some(pool), _) => shape_postgres(pool, &bench.table).await?,
        (None, Location::Sqlite { path }) => shape_sqlite(path, &bench.table).await?,
        _ => return Err("the UI row runs on PostgreSQL and SQLite".into()),
    }
    bench.settle().await;
    let store = store_name(kind);
    println!(
        "{store} UI row: {} rows written and shaped in {:.0} s",
        filled.total,
        filled.took.as_secs_f64()
    );
    let progress = Progress::new(0);
    let relay = OutboxRelay::builder(&bench.store)
        .lane(
            lane_config(LANE, 16),
            CountingHandler {
                progress,
                latency: Duration::ZERO,
            },
        )
        .start()
        .await
        .map_err(|e| format!("start the relay: {e}"))?;
    let relay = Arc::new(relay);
    let slot = RelaySlot::new();
    slot.set(
        relay.clone(),
        bench.store.clone(),
        tokio::runtime::Handle::current(),
    );
    let token = ControlToken::new(TOKEN).map_err(|e| format!("token: {e}"))?;
    let app = router(RouterConfig::new().relay(slot).token(token));

    // Log in as a browser does: the login form's nonce, then the token.
    let (_, cookies, page) = send(&app, get("/ui/login", "")).await?;
    let nonce = cookies.first().ok_or("no login cookie")?.clone();
    let form = format!("csrf={}&next=%2Fui%2Flanes&token={TOKEN}", csrf_in(&page)?);
    let (status, cookies, _) = send(&app, post("/ui/login", &nonce, form)).await?;
    if status != StatusCode::SEE_OTHER {
        return Err(format!("login answered {status}"));
    }
    let session = cookies
        .iter()
        .find(|c| c.starts_with("outbox_ui_session="))
        .ok_or("no session cookie")?
        .clone();
    let (_, _, lanes) = send(&app, get("/ui/lanes", &session)).await?;
    let csrf = csrf_in(&lanes)?;

    let stats = bench
        .store
        .stats(&outbox_relay::store::MessageFilter::lane(LANE, TARGET))
        .await
        .map_err(|e| format!("stats: {e}"))?;
    let stats = stats.first().ok_or("no stats")?;
    // A keyed dead letter to open, and a cursor half-way through the lane.
    let dead = bench
        .store
        .list(
            &outbox_relay::store::MessageFilter {
                status: Some(outbox_relay::message::OutboxStatus::DeadLetter),
                ..outbox_relay::store::MessageFilter::lane(LANE, TARGET)
            },
            outbox_relay::store::PageRequest {
                after: Some((rows / 2) as i64),
                limit: 1,
            },
        )
        .await
        .map_err(|e| format!("list: {e}"))?;
    let dead = dead.messages.first().ok_or("no dead letter")?;
    let lane = format!("{LANE}%2F{TARGET}");
    let key = dead.ordering_key.clone().unwrap_or_default();
    let pages: Vec<(&'static str, String, Option<String>)> = vec![
        ("lanes", "/ui/lanes".to_owned(), None),
        (
            "messages: lane, first page",
            format!("/ui/messages?lane_target={lane}"),
            None,
        ),
        (
            "messages: lane, page at the middle",
            format!("/ui/messages?lane_target={lane}&after={}", rows / 2),
            None,
        ),
        (
            "messages: status dead_letter",
            format!("/ui/messages?lane_target={lane}&status=dead_letter"),
            None,
        ),
        (
            "messages: ordering key",
            format!("/ui/messages?lane_target={lane}&key={key}"),
            None,
        ),
        (
            "messages: by id",
            format!("/ui/messages?id={}", dead.outbox_id),
            None,
        ),
        (
            "one message (with its key's head)",
            format!("/ui/messages/{}", dead.outbox_id),
            None,
        ),
        (
            "dead letters",
            format!("/ui/dead-letters?lane_target={lane}"),
            None,
        ),
        (
            "blocked keys",
            format!("/ui/blocked-keys?lane_target={lane}"),
            None,
        ),
        (
            "bulk discard confirmation (dry-run count)",
            "/ui/dead-letters/confirm".to_owned(),
            Some(format!(
                "csrf={csrf}&op=discard-matching&lane_target={lane}"
            )),
        ),
    ];
    let mut row = UiRow {
        store,
        rows: filled.total,
        dead_letters: stats.dead_letter,
        pending: stats.pending,
        requests,
        pages: Vec::new(),
    };
    for (name, path, form) in pages {
        let request = || match &form {
            Some(form) => post(&path, &session, form.clone()),
            None => get(&path, &session),
        };
        // Two untimed requests warm the pool and the database's caches.
        for _ in 0..2 {
            send(&app, request()).await?;
        }
        let mut took = Vec::with_capacity(requests);
        for _ in 0..requests {
            let started = Instant::now();
            let (status, _, body) = send(&app, request()).await?;
            took.push(started.elapsed());
            if status != StatusCode::OK {
                return Err(format!("{name} answered {status}: {body}"));
            }
        }
        took.sort();
        let at = |q: f64| took[((took.len() as f64 * q).ceil() as usize).clamp(1, took.len()) - 1];
        let page = PageRow {
            page: name,
            p50: at(0.5),
            p95: at(0.95),
            max: at(1.0),
        };
        println!(
            "{store} UI {name}: p50 {:.1} ms, p95 {:.1} ms, max {:.1} ms",
            page.p50.as_secs_f64() * 1e3,
            page.p95.as_secs_f64() * 1e3,
            page.max.as_secs_f64() * 1e3
        );
        row.pages.push(page);
    }
    // What the lanes page's counts cost when they are read (at most once per lane every
    // few seconds, whatever the page views: the page serves them from a cache).
    let mut took = Vec::with_capacity(requests.min(20));
    for _ in 0..requests.min(20) {
        let started = Instant::now();
        bench
            .store
            .stats(&outbox_relay::store::MessageFilter::lane(LANE, TARGET))
            .await
            .map_err(|e| format!("stats: {e}"))?;
        took.push(started.elapsed());
    }
    took.sort();
    let at = |q: f64| took[((took.len() as f64 * q).ceil() as usize).clamp(1, took.len()) - 1];
    row.pages.push(PageRow {
        page: "(the lane's store counts behind the lanes page, read at most every 5 s; 20 reads)",
        p50: at(0.5),
        p95: at(0.95),
        max: at(1.0),
    });
    drop(app);
    relay
        .shutdown(Duration::from_secs(10))
        .await
        .map_err(|e| format!("relay shutdown: {e}"))?;
    Ok(row)
}
