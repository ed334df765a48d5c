//! The router's routes, called in process (`tower::ServiceExt::oneshot`) on a relay over
//! the memory store: the token on every mutating route, the JSON errors, the fleet pause;
//! who may read and change what is in `access`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use serde_json::{json, Value};
use tower::ServiceExt;

use super::*;
use crate::{InMemoryOutboxStore, LaneConfig, Outbox, OutboxRelay, RelayHandle};

mod access;

const TOKEN: &str = "0123456789abcdef-api-token";
/// The `Host` the tests' requests name (an IP literal: always allowed).
const HOST: &str = "127.0.0.1:9464";
/// Generous: other builds share the machine.
const WAIT: Duration = Duration::from_secs(60);

struct Idle;

#[async_trait::async_trait]
impl crate::DeliveryHandler for Idle {
    async fn deliver(&self, _message: &crate::OutboxMessage) -> Result<(), crate::DeliveryError> {
        Ok(())
    }
}

/// A relay with lane orders/audit on a memory store, and a router over it.
async fn serving(config: RouterConfig) -> (Router, Arc<RelayHandle>, Outbox) {
    let store: Outbox = Outbox::new(InMemoryOutboxStore::new());
    let relay = OutboxRelay::builder(&store)
        .lane(LaneConfig::new("orders", "audit"), Idle)
        .start()
        .await
        .expect("start the relay");
    let relay = Arc::new(relay);
    let slot = RelaySlot::new();
    slot.set(
        relay.clone(),
        store.clone(),
        tokio::runtime::Handle::current(),
    );
    (router(config.relay(slot)), relay, store)
}

fn with_token() -> RouterConfig {
    RouterConfig::new().token(ControlToken::new(TOKEN).expect("a token"))
}

