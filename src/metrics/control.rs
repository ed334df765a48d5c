//! The metrics listener's control routes (feature `prometheus`): pause and resume a running
//! relay's lanes over HTTP, which is what `outbox-relay pause|resume` uses.
//!
//! | request | does |
//! |---|---|
//! | `POST /lanes/{lane}/pause` | pauses every target of `lane` |
//! | `POST /lanes/{lane}/{target}/pause` | pauses that one lane relay |
//! | `POST /lanes/{lane}/resume`, `POST /lanes/{lane}/{target}/resume` | resumes them |
//!
//! Every request needs `Authorization: Bearer <token>`, the [`ControlToken`] the control
//! was made with ([`LaneControl::with_token`]); without one configured the routes are off.
//! The answer is JSON: 200 `{"action":"pause","lanes":["orders/audit"]}`, 404 for a lane
//! the relay does not run, 403 while no token is configured and from any peer that is not
//! loopback, 401 without the right token (nothing changes), 405 for another method, 503
//! until the relay runs.
//!
//! Why a token: a loopback check alone trusts every local process, and a browser on the
//! host too (a page can send a no-cors POST to 127.0.0.1, and DNS rebinding gets around
//! the same-origin policy); neither can know the token. Why loopback as well: the listener
//! is often bound to all interfaces so that Prometheus can scrape it, and a scrape port
//! must not be able to stop a relay. An operator who needs it remotely runs the CLI on
//! the host (`kubectl exec`).

use std::fmt;
use std::net::IpAddr;
use std::sync::{Arc, RwLock};

use hyper::Method;

use crate::config::ControlToken;
use crate::relay::{LaneKey, RelayError, RelayHandle};

/// What a control request asks of a lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaneAction {
    /// Stop claiming; deliveries in flight finish.
    Pause,
    /// Claim again.
    Resume,
}

impl LaneAction {
    /// The action's name in paths and answers: `pause` or `resume`.
    pub fn as_str(self) -> &'static str {
        match self {
            LaneAction::Pause => "pause",
            LaneAction::Resume => "resume",
        }
    }
}

/// The relay that the control routes act on, set once the relay runs, and the token they
/// require. Until [`LaneControl::set`] is called they answer 503; without a token
/// ([`LaneControl::new`]) they are off (403). Cloning shares the same slot.
#[derive(Clone, Default)]
pub struct LaneControl {
    relay: Arc<RwLock<Option<Target>>>,
    token: Option<ControlToken>,
}

#[derive(Clone)]
struct Target {
    relay: Arc<RelayHandle>,
    runtime: tokio::runtime::Handle,
}

impl fmt::Debug for LaneControl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LaneControl")
            .field("set", &self.current().is_some())
            .field("token", &self.token)
            .finish()
    }
}

/// A control request's answer: the HTTP status and the JSON body.
pub(super) type ControlAnswer = (u16, serde_json::Value);

impl LaneControl {
    /// Control routes that are off: every request is answered 403, saying that no token
    /// is configured.
    pub fn new() -> Self {
        Self::default()
    }

    /// Control routes that require `Authorization: Bearer <token>`, and answer 503 until
    /// [`set`](Self::set).
    pub fn with_token(token: ControlToken) -> Self {
        Self {
            relay: Arc::default(),
            token: Some(token),
        }
    }

    /// Whether the routes are on (a token is configured).
    pub fn is_on(&self) -> bool {
        self.token.is_some()
    }

    /// From now on the control routes act on `relay`, running its commands on `runtime`
    /// (the application's, which owns the relay; the listener has a runtime of its own).
    pub fn set(&self, relay: Arc<RelayHandle>, runtime: tokio::runtime::Handle) {
        *self
            .relay
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(Target { relay, runtime });
    }

