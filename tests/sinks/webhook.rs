//! The webhook sink against an HTTP receiver this test starts on a loopback port.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_relay::relay::RelayEvent;
use outbox_relay::store::NackOutcome;
use outbox_relay::OutboxStatus;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::time::Instant;

use super::{build, claimed, draft, enqueue, payload_bytes, start_relay, wait_for, EVENT_TIMEOUT};

/// What the receiver answers to one request.
#[derive(Debug, Clone)]
struct Answer {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: &'static str,
}

impl Answer {
    fn status(status: u16) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: "",
        }
    }
}

/// One request as the receiver read it.
#[derive(Debug, Clone)]
struct Request {
    method: String,
    path: String,
    /// Header names lowercased, in the order sent.
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// When its last byte was read.
    received: Instant,
    /// When the answer started to go out.
    answered: Instant,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A minimal HTTP/1.1 receiver (keep-alive, `content-length` bodies): it answers from a
/// script, then 200, and records every request.
#[derive(Clone)]
struct Receiver {
    port: u16,
    script: Arc<Mutex<VecDeque<Answer>>>,
    requests: Arc<Mutex<Vec<Request>>>,
}

impl Receiver {
    /// The webhook sink posting to this receiver's `/in`, built from a config line.
    async fn sink(&self) -> Arc<dyn outbox_relay::DeliveryHandler> {
        build(&format!(
            r#"sink = {{ kind = "webhook", url = "{}/in" }}"#,
            self.url()
        ))
        .await
    }

    async fn start(script: Vec<Answer>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let receiver = Self {
            port: listener.local_addr().unwrap().port(),
            script: Arc::new(Mutex::new(script.into())),
            requests: Arc::default(),
        };
        let serving = receiver.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let serving = serving.clone();
                tokio::spawn(async move { serving.serve(stream).await });
            }
        });
        receiver
    }

    async fn serve(&self, stream: tokio::net::TcpStream) {
        let mut stream = BufReader::new(stream);
        loop {
            let mut line = String::new();
            if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
                return;
            }
            let mut parts = line.split_whitespace();
            let method = parts.next().unwrap_or_default().to_owned();
            let path = parts.next().unwrap_or_default().to_owned();
            let mut headers = Vec::new();
            loop {
                let mut line = String::new();
                stream.read_line(&mut line).await.unwrap();
                let line = line.trim_end();
                if line.is_empty() {
                    break;
                }
                let (name, value) = line.split_once(':').unwrap();
                headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
            }
            let length = headers
                .iter()
                .find(|(n, _)| n == "content-length")
                .map_or(0, |(_, v)| v.parse::<usize>().unwrap());
            let mut body = vec![0; length];
            stream.read_exact(&mut body).await.unwrap();
            let received = Instant::now();
            let answer = self
                .script
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or_else(|| Answer::status(200));
            // Recorded before the answer goes out, so a test that saw the delivery acked
            // sees the request.
            let index = {
                let mut requests = self.requests.lock().unwrap();
                requests.push(Request {
                    method,
                    path,
                    headers,
                    body,
                    received,
                    answered: received,
                });
                requests.len() - 1
            };
            let mut out = format!(
                "HTTP/1.1 {} Scripted\r\ncontent-length: {}\r\n",
                answer.status,
                answer.body.len()
            );
            for (name, value) in &answer.headers {
                out.push_str(&format!("{name}: {value}\r\n"));
            }
            out.push_str("\r\n");
            out.push_str(answer.body);
            // Taken just before the answer's first byte goes out: the client cannot have
            // it any earlier, so a gap measured from here is never too long.
            self.requests.lock().unwrap()[index].answered = Instant::now();
            stream.get_mut().write_all(out.as_bytes()).await.unwrap();
            stream.get_mut().flush().await.unwrap();
        }
    }

    fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

/// The secret the tests sign with (base64 of "outbox-relay-test-secret").
const SECRET: &str = "whsec_b3V0Ym94LXJlbGF5LXRlc3Qtc2VjcmV0";

