//! One HTTP surface (feature `http`): [`router`] builds every route as an
//! [`axum::Router`], which a service mounts in its own server and the binary serves
//! on its listener ([`listener`]: timeouts, a connection cap).
//!
//! | route | group | what it answers |
//! |---|---|---|
//! | `GET /metrics` | [`RouteGroup::Metrics`] | the Prometheus text format |
//! | `GET /healthz` | [`RouteGroup::Probes`] | 200 while the process is alive; 503 once a lane has been failed too long ([`health`]) |
//! | `GET /readyz` | [`RouteGroup::Probes`] | 200 or 503 with a JSON reason, from a check run at most once a second ([`health`]) |
//! | `GET /api/v1/lanes` | [`RouteGroup::Api`] | every lane of this relay: state, counters, gates, the process-local and the fleet-wide pause (the token, unless [`RouterConfig::open_lane_reads`]) |
//! | `POST /api/v1/lanes/{lane}/{target}/pause` | [`RouteGroup::Control`] | pauses the lane for every relay on the store (`{"reason": …, "by": …}`, both optional) |
//! | `POST /api/v1/lanes/{lane}/{target}/resume` | [`RouteGroup::Control`] | lifts that pause |
//! | `GET /api/v1/messages?lane=&target=[&status=&key=&limit=&after=]`, `?id=…` | [`RouteGroup::Api`] | a page of messages, keyset paging (`next_cursor`) (the token) |
//! | `GET /api/v1/messages/{id}` | [`RouteGroup::Api`] | one message (the token) |
//! | `POST /api/v1/dead-letters/requeue`, `…/discard` | [`RouteGroup::Control`] | by `ids` or `lane`+`target`, `dry_run` to count first: the count |
//! | `GET /ui/…`, `POST /ui/…` | [`RouteGroup::Ui`] | the operator's web UI ([`ui`]): lanes, messages, dead letters, blocked keys; its changes also need [`RouteGroup::Control`] |
//!
//! Who may call what is `http/access.rs`'s (the one table of it is the guide's security page):
//! every mutating route and every read of messages needs `Authorization: Bearer <token>`
//! ([`RouterConfig::token`]), lane reads too unless opened
//! ([`RouterConfig::open_lane_reads`]); without it (or with another) the answer is 401 and
//! nothing is read or changed; with no token configured, mutations and reads of messages
//! answer 403. The API and the UI answer only the hosts the allow-list names
//! ([`RouterConfig::allowed_hosts`]); the probes and `/metrics` answer any. A peer that
//! presents wrong tokens waits longer after each (`http/guessing.rs`). Errors are JSON,
//! `{"error": …, "field": …}`, `field` naming what was wrong when a field was. Request
//! bodies of the mutating routes and the UI's forms are at most [`MAX_BODY_BYTES`], read
//! only once the token (or session) is checked.
//!
//! The routes that read the relay or the store run on the runtime given to
//! [`RelaySlot::set`] (the application's, which owns the relay's actors and the store's
//! connections), so the router can be served from any runtime, such as the exporter's own
//! thread ([`install_prometheus_exporter`]); at most
//! [`RouterConfig::api_store_calls`] at once, each within
//! [`RouterConfig::api_store_timeout`], cancelled when the client goes (`http/control.rs`).

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::middleware::from_fn_with_state;
use axum::routing::{get, post};
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::config::{ControlToken, DEFAULT_API_STORE_CALLS, DEFAULT_API_STORE_TIMEOUT};

mod access;
mod api;
mod control;
mod exporter;
mod guessing;
pub mod health;
pub mod listener;
mod messages;
pub mod ui;

pub use access::TokenSlot;
pub use control::RelaySlot;
pub use exporter::{
    install_prometheus_exporter, install_prometheus_exporter_with_router, MetricsError,
};
pub use health::{Liveness, Readiness, ReadinessCheck, RelayLiveness, RelayReadiness};
pub use messages::{DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE};

/// A group of routes, turned on or off as a whole ([`RouterConfig::routes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum RouteGroup {
    /// `GET /metrics`.
    Metrics,
    /// `GET /healthz` and `GET /readyz`.
    Probes,
    /// The JSON API's reads (`GET /api/v1/…`).
    Api,
    /// The JSON API's mutations (`POST /api/v1/…`), each behind the token.
    Control,
    /// The web UI (`/ui/…`); its changes need [`RouteGroup::Control`] on as well.
    Ui,
}

impl RouteGroup {
    /// Every group.
    pub const ALL: [RouteGroup; 5] = [
        RouteGroup::Metrics,
        RouteGroup::Probes,
        RouteGroup::Api,
        RouteGroup::Control,
        RouteGroup::Ui,
    ];