    fn current(&self) -> Option<Target> {
        self.relay
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Answers a request for `path` (which starts with `/lanes/`) from `peer`, with the
    /// `Authorization` header's value.
    pub(super) async fn answer(
        &self,
        method: &Method,
        path: &str,
        peer: IpAddr,
        authorization: Option<&str>,
    ) -> ControlAnswer {
        let error =
            |status: u16, message: String| (status, serde_json::json!({ "error": message }));
        let Some((lane, target, action)) = parse(path) else {
            return error(
                404,
                format!(
                    "not found: {path}; control paths are /lanes/LANE[/TARGET]/pause and …/resume"
                ),
            );
        };
        if method != Method::POST {
            return error(405, format!("{path} takes POST, not {method}"));
        }
        let Some(token) = &self.token else {
            return error(
                403,
                "lane control is off: no control token is configured (listener.control_token_env or listener.control_token_file)".to_owned(),
            );
        };
        if !token.authorizes(authorization) {
            return error(
                401,
                "lane control needs the control token: Authorization: Bearer <token>".to_owned(),
            );
        }
        if !peer.is_loopback() {
            return error(
                403,
                format!("lane control is answered on loopback only, not to {peer}"),
            );
        }
        let Some(relay) = self.current() else {
            return error(503, "starting: the relay is not running yet".to_owned());
        };
        let (lane, target) = (lane.to_owned(), target.map(str::to_owned));
        // On the application's runtime, which owns the relay's actors.
        let acting = relay
            .runtime
            .spawn(async move { act(&relay.relay, action, &lane, target.as_deref()).await });
        match acting.await {
            Ok(answer) => answer,
            Err(failure) => error(
                500,
                format!("the {} command failed: {failure}", action.as_str()),
            ),
        }
    }
}

/// Splits `/lanes/{lane}[/{target}]/{action}`.
fn parse(path: &str) -> Option<(&str, Option<&str>, LaneAction)> {
    let rest = path.strip_prefix("/lanes/")?;
    let (names, action) = rest.rsplit_once('/')?;
    let action = match action {
        "pause" => LaneAction::Pause,
        "resume" => LaneAction::Resume,
        _ => return None,
    };
    let (lane, target) = match names.split_once('/') {
        Some((lane, target)) => (lane, Some(target)),
        None => (names, None),
    };
    if lane.is_empty() || target.is_some_and(|t| t.is_empty() || t.contains('/')) {
        return None;
    }
    Some((lane, target, action))
}

async fn act(
    relay: &RelayHandle,
    action: LaneAction,
    lane: &str,
    target: Option<&str>,
) -> ControlAnswer {
    let failed = |status: u16, message: String| (status, serde_json::json!({ "error": message }));
    let keys: Vec<LaneKey> = match target {
        Some(target) => vec![LaneKey::new(lane, target)],
        None => match relay.status().await {
            Ok(lanes) => lanes
                .into_iter()
                .map(|status| status.lane)
                .filter(|key| key.name == lane)
                .collect(),
            Err(error) => return failed(503, format!("the relay does not answer: {error}")),
        },
    };
    if keys.is_empty() {
        return failed(404, format!("this relay runs no lane `{lane}`"));
    }
    let mut done = Vec::with_capacity(keys.len());
    for key in keys {
        let result = match action {
            LaneAction::Pause => relay.pause(&key.name, &key.target).await,
            LaneAction::Resume => relay.resume(&key.name, &key.target).await,
        };
        match result {
            Ok(()) => done.push(key.to_string()),
            Err(RelayError::UnknownLane(key)) => {
                return failed(404, format!("this relay runs no lane `{key}`"))
            }
            Err(error) => {
                return failed(503, format!("{} of {key} failed: {error}", action.as_str()))
            }
        }
    }
    (
        200,
        serde_json::json!({ "action": action.as_str(), "lanes": done }),
    )
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;
    use std::time::Duration;

    use super::*;
    use crate::{InMemoryOutboxStore, LaneConfig, Outbox, OutboxRelay};

    struct Idle;

    #[async_trait::async_trait]
    impl crate::DeliveryHandler for Idle {
        async fn deliver(
            &self,
            _message: &crate::OutboxMessage,
        ) -> Result<(), crate::DeliveryError> {
            Ok(())
        }
    }

    const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    const TOKEN: &str = "0123456789abcdef-control";
    const BEARER: Option<&str> = Some("Bearer 0123456789abcdef-control");

    #[tokio::test]
    async fn only_loopback_peers_with_the_token_may_pause_and_only_once_the_relay_runs() {
        let control = LaneControl::with_token(ControlToken::new(TOKEN).expect("a token"));
        let (status, body) = control
            .answer(&Method::POST, "/lanes/orders/pause", LOOPBACK, BEARER)
            .await;
        assert_eq!(status, 503, "{body}");

        let relay = OutboxRelay::builder(Outbox::new(InMemoryOutboxStore::new()))
            .lane(LaneConfig::new("orders", "audit"), Idle)
            .start()
            .await
            .expect("start");
        let relay = Arc::new(relay);
        control.set(relay.clone(), tokio::runtime::Handle::current());

        let remote = IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3));
        let (status, body) = control
            .answer(&Method::POST, "/lanes/orders/pause", remote, BEARER)
            .await;
        assert_eq!(status, 403, "{body}");
        assert!(
            body["error"]
                .as_str()
                .unwrap_or_default()
                .contains("10.1.2.3"),
            "{body}"
        );
        let (status, _) = control
            .answer(&Method::GET, "/lanes/orders/pause", LOOPBACK, BEARER)
            .await;
        assert_eq!(status, 405);

