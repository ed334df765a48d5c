//! One HTTP surface (feature `http`): [`router`] builds every route as an axum
//! [`Router`](axum::Router), which a service mounts in its own server and the binary serves
//! on its listener ([`listener`]: timeouts, a connection cap).
//!
//! | route | group | what it answers |
//! |---|---|---|
//! | `GET /metrics` | [`RouteGroup::Metrics`] | the Prometheus text format |
//! | `GET /healthz` | [`RouteGroup::Probes`] | 200 while the process is alive; 503 once a lane has been failed too long ([`health`]) |
//! | `GET /readyz` | [`RouteGroup::Probes`] | 200 or 503 with a JSON reason, from a check run at most once a second ([`health`]) |
//! | `GET /api/v1/lanes` | [`RouteGroup::Api`] | every lane of this relay: state, counters, gates, the process-local and the fleet-wide pause |
//! | `POST /api/v1/lanes/{lane}/{target}/pause` | [`RouteGroup::Control`] | pauses the lane for every relay on the store (`{"reason": …, "by": …}`, both optional) |
//! | `POST /api/v1/lanes/{lane}/{target}/resume` | [`RouteGroup::Control`] | lifts that pause |
//! | `GET /api/v1/messages?lane=&target=[&status=&key=&limit=&after=]`, `?id=…` | [`RouteGroup::Api`] | a page of messages, keyset paging (`next_cursor`) |
//! | `GET /api/v1/messages/{id}` | [`RouteGroup::Api`] | one message |
//! | `POST /api/v1/dead-letters/requeue`, `…/discard` | [`RouteGroup::Control`] | by `ids` or `lane`+`target`, `dry_run` to count first: the count |
//! | `GET /ui/…`, `POST /ui/…` | [`RouteGroup::Ui`] | the operator's web UI ([`ui`]): lanes, messages, dead letters, blocked keys; its changes also need [`RouteGroup::Control`] |
//!
//! Every mutating route of the JSON API needs `Authorization: Bearer <token>` ([`RouterConfig::token`]):
//! without it (or with another) the answer is 401 and nothing changes; with no token
//! configured the mutating routes answer 403. Errors are JSON, `{"error": …, "field": …}`,
//! `field` naming what was wrong when a field was.
//!
//! The routes that read the relay or the store run on the runtime given to
//! [`RelaySlot::set`] (the application's, which owns the relay's actors and the store's
//! connections), so the router can be served from any runtime, such as the exporter's own
//! thread ([`install_prometheus_exporter`]).

use std::collections::BTreeSet;
use std::fmt;

use axum::routing::{get, post};
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::config::ControlToken;

mod api;
mod control;
mod exporter;
pub mod health;
pub mod listener;
mod messages;
pub mod ui;

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

/// What [`router`] serves: the metrics handle, the readiness check, the relay, the token
/// and the route groups that are on.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RouterConfig {
    metrics: Option<PrometheusHandle>,
    readiness: Readiness,
    liveness: Liveness,
    relay: RelaySlot,
    token: Option<ControlToken>,
    routes: BTreeSet<RouteGroup>,
    ui_hosts: Vec<String>,
}

impl Default for RouterConfig {
    fn default() -> Self {
        Self {
            metrics: None,
            readiness: Readiness::new(),
            liveness: Liveness::new(),
            relay: RelaySlot::new(),
            token: None,
            routes: RouteGroup::ALL.into_iter().collect(),
            ui_hosts: Vec::new(),
        }
    }
}

impl RouterConfig {
    /// Every group on, no metrics handle (no `/metrics`), readiness "starting", no relay
    /// yet (the API answers 503), no token (mutations answer 403).
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

    /// Requires `Authorization: Bearer <token>` on every mutating route.
    pub fn token(mut self, token: ControlToken) -> Self {
        self.token = Some(token);
        self
    }

    /// Turns on exactly these groups.
    pub fn routes(mut self, groups: impl IntoIterator<Item = RouteGroup>) -> Self {
        self.routes = groups.into_iter().collect();
        self
    }

    /// Host names the UI answers besides IP literals and `localhost` (the name operators
    /// reach the listener by, behind a proxy or in a cluster). A request with any other
    /// `Host` gets 403: a page of another site whose name resolves to the relay (DNS
    /// rebinding) cannot read or act on the UI.
    pub fn ui_hosts(mut self, hosts: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.ui_hosts = hosts.into_iter().map(Into::into).collect();
        self
    }

    /// Whether `group` is on.
    pub fn serves(&self, group: RouteGroup) -> bool {
        self.routes.contains(&group)
    }

    /// Whether a mutating route is on and needs no token: what a listener on every
    /// interface must refuse.
    pub fn mutations_unprotected(&self) -> bool {
        self.serves(RouteGroup::Control) && self.token.is_none()
    }
}

/// The shared state of the routes.
#[derive(Debug, Clone)]
struct Routes {
    metrics: Option<PrometheusHandle>,
    readiness: Readiness,
    liveness: Liveness,
    relay: RelaySlot,
    token: Option<ControlToken>,
    ui: std::sync::Arc<ui::UiState>,
}

/// Every route `config` turns on, as one axum router to serve or to nest in a service's
/// own (`Router::merge`). Paths the router does not serve answer 404.
pub fn router(config: RouterConfig) -> Router {
    let routes = Routes {
        metrics: config.metrics.clone(),
        readiness: config.readiness.clone(),
        liveness: config.liveness.clone(),
        relay: config.relay.clone(),
        token: config.token.clone(),
        ui: std::sync::Arc::new(ui::UiState::new(
            config.ui_hosts.clone(),
            config.serves(RouteGroup::Control),
        )),
    };
    let mut router = Router::new();
    if config.serves(RouteGroup::Metrics) && routes.metrics.is_some() {
        router = router.route("/metrics", get(health::metrics));
    }
    if config.serves(RouteGroup::Probes) {
        router = router
            .route("/healthz", get(health::healthz))
            .route("/readyz", get(health::readyz));
    }
    if config.serves(RouteGroup::Api) {
        router = router
            .route("/api/v1/lanes", get(api::lanes))
            .route("/api/v1/messages", get(messages::list))
            .route("/api/v1/messages/{id}", get(messages::one));
    }
    if config.serves(RouteGroup::Control) {
        router = router
            .route(
                "/api/v1/lanes/{lane}/{target}/{action}",
                post(control::lane_action),
            )
            .route(
                "/api/v1/dead-letters/{action}",
                post(messages::dead_letters),
            );
    }
    if config.serves(RouteGroup::Ui) {
        router = router.merge(ui::routes());
    }
    router.fallback(api::not_found).with_state(routes)
}

#[cfg(test)]
mod tests;
