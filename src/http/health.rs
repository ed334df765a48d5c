//! The probes and the scrape: `/metrics`, `/healthz`, `/readyz`, and the readiness check.
//!
//! `/healthz` answers 200 as long as the listener's thread runs and its [`Liveness`] check
//! (once set) passes: [`RelayLiveness`] fails once a lane has been failed for longer than
//! the supervisor's `fail_liveness_after` (a failed lane stays down until the process
//! restarts, so a restart is the cure), and never because the database is down (a restart
//! would not bring the database back). `/readyz` asks a [`ReadinessCheck`]
//! within a timeout and answers 200 or 503 with a JSON reason; the check runs at most once
//! per [`READINESS_PROBE_INTERVAL`] whatever the request rate (requests meanwhile get its
//! last answer), so a `/readyz` flood cannot take the store's connections from the lanes'
//! claims and lease extensions.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use uuid::Uuid;

use super::Routes;
use crate::lane::LaneState;
use crate::relay::RelayHandle;
use crate::store::Outbox;

/// How long `/readyz` waits for its check before answering 503. Kubernetes' default probe
/// timeout is 1 s and its usual setting a few seconds: the check must answer well inside it.
pub const DEFAULT_READINESS_TIMEOUT: Duration = Duration::from_secs(2);
/// How long an answer of the readiness check stands: `/readyz` asks the check (a store
/// call) at most once per interval, whatever the request rate. Probes come every few
/// seconds; a second is fresh enough for any of them.
pub const READINESS_PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// What `/readyz` asks: `Ok` when the process should receive work, otherwise the reason.
#[async_trait]
pub trait ReadinessCheck: Send + Sync + 'static {
    /// Whether the process is ready; the `Err` is the reason shown in the 503's JSON body.
    async fn ready(&self) -> Result<(), String>;
}

/// The check `/readyz` asks, set once the relay runs. Until [`Readiness::set`] is called,
/// `/readyz` answers 503 ("starting"). Cloning shares the same slot.
#[derive(Clone, Default)]
pub struct Readiness {
    probe: Arc<RwLock<Option<Probe>>>,
    /// How many checks were set, so an answer of a replaced check is not reused.
    generations: Arc<AtomicU64>,
    /// The last answer. The lock is held while the check runs: concurrent requests wait
    /// for that one answer rather than each running the check.
    last: Arc<tokio::sync::Mutex<Option<Answered>>>,
}

#[derive(Clone)]
struct Probe {
    check: Arc<dyn ReadinessCheck>,
    runtime: tokio::runtime::Handle,
    timeout: Duration,
    generation: u64,
}

/// An answer of the check, and when it came.
struct Answered {
    at: Instant,
    generation: u64,
    answer: Result<(), String>,
}

impl fmt::Debug for Readiness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let probe = self.current();
        f.debug_struct("Readiness")
            .field("set", &probe.is_some())
            .field("timeout", &probe.map(|probe| probe.timeout))
            .finish()
    }
}

impl Readiness {
    /// A readiness that answers "starting" until [`set`](Self::set).
    pub fn new() -> Self {
        Self::default()
    }

    /// From now on `/readyz` runs `check` on `runtime` and waits at most `timeout` for it.
    ///
    /// The check runs on the application's runtime, not on the listener's own thread,
    /// because a store's connections belong to the runtime that opened them. A runtime too
    /// busy to answer within `timeout` makes the process not ready, which is the truth.
    pub fn set(
        &self,
        check: impl ReadinessCheck,
        runtime: tokio::runtime::Handle,
        timeout: Duration,
    ) {
        let probe = Probe {
            check: Arc::new(check),
            runtime,
            timeout,
            generation: self.generations.fetch_add(1, Ordering::Relaxed) + 1,
        };
        *self
            .probe
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(probe);
    }

    fn current(&self) -> Option<Probe> {
        self.probe
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Asks the check, or gives its answer of less than [`READINESS_PROBE_INTERVAL`] ago:
    /// `Ok` when ready, otherwise the reason.
    pub async fn ask(&self) -> Result<(), String> {
        let Some(probe) = self.current() else {
            return Err("starting: the relay is not running yet".to_owned());
        };
        let mut last = self.last.lock().await;
        if let Some(answered) = last.as_ref() {
            if answered.generation == probe.generation
                && answered.at.elapsed() < READINESS_PROBE_INTERVAL
            {
                return answered.answer.clone();
            }
        }
        let generation = probe.generation;
        let answer = Self::run(probe).await;
        // Timed from the answer: the next check starts a full interval after this one ended.
        *last = Some(Answered {
            at: Instant::now(),
            generation,
            answer: answer.clone(),
        });
        answer
    }

    /// Runs the check on its runtime, within its timeout.
    async fn run(probe: Probe) -> Result<(), String> {
        let check = probe.check.clone();
        let running = probe.runtime.spawn(async move { check.ready().await });
        let abort = running.abort_handle();
        match tokio::time::timeout(probe.timeout, running).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(error)) => Err(format!("the readiness check failed: {error}")),
            Err(_) => {
                abort.abort();
                Err(format!(
                    "the readiness check did not answer within {:?}",
                    probe.timeout
                ))
            }
        }
    }
}

