//! Who may read and change what through the router, in process: the token on reads of
//! messages and lanes, the Host allow-list, the token before the body, the pace of wrong
//! tokens, the login form's value, the cookie behind TLS, and the bound on store calls.

use std::net::SocketAddr;

use axum::extract::ConnectInfo;

use super::*;

/// A GET of `path` from `peer` with `headers`: status, headers, body.
async fn get_from(
    router: &Router,
    path: &str,
    peer: Option<&str>,
    headers: &[(&str, &str)],
) -> (StatusCode, axum::http::HeaderMap, Vec<u8>) {
    request(router, Method::GET, path, peer, headers, Body::empty()).await
}

async fn request(
    router: &Router,
    method: Method,
    path: &str,
    peer: Option<&str>,
    headers: &[(&str, &str)],
    body: Body,
) -> (StatusCode, axum::http::HeaderMap, Vec<u8>) {
    let mut request = Request::builder().method(method).uri(path);
    if !headers.iter().any(|(name, _)| *name == "host") {
        request = request.header("host", HOST);
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let mut request = request.body(body).expect("a request");
    if let Some(peer) = peer {
        let addr: SocketAddr = peer.parse().expect("a peer address");
        request.extensions_mut().insert(ConnectInfo(addr));
    }
    send(router, request).await
}

/// The paths that read messages.
fn message_reads(id: uuid::Uuid) -> [String; 2] {
    [
        "/api/v1/messages?lane=billing&target=audit".to_owned(),
        format!("/api/v1/messages/{id}"),
    ]
}

#[tokio::test]
async fn reading_messages_needs_the_token_and_is_off_without_one() {
    let (router, relay, store) = serving(with_token()).await;
    let id = dead_letter(&store).await;
    let bearer = format!("Bearer {TOKEN}");
    for path in message_reads(id) {
        for wrong in [None, Some("Bearer 0123456789abcdef-not-it")] {
            let (status, answer) = call(&router, Method::GET, &path, wrong, "").await;
            assert_eq!(
                status,
                StatusCode::UNAUTHORIZED,
                "{path} {wrong:?}: {answer}"
            );
            assert_eq!(answer["field"], "authorization");
            assert!(
                !answer.to_string().contains("refused\""),
                "no message in {answer}"
            );
        }
        let (status, answer) = call(&router, Method::GET, &path, Some(&bearer), "").await;
        assert_eq!(status, StatusCode::OK, "{path}: {answer}");
    }
    relay.shutdown(WAIT).await.expect("shutdown");

    // No token configured: off, whoever asks.
    let (router, relay, store) = serving(RouterConfig::new()).await;
    let id = dead_letter(&store).await;
    for path in message_reads(id) {
        let (status, answer) = call(&router, Method::GET, &path, Some(&bearer), "").await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {answer}");
    }
    // The lanes' status stays open there: nothing to authorize with.
    let (status, _) = call(&router, Method::GET, "/api/v1/lanes", None, "").await;
    assert_eq!(status, StatusCode::OK);
    relay.shutdown(WAIT).await.expect("shutdown");
}

#[tokio::test]
async fn lane_reads_need_the_token_when_one_is_configured_unless_opened() {
    let bearer = format!("Bearer {TOKEN}");
    let (router, relay, store) = serving(with_token()).await;
    let (status, _) = call(&router, Method::GET, "/api/v1/lanes", None, "").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = call(&router, Method::GET, "/api/v1/lanes", Some(&bearer), "").await;
    assert_eq!(status, StatusCode::OK);
    relay.shutdown(WAIT).await.expect("shutdown");
    drop(store);

    let (router, relay, store) = serving(with_token().open_lane_reads(true)).await;
    let (status, _) = call(&router, Method::GET, "/api/v1/lanes", None, "").await;
    assert_eq!(status, StatusCode::OK, "opened");
    // Never the messages.
    let id = dead_letter(&store).await;
    for path in message_reads(id) {
        let (status, _) = call(&router, Method::GET, &path, None, "").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
    }
    relay.shutdown(WAIT).await.expect("shutdown");
}

#[tokio::test]
async fn a_foreign_host_is_refused_on_the_api_and_the_ui_and_answered_on_the_probes() {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let config = with_token()
        .metrics(recorder.handle())
        .allowed_hosts(["relay.internal"]);
    let (router, relay, _store) = serving(config).await;
    let bearer = format!("Bearer {TOKEN}");
    let auth = [("authorization", bearer.as_str())];
    for host in [
        "attacker.example",
        "attacker.example:9464",
        "relay.internal.attacker.example",
    ] {
        for path in [
            "/api/v1/lanes",
            "/api/v1/messages?lane=a&target=b",
            "/ui/lanes",
            "/ui/login",
        ] {
            let headers = [auth[0], ("host", host)];
            let (status, _, body) = get_from(&router, path, None, &headers).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{host} {path}");
            assert!(
                String::from_utf8_lossy(&body).contains("allowed_hosts"),
                "{host} {path}: the refusal names the setting"
            );
        }
        for path in ["/metrics", "/healthz"] {
            let (status, _, _) = get_from(&router, path, None, &[("host", host)]).await;
            assert_eq!(status, StatusCode::OK, "{host} {path}");
        }
    }
    for host in [
        "relay.internal:9464",
        "RELAY.INTERNAL",
        "10.1.2.3:9464",
        "localhost",
    ] {
        let headers = [auth[0], ("host", host)];
        let (status, _, _) = get_from(&router, "/api/v1/lanes", None, &headers).await;
        assert_eq!(status, StatusCode::OK, "{host}");
    }
    relay.shutdown(WAIT).await.expect("shutdown");
}

/// A body whose bytes never come: a handler that read it would never answer.
struct Endless;

impl hyper::body::Body for Endless {
    type Data = axum::body::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::task::Poll::Pending
    }
}

