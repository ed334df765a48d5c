//! The relay the routes act on ([`RelaySlot`]), how their store work runs
//! ([`StoreCalls`]), and `POST /api/v1/lanes/{lane}/{target}/pause|resume`: the fleet-wide
//! pause, written to the store (`store::lane_control`), so every relay on the database
//! applies it. The token is checked before any of it ([`super::access`]).
//!
//! Why the store work is bounded, timed and cancelled: an API read is a store query, and
//! queries past the store's connections wait for one, so a flood of reads (or of clients
//! that send a read and hang up) would take the connections a lane's claims, acks and
//! lease extensions need. At most [`RouterConfig::api_store_calls`](super::RouterConfig::api_store_calls)
//! run at once (a request past it is answered 503 at once, `Retry-After: 1`); each gets
//! [`RouterConfig::api_store_timeout`](super::RouterConfig::api_store_timeout); and the
//! work is dropped, its query with it, as soon as the client goes.

use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

use super::api::ApiError;
use super::Routes;
use crate::config::duration::format_duration;
use crate::lane::LaneKey;
use crate::metrics::http::{
    API_STORE_CALLS_IN_FLIGHT, API_STORE_CALLS_REFUSED_TOTAL, LABEL_REASON,
};
use crate::relay::RelayHandle;
use crate::store::{LanePauseRequest, Outbox};

/// The relay and store the routes act on, set once the relay runs; until then the API
/// answers 503. Cloning shares the same slot.
#[derive(Clone, Default)]
pub struct RelaySlot(Arc<RwLock<Option<Running>>>);

#[derive(Clone)]
pub(super) struct Running {
    pub(super) relay: Arc<RelayHandle>,
    pub(super) store: Outbox,
    runtime: tokio::runtime::Handle,
}

impl fmt::Debug for RelaySlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RelaySlot")
            .field("set", &self.current().is_some())
            .finish()
    }
}

impl RelaySlot {
    /// An empty slot: the API answers 503 ("starting") until [`set`](Self::set).
    pub fn new() -> Self {
        Self::default()
    }

    /// From now on the routes act on `relay` and `store`, on `runtime` (the application's,
    /// which owns the relay's actors and the store's connections).
    pub fn set(&self, relay: Arc<RelayHandle>, store: Outbox, runtime: tokio::runtime::Handle) {
        *self
            .0
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(Running {
            relay,
            store,
            runtime,
        });
    }

    fn current(&self) -> Option<Running> {
        self.0
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

/// How the routes' relay and store work runs: at most so many at once, each within a
/// timeout, on the relay's runtime, cancelled when its request goes.
#[derive(Debug, Clone)]
pub(super) struct StoreCalls {
    permits: Arc<Semaphore>,
    timeout: Duration,
}

impl StoreCalls {
    pub(super) fn new(at_once: usize, timeout: Duration) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(at_once)),
            timeout,
        }
    }

    /// Runs `work` on the relay's runtime: 503 until the slot is set, 503 at once when
    /// the bound is reached, 503 when the work outlasts the timeout. Dropping the returned
    /// future (the client hung up) aborts the work.
    pub(super) async fn run<T, F>(
        &self,
        slot: &RelaySlot,
        work: impl FnOnce(Running) -> F,
    ) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, ApiError>> + Send + 'static,
    {
        let running = slot.current().ok_or_else(|| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "starting: the relay is not running yet",
            )
        })?;
        let Ok(permit) = self.permits.clone().try_acquire_owned() else {
            metrics::counter!(API_STORE_CALLS_REFUSED_TOTAL, LABEL_REASON => "busy").increment(1);
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "busy: the API's store calls are at their bound (listener.api_store_calls); try again in a second",
            )
            .retry_after(1));
        };
        let in_flight = InFlight::new(permit);
        let timeout = self.timeout;
        let runtime = running.runtime.clone();
        let work = work(running);
        // The permit goes into the task: the bound counts work until it has really ended,
        // not until its request went.
        let task = runtime.spawn(async move {
            let _in_flight = in_flight;
            match tokio::time::timeout(timeout, work).await {
                Ok(answer) => answer,
                Err(_) => {
                    metrics::counter!(API_STORE_CALLS_REFUSED_TOTAL, LABEL_REASON => "timeout")
                        .increment(1);
                    Err(ApiError::new(
                        StatusCode::SERVICE_UNAVAILABLE,
                        format!(
                            "the store did not answer within {} (listener.api_store_timeout)",
                            format_duration(timeout)
                        ),
                    ))
                }
            }
        });
        AbortOnDrop(task).await.map_err(|failure| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the request failed: {failure}"),
            )
        })?
    }
}