    /// The group's name in config files: `metrics`, `probes`, `api`, `control`, `ui`.
    pub fn as_str(self) -> &'static str {
        match self {
            RouteGroup::Metrics => "metrics",
            RouteGroup::Probes => "probes",
            RouteGroup::Api => "api",
            RouteGroup::Control => "control",
            RouteGroup::Ui => "ui",
        }
    }
}

impl fmt::Display for RouteGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for RouteGroup {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RouteGroup::ALL
            .into_iter()
            .find(|group| group.as_str() == s)
            .ok_or_else(|| {
                format!("unknown route group {s:?}; expected metrics, probes, api, control or ui")
            })
    }
}

/// The largest request body the mutating routes and the UI's forms read (a bulk action
/// of 500 ids is about 20 KiB): a larger one is answered 413 unread.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// What [`router`] serves: the metrics handle, the readiness check, the relay, the token,
/// the route groups that are on, the hosts the API and UI answer, and the bound on their
/// store calls.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RouterConfig {
    metrics: Option<PrometheusHandle>,
    readiness: Readiness,
    liveness: Liveness,
    relay: RelaySlot,
    tokens: TokenSlot,
    routes: BTreeSet<RouteGroup>,
    allowed_hosts: Vec<String>,
    open_lane_reads: bool,
    secure_cookies: bool,
    api_store_calls: usize,
    api_store_timeout: Duration,
}

impl Default for RouterConfig {
    fn default() -> Self {
        Self {
            metrics: None,
            readiness: Readiness::new(),
            liveness: Liveness::new(),
            relay: RelaySlot::new(),
            tokens: TokenSlot::new(),
            routes: RouteGroup::ALL.into_iter().collect(),
            allowed_hosts: Vec::new(),
            open_lane_reads: false,
            secure_cookies: false,
            api_store_calls: DEFAULT_API_STORE_CALLS,
            api_store_timeout: DEFAULT_API_STORE_TIMEOUT,
        }
    }
}

impl RouterConfig {
    /// Every group on, no metrics handle (no `/metrics`), readiness "starting", no relay
    /// yet (the API answers 503), no token (mutations and reads of messages answer 403).
    pub fn new() -> Self {
        Self::default()
    }

    /// Serves `/metrics` from `handle` (a service's own recorder's, or the one
    /// [`install_prometheus_exporter_with_router`] installs).
    pub fn metrics(mut self, handle: PrometheusHandle) -> Self {
        self.metrics = Some(handle);
        self
    }

    /// Answers `/readyz` from `readiness` (its check is set once the relay runs).
    pub fn readiness(mut self, readiness: Readiness) -> Self {
        self.readiness = readiness;
        self
    }

    /// Answers `/healthz` from `liveness` (its check is set once the relay runs).
    pub fn liveness(mut self, liveness: Liveness) -> Self {
        self.liveness = liveness;
        self
    }

    /// Acts on the relay and store `slot` holds, once [set](RelaySlot::set).
    pub fn relay(mut self, slot: RelaySlot) -> Self {
        self.relay = slot;
        self
    }

    /// Requires `Authorization: Bearer <token>` (or a UI session opened with it) on every
    /// mutating route, every read of messages, and lane reads unless
    /// [`open_lane_reads`](Self::open_lane_reads). A fresh [`TokenSlot`] holds it: see
    /// [`token_slot`](Self::token_slot) to rotate it while the router serves.
    pub fn token(mut self, token: ControlToken) -> Self {
        self.tokens = TokenSlot::new();
        self.tokens.set(token);
        self
    }

    /// The slot the router reads its token from: [`TokenSlot::set`] on it replaces the
    /// token of a router that already serves (a rotation).
    pub fn token_slot(&self) -> TokenSlot {
        self.tokens.clone()
    }

    /// Turns on exactly these groups.
    pub fn routes(mut self, groups: impl IntoIterator<Item = RouteGroup>) -> Self {
        self.routes = groups.into_iter().collect();
        self
    }

    /// Host names the API and the UI answer besides IP literals and `localhost` (the name
    /// operators reach the listener by, behind a proxy or in a cluster). A request to
    /// either with any other `Host` gets 403 before anything is read: a page of another
    /// site whose name resolves to the relay (DNS rebinding) cannot read or act on them.
    /// `/metrics` and the probes answer any name.
    pub fn allowed_hosts(mut self, hosts: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.allowed_hosts = hosts.into_iter().map(Into::into).collect();
        self
    }

    /// Opens `GET /api/v1/lanes` (the lanes' status, no message) to requests without the
    /// token, for dashboards and status pages that should not hold it. Reads of messages
    /// and every mutation still need it. Default off: with a token configured, lane reads
    /// need it too.
    pub fn open_lane_reads(mut self, open: bool) -> Self {
        self.open_lane_reads = open;
        self
    }

