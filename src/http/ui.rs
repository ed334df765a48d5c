//! The operator's web UI at `/ui` ([`RouteGroup::Ui`](super::RouteGroup::Ui)): server-rendered
//! HTML with one stylesheet and one small script, both compiled into the binary
//! (`include_str!`), so it works offline and builds with `cargo` alone.
//!
//! | page | what it shows and does |
//! |---|---|
//! | `/ui/lanes` | every lane of this relay: state (who paused it, why, when), gates, pending, oldest due age, delivered and failed per minute over the last hour, in flight, dead letters; pause with a reason, resume |
//! | `/ui/messages` | search by id, ordering key, status and lane, keyset paging |
//! | `/ui/messages/{id}` | one message: payload pretty-printed (`?raw=1`: the stored bytes), headers, attempts, last error, claim, lease, trace id, its key's head and what waits behind it |
//! | `/ui/dead-letters` | filter, select, requeue or discard in bulk, after a confirmation that shows the count |
//! | `/ui/blocked-keys` | keys held by a dead head (what `OrderingPolicy::Block` holds back), with the action that frees each |
//!
//! Who may use it (the `session` module): with a control token configured, every page needs a login
//! (the token, typed once, opens a session kept in an `HttpOnly`, `SameSite=Strict`
//! cookie, `Secure` behind TLS); every form carries the session's CSRF token; the `Host`
//! header must be an IP literal, `localhost` or a name given to
//! [`RouterConfig::allowed_hosts`](super::RouterConfig::allowed_hosts), and a POST's
//! `Origin`, when sent, the same host. A mutation without a session answers 401 (its form
//! unread), with a wrong CSRF token, host or origin 403, and changes nothing. Wrong tokens
//! at the login make their peer wait (`http/guessing.rs`). Without a token configured the
//! lanes page is open, as the JSON API's lane reads are, every page that shows messages
//! answers 403 (no payload without a token), and every mutation answers 403; with the
//! `control` group off, mutations answer 403 too.
//!
//! Every page reads without JavaScript; the script only refreshes the lanes table in place
//! and adds "select all". Forms are plain HTML, so the keyboard reaches every control.

