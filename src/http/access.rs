//! Who may use the API and the UI, checked before a handler reads anything: the `Host`
//! allow-list, the token ([`TokenSlot`]), the UI's sessions (`ui/session.rs`) and the pace
//! of wrong tokens ([`super::guessing`]); and a refusal as each answers it, JSON for the API
//! and a page for the UI.
//!
//! | request | needs |
//! |---|---|
//! | `/metrics`, `/healthz`, `/readyz` | nothing, by any `Host` (Prometheus and kubelets reach them by address or service name) |
//! | `GET /api/v1/lanes` | the token when one is configured, unless lane reads are opened ([`RouterConfig::open_lane_reads`](super::RouterConfig::open_lane_reads)) |
//! | `GET /api/v1/messages…` | the token (or a UI session); with no token configured, off (403) |
//! | `POST /api/v1/…` | the token; with no token configured, off (403); checked before the body is read |
//! | `/ui/…` | a session opened with the token; with no token configured, the lanes page only |
//!
//! Every API and UI request must name an allowed host: an IP literal, `localhost`, or one
//! of [`RouterConfig::allowed_hosts`](super::RouterConfig::allowed_hosts). A page of another
//! site whose name resolves to the relay (DNS rebinding) sends its own name, and is refused
//! (403) before anything is read. Why the token on reads: a message's payload and headers
//! (a downstream `authorization` header among them) are the data an outbox carries; a
//! listener reachable by a cluster must not hand them to whoever asks.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Instant;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::header::{AUTHORIZATION, COOKIE, HOST, RETRY_AFTER};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::api::ApiError;
use super::guessing::{Guesses, Peer, Warning};
use super::ui::html::error_page;
use super::ui::session::{self, Session, Sessions, SESSION_COOKIE};
use super::Routes;
use crate::config::ControlToken;
use crate::metrics::http::AUTH_FAILURES_TOTAL;
use crate::metrics::LABEL_KIND;

/// The token the API and the UI require, shared: a listener that runs takes a new one at
/// once ([`TokenSlot::set`]), so a token can be rotated without a restart (the binary
/// re-reads its `token_file` on SIGHUP). Cloning shares the slot.
#[derive(Clone, Default)]
pub struct TokenSlot(Arc<RwLock<Option<ControlToken>>>);

impl fmt::Debug for TokenSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenSlot")
            .field("set", &self.current().is_some())
            .finish()
    }
}

impl TokenSlot {
    /// An empty slot: no token, so reads of messages and every mutation are off.
    pub fn new() -> Self {
        Self::default()
    }

    /// From now on `token` is the one required; the one before stops working at once.
    /// UI sessions opened with it stay open (they hold no token).
    pub fn set(&self, token: ControlToken) {
        *self
            .0
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(token);
    }

    /// The token required now, if any.
    pub fn current(&self) -> Option<ControlToken> {
        self.0
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

/// What a request asks to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Need {
    /// Read the lanes' status.
    Lanes,
    /// Read messages: payloads, headers, errors.
    Messages,
    /// Change something.
    Mutation,
}

/// The access settings and state the routes share.
#[derive(Debug)]
pub(super) struct Access {
    pub(super) tokens: TokenSlot,
    hosts: Vec<String>,
    open_lane_reads: bool,
    pub(super) secure_cookies: bool,
    guesses: Mutex<Guesses>,
    /// The UI's open sessions and login forms: a session also opens the API's reads.
    sessions: Mutex<Sessions>,
}

impl Access {
    pub(super) fn new(
        tokens: TokenSlot,
        hosts: Vec<String>,
        open_lane_reads: bool,
        secure_cookies: bool,
    ) -> Self {
        Self {
            tokens,
            hosts,
            open_lane_reads,
            secure_cookies,
            guesses: Mutex::default(),
            sessions: Mutex::default(),
        }
    }

    fn guesses(&self) -> MutexGuard<'_, Guesses> {
        self.guesses
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The UI's sessions and login forms.
    pub(super) fn sessions(&self) -> MutexGuard<'_, Sessions> {
        self.sessions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The open session whose cookie `headers` carry: its id and state.
    pub(super) fn session(&self, headers: &HeaderMap) -> Option<(String, Session)> {
        let id = headers
            .get(COOKIE)
            .and_then(|value| value.to_str().ok())
            .and_then(|cookies| session::cookie(cookies, SESSION_COOKIE))?;
        let session = self.sessions().get(id, Instant::now())?;
        Some((id.to_owned(), session))
    }

