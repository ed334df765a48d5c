//! The relay the routes act on ([`RelaySlot`]), the bearer token of the mutating routes,
//! and `POST /api/v1/lanes/{lane}/{target}/pause|resume`: the fleet-wide pause, written to
//! the store (`store::lane_control`), so every relay on the database applies it.
//!
//! Why a token on every mutation: a listener is often bound to every interface so that
//! Prometheus can scrape it, and a local process or a browser page on the host (a no-cors
//! POST, DNS rebinding) can reach a loopback one; none of them knows the token.

use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::header::AUTHORIZATION;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;

use super::api::ApiError;
use super::Routes;
use crate::relay::{LaneKey, RelayHandle};
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

    /// Runs `work` on the relay's runtime: 503 until the slot is set.
    pub(super) async fn run<T, F>(&self, work: impl FnOnce(Running) -> F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, ApiError>> + Send + 'static,
    {
        let running = self.current().ok_or_else(|| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "starting: the relay is not running yet",
            )
        })?;
        let runtime = running.runtime.clone();
        runtime.spawn(work(running)).await.map_err(|failure| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the request failed: {failure}"),
            )
        })?
    }
}

/// 401 unless `headers` carry the configured token; 403 when none is configured.
pub(super) fn authorize(routes: &Routes, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(token) = &routes.token else {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "mutations are off: no token is configured (listener.control_token_env or listener.control_token_file)",
        ));
    };
    let presented = headers
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok());
    if token.authorizes(presented) {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::UNAUTHORIZED,
        "this route needs the token: Authorization: Bearer <token>",
    )
    .field("authorization"))
}

/// The optional JSON body of a pause.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PauseBody {
    reason: Option<String>,
    by: Option<String>,
}

/// `POST /api/v1/lanes/{lane}/{target}/{pause|resume}`.
pub(super) async fn lane_action(
    State(routes): State<Routes>,
    Path((lane, target, action)): Path<(String, String, String)>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(refused) = authorize(&routes, &headers) {
        return refused.into_response();
    }
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
        .relay
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