#[tokio::test]
async fn posts_the_payload_bytes_with_standard_webhooks_headers() {
    let receiver = Receiver::start(vec![]).await;
    let variable = super::unique("OUTBOX_TEST_WEBHOOK_SECRET");
    // Two secrets: the receiver may verify with either while it rotates.
    std::env::set_var(&variable, format!("whsec_b2xkLXNlY3JldA== {SECRET}"));
    let sink = build(&format!(
        r#"sink = {{ kind = "webhook", url = "{}/hooks/{{lane}}/{{target}}/{{header.x-tenant}}", secret_env = "{variable}" }}"#,
        receiver.url()
    ))
    .await;
    // A message header the HTTP client owns is not forwarded (it would corrupt the framing).
    let message = claimed(draft().with_header("Content-Length", "999")).await;
    sink.deliver(&message).await.expect("delivered");
    sink.deliver(&message).await.expect("delivered again");

    let requests = receiver.requests();
    assert_eq!(requests.len(), 2);
    let request = &requests[0];
    println!(
        "webhook read back: {} {}\n  headers: {:?}\n  body: {}",
        request.method,
        request.path,
        request.headers,
        String::from_utf8_lossy(&request.body)
    );
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/hooks/orders/billing/acme");
    assert_eq!(request.body, payload_bytes(&message));
    let id = message.outbox_id.to_string();
    assert_eq!(request.header("content-type"), Some("application/json"));
    let lengths: Vec<_> = request
        .headers
        .iter()
        .filter(|(n, _)| n == "content-length")
        .collect();
    assert_eq!(lengths.len(), 1, "{lengths:?}");
    assert_eq!(lengths[0].1, request.body.len().to_string());
    assert_eq!(request.header("webhook-id"), Some(id.as_str()));
    assert_eq!(request.header("idempotency-key"), Some(id.as_str()));
    assert_eq!(request.header("x-tenant"), Some("acme"));
    assert_eq!(
        request.header("traceparent"),
        Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    );
    let timestamp: u64 = request
        .header("webhook-timestamp")
        .unwrap()
        .parse()
        .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(
        now.abs_diff(timestamp) < 300,
        "timestamp {timestamp}, now {now}"
    );
    let signature = request.header("webhook-signature").unwrap();
    assert_eq!(
        signature.split(' ').count(),
        2,
        "one signature per secret: {signature}"
    );
    // The id is stable across attempts; the signature covers each attempt's timestamp.
    assert_eq!(requests[1].header("webhook-id"), Some(id.as_str()));

    // An implementation that is not ours checks the signature: the Standard Webhooks
    // verifier from PyPI, with only the new secret.
    verify_with_standardwebhooks(SECRET, request);
}

/// Runs the `standardwebhooks` package's `Webhook.verify` over the request as received.
/// Missing Python or the package is a failure, never a skip (`.ci/run` installs it).
fn verify_with_standardwebhooks(secret: &str, request: &Request) {
    let script = r#"
import json, sys
from standardwebhooks.webhooks import Webhook
data = json.load(sys.stdin)
Webhook(data["secret"]).verify(bytes.fromhex(data["body"]), data["headers"], json_parse=False)
print("verified by standardwebhooks")
"#;
    let headers: std::collections::BTreeMap<&str, &str> = request
        .headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    let input = serde_json::json!({
        "secret": secret,
        "body": request.body.iter().map(|b| format!("{b:02x}")).collect::<String>(),
        "headers": headers,
    });
    let mut child = std::process::Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 must be installed to verify webhook signatures independently");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input.to_string().as_bytes()).unwrap();
    }
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the standardwebhooks verifier refused the signature (or is missing: \
         `pip install standardwebhooks`): {stderr}"
    );
    print!("{}", String::from_utf8_lossy(&output.stdout));
}

#[tokio::test]
async fn a_500_is_retried_then_delivered() {
    let receiver = Receiver::start(vec![
        Answer {
            body: "database is down",
            ..Answer::status(500)
        },
        Answer::status(503),
    ])
    .await;
    let sink = receiver.sink().await;
    let (store, relay, mut events) = start_relay(sink).await;
    let id = enqueue(&store, draft()).await;
    let story = wait_for(&mut events, id, "delivery", |e| {
        matches!(e, RelayEvent::Delivered { .. })
    })
    .await;
    let failures: Vec<&str> = story
        .iter()
        .filter_map(|e| match e {
            RelayEvent::Failed { outcome, error, .. } => {
                assert!(matches!(outcome, NackOutcome::Requeued), "{e:?}");
                Some(error.as_str())
            }
            _ => None,
        })
        .collect();
    assert_eq!(failures.len(), 2, "{story:#?}");
    assert!(
        failures[0].contains("500") && failures[0].contains("database is down"),
        "{}",
        failures[0]
    );
    assert!(failures[1].contains("503"), "{}", failures[1]);
    let RelayEvent::Delivered { attempt, .. } = story.last().unwrap() else {
        unreachable!()
    };
    assert_eq!(*attempt, 3);
    let requests = receiver.requests();
    assert_eq!(requests.len(), 3);
    let ids: Vec<_> = requests
        .iter()
        .map(|r| r.header("webhook-id").unwrap())
        .collect();
    assert!(ids.iter().all(|i| *i == id.to_string()), "{ids:?}");
    let stored = store.get(id).await.unwrap().unwrap();
    assert_eq!(stored.status, OutboxStatus::Delivered);
    relay.shutdown(Duration::from_secs(10)).await.unwrap();
}