fn endless_body() -> Body {
    Body::new(Endless)
}

#[tokio::test]
async fn the_token_is_checked_before_the_body_is_read() {
    let (router, relay, _store) = serving(with_token()).await;
    for (path, _) in MUTATIONS {
        let answer = tokio::time::timeout(
            WAIT,
            request(
                &router,
                Method::POST,
                path,
                None,
                &[("content-type", "application/json")],
                endless_body(),
            ),
        )
        .await
        .unwrap_or_else(|_| panic!("{path}: no answer: the body was read before the token"));
        assert_eq!(answer.0, StatusCode::UNAUTHORIZED, "{path}");
    }
    // The UI's forms too (the session before the form).
    for (path, _) in UI_FORMS {
        let answer = tokio::time::timeout(
            WAIT,
            request(&router, Method::POST, path, None, &[], endless_body()),
        )
        .await
        .unwrap_or_else(|_| panic!("{path}: no answer: the form was read before the session"));
        assert_eq!(answer.0, StatusCode::UNAUTHORIZED, "{path}");
    }
    relay.shutdown(WAIT).await.expect("shutdown");
}

#[tokio::test]
async fn a_body_past_the_limit_is_refused_unread() {
    let (router, relay, store) = serving(with_token()).await;
    dead_letter(&store).await;
    let bearer = format!("Bearer {TOKEN}");
    let big = format!(
        r#"{{"lane": "billing", "target": "audit", "pad": "{}"}}"#,
        "x".repeat(MAX_BODY_BYTES)
    );
    let (status, _) = call(
        &router,
        Method::POST,
        "/api/v1/dead-letters/discard",
        Some(&bearer),
        &big,
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(dead_letters(&store).await, 1);
    relay.shutdown(WAIT).await.expect("shutdown");
}

#[tokio::test]
async fn wrong_tokens_make_their_peer_wait_and_others_go_on() {
    let (router, relay, _store) = serving(with_token()).await;
    let wrong = [("authorization", "Bearer 0123456789abcdef-guess")];
    let right = format!("Bearer {TOKEN}");
    let right = [("authorization", right.as_str())];
    let attacker = Some("10.0.0.9:40000");
    for guess in 0..guessing::FREE_FAILURES + 1 {
        let (status, _, _) = get_from(&router, "/api/v1/lanes", attacker, &wrong).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "guess {guess}");
    }
    // Now it waits: even the right token is not looked at from there.
    for headers in [&wrong, &right] {
        let (status, answer_headers, body) =
            get_from(&router, "/api/v1/lanes", attacker, headers).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body:?}");
        let wait: u64 = answer_headers["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=60).contains(&wait), "Retry-After {wait}");
    }
    // Another peer is not held back.
    let (status, _, _) = get_from(&router, "/api/v1/lanes", Some("10.0.0.10:40000"), &right).await;
    assert_eq!(status, StatusCode::OK);
    // A request without any token is no guess.
    for _ in 0..20 {
        let (status, _, _) = get_from(&router, "/api/v1/lanes", Some("10.0.0.11:1"), &[]).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    let (status, _, _) = get_from(&router, "/api/v1/lanes", Some("10.0.0.11:1"), &right).await;
    assert_eq!(status, StatusCode::OK);
    relay.shutdown(WAIT).await.expect("shutdown");
}

/// The value of cookie `name` among `headers`' `Set-Cookie`s, and the whole line.
fn set_cookie(headers: &axum::http::HeaderMap, name: &str) -> Option<(String, String)> {
    headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .find(|line| line.starts_with(&format!("{name}=")))
        .map(|line| {
            let value = line[name.len() + 1..]
                .split(';')
                .next()
                .unwrap_or_default()
                .to_owned();
            (value, line.to_owned())
        })
}

/// Posts the login form with `value` as its double-submit value (cookie and field) and
/// `token`: the answer.
async fn post_login(
    router: &Router,
    peer: Option<&str>,
    value: &str,
    token: &str,
    extra: &[(&str, &str)],
) -> (StatusCode, axum::http::HeaderMap, Vec<u8>) {
    let cookie = format!("outbox_ui_login={value}");
    let mut headers = vec![
        ("content-type", "application/x-www-form-urlencoded"),
        ("cookie", cookie.as_str()),
    ];
    headers.extend_from_slice(extra);
    let form = format!("csrf={value}&next=%2Fui%2Flanes&token={token}");
    request(
        router,
        Method::POST,
        "/ui/login",
        peer,
        &headers,
        Body::from(form),
    )
    .await
}

/// The double-submit value the login page issues.
async fn login_value(router: &Router) -> String {
    let (status, headers, _) = get_from(router, "/ui/login", None, &[]).await;
    assert_eq!(status, StatusCode::OK);
    set_cookie(&headers, "outbox_ui_login")
        .expect("the login page sets its cookie")
        .0
}

#[tokio::test]
async fn a_login_value_the_server_did_not_issue_is_refused() {
    let (router, relay, _store) = serving(with_token()).await;
    // The attacker's own value, the same in the cookie and the form.
    let chosen = "a".repeat(64);
    let (status, headers, _) = post_login(&router, None, &chosen, TOKEN, &[]).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(set_cookie(&headers, "outbox_ui_session").is_none());
    // The one the page issued works, once.
    let issued = login_value(&router).await;
    let (status, headers, _) = post_login(&router, None, &issued, TOKEN, &[]).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(set_cookie(&headers, "outbox_ui_session").is_some());
    let (status, _, _) = post_login(&router, None, &issued, TOKEN, &[]).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "used up");
    relay.shutdown(WAIT).await.expect("shutdown");
}