/// A permit of the bound, counted in [`API_STORE_CALLS_IN_FLIGHT`] while held.
struct InFlight(#[allow(dead_code)] OwnedSemaphorePermit);

impl InFlight {
    fn new(permit: OwnedSemaphorePermit) -> Self {
        metrics::gauge!(API_STORE_CALLS_IN_FLIGHT).increment(1.0);
        Self(permit)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        metrics::gauge!(API_STORE_CALLS_IN_FLIGHT).decrement(1.0);
    }
}

/// A spawned task that is aborted when its handle is dropped: the request future that
/// awaits it goes when the client hangs up, and the store query goes with it.
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Future for AbortOnDrop<T> {
    type Output = Result<T, tokio::task::JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The optional JSON body of a pause.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PauseBody {
    reason: Option<String>,
    by: Option<String>,
}

/// `POST /api/v1/lanes/{lane}/{target}/{pause|resume}` (the token checked already).
pub(super) async fn lane_action(
    State(routes): State<Routes>,
    Path((lane, target, action)): Path<(String, String, String)>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    body: Bytes,
) -> Response {
    let pause = match action.as_str() {
        "pause" => true,
        "resume" => false,
        _ => {
            return ApiError::new(
                StatusCode::NOT_FOUND,
                format!("no action {action:?}: lanes/{{lane}}/{{target}}/pause or …/resume"),
            )
            .field("action")
            .into_response()
        }
    };
    let body: PauseBody = if body.iter().all(u8::is_ascii_whitespace) {
        PauseBody::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(body) => body,
            Err(error) => {
                return ApiError::new(
                    StatusCode::BAD_REQUEST,
                    format!("the body is not a pause request: {error}"),
                )
                .field("body")
                .into_response()
            }
        }
    };
    if !pause && (body.reason.is_some() || body.by.is_some()) {
        return ApiError::new(StatusCode::BAD_REQUEST, "resume takes no body")
            .field("body")
            .into_response();
    }
    let by = body.by.unwrap_or_else(|| match peer {
        Some(Extension(ConnectInfo(addr))) => format!("api:{}", addr.ip()),
        None => "api".to_owned(),
    });
    let key = LaneKey::new(lane, target);
    let answer = routes
        .run(move |running| async move {
            let lanes = running.relay.status().await.map_err(|error| {
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("the relay does not answer: {error}"),
                )
            })?;
            if !lanes.iter().any(|status| status.lane == key) {
                return Err(ApiError::new(
                    StatusCode::NOT_FOUND,
                    format!("this relay runs no lane {key}"),
                )
                .field("lane"));
            }
            if pause {
                let mut request = LanePauseRequest::new(&key.name, &key.target, by);
                if let Some(reason) = body.reason {
                    request = request.reason(reason);
                }
                let recorded = running.store.pause_lane(&request).await?;
                Ok(serde_json::json!({ "action": "pause", "pause": recorded }))
            } else {
                let lifted = running.store.resume_lane(&key.name, &key.target).await?;
                Ok(serde_json::json!({ "action": "resume", "lifted": lifted }))
            }
        })
        .await;
    match answer {
        Ok(body) => Json(body).into_response(),
        Err(error) => error.into_response(),
    }
}