    /// Marks the UI's cookies `Secure` on every answer, for a UI served behind a proxy that
    /// terminates TLS. Without it they are marked `Secure` when the request says it came
    /// over TLS (`X-Forwarded-Proto: https`).
    pub fn secure_cookies(mut self, secure: bool) -> Self {
        self.secure_cookies = secure;
        self
    }

    /// How many store calls the API and the UI run at once; past it a request is answered
    /// 503 at once ([`DEFAULT_API_STORE_CALLS`]; at least 1).
    pub fn api_store_calls(mut self, at_once: usize) -> Self {
        self.api_store_calls = at_once.max(1);
        self
    }

    /// How long one request's store work may take before it is given up with a 503
    /// ([`DEFAULT_API_STORE_TIMEOUT`]).
    pub fn api_store_timeout(mut self, timeout: Duration) -> Self {
        self.api_store_timeout = timeout;
        self
    }

    /// Whether `group` is on.
    pub fn serves(&self, group: RouteGroup) -> bool {
        self.routes.contains(&group)
    }
}

/// The shared state of the routes.
#[derive(Debug, Clone)]
struct Routes {
    metrics: Option<PrometheusHandle>,
    readiness: Readiness,
    liveness: Liveness,
    relay: RelaySlot,
    access: std::sync::Arc<access::Access>,
    store_calls: control::StoreCalls,
    ui: std::sync::Arc<ui::UiState>,
}

impl Routes {
    /// Runs `work` on the relay's runtime, within the bound and the timeout of the API's
    /// store calls ([`control::StoreCalls::run`]).
    async fn run<T, F>(&self, work: impl FnOnce(control::Running) -> F) -> Result<T, api::ApiError>
    where
        T: Send + 'static,
        F: std::future::Future<Output = Result<T, api::ApiError>> + Send + 'static,
    {
        self.store_calls.run(&self.relay, work).await
    }
}

/// Every route `config` turns on, as one axum router to serve or to nest in a service's
/// own (`Router::merge`). Paths the router does not serve answer 404.
pub fn router(config: RouterConfig) -> Router {
    let routes = Routes {
        metrics: config.metrics.clone(),
        readiness: config.readiness.clone(),
        liveness: config.liveness.clone(),
        relay: config.relay.clone(),
        access: std::sync::Arc::new(access::Access::new(
            config.tokens.clone(),
            config.allowed_hosts.clone(),
            config.open_lane_reads,
            config.secure_cookies,
        )),
        store_calls: control::StoreCalls::new(config.api_store_calls, config.api_store_timeout),
        ui: std::sync::Arc::new(ui::UiState::new(config.serves(RouteGroup::Control))),
    };
    // What the Host allow-list covers: the API and the UI.
    let mut guarded: Router<Routes> = Router::new();
    if config.serves(RouteGroup::Api) {
        guarded = guarded
            .route(
                "/api/v1/lanes",
                get(api::lanes).route_layer(from_fn_with_state(routes.clone(), access::lane_reads)),
            )
            .route(
                "/api/v1/messages",
                get(messages::list)
                    .route_layer(from_fn_with_state(routes.clone(), access::message_reads)),
            )
            .route(
                "/api/v1/messages/{id}",
                get(messages::one)
                    .route_layer(from_fn_with_state(routes.clone(), access::message_reads)),
            );
    }
    if config.serves(RouteGroup::Control) {
        // The token is checked (a middleware) before the body is read (an extractor).
        let mutations = Router::new()
            .route(
                "/api/v1/lanes/{lane}/{target}/{action}",
                post(control::lane_action),
            )
            .route(
                "/api/v1/dead-letters/{action}",
                post(messages::dead_letters),
            )
            .route_layer(from_fn_with_state(routes.clone(), access::mutations));
        guarded = guarded.merge(mutations);
    }
    if config.serves(RouteGroup::Ui) {
        guarded = guarded.merge(ui::routes(&routes));
    }
    let guarded_groups = [RouteGroup::Api, RouteGroup::Control, RouteGroup::Ui];
    if guarded_groups.iter().any(|group| config.serves(*group)) {
        guarded = guarded
            .route_layer(from_fn_with_state(routes.clone(), access::allowed_host))
            .layer(DefaultBodyLimit::max(MAX_BODY_BYTES));
    }
    let mut router = Router::new();
    if config.serves(RouteGroup::Metrics) && routes.metrics.is_some() {
        router = router.route("/metrics", get(health::metrics));
    }
    if config.serves(RouteGroup::Probes) {
        router = router
            .route("/healthz", get(health::healthz))
            .route("/readyz", get(health::readyz));
    }
    router
        .merge(guarded)
        .fallback(api::not_found)
        .with_state(routes)
}

#[cfg(test)]
mod tests;