#[tokio::test]
async fn wrong_logins_make_their_peer_wait() {
    let (router, relay, _store) = serving(with_token()).await;
    let attacker = Some("192.0.2.7:5000");
    for guess in 0..guessing::FREE_FAILURES + 1 {
        let value = login_value(&router).await;
        let (status, _, _) =
            post_login(&router, attacker, &value, "0123456789abcdef-guess", &[]).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "guess {guess}");
    }
    let value = login_value(&router).await;
    let (status, headers, _) = post_login(&router, attacker, &value, TOKEN, &[]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(headers.contains_key("retry-after"));
    let value = login_value(&router).await;
    let (status, _, _) = post_login(&router, Some("192.0.2.8:5000"), &value, TOKEN, &[]).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "another peer logs in");
    relay.shutdown(WAIT).await.expect("shutdown");
}

#[tokio::test]
async fn the_session_cookie_is_secure_behind_tls() {
    for (config, forwarded, secure) in [
        (with_token(), None, false),
        (with_token(), Some("https"), true),
        (with_token(), Some("http"), false),
        (with_token().secure_cookies(true), None, true),
    ] {
        let (router, relay, _store) = serving(config).await;
        let extra: Vec<(&str, &str)> = forwarded
            .map(|proto| vec![("x-forwarded-proto", proto)])
            .unwrap_or_default();
        let value = login_value(&router).await;
        let (status, headers, _) = post_login(&router, None, &value, TOKEN, &extra).await;
        assert_eq!(status, StatusCode::SEE_OTHER);
        let (_, line) = set_cookie(&headers, "outbox_ui_session").expect("a session");
        assert_eq!(line.contains("; Secure"), secure, "{forwarded:?}: {line}");
        relay.shutdown(WAIT).await.expect("shutdown");
    }
}

