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
//! Who may use it ([`session`]): with a control token configured, every page needs a login
//! (the token, typed once, opens a session kept in an `HttpOnly`, `SameSite=Strict`
//! cookie); every form carries the session's CSRF token; the `Host` header must be an IP
//! literal, `localhost` or a name given to [`RouterConfig::ui_hosts`](super::RouterConfig::ui_hosts),
//! and a POST's `Origin`, when sent, the same host. A mutation without a session answers
//! 401, with a wrong CSRF token, host or origin 403, and changes nothing. Without a token
//! configured the pages are open, as the JSON API's reads are, and every mutation answers
//! 403; with the `control` group off, too.
//!
//! Every page reads without JavaScript; the script only refreshes the lanes table in place
//! and adds "select all". Forms are plain HTML, so the keyboard reaches every control.

// A refusal is an answer (the error page), made once per request and returned at once:
// boxing the `Response` in every `Err` would cost an allocation and buy nothing.
#![allow(clippy::result_large_err)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, COOKIE, HOST, LOCATION, ORIGIN, SET_COOKIE};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use super::api::ApiError;
use super::control::Running;
use super::Routes;
use html::{error_page, esc};
use session::{Session, Sessions, LOGIN_COOKIE, SESSION_COOKIE, SESSION_TTL};
use throughput::Throughput;

mod dead_letters;
mod html;
mod lanes;
mod messages;
pub(crate) mod session;
mod throughput;

const CSS: &str = include_str!("ui/assets/ui.css");
const JS: &str = include_str!("ui/assets/ui.js");

/// What the UI keeps between requests: the sessions, the throughput history and what the
/// router was configured with.
#[derive(Debug)]
pub(super) struct UiState {
    sessions: Mutex<Sessions>,
    throughput: Mutex<Throughput>,
    sampler_started: AtomicBool,
    counts: Mutex<lanes::CountsCache>,
    hosts: Vec<String>,
    control: bool,
}

impl UiState {
    /// `hosts`: the names served besides IP literals and `localhost`; `control`: whether
    /// the mutating routes are on.
    pub(super) fn new(hosts: Vec<String>, control: bool) -> Self {
        Self {
            sessions: Mutex::default(),
            throughput: Mutex::default(),
            sampler_started: AtomicBool::new(false),
            counts: Mutex::default(),
            hosts,
            control,
        }
    }