// A refusal is an answer (the error page), made once per request and returned at once:
// boxing the `Response` in every `Err` would cost an allocation and buy nothing.
#![allow(clippy::result_large_err)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::{Request, State};
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, HOST, LOCATION, ORIGIN, SET_COOKIE};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::middleware::{from_fn_with_state, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use super::access::{Need, Refusal};
use super::api::ApiError;
use super::control::Running;
use super::Routes;
use html::error_page;
use session::Session;
use throughput::Throughput;

mod dead_letters;
pub(super) mod html;
mod lanes;
mod login;
mod messages;
pub(crate) mod session;
mod throughput;

const CSS: &str = include_str!("ui/assets/ui.css");
const JS: &str = include_str!("ui/assets/ui.js");

/// What the UI keeps between requests: the throughput history, the lanes' counts and what
/// the router was configured with (the sessions are the access checks', `http/access.rs`).
#[derive(Debug)]
pub(super) struct UiState {
    throughput: Mutex<Throughput>,
    sampler_started: AtomicBool,
    counts: Mutex<lanes::CountsCache>,
    control: bool,
}

impl UiState {
    /// `control`: whether the mutating routes are on.
    pub(super) fn new(control: bool) -> Self {
        Self {
            throughput: Mutex::default(),
            sampler_started: AtomicBool::new(false),
            counts: Mutex::default(),
            control,
        }
    }

    fn counts(&self) -> MutexGuard<'_, lanes::CountsCache> {
        self.counts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn throughput(&self) -> MutexGuard<'_, Throughput> {
        self.throughput
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The UI's routes, under `/ui`. Every form but the login's is refused before it is read
/// unless its request carries an open session ([`session_before_form`]).
pub(super) fn routes(state: &Routes) -> Router<Routes> {
    let forms = Router::new()
        .route("/ui/logout", post(login::logout))
        .route("/ui/lanes/action", post(lanes::action))
        .route("/ui/dead-letters/confirm", post(dead_letters::confirm))
        .route("/ui/dead-letters/apply", post(dead_letters::apply))
        .route_layer(from_fn_with_state(state.clone(), session_before_form));
    Router::new()
        .route("/ui", get(index))
        .route("/ui/", get(index))
        .route("/ui/assets/ui.css", get(css))
        .route("/ui/assets/ui.js", get(js))
        .route("/ui/login", get(login::page).post(login::submit))
        .route("/ui/lanes", get(lanes::page))
        .route("/ui/messages", get(messages::search))
        .route("/ui/messages/{id}", get(messages::one))
        .route("/ui/dead-letters", get(dead_letters::page))
        .route("/ui/blocked-keys", get(dead_letters::blocked_keys))
        .merge(forms)
}

/// Middleware of the UI's forms (every POST but the login): the origin, the token and the
/// session are checked before the form is read; the handler then checks its CSRF token.
async fn session_before_form(
    State(routes): State<Routes>,
    request: Request,
    next: Next,
) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    // Logging out needs a session, not the control routes.
    let needs_control = request.uri().path() != "/ui/logout";
    match may_change(&routes, request.headers(), needs_control) {
        Ok(_) => next.run(request).await,
        Err(refused) => refused,
    }
}

/// A reader of the pages: the CSRF token for the forms, when there is a session.
#[derive(Debug)]
pub(super) struct Reader {
    csrf: Option<String>,
}

fn header(headers: &HeaderMap, name: axum::http::header::HeaderName) -> Option<&str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

/// May this request read the lanes page at `uri`? A login page redirect when a session is
/// needed and missing.
pub(super) fn reader(routes: &Routes, headers: &HeaderMap, uri: &Uri) -> Result<Reader, Response> {
    if routes.access.tokens.current().is_none() {
        return Ok(Reader { csrf: None });
    }
    match routes.access.session(headers) {
        Some((_, session)) => Ok(Reader {
            csrf: (routes.ui.control).then_some(session.csrf),
        }),
        None => {
            let next = uri.path_and_query().map_or("/ui/lanes", |pq| pq.as_str());
            Err(redirect(&format!("/ui/login?next={}", html::url(next))))
        }
    }
}

/// May this request read the page at `uri`, which shows messages? As [`reader`], and off
/// (403) without a token configured: no payload without a token.
pub(super) fn message_reader(
    routes: &Routes,
    headers: &HeaderMap,
    uri: &Uri,
) -> Result<Reader, Response> {
    if routes.access.tokens.current().is_none() {
        return Err(Refusal::Off(Need::Messages).into_page());
    }
    reader(routes, headers, uri)
}

/// A form's fields, in order (a name may repeat: `id`).
#[derive(Debug, Default)]
pub(super) struct Form(Vec<(String, String)>);

impl Form {
    fn parse(body: &[u8]) -> Self {
        Self(
            url::form_urlencoded::parse(body)
                .map(|(name, value)| (name.into_owned(), value.into_owned()))
                .collect(),
        )
    }

    /// The first value of `name`, trimmed; `None` when absent or empty.
    pub(super) fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(field, _)| field == name)
            .map(|(_, value)| value.trim())
            .filter(|value| !value.is_empty())
    }

    /// Every value of `name`.
    pub(super) fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.0
            .iter()
            .filter(move |(field, _)| field == name)
            .map(|(_, value)| value.as_str())
    }
}

/// May a POST with `headers` change something? Its session (id and state) when it may;
/// 401 without a session, 403 with a wrong origin, without a token configured, or (when
/// `needs_control`) with the control routes off. Needs no body.
fn may_change(
    routes: &Routes,
    headers: &HeaderMap,
    needs_control: bool,
) -> Result<(String, Session), Response> {
    if !session::origin_matches(header(headers, ORIGIN), header(headers, HOST)) {
        return Err(error_page(
            StatusCode::FORBIDDEN,
            "this form was sent from another site",
        ));
    }
    if routes.access.tokens.current().is_none() || (needs_control && !routes.ui.control) {
        return Err(error_page(
            StatusCode::FORBIDDEN,
            "changes are off: the listener has no control token, or its control routes are off",
        ));
    }
    routes.access.session(headers).ok_or_else(|| {
        error_page(
            StatusCode::UNAUTHORIZED,
            "log in first: this change needs a session",
        )
    })
}