/// The check `/healthz` asks, set once the relay runs: until then, and without one,
/// `/healthz` answers 200 while the listener runs. Asked as [`Readiness`] asks its check (on
/// the application's runtime, within a timeout, at most once per
/// [`READINESS_PROBE_INTERVAL`]). Cloning shares the same slot.
#[derive(Debug, Clone, Default)]
pub struct Liveness(Readiness);

/// How long `/healthz` waits for its check before answering 503: the check asks the
/// relay's supervisor, in process; a runtime that cannot answer within this is not well.
pub const DEFAULT_LIVENESS_TIMEOUT: Duration = Duration::from_secs(2);

impl Liveness {
    /// A liveness that answers "alive" until [`set`](Self::set).
    pub fn new() -> Self {
        Self::default()
    }

    /// From now on `/healthz` runs `check` on `runtime`, waiting at most `timeout`.
    pub fn set(
        &self,
        check: impl ReadinessCheck,
        runtime: tokio::runtime::Handle,
        timeout: Duration,
    ) {
        self.0.set(check, runtime, timeout);
    }

    /// `Ok` while alive (or no check is set), otherwise the reason.
    pub async fn ask(&self) -> Result<(), String> {
        if self.0.current().is_none() {
            return Ok(());
        }
        self.0.ask().await
    }
}

/// Alive while the relay answers and no lane has been failed for longer than its
/// supervisor allows ([`RelayHandle::liveness`]).
#[derive(Debug, Clone)]
pub struct RelayLiveness(Arc<RelayHandle>);

impl RelayLiveness {
    /// Checks the lanes of `relay`.
    pub fn new(relay: Arc<RelayHandle>) -> Self {
        Self(relay)
    }
}

#[async_trait]
impl ReadinessCheck for RelayLiveness {
    async fn ready(&self) -> Result<(), String> {
        self.0.liveness().await.map_err(|error| error.to_string())
    }
}

/// Ready when the store answers a lookup and no lane has [failed](LaneState::Failed) (a
/// lane that restarted too often stays down until an operator acts).
#[derive(Debug, Clone)]
pub struct RelayReadiness {
    store: Outbox,
    relay: Arc<RelayHandle>,
}

impl RelayReadiness {
    /// Checks `store` and the lanes of `relay`.
    pub fn new(store: Outbox, relay: Arc<RelayHandle>) -> Self {
        Self { store, relay }
    }
}

#[async_trait]
impl ReadinessCheck for RelayReadiness {
    async fn ready(&self) -> Result<(), String> {
        // A lookup by primary key of an id no message has: one index probe on every
        // store, cheap at any backlog, yet a full round trip to the database.
        self.store
            .get(Uuid::nil())
            .await
            .map_err(|error| format!("the store is unreachable: {error}"))?;
        let lanes = self
            .relay
            .status()
            .await
            .map_err(|error| format!("the relay does not answer: {error}"))?;
        let failed: Vec<String> = lanes
            .iter()
            .filter(|status| status.state == LaneState::Failed)
            .map(|status| format!("{}/{}", status.lane.name, status.lane.target))
            .collect();
        if failed.is_empty() {
            Ok(())
        } else {
            Err(format!("lanes failed: {}", failed.join(", ")))
        }
    }
}

/// `GET /metrics`: the Prometheus text format.
pub(super) async fn metrics(State(routes): State<Routes>) -> Response {
    match &routes.metrics {
        Some(handle) => (
            [(CONTENT_TYPE, "text/plain; version=0.0.4")],
            handle.render(),
        )
            .into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// `GET /healthz`: alive, or 503 with the reason.
pub(super) async fn healthz(State(routes): State<Routes>) -> Response {
    match routes.liveness.ask().await {
        Ok(()) => ([(CONTENT_TYPE, "text/plain")], "ok\n").into_response(),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(CONTENT_TYPE, "text/plain")],
            format!("{reason}\n"),
        )
            .into_response(),
    }
}