    /// Whether `peer` may present a token now; else the 429 to answer.
    pub(super) fn admit(&self, peer: Peer) -> Result<(), Refusal> {
        self.guesses()
            .admit(peer, Instant::now())
            .map_err(|wait| Refusal::TooManyFailures(wait.as_secs().max(1)))
    }

    /// `peer` presented a wrong token (`what`: "bearer token", "UI login"): counted, and
    /// logged unless a warning went out a moment ago.
    pub(super) fn failed(&self, peer: Peer, what: &'static str) {
        metrics::counter!(AUTH_FAILURES_TOTAL, LABEL_KIND => what).increment(1);
        let warning = self.guesses().failed(peer, Instant::now());
        if let Some(Warning {
            peer,
            failures,
            wait,
            unlogged,
        }) = warning
        {
            tracing::warn!(
                %peer,
                failures,
                wait_seconds = wait.map_or(0, |wait| wait.as_secs()),
                unlogged,
                "a wrong {what} was refused (wrong tokens are logged at most once per {}s; `unlogged` counts the others)",
                super::guessing::WARN_EVERY.as_secs()
            );
        }
    }

    /// `peer` presented the right token.
    pub(super) fn succeeded(&self, peer: Peer) {
        self.guesses().succeeded(peer);
    }
}

/// Why a request is refused before its handler runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Refusal {
    /// The `Host` is not one the API and UI answer to.
    Host,
    /// No token is configured: what the request asks is off.
    Off(Need),
    /// A token is needed and was not presented, or a wrong one was.
    Unauthorized,
    /// The peer failed too often; it may try again in this many seconds.
    TooManyFailures(u64),
}

impl Refusal {
    /// The refusal as the API answers it (JSON, naming the field).
    pub(super) fn into_api(self) -> Response {
        match self {
            Refusal::Host => ApiError::new(
                StatusCode::FORBIDDEN,
                "this Host is not served: use the relay's IP address, localhost, or a name in listener.allowed_hosts",
            )
            .field("host")
            .into_response(),
            Refusal::Off(Need::Mutation) => ApiError::new(
                StatusCode::FORBIDDEN,
                "mutations are off: no token is configured (listener.token_env or listener.token_file)",
            )
            .into_response(),
            Refusal::Off(_) => ApiError::new(
                StatusCode::FORBIDDEN,
                "reads of messages are off: no token is configured (listener.token_env or listener.token_file)",
            )
            .into_response(),
            Refusal::Unauthorized => ApiError::new(
                StatusCode::UNAUTHORIZED,
                "this route needs the token: Authorization: Bearer <token>",
            )
            .field("authorization")
            .into_response(),
            Refusal::TooManyFailures(seconds) => ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!("too many wrong tokens from this address: try again in {seconds}s"),
            )
            .field("authorization")
            .retry_after(seconds)
            .into_response(),
        }
    }

    /// The refusal as the UI answers it (a page).
    pub(super) fn into_page(self) -> Response {
        match self {
            Refusal::Host => error_page(
                StatusCode::FORBIDDEN,
                "this Host is not served: use the relay's IP address, localhost, or a name in listener.allowed_hosts",
            ),
            Refusal::TooManyFailures(seconds) => {
                let mut page = error_page(
                    StatusCode::TOO_MANY_REQUESTS,
                    &format!("too many wrong tokens from this address: try again in {seconds}s"),
                );
                page.headers_mut()
                    .insert(RETRY_AFTER, HeaderValue::from(seconds));
                page
            }
            Refusal::Off(_) => error_page(
                StatusCode::FORBIDDEN,
                "this page shows messages, which are off: the listener has no control token (listener.token_env or listener.token_file)",
            ),
            Refusal::Unauthorized => error_page(StatusCode::UNAUTHORIZED, "log in first"),
        }
    }
}

/// The peer of a request, when the server passed it (`ConnectInfo`).
pub(super) fn peer_of(request: &Request) -> Peer {
    Peer::of(
        request
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(addr)| addr.ip()),
    )
}