#[tokio::test]
async fn ui_pages_that_show_messages_are_off_without_a_token() {
    let (router, relay, store) = serving(RouterConfig::new()).await;
    let id = dead_letter(&store).await;
    for path in [
        "/ui/messages".to_owned(),
        format!("/ui/messages/{id}"),
        "/ui/dead-letters".to_owned(),
        "/ui/blocked-keys".to_owned(),
    ] {
        let (status, _, body) = get_from(&router, &path, None, &[]).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}");
        assert!(
            !String::from_utf8_lossy(&body).contains(&id.to_string()),
            "{path}"
        );
    }
    let (status, _, _) = get_from(&router, "/ui/lanes", None, &[]).await;
    assert_eq!(status, StatusCode::OK, "the lanes page stays open");
    relay.shutdown(WAIT).await.expect("shutdown");
}

#[tokio::test]
async fn a_token_set_on_the_slot_replaces_the_old_one_at_once() {
    let config = with_token();
    let tokens = config.token_slot();
    let (router, relay, _store) = serving(config).await;
    let old = format!("Bearer {TOKEN}");
    let new_token = "0123456789abcdef-rotated-token";
    let new = format!("Bearer {new_token}");
    let (status, _) = call(&router, Method::GET, "/api/v1/lanes", Some(&old), "").await;
    assert_eq!(status, StatusCode::OK);
    tokens.set(ControlToken::new(new_token).expect("a token"));
    let (status, _) = call(&router, Method::GET, "/api/v1/lanes", Some(&old), "").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = call(&router, Method::GET, "/api/v1/lanes", Some(&new), "").await;
    assert_eq!(status, StatusCode::OK);
    relay.shutdown(WAIT).await.expect("shutdown");
}

/// Signals when the work it guards ends, however it ends (finished, timed out, aborted).
struct Ends(Option<tokio::sync::oneshot::Sender<()>>);

impl Drop for Ends {
    fn drop(&mut self) {
        if let Some(ended) = self.0.take() {
            let _ = ended.send(());
        }
    }
}

#[tokio::test]
async fn store_calls_are_bounded_timed_and_cancelled_with_their_request() {
    let (_router, relay, store) = serving(RouterConfig::new()).await;
    let slot = RelaySlot::new();
    slot.set(relay.clone(), store, tokio::runtime::Handle::current());
    let calls = control::StoreCalls::new(2, WAIT);
    // Two calls that never end hold the bound.
    let mut held = Vec::new();
    let mut ended = Vec::new();
    for _ in 0..2 {
        let (started, running) = tokio::sync::oneshot::channel::<()>();
        let (end, ends) = tokio::sync::oneshot::channel::<()>();
        ended.push(ends);
        let (calls, slot) = (calls.clone(), slot.clone());
        held.push(tokio::spawn(async move {
            calls
                .run(&slot, move |_| async move {
                    let _ends = Ends(Some(end));
                    let _ = started.send(());
                    std::future::pending::<Result<(), api::ApiError>>().await
                })
                .await
        }));
        running.await.expect("the call runs");
    }
    // The third is refused at once.
    let refused = calls
        .run(&slot, |_| async { Ok::<_, api::ApiError>(()) })
        .await
        .expect_err("past the bound");
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    // Its request goes (the client hung up): the work ends, and its permit is free again.
    held.remove(0).abort();
    tokio::time::timeout(WAIT, ended.remove(0))
        .await
        .expect("the abandoned work ended")
        .expect("it signalled");
    let answered = tokio::time::timeout(WAIT, async {
        loop {
            match calls
                .run(&slot, |_| async { Ok::<_, api::ApiError>(7) })
                .await
            {
                Ok(n) => return n,
                // The task that held the permit is being dropped: a moment.
                Err(_) => tokio::task::yield_now().await,
            }
        }
    })
    .await
    .expect("a call goes through once a permit is free");
    assert_eq!(answered, 7);
    // A call past its timeout is answered 503, and its work ends.
    let short = control::StoreCalls::new(1, Duration::from_millis(50));
    let (end, ends) = tokio::sync::oneshot::channel::<()>();
    let timed_out = short
        .run(&slot, move |_| async move {
            let _ends = Ends(Some(end));
            std::future::pending::<Result<(), api::ApiError>>().await
        })
        .await
        .expect_err("timed out");
    assert_eq!(timed_out.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        timed_out.message().contains("api_store_timeout"),
        "{}",
        timed_out.message()
    );
    tokio::time::timeout(WAIT, ends)
        .await
        .expect("ended")
        .expect("signalled");
    held.remove(0).abort();
    relay.shutdown(WAIT).await.expect("shutdown");
}
