//! The JSON API's reads and its error shape.
//!
//! `GET /api/v1/lanes` answers every lane of this relay, as `RelayHandle::status` does:
//!
//! ```json
//! {"lanes": [{"lane": {"lane": "orders", "target": "billing"}, "state": "paused",
//!   "in_flight": 0, "restarts": 0, "last_error": null, "claimed": 120, "delivered": 120,
//!   "failed": 0, "dead_lettered": 0, "lost_claims": 0,
//!   "gates": {"rate_limit": null, "breaker": null, "retry_after_holds_lane": false, "throttled_ms": 0},
//!   "paused_here": false,
//!   "fleet_pause": {"lane": "orders", "target": "billing", "paused_by": "cli:ana@ops-1",
//!     "reason": "billing API upgrade", "paused_at": "2026-12-06T05:40:12.301Z"}}]}
//! ```

use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::Routes;
use crate::store::StoreError;

/// A 4xx or 5xx answer: `{"error": …, "field": …}` (`field` when one is at fault).
#[derive(Debug)]
pub(super) struct ApiError {
    status: StatusCode,
    message: String,
    field: Option<String>,
    /// Seconds for a `Retry-After` header.
    retry_after: Option<u64>,
}

impl ApiError {
    pub(super) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            field: None,
            retry_after: None,
        }
    }

    /// Asks the client to wait `seconds` before trying again (`Retry-After`).
    pub(super) fn retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    /// The answer's status.
    pub(super) fn status(&self) -> StatusCode {
        self.status
    }

    /// What went wrong.
    pub(super) fn message(&self) -> &str {
        &self.message
    }

    /// Names the field at fault.
    pub(super) fn field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Validation(invalid) => {
                ApiError::new(StatusCode::BAD_REQUEST, invalid.reason.clone())
                    .field(invalid.field.clone())
            }
            other if other.is_retryable() => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, other.to_string())
            }
            other => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, other.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = match &self.field {
            Some(field) => json!({ "error": self.message, "field": field }),
            None => json!({ "error": self.message }),
        };
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        if let Some(seconds) = self.retry_after {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(seconds),
            );
        }
        response
    }
}

/// `GET /api/v1/lanes`.
pub(super) async fn lanes(State(routes): State<Routes>) -> Response {
    let answer = routes
        .run(|running| async move {
            running.relay.status().await.map_err(|error| {
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("the relay does not answer: {error}"),
                )
            })
        })
        .await;
    match answer {
        Ok(lanes) => Json(json!({ "lanes": lanes })).into_response(),
        Err(error) => error.into_response(),
    }
}

/// Any path the router does not serve.
pub(super) async fn not_found(uri: Uri) -> Response {
    ApiError::new(StatusCode::NOT_FOUND, format!("not found: {}", uri.path())).into_response()
}