/// Whether a request's `Host` (the header, else the URI's authority) is one the API and UI
/// answer to: an IP literal, `localhost`, or one of `allowed` (names compared without
/// case, the port ignored).
pub(super) fn host_allowed(host: Option<&str>, allowed: &[String]) -> bool {
    let Some(host) = host.map(str::trim).filter(|host| !host.is_empty()) else {
        return false;
    };
    let name = if let Some(rest) = host.strip_prefix('[') {
        // [v6]:port
        match rest.split_once(']') {
            Some((v6, _)) => return v6.parse::<std::net::Ipv6Addr>().is_ok(),
            None => return false,
        }
    } else {
        host.rsplit_once(':')
            .filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit()))
            .map_or(host, |(name, _)| name)
    };
    name.parse::<IpAddr>().is_ok()
        || name.eq_ignore_ascii_case("localhost")
        || allowed.iter().any(|a| a.eq_ignore_ascii_case(name))
}

/// The host a request names.
fn host_of(request: &Request) -> Option<&str> {
    request
        .headers()
        .get(HOST)
        .and_then(|value| value.to_str().ok())
        .or_else(|| {
            request
                .uri()
                .authority()
                .map(|authority| authority.as_str())
        })
}

/// Whether `headers` carry `Bearer <token>`: `None` when they carry no `Authorization`.
fn bearer(headers: &HeaderMap, token: &ControlToken) -> Option<bool> {
    let presented = headers.get(AUTHORIZATION)?;
    Some(token.authorizes(presented.to_str().ok()))
}

/// Decides `need` for a request from `peer` with `headers`; `session` says whether it
/// carries an open UI session. Counts a wrong token against the peer.
pub(super) fn authorize(
    routes: &Routes,
    headers: &HeaderMap,
    peer: Peer,
    need: Need,
    session: bool,
) -> Result<(), Refusal> {
    let Some(token) = routes.access.tokens.current() else {
        return match need {
            Need::Lanes => Ok(()),
            other => Err(Refusal::Off(other)),
        };
    };
    if need == Need::Lanes && routes.access.open_lane_reads {
        return Ok(());
    }
    if need != Need::Mutation && session {
        return Ok(());
    }
    routes.access.admit(peer)?;
    match bearer(headers, &token) {
        Some(true) => {
            routes.access.succeeded(peer);
            Ok(())
        }
        Some(false) => {
            routes.access.failed(peer, "bearer token");
            Err(Refusal::Unauthorized)
        }
        None => Err(Refusal::Unauthorized),
    }
}

/// Middleware of every API and UI route: refuses a `Host` not allowed, before anything is
/// read (JSON for the API, a page for the UI).
pub(super) async fn allowed_host(
    State(routes): State<Routes>,
    request: Request,
    next: Next,
) -> Response {
    if host_allowed(host_of(&request), &routes.access.hosts) {
        return next.run(request).await;
    }
    if request.uri().path().starts_with("/ui") {
        Refusal::Host.into_page()
    } else {
        Refusal::Host.into_api()
    }
}

/// Middleware of `GET /api/v1/lanes`.
pub(super) async fn lane_reads(
    State(routes): State<Routes>,
    request: Request,
    next: Next,
) -> Response {
    guarded(&routes, request, next, Need::Lanes).await
}

/// Middleware of `GET /api/v1/messages…`.
pub(super) async fn message_reads(
    State(routes): State<Routes>,
    request: Request,
    next: Next,
) -> Response {
    guarded(&routes, request, next, Need::Messages).await
}

/// Middleware of `POST /api/v1/…`: the token is checked before the body is read. Another
/// method goes on to its 405 unchecked (it reads and changes nothing).
pub(super) async fn mutations(
    State(routes): State<Routes>,
    request: Request,
    next: Next,
) -> Response {
    if request.method() != axum::http::Method::POST {
        return next.run(request).await;
    }
    guarded(&routes, request, next, Need::Mutation).await
}

async fn guarded(routes: &Routes, request: Request, next: Next, need: Need) -> Response {
    let session = need != Need::Mutation && routes.access.session(request.headers()).is_some();
    match authorize(routes, request.headers(), peer_of(&request), need, session) {
        Ok(()) => next.run(request).await,
        Err(refusal) => refusal.into_api(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ip_literals_localhost_and_allowed_names_are_served() {
        let named = vec!["relay.internal".to_owned()];
        for host in [
            "127.0.0.1:9464",
            "127.0.0.1",
            "[::1]:9464",
            "localhost:9464",
            "LOCALHOST",
            "10.0.0.7",
            "relay.internal:9464",
        ] {
            assert!(host_allowed(Some(host), &named), "{host}");
        }
        for host in [
            "evil.example:9464",
            "evil.example",
            "",
            "[zz]:1",
            "127.0.0.1.evil.example",
        ] {
            assert!(!host_allowed(Some(host), &named), "{host}");
        }
        assert!(!host_allowed(None, &named));
    }
}