/// Sends one request: the status and the JSON body (`null` when the body is not JSON).
async fn call(
    router: &Router,
    method: Method,
    path: &str,
    authorization: Option<&str>,
    body: &str,
) -> (StatusCode, Value) {
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", HOST);
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    let request = request
        .body(Body::from(body.to_owned()))
        .expect("a request");
    let (status, _, body) = send(router, request).await;
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

/// Sends `request`: the status, the headers and the body.
async fn send(
    router: &Router,
    request: Request<Body>,
) -> (StatusCode, axum::http::HeaderMap, Vec<u8>) {
    let response = router.clone().oneshot(request).await.expect("an answer");
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .expect("the body");
    (status, headers, bytes.to_vec())
}

/// Every mutating route the router serves, each with a body it accepts.
const MUTATIONS: [(&str, &str); 4] = [
    (
        "/api/v1/lanes/orders/audit/pause",
        r#"{"reason": "upgrade"}"#,
    ),
    ("/api/v1/lanes/orders/audit/resume", ""),
    (
        "/api/v1/dead-letters/requeue",
        r#"{"lane": "billing", "target": "audit"}"#,
    ),
    (
        "/api/v1/dead-letters/discard",
        r#"{"lane": "billing", "target": "audit"}"#,
    ),
];

/// A dead letter in billing/audit, a lane no relay runs: its id.
async fn dead_letter(store: &Outbox) -> uuid::Uuid {
    use crate::store::{ClaimRequest, Nack, NackDisposition};
    let draft =
        crate::OutboxMessageDraft::new("billing", "audit", json!({"n": 1})).expect("a draft");
    store.enqueue(draft).await.expect("enqueue");
    let claim = ClaimRequest::new("billing", "audit", 1, Duration::from_secs(30), "test");
    let batch = store.claim(&claim).await.expect("claim");
    let message = &batch.messages[0];
    store
        .nack(&[Nack {
            claim: message.claim().expect("claimed"),
            error: "refused".to_owned(),
            disposition: NackDisposition::Permanent,
        }])
        .await
        .expect("nack");
    message.outbox_id
}

/// How many dead letters billing/audit holds.
async fn dead_letters(store: &Outbox) -> u64 {
    let stats = store
        .stats(&crate::store::MessageFilter::lane("billing", "audit"))
        .await
        .expect("stats");
    stats.iter().map(|lane| lane.dead_letter).sum()
}

#[tokio::test]
async fn every_mutating_route_answers_401_without_the_token_and_changes_nothing() {
    let (router, relay, store) = serving(with_token()).await;
    // A pause in force, so that a resume that went through would show.
    store
        .pause_lane(&crate::store::LanePauseRequest::new(
            "orders", "audit", "setup",
        ))
        .await
        .expect("pause");
    dead_letter(&store).await;
    let mut peer = 0u8;
    for (path, body) in MUTATIONS {
        for authorization in [
            None,
            Some("Bearer 0123456789abcdef-not-it"),
            Some(TOKEN),
            Some("Basic 0123456789abcdef-api-token"),
        ] {
            // Each from an address of its own: wrong tokens make their address wait.
            peer += 1;
            let mut request = Request::builder()
                .method(Method::POST)
                .uri(path)
                .header("host", HOST);
            if let Some(value) = authorization {
                request = request.header("authorization", value);
            }
            let mut request = request
                .body(Body::from(body.to_owned()))
                .expect("a request");
            request.extensions_mut().insert(axum::extract::ConnectInfo(
                std::net::SocketAddr::from(([10, 9, 0, peer], 4000)),
            ));
            let (status, _, answer) = send(&router, request).await;
            let answer: Value = serde_json::from_slice(&answer).unwrap_or(Value::Null);
            assert_eq!(
                status,
                StatusCode::UNAUTHORIZED,
                "{path} {authorization:?}: {answer}"
            );
            assert_eq!(answer["field"], "authorization", "{answer}");
        }
    }
    let pauses = store.lane_pauses().await.expect("pauses");
    assert_eq!(pauses.len(), 1);
    assert_eq!(pauses[0].paused_by, "setup", "a refused pause replaced it");
    assert_eq!(
        dead_letters(&store).await,
        1,
        "a refused requeue or discard acted"
    );
    relay.shutdown(WAIT).await.expect("shutdown");
}

#[tokio::test]
async fn without_a_token_configured_every_mutating_route_is_off() {
    let (router, relay, store) = serving(RouterConfig::new()).await;
    for (path, body) in MUTATIONS {
        let bearer = format!("Bearer {TOKEN}");
        let (status, answer) = call(&router, Method::POST, path, Some(&bearer), body).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {answer}");
    }
    assert!(store.lane_pauses().await.expect("pauses").is_empty());
    relay.shutdown(WAIT).await.expect("shutdown");
}

#[tokio::test]
async fn a_pause_through_the_api_is_fleet_wide_and_reported_apart_from_the_local_one() {
    let (router, relay, store) = serving(with_token()).await;
    let bearer = format!("Bearer {TOKEN}");
    let (status, lanes) = call(&router, Method::GET, "/api/v1/lanes", Some(&bearer), "").await;
    assert_eq!(status, StatusCode::OK, "{lanes}");
    assert_eq!(
        lanes["lanes"][0]["lane"],
        json!({"lane": "orders", "target": "audit"})
    );
    assert_eq!(lanes["lanes"][0]["state"], "running");
    assert_eq!(lanes["lanes"][0]["fleet_pause"], Value::Null);

    let (status, answer) = call(
        &router,
        Method::POST,
        "/api/v1/lanes/orders/audit/pause",
        Some(&bearer),
        r#"{"reason": "broker upgrade", "by": "ana"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["pause"]["paused_by"], "ana");
    assert_eq!(answer["pause"]["reason"], "broker upgrade");
    let recorded = store.lane_pauses().await.expect("pauses");
    assert_eq!(recorded.len(), 1);

    // The relay's lane-control poll applies it; `paused_here` stays false.
    let started = Instant::now();
    loop {
        let (_, lanes) = call(&router, Method::GET, "/api/v1/lanes", Some(&bearer), "").await;
        let lane = &lanes["lanes"][0];
        if lane["state"] == "paused" {
            assert_eq!(lane["paused_here"], false, "{lane}");
            assert_eq!(lane["fleet_pause"]["paused_by"], "ana", "{lane}");
            break;
        }
        assert!(
            started.elapsed() < WAIT,
            "not paused after {WAIT:?}: {lane}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "the API's pause reached the lane after {:?}",
        started.elapsed()
    );

    // A local resume does not lift the fleet's pause.
    relay.resume("orders", "audit").await.expect("local resume");
    let status = relay.status().await.expect("status");
    assert_eq!(status[0].state, crate::relay::LaneState::Paused);

    let (status, answer) = call(
        &router,
        Method::POST,
        "/api/v1/lanes/orders/audit/resume",
        Some(&bearer),
        "",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["lifted"]["paused_by"], "ana");
    assert!(store.lane_pauses().await.expect("pauses").is_empty());
    relay.shutdown(WAIT).await.expect("shutdown");
}

#[tokio::test]
async fn bad_requests_get_a_json_error_naming_the_field_and_change_nothing() {
    let (router, relay, store) = serving(with_token()).await;
    let bearer = format!("Bearer {TOKEN}");
    for (path, body, status, field) in [
        (
            "/api/v1/lanes/orders/nosuch/pause",
            "",
            StatusCode::NOT_FOUND,
            "lane",
        ),
        (
            "/api/v1/lanes/orders/audit/pause",
            "{not json",
            StatusCode::BAD_REQUEST,
            "body",
        ),
        (
            "/api/v1/lanes/orders/audit/pause",
            r#"{"reasons": "typo"}"#,
            StatusCode::BAD_REQUEST,
            "body",
        ),
        (
            "/api/v1/lanes/orders/audit/pause",
            &format!(r#"{{"reason": "{}"}}"#, "x".repeat(2000)),
            StatusCode::BAD_REQUEST,
            "reason",
        ),
        (
            "/api/v1/lanes/orders/audit/stop",
            "",
            StatusCode::NOT_FOUND,
            "action",
        ),
        (
            "/api/v1/lanes/orders/audit/resume",
            r#"{"reason": "x"}"#,
            StatusCode::BAD_REQUEST,
            "body",
        ),
    ] {
        let (got, answer) = call(&router, Method::POST, path, Some(&bearer), body).await;
        assert_eq!(got, status, "{path} {body:.40}: {answer}");
        assert_eq!(answer["field"], field, "{path}: {answer}");
        assert!(answer["error"].is_string(), "{answer}");
    }
    assert!(store.lane_pauses().await.expect("pauses").is_empty());
    let (status, answer) = call(&router, Method::GET, "/api/v1/nothing", None, "").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{answer}");
    relay.shutdown(WAIT).await.expect("shutdown");
}

#[tokio::test]
async fn the_api_answers_503_until_the_relay_runs_and_groups_can_be_turned_off() {
    let router = router(RouterConfig::new());
    let (status, answer) = call(&router, Method::GET, "/api/v1/lanes", None, "").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");

    let reads_only = super::router(RouterConfig::new().routes([RouteGroup::Probes]));
    let (status, _) = call(&reads_only, Method::GET, "/api/v1/lanes", None, "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = call(&reads_only, Method::GET, "/healthz", None, "").await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = call(&reads_only, Method::GET, "/ui/lanes", None, "").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "the ui group is off");
    assert_eq!("control".parse::<RouteGroup>(), Ok(RouteGroup::Control));
    assert_eq!("ui".parse::<RouteGroup>(), Ok(RouteGroup::Ui));
    assert!("admin".parse::<RouteGroup>().is_err());
}

#[tokio::test]
async fn messages_are_listed_by_lane_with_a_cursor_and_dead_letters_requeued_by_filter() {
    let (router, relay, store) = serving(with_token()).await;
    let bearer = format!("Bearer {TOKEN}");
    let dead = dead_letter(&store).await;
    dead_letter(&store).await;

    let (status, page) = call(
        &router,
        Method::GET,
        "/api/v1/messages?lane=billing&target=audit&status=dead_letter&limit=1",
        Some(&bearer),
        "",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(page["messages"].as_array().map(Vec::len), Some(1), "{page}");
    assert_eq!(page["messages"][0]["outbox_id"], dead.to_string(), "{page}");
    let cursor = page["next_cursor"].as_i64().expect("a next page");
    let (_, next) = call(
        &router,
        Method::GET,
        &format!("/api/v1/messages?lane=billing&target=audit&limit=1&after={cursor}"),
        Some(&bearer),
        "",
    )
    .await;
    assert_eq!(next["messages"].as_array().map(Vec::len), Some(1), "{next}");
    assert_eq!(next["next_cursor"], Value::Null, "{next}");
    let (status, one) = call(
        &router,
        Method::GET,
        &format!("/api/v1/messages/{dead}"),
        Some(&bearer),
        "",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{one}");
    assert_eq!(one["last_error"], "refused");
    let (status, answer) = call(
        &router,
        Method::GET,
        "/api/v1/messages?lane=billing",
        Some(&bearer),
        "",
    )
    .await;
    assert_eq!(
        (status, answer["field"].clone()),
        (StatusCode::BAD_REQUEST, json!("target"))
    );

    // A dry run counts, and changes nothing; then the requeue changes what it counted.
    let by_lane = r#"{"lane": "billing", "target": "audit", "dry_run": true}"#;
    let (status, answer) = call(
        &router,
        Method::POST,
        "/api/v1/dead-letters/requeue",
        Some(&bearer),
        by_lane,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(
        answer,
        json!({"action": "requeue", "dry_run": true, "count": 2})
    );
    assert_eq!(dead_letters(&store).await, 2);
    let body = format!(r#"{{"ids": ["{dead}"]}}"#);
    let (_, answer) = call(
        &router,
        Method::POST,
        "/api/v1/dead-letters/requeue",
        Some(&bearer),
        &body,
    )
    .await;
    assert_eq!(answer["count"], 1, "{answer}");
    assert_eq!(dead_letters(&store).await, 1);
    // A bulk action with no filter at all is refused.
    let (status, answer) = call(
        &router,
        Method::POST,
        "/api/v1/dead-letters/discard",
        Some(&bearer),
        "{}",
    )
    .await;
    assert_eq!(
        (status, answer["field"].clone()),
        (StatusCode::BAD_REQUEST, json!("filter"))
    );
    let (_, answer) = call(
        &router,
        Method::POST,
        "/api/v1/dead-letters/discard",
        Some(&bearer),
        r#"{"lane": "billing", "target": "audit"}"#,
    )
    .await;
    assert_eq!(answer["count"], 1, "{answer}");
    assert_eq!(dead_letters(&store).await, 0);
    relay.shutdown(WAIT).await.expect("shutdown");
}

/// Every form of the web UI, each with fields it accepts once logged in.
const UI_FORMS: [(&str, &str); 4] = [
    (
        "/ui/lanes/action",
        "lane_target=orders%2Faudit&action=resume",
    ),
    (
        "/ui/dead-letters/confirm",
        "op=discard-matching&lane_target=billing%2Faudit",
    ),
    (
        "/ui/dead-letters/apply",
        "op=discard-matching&lane_target=billing%2Faudit",
    ),
    ("/ui/logout", ""),
];

/// A form POST to the UI with `host` and `cookie`: the status.
async fn ui_post(
    router: &Router,
    path: &str,
    host: Option<&str>,
    cookie: &str,
    form: &str,
) -> StatusCode {
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(path)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("cookie", cookie);
    if let Some(host) = host {
        request = request.header("host", host);
    }
    let request = request
        .body(Body::from(form.to_owned()))
        .expect("a request");
    router
        .clone()
        .oneshot(request)
        .await
        .expect("an answer")
        .status()
}

#[tokio::test]
async fn every_ui_form_is_refused_without_a_session_host_or_token_and_changes_nothing() {
    let (router, relay, store) = serving(with_token()).await;
    store
        .pause_lane(&crate::store::LanePauseRequest::new(
            "orders", "audit", "setup",
        ))
        .await
        .expect("pause");
    dead_letter(&store).await;
    let host = Some("127.0.0.1:9464");
    for (path, form) in UI_FORMS {
        let form = format!("{form}&csrf={}", "0".repeat(64));
        // The API's bearer token is not a session.
        let bearer = format!("Bearer {TOKEN}");
        for cookie in ["", "outbox_ui_session=forged", &bearer] {
            let status = ui_post(&router, path, host, cookie, &form).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{path} {cookie:?}");
        }
        for bad_host in [None, Some("evil.example:9464")] {
            let status = ui_post(&router, path, bad_host, "", &form).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{path} Host {bad_host:?}");
        }
    }
    let pauses = store.lane_pauses().await.expect("pauses");
    assert_eq!(pauses.len(), 1);
    assert_eq!(pauses[0].paused_by, "setup", "a refused resume acted");
    assert_eq!(dead_letters(&store).await, 1, "a refused discard acted");
    relay.shutdown(WAIT).await.expect("shutdown");

    // Without a token configured there is no session to have: every form is off.
    let (router, relay, store) = serving(RouterConfig::new()).await;
    dead_letter(&store).await;
    for (path, form) in UI_FORMS {
        let status = ui_post(&router, path, host, "", form).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}");
    }
    assert_eq!(dead_letters(&store).await, 1);
    relay.shutdown(WAIT).await.expect("shutdown");
}