    fn sessions(&self) -> MutexGuard<'_, Sessions> {
        self.sessions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
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

/// The UI's routes, under `/ui`.
pub(super) fn routes() -> Router<Routes> {
    Router::new()
        .route("/ui", get(index))
        .route("/ui/", get(index))
        .route("/ui/assets/ui.css", get(css))
        .route("/ui/assets/ui.js", get(js))
        .route("/ui/login", get(login_page).post(login))
        .route("/ui/logout", post(logout))
        .route("/ui/lanes", get(lanes::page))
        .route("/ui/lanes/action", post(lanes::action))
        .route("/ui/messages", get(messages::search))
        .route("/ui/messages/{id}", get(messages::one))
        .route("/ui/dead-letters", get(dead_letters::page))
        .route("/ui/dead-letters/confirm", post(dead_letters::confirm))
        .route("/ui/dead-letters/apply", post(dead_letters::apply))
        .route("/ui/blocked-keys", get(dead_letters::blocked_keys))
}

/// A reader of the pages: the CSRF token for the forms, when there is a session.
#[derive(Debug)]
pub(super) struct Reader {
    csrf: Option<String>,
}

fn header(headers: &HeaderMap, name: axum::http::header::HeaderName) -> Option<&str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

fn session_of(routes: &Routes, headers: &HeaderMap) -> Option<(String, Session)> {
    let id =
        header(headers, COOKIE).and_then(|cookies| session::cookie(cookies, SESSION_COOKIE))?;
    let session = routes.ui.sessions().get(id, Instant::now())?;
    Some((id.to_owned(), session))
}

fn check_host(routes: &Routes, headers: &HeaderMap) -> Result<(), Response> {
    if session::host_allowed(header(headers, HOST), &routes.ui.hosts) {
        Ok(())
    } else {
        Err(error_page(
            StatusCode::FORBIDDEN,
            "this Host is not served: use the relay's IP address, localhost, or a name the listener allows (ui_hosts)",
        ))
    }
}

/// May this request read the page at `uri`? A login page redirect when a session is
/// needed and missing.
pub(super) fn reader(routes: &Routes, headers: &HeaderMap, uri: &Uri) -> Result<Reader, Response> {
    check_host(routes, headers)?;
    if routes.token.is_none() {
        return Ok(Reader { csrf: None });
    }
    match session_of(routes, headers) {
        Some((_, session)) => Ok(Reader {
            csrf: (routes.ui.control).then_some(session.csrf),
        }),
        None => {
            let next = uri.path_and_query().map_or("/ui/lanes", |pq| pq.as_str());
            Err(redirect(&format!("/ui/login?next={}", html::url(next))))
        }
    }
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

/// May this POST change something? Its form when it may; 401 without a session, 403 with
/// a wrong CSRF token, host or origin, or with mutations off.
pub(super) fn writer(
    routes: &Routes,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(Form, String), Response> {
    check_host(routes, headers)?;
    if !session::origin_matches(header(headers, ORIGIN), header(headers, HOST)) {
        return Err(error_page(
            StatusCode::FORBIDDEN,
            "this form was sent from another site",
        ));
    }
    if routes.token.is_none() || !routes.ui.control {
        return Err(error_page(
            StatusCode::FORBIDDEN,
            "changes are off: the listener has no control token, or its control routes are off",
        ));
    }
    let Some((_, session)) = session_of(routes, headers) else {
        return Err(error_page(
            StatusCode::UNAUTHORIZED,
            "log in first: this change needs a session",
        ));
    };
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

/// Runs `work` on the relay's runtime; an error becomes an error page.
pub(super) async fn with_relay<T, F>(
    routes: &Routes,
    work: impl FnOnce(Running) -> F,
) -> Result<T, Response>
where
    T: Send + 'static,
    F: std::future::Future<Output = Result<T, ApiError>> + Send + 'static,
{
    routes
        .relay
        .run(work)
        .await
        .map_err(|error| error_page(error.status(), error.message()))
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

/// Where a login goes next: a path under `/ui` only, never another site.
fn next_page(next: Option<&str>) -> &str {
    next.filter(|next| next.starts_with("/ui/") && !next.starts_with("//") && !next.contains('\\'))
        .unwrap_or("/ui/lanes")
}

fn login_form(next: &str, nonce: &str, message: Option<&str>) -> Response {
    let alert = message.map_or(String::new(), |message| {
        format!("<p class=\"error\" role=\"alert\">{}</p>", esc(message))
    });
    let body = format!(
        "{alert}<form method=\"post\" action=\"/ui/login\" class=\"search\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{nonce}\">\
         <input type=\"hidden\" name=\"next\" value=\"{next}\">\
         <label>Control token <input type=\"password\" name=\"token\" id=\"token\" autocomplete=\"current-password\" required autofocus></label>\
         <button type=\"submit\" class=\"primary\">Log in</button></form>\
         <p class=\"muted\">The listener's control token (<code>listener.control_token_env</code> or \
         <code>control_token_file</code>). It opens a session for this browser; the token itself is not stored.</p>",
        nonce = esc(nonce),
        next = esc(next),
    );
    let mut response = html::page(
        &html::Frame {
            title: "Log in",
            nav: html::Nav::None,
            csrf: None,
        },
        &body,
    );
    if message.is_some() {
        *response.status_mut() = StatusCode::UNAUTHORIZED;
    }
    if let Ok(cookie) = HeaderValue::from_str(&session::set_cookie(
        LOGIN_COOKIE,
        nonce,
        Some(std::time::Duration::from_secs(3600)),
    )) {
        response.headers_mut().append(SET_COOKIE, cookie);
    }
    response
}

async fn login_page(
    State(routes): State<Routes>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    if let Err(refused) = check_host(&routes, &headers) {
        return refused;
    }
    if routes.token.is_none() {
        return html::page(
            &html::Frame {
                title: "Log in",
                nav: html::Nav::None,
                csrf: None,
            },
            "<p>This listener has no control token: the pages are open and changes are off. \
             Set <code>listener.control_token_env</code> or <code>control_token_file</code> to act from here.</p>\
             <p><a href=\"/ui/lanes\">Go to the lanes</a></p>",
        );
    }
    let form = Form::parse(query.unwrap_or_default().as_bytes());
    login_form(next_page(form.get("next")), &session::secret(), None)
}

async fn login(State(routes): State<Routes>, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(refused) = check_host(&routes, &headers) {
        return refused;
    }
    if !session::origin_matches(header(&headers, ORIGIN), header(&headers, HOST)) {
        return error_page(
            StatusCode::FORBIDDEN,
            "this form was sent from another site",
        );
    }
    let Some(token) = &routes.token else {
        return error_page(
            StatusCode::FORBIDDEN,
            "this listener has no control token: there is nothing to log in with",
        );
    };
    let form = Form::parse(&body);
    let next = next_page(form.get("next")).to_owned();
    // Double submit: the login form's nonce is in its cookie and in the form.
    let nonce = header(&headers, COOKIE).and_then(|cookies| session::cookie(cookies, LOGIN_COOKIE));
    let nonce_ok = match (nonce, form.get("csrf")) {
        (Some(cookie), Some(field)) => session::same_secret(cookie, field),
        _ => false,
    };
    if !nonce_ok {
        return error_page(
            StatusCode::FORBIDDEN,
            "the login form's CSRF token is missing or stale: open the login page again",
        );
    }
    let presented = form.get("token").map(|token| format!("Bearer {token}"));
    if !token.authorizes(presented.as_deref()) {
        tracing::warn!("a UI login with a wrong token was refused");
        return login_form(
            &next,
            &session::secret(),
            Some("That is not the listener's token."),
        );
    }
    let id = routes.ui.sessions().open(Instant::now());
    let mut response = redirect(&next);
    for cookie in [
        session::set_cookie(SESSION_COOKIE, &id, Some(SESSION_TTL)),
        session::set_cookie(LOGIN_COOKIE, "", None),
    ] {
        if let Ok(value) = HeaderValue::from_str(&cookie) {
            response.headers_mut().append(SET_COOKIE, value);
        }
    }
    response
}

async fn logout(State(routes): State<Routes>, headers: HeaderMap, body: Bytes) -> Response {
    check_host(&routes, &headers)
        .and_then(|()| {
            if routes.token.is_none() {
                return Err(error_page(
                    StatusCode::FORBIDDEN,
                    "this listener has no control token: there are no sessions",
                ));
            }
            let (id, session) = session_of(&routes, &headers).ok_or_else(|| {
                error_page(StatusCode::UNAUTHORIZED, "there is no session to end")
            })?;
            let form = Form::parse(&body);
            if !form
                .get("csrf")
                .is_some_and(|csrf| session::same_secret(&session.csrf, csrf))
            {
                return Err(error_page(
                    StatusCode::FORBIDDEN,
                    "the form's CSRF token is missing or stale",
                ));
            }
            routes.ui.sessions().close(&id);
            let mut response = redirect("/ui/login");
            if let Ok(value) = HeaderValue::from_str(&session::set_cookie(SESSION_COOKIE, "", None))
            {
                response.headers_mut().append(SET_COOKIE, value);
            }
            Ok(response)
        })
        .unwrap_or_else(|refused| refused)
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
    fn a_login_only_goes_on_to_a_ui_page() {
        assert_eq!(next_page(Some("/ui/messages?key=a")), "/ui/messages?key=a");
        for next in [
            None,
            Some("https://evil.example/"),
            Some("//evil.example"),
            Some("/ui\\x"),
            Some("/metrics"),
        ] {
            assert_eq!(next_page(next), "/ui/lanes", "{next:?}");
        }
    }

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