/// A target refusing the sink's credentials (a rotation on its side first, a permission
/// granted late): the messages are retried, not dead-lettered, and the lane's breaker
/// opens; once the target takes them again, they are delivered.
#[tokio::test]
async fn a_401_and_a_403_are_retried_and_open_the_breaker_instead_of_dead_lettering() {
    use outbox_relay::config::CircuitBreakerConfig;
    use outbox_relay::relay::BreakerState;

    let receiver = Receiver::start(vec![
        Answer {
            body: "invalid credentials",
            ..Answer::status(401)
        },
        Answer {
            body: "forbidden",
            ..Answer::status(403)
        },
    ])
    .await;
    let sink = receiver.sink().await;
    let store = outbox_relay::Outbox::new(outbox_relay::InMemoryOutboxStore::new());
    let breaker = CircuitBreakerConfig::default()
        .consecutive_failures(Some(2))
        .cool_down(Duration::from_millis(200));
    let builder = outbox_relay::OutboxRelay::builder(&store)
        .lane_shared(super::fast_lane().circuit_breaker(Some(breaker)), sink);
    let mut events = builder.subscribe();
    let relay = builder.start().await.expect("relay starts");
    let id = enqueue(&store, draft()).await;
    let opened = tokio::time::timeout(EVENT_TIMEOUT, async {
        loop {
            match events.recv().await.expect("events") {
                RelayEvent::BreakerChanged {
                    state: BreakerState::Open,
                    ..
                } => return,
                RelayEvent::Failed { outcome, error, .. } => assert!(
                    matches!(outcome, NackOutcome::Requeued),
                    "an authorization failure was not retried: {outcome:?} {error}"
                ),
                _ => {}
            }
        }
    })
    .await;
    assert!(
        opened.is_ok(),
        "the breaker did not open within {EVENT_TIMEOUT:?}"
    );
    wait_for(
        &mut events,
        id,
        "delivery once the target takes the credential",
        |e| matches!(e, RelayEvent::Delivered { .. }),
    )
    .await;
    let stored = store.get(id).await.unwrap().unwrap();
    assert_eq!(stored.status, OutboxStatus::Delivered);
    assert_eq!(receiver.requests().len(), 3);
    relay.shutdown(Duration::from_secs(10)).await.unwrap();

    // The sink that says so dead-letters them at once.
    let receiver = Receiver::start(vec![Answer::status(403)]).await;
    let sink = build(&format!(
        r#"sink = {{ kind = "webhook", url = "{}/in", retry_auth_failures = false }}"#,
        receiver.url()
    ))
    .await;
    let message = claimed(draft()).await;
    let error = sink.deliver(&message).await.expect_err("a 403");
    assert!(error.is_permanent(), "{error:?}");
}

/// A payload holding a number beyond `f64` is valid JSON: its URL is filled from another
/// field, and its bytes arrive as enqueued.
#[tokio::test]
async fn a_payload_beyond_f64_routes_by_another_field_and_arrives_byte_for_byte() {
    let receiver = Receiver::start(vec![]).await;
    let sink = build(&format!(
        r#"sink = {{ kind = "webhook", url = "{}/events/{{payload.aggregatetype}}" }}"#,
        receiver.url()
    ))
    .await;
    let payload = r#"{"aggregatetype": "Order", "id": 7, "big": 1e400, "exact": 1.50}"#;
    let draft = outbox_relay::OutboxMessageDraft::from_payload(
        "orders",
        "billing",
        outbox_relay::message::Payload::from_json(payload).unwrap(),
    )
    .unwrap();
    let message = claimed(draft).await;
    sink.deliver(&message).await.expect("delivered");
    let requests = receiver.requests();
    assert_eq!(requests[0].path, "/events/Order");
    assert_eq!(requests[0].body, payload.as_bytes());
}