/// `GET /readyz`: the readiness check's (cached) answer.
pub(super) async fn readyz(State(routes): State<Routes>) -> Response {
    match routes.readiness.ask().await {
        Ok(()) => Json(json!({ "ready": true })).into_response(),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "ready": false, "reason": reason })),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{InMemoryOutboxStore, LaneConfig, OutboxRelay};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Generous: other builds share the machine.
    const WAIT: Duration = Duration::from_secs(60);

    /// Serves `readiness` (and an empty local recorder's metrics) on a port of its own.
    async fn listen(readiness: Readiness) -> std::net::SocketAddr {
        listen_alive(readiness, Liveness::new()).await
    }

    /// Serves `readiness` and `liveness` on a port of its own.
    async fn listen_alive(readiness: Readiness, liveness: Liveness) -> std::net::SocketAddr {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            metrics::counter!("probe_test_total").increment(3);
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a port");
        let addr = listener.local_addr().expect("its address");
        tokio::spawn(super::super::listener::serve(
            listener,
            super::super::router(
                super::super::RouterConfig::new()
                    .metrics(handle)
                    .readiness(readiness)
                    .liveness(liveness),
            ),
            crate::config::ListenerConfig::default(),
        ));
        addr
    }

    /// GETs `path`: the status code and the body.
    async fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
        let exchange = async {
            let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
            let request =
                format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
            stream.write_all(request.as_bytes()).await.expect("send");
            let mut response = String::new();
            stream.read_to_string(&mut response).await.expect("read");
            response
        };
        let response = tokio::time::timeout(WAIT, exchange)
            .await
            .expect("an answer");
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

    fn json(body: &str) -> serde_json::Value {
        serde_json::from_str(body).unwrap_or_else(|error| panic!("{error}: {body:?}"))
    }

    struct Answers(Result<(), String>);

    #[async_trait]
    impl ReadinessCheck for Answers {
        async fn ready(&self) -> Result<(), String> {
            self.0.clone()
        }
    }

    struct NeverAnswers;

    #[async_trait]
    impl ReadinessCheck for NeverAnswers {
        async fn ready(&self) -> Result<(), String> {
            std::future::pending().await
        }
    }

    #[tokio::test]
    async fn serves_metrics_liveness_and_404_for_other_paths() {
        let addr = listen(Readiness::new()).await;
        let (status, body) = get(addr, "/metrics").await;
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("probe_test_total 3"), "{body}");
        assert_eq!(get(addr, "/healthz").await, (200, "ok\n".to_owned()));
        for path in ["/", "/metricsx", "/healthz/extra", "/favicon.ico"] {
            let (status, body) = get(addr, path).await;
            assert_eq!(status, 404, "{path}: {body}");
        }
    }

    #[tokio::test]
    async fn readyz_is_503_until_a_check_is_set_then_answers_what_it_says() {
        let readiness = Readiness::new();
        let addr = listen(readiness.clone()).await;
        let (status, body) = get(addr, "/readyz").await;
        assert_eq!(status, 503, "{body}");
        assert_eq!(json(&body)["ready"], false, "{body}");
        assert!(
            json(&body)["reason"]
                .as_str()
                .unwrap_or("")
                .starts_with("starting"),
            "{body}"
        );

        readiness.set(
            Answers(Ok(())),
            tokio::runtime::Handle::current(),
            DEFAULT_READINESS_TIMEOUT,
        );
        let (status, body) = get(addr, "/readyz").await;
        assert_eq!((status, json(&body)), (200, json!({ "ready": true })));

        readiness.set(
            Answers(Err("lanes failed: orders/audit".to_owned())),
            tokio::runtime::Handle::current(),
            DEFAULT_READINESS_TIMEOUT,
        );
        let (status, body) = get(addr, "/readyz").await;
        assert_eq!(
            (status, json(&body)),
            (
                503,
                json!({ "ready": false, "reason": "lanes failed: orders/audit" })
            )
        );
        // Liveness does not depend on readiness.
        assert_eq!(get(addr, "/healthz").await.0, 200);
    }

    #[tokio::test]
    async fn healthz_is_200_until_a_liveness_check_is_set_then_answers_what_it_says() {
        let liveness = Liveness::new();
        let addr = listen_alive(Readiness::new(), liveness.clone()).await;
        assert_eq!(get(addr, "/healthz").await, (200, "ok\n".to_owned()));
        liveness.set(
            Answers(Err(
                "lanes failed for longer than 5m: orders/audit".to_owned()
            )),
            tokio::runtime::Handle::current(),
            DEFAULT_LIVENESS_TIMEOUT,
        );
        assert_eq!(
            get(addr, "/healthz").await,
            (
                503,
                "lanes failed for longer than 5m: orders/audit\n".to_owned()
            )
        );
    }

    #[tokio::test]
    async fn readyz_is_503_when_the_check_does_not_answer_within_its_timeout() {
        let readiness = Readiness::new();
        let addr = listen(readiness.clone()).await;
        readiness.set(
            NeverAnswers,
            tokio::runtime::Handle::current(),
            Duration::from_millis(50),
        );
        let (status, body) = get(addr, "/readyz").await;
        assert_eq!(status, 503, "{body}");
        assert_eq!(
            json(&body)["reason"],
            "the readiness check did not answer within 50ms",
            "{body}"
        );
    }

    #[tokio::test]
    async fn relay_readiness_is_ready_while_the_relay_runs_and_not_once_it_stopped() {
        let store: Outbox = Outbox::new(InMemoryOutboxStore::new());
        let relay = OutboxRelay::builder(&store)
            .lane(
                LaneConfig::new("orders", "audit"),
                crate::sinks::LogSink::new(std::io::sink()),
            )
            .start()
            .await
            .expect("start the relay");
        let relay = Arc::new(relay);
        let check = RelayReadiness::new(store, relay.clone());
        assert_eq!(check.ready().await, Ok(()));

        relay.shutdown(WAIT).await.expect("shutdown");
        let reason = check
            .ready()
            .await
            .expect_err("a stopped relay is not ready");
        assert!(
            reason.starts_with("the relay does not answer: "),
            "{reason}"
        );
    }
}