        // Without the token, or with another one: 401, and the lane is not paused.
        for authorization in [None, Some("Bearer 0123456789abcdef-guess"), Some(TOKEN)] {
            let (status, body) = control
                .answer(
                    &Method::POST,
                    "/lanes/orders/pause",
                    LOOPBACK,
                    authorization,
                )
                .await;
            assert_eq!(status, 401, "{authorization:?}: {body}");
        }
        let lanes = relay.status().await.expect("status");
        assert_eq!(lanes[0].state, crate::metrics::LaneState::Running);

        let (status, body) = control
            .answer(&Method::POST, "/lanes/orders/pause", LOOPBACK, BEARER)
            .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            body,
            serde_json::json!({ "action": "pause", "lanes": ["orders/audit"] })
        );
        let lanes = relay.status().await.expect("status");
        assert_eq!(lanes[0].state, crate::metrics::LaneState::Paused);

        let (status, body) = control
            .answer(
                &Method::POST,
                "/lanes/orders/nosuch/resume",
                LOOPBACK,
                BEARER,
            )
            .await;
        assert_eq!(status, 404, "{body}");
        relay
            .shutdown(Duration::from_secs(10))
            .await
            .expect("shutdown");
    }

    #[tokio::test]
    async fn without_a_token_the_control_routes_are_off() {
        let control = LaneControl::new();
        let relay = OutboxRelay::builder(Outbox::new(InMemoryOutboxStore::new()))
            .lane(LaneConfig::new("orders", "audit"), Idle)
            .start()
            .await
            .expect("start");
        let relay = Arc::new(relay);
        control.set(relay.clone(), tokio::runtime::Handle::current());
        let (status, body) = control
            .answer(&Method::POST, "/lanes/orders/pause", LOOPBACK, BEARER)
            .await;
        assert_eq!(status, 403, "{body}");
        assert!(
            body["error"]
                .as_str()
                .unwrap_or_default()
                .contains("no control token is configured"),
            "{body}"
        );
        let lanes = relay.status().await.expect("status");
        assert_eq!(lanes[0].state, crate::metrics::LaneState::Running);
        relay
            .shutdown(Duration::from_secs(10))
            .await
            .expect("shutdown");
    }

    #[test]
    fn paths_name_a_lane_an_optional_target_and_the_action() {
        assert_eq!(
            parse("/lanes/orders/pause"),
            Some(("orders", None, LaneAction::Pause))
        );
        assert_eq!(
            parse("/lanes/orders/audit/resume"),
            Some(("orders", Some("audit"), LaneAction::Resume))
        );
        for bad in [
            "/lanes/orders/stop",
            "/lanes//pause",
            "/lanes/pause",
            "/lanes/a/b/c/pause",
            "/lanes/orders//pause",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }
}