#[tokio::test]
async fn a_429_with_retry_after_holds_the_next_attempt_back() {
    let receiver = Receiver::start(vec![Answer {
        headers: vec![("retry-after", "2".to_owned())],
        ..Answer::status(429)
    }])
    .await;
    let sink = receiver.sink().await;
    let (store, relay, mut events) = start_relay(sink).await;
    let id = enqueue(&store, draft()).await;
    wait_for(&mut events, id, "delivery", |e| {
        matches!(e, RelayEvent::Delivered { .. })
    })
    .await;
    let requests = receiver.requests();
    assert_eq!(requests.len(), 2, "{requests:#?}");
    // From the first attempt's answer (just before it went out) to the second attempt's
    // arrival: the lane's own backoff is 50 ms, so only Retry-After explains 2 s. The store
    // keeps times in whole milliseconds: the nack's "now" is truncated, so the message comes
    // due up to 1 ms before the answer + 2 s (seen once: 1.99968 s on a loaded machine).
    let gap = requests[1].received.duration_since(requests[0].answered);
    let floor = Duration::from_secs(2) - Duration::from_millis(1);
    assert!(
        gap >= floor,
        "second attempt {gap:?} after the 429's answer; wanted >= {floor:?} (first answered at {:?}, second received at {:?})",
        requests[0].answered,
        requests[1].received
    );
    relay.shutdown(Duration::from_secs(10)).await.unwrap();
}

#[tokio::test]
async fn a_410_dead_letters_on_the_first_attempt() {
    let receiver = Receiver::start(vec![Answer {
        body: "this endpoint was removed",
        ..Answer::status(410)
    }])
    .await;
    let sink = receiver.sink().await;
    let (store, relay, mut events) = start_relay(sink).await;
    let id = enqueue(&store, draft()).await;
    let story = wait_for(&mut events, id, "dead letter", |e| {
        matches!(e, RelayEvent::Failed { .. })
    })
    .await;
    let RelayEvent::Failed { outcome, error, .. } = &story[0] else {
        unreachable!()
    };
    assert!(matches!(outcome, NackOutcome::DeadLettered), "{story:#?}");
    assert!(
        error.contains("410") && error.contains("this endpoint was removed"),
        "{error}"
    );
    let stored = store.get(id).await.unwrap().unwrap();
    assert_eq!(stored.status, OutboxStatus::DeadLetter);
    assert_eq!(stored.attempt_count, 1);
    assert_eq!(receiver.requests().len(), 1);
    relay.shutdown(Duration::from_secs(10)).await.unwrap();
}

#[tokio::test]
async fn a_closed_port_is_retryable_and_redirects_are_not_followed() {
    // A port that was just free: nothing listens there.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let sink = build(&format!(
        r#"sink = {{ kind = "webhook", url = "http://127.0.0.1:{port}/in", timeout = "5s" }}"#
    ))
    .await;
    let message = claimed(draft()).await;
    let error = sink.deliver(&message).await.unwrap_err();
    assert!(
        matches!(error, outbox_relay::DeliveryError::Retryable(_)),
        "{error:?}"
    );

    let receiver = Receiver::start(vec![Answer {
        headers: vec![("location", "/elsewhere".to_owned())],
        ..Answer::status(302)
    }])
    .await;
    let sink = receiver.sink().await;
    let error = tokio::time::timeout(EVENT_TIMEOUT, sink.deliver(&message))
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        error.is_permanent() && error.to_string().contains("302"),
        "{error}"
    );
    assert_eq!(receiver.requests().len(), 1, "the redirect was followed");
}

#[tokio::test]
async fn a_missing_secret_names_the_variable() {
    let variable = super::unique("OUTBOX_TEST_UNSET");
    let config = super::sink_from_toml(&format!(
        r#"sink = {{ kind = "webhook", url = "http://127.0.0.1:1/in", secret_env = "{variable}" }}"#
    ));
    let error = config
        .build("lanes[orders/billing].sink")
        .await
        .err()
        .expect("the build fails");
    assert_eq!(error.field(), "lanes[orders/billing].sink.secret_env");
    assert_eq!(error.missing_variable_name(), Some(variable.as_str()));
    assert!(error.to_string().contains(&variable), "{error}");
}

mod answers;
mod gates;
mod headers;