/// May this POST change something? Its form when it may; 401 without a session, 403 with
/// a wrong CSRF token or origin, or with mutations off.
pub(super) fn writer(
    routes: &Routes,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(Form, String), Response> {
    let (_, session) = may_change(routes, headers, true)?;
    let form = Form::parse(body);
    if !form
        .get("csrf")
        .is_some_and(|csrf| session::same_secret(&session.csrf, csrf))
    {
        return Err(error_page(
            StatusCode::FORBIDDEN,
            "the form's CSRF token is missing or stale: reload the page and try again",
        ));
    }
    Ok((form, session.csrf))
}

/// A 303 to `location`.
fn redirect(location: &str) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    if let Ok(value) = HeaderValue::from_str(location) {
        response.headers_mut().insert(LOCATION, value);
    }
    response
}

/// Runs `work` on the relay's runtime, as the API's store work runs; an error becomes an
/// error page.
pub(super) async fn with_relay<T, F>(
    routes: &Routes,
    work: impl FnOnce(Running) -> F,
) -> Result<T, Response>
where
    T: Send + 'static,
    F: std::future::Future<Output = Result<T, ApiError>> + Send + 'static,
{
    routes
        .run(work)
        .await
        .map_err(|error| error_page(error.status(), error.message()))
}

/// Whether the UI's cookies are marked `Secure`: the router says so, or the request came
/// over TLS to a proxy that says so (`X-Forwarded-Proto: https`).
fn secure_cookies(routes: &Routes, headers: &HeaderMap) -> bool {
    routes.access.secure_cookies
        || header(
            headers,
            axum::http::header::HeaderName::from_static("x-forwarded-proto"),
        )
        .and_then(|value| value.split(',').next())
        .is_some_and(|proto| proto.trim().eq_ignore_ascii_case("https"))
}

/// Appends `Set-Cookie: name=value` ([`session::set_cookie`]) to `response`.
fn add_cookie(
    response: &mut Response,
    name: &str,
    value: &str,
    max_age: Option<std::time::Duration>,
    secure: bool,
) {
    if let Ok(cookie) = HeaderValue::from_str(&session::set_cookie(name, value, max_age, secure)) {
        response.headers_mut().append(SET_COOKIE, cookie);
    }
}

/// The minute number of now (minutes since the Unix epoch), the chart's clock.
fn this_minute() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs() / 60)
}

/// Starts, once, the task that reads the relay's delivery totals every
/// [`throughput::SAMPLE_EVERY`] for the chart; it ends when the relay is gone.
fn start_sampler(routes: &Routes, running: &Running) {
    if routes.ui.sampler_started.swap(true, Ordering::SeqCst) {
        return;
    }
    let relay = Arc::downgrade(&running.relay);
    let ui = routes.ui.clone();
    tokio::spawn(async move {
        loop {
            let Some(relay) = relay.upgrade() else { return };
            let Ok(lanes) = relay.status().await else {
                return;
            };
            drop(relay);
            let minute = this_minute();
            {
                let mut history = ui.throughput();
                for lane in &lanes {
                    history.observe(&lane.lane.to_string(), minute, lane.delivered, lane.failed);
                }
            }
            tokio::time::sleep(throughput::SAMPLE_EVERY).await;
        }
    });
}

async fn index(State(routes): State<Routes>, headers: HeaderMap, uri: Uri) -> Response {
    match reader(&routes, &headers, &uri) {
        Ok(_) => redirect("/ui/lanes"),
        Err(refused) => refused,
    }
}

fn asset(content_type: &'static str, text: &'static str) -> Response {
    let mut response = text.into_response();
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("max-age=300"));
    response
}

async fn css() -> Response {
    asset("text/css; charset=utf-8", CSS)
}

async fn js() -> Response {
    asset("text/javascript; charset=utf-8", JS)
}

/// `lane/target` from a form or query value.
pub(super) fn lane_target(value: Option<&str>) -> Option<(String, String)> {
    let (lane, target) = value?.split_once('/')?;
    (!lane.is_empty() && !target.is_empty()).then(|| (lane.to_owned(), target.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_are_named_lane_slash_target() {
        assert_eq!(
            lane_target(Some("orders/audit")),
            Some(("orders".to_owned(), "audit".to_owned()))
        );
        assert_eq!(lane_target(Some("orders")), None);
        assert_eq!(lane_target(Some("/audit")), None);
        assert_eq!(lane_target(None), None);
    }
}
