//! The NATS JetStream sink against the shared server at 127.0.0.1:4222, and against a
//! private `nats-server` this test starts, stops and starts again on its own port.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use outbox_relay::relay::RelayEvent;
use outbox_relay::store::NackOutcome;
use outbox_relay::OutboxStatus;

use super::{build, claimed, draft, enqueue, payload_bytes, start_relay, unique, wait_for};

const SHARED: &str = "nats://127.0.0.1:4222";

/// A stream of its own (and subjects of its own) on `url`; deleted when the test ends well.
///
/// In memory: nats-server 2.9 removes the account's stream directory when its last file
/// stream is deleted, racing with a file stream being created at that moment ("could not
/// create storage directory"), and these tests create and delete streams in parallel.
async fn own_stream(url: &str) -> (jetstream::Context, String, String) {
    let client = async_nats::connect(url)
        .await
        .expect("NATS is up (.ci/run starts it)");
    let context = jetstream::new(client);
    let name = unique("SINKTEST").to_uppercase();
    let prefix = unique("sinktest");
    context
        .create_stream(stream::Config {
            name: name.clone(),
            subjects: vec![format!("{prefix}.>")],
            storage: stream::StorageType::Memory,
            ..Default::default()
        })
        .await
        .unwrap();
    (context, name, prefix)
}

async fn stored_count(context: &jetstream::Context, stream: &str) -> u64 {
    let mut stream = context.get_stream(stream).await.unwrap();
    stream.info().await.unwrap().state.messages
}

#[tokio::test]
async fn publishes_the_payload_with_its_id_and_headers() {
    let (context, name, prefix) = own_stream(SHARED).await;
    let sink = build(&format!(
        r#"sink = {{ kind = "nats", url = "{SHARED}", subject = "{prefix}.{{lane}}.{{target}}", stream = "{name}" }}"#
    ))
    .await;
    let message = claimed(draft()).await;
    sink.deliver(&message).await.expect("delivered");

    let stream = context.get_stream(&name).await.unwrap();
    let stored = stream.get_raw_message(1).await.unwrap();
    println!(
        "nats read back: subject {} seq {}\n  headers: {:?}\n  payload: {}",
        stored.subject,
        stored.sequence,
        stored.headers,
        String::from_utf8_lossy(&stored.payload)
    );
    assert_eq!(stored.subject.as_str(), format!("{prefix}.orders.billing"));
    assert_eq!(&stored.payload[..], &payload_bytes(&message)[..]);
    let header = |name: &str| stored.headers.get(name).map(|v| v.as_str().to_owned());
    assert_eq!(header("Nats-Msg-Id"), Some(message.outbox_id.to_string()));
    assert_eq!(header("x-tenant").as_deref(), Some("acme"));
    assert_eq!(
        header("traceparent").as_deref(),
        Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    );
    context.delete_stream(&name).await.unwrap();
}

/// A relay that crashed after the publish and before the ack delivers the message again:
/// the same `Nats-Msg-Id` within the duplicate window, so the stream keeps one copy.
#[tokio::test]
async fn a_message_delivered_twice_is_stored_once() {
    let (context, name, prefix) = own_stream(SHARED).await;
    let sink = build(&format!(
        r#"sink = {{ kind = "nats", url = "{SHARED}", subject = "{prefix}.out", stream = "{name}" }}"#
    ))
    .await;
    let message = claimed(draft()).await;
    sink.deliver(&message).await.expect("first delivery");
    sink.deliver(&message)
        .await
        .expect("the redelivery is acked too");
    let other = claimed(draft()).await;
    sink.deliver(&other).await.expect("another message");
    assert_eq!(
        stored_count(&context, &name).await,
        2,
        "one copy per outbox_id"
    );
    context.delete_stream(&name).await.unwrap();
}

/// The sink creates streams with the server's defaults, so on file storage: on a server of
/// its own (see `own_stream`). On the shared server another test run's copy of this test
/// (two suites at once on one machine) deleted its file stream while this one created its
/// own, and the create failed ("could not create storage directory", JetStream 10049).
#[tokio::test]
async fn a_missing_stream_is_an_error_at_start_unless_created() {
    let server = PrivateServer::start();
    let url = server.url();
    // The server is the test's alone: no other test can see these names.
    let (name, subject) = ("BILLING_EVENTS", "billing");
    let config = super::sink_from_toml(&format!(
        r#"sink = {{ kind = "nats", url = "{url}", subject = "{subject}.x", stream = "{name}" }}"#
    ));
    let error = config
        .build("lanes[orders/billing].sink")
        .await
        .err()
        .expect("the build fails");
    assert_eq!(error.field(), "lanes[orders/billing].sink.stream");
    assert!(
        error.to_string().contains(name) && error.to_string().contains("does not exist"),
        "{error}"
    );

    let sink = build(&format!(
        r#"sink = {{ kind = "nats", url = "{url}", subject = "{subject}.x", stream = "{name}", create_stream = true }}"#
    ))
    .await;
    sink.deliver(&claimed(draft()).await)
        .await
        .expect("delivered");
    let context = jetstream::new(async_nats::connect(url.as_str()).await.unwrap());
    assert_eq!(stored_count(&context, name).await, 1);
}

/// A `nats-server` of the test's own, with JetStream storing in a temp dir, so stopping it
/// touches no other test.
struct PrivateServer {
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl PrivateServer {
    fn start() -> Self {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let mut server = Self {
            port,
            dir: tempfile::tempdir().unwrap(),
            child: None,
        };
        server.restart();
        server
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    fn restart(&mut self) {
        let child = Command::new("nats-server")
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server must be on PATH (.ci/run checks it)");
        self.child = Some(child);
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "nats-server did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        self.stop();
    }
}

#[tokio::test]
async fn a_server_that_is_down_is_retried_and_delivered_once_it_is_back() {
    let mut server = PrivateServer::start();
    let sink = build(&format!(
        r#"sink = {{ kind = "nats", url = "{}", subject = "outage.orders", stream = "OUTAGE", create_stream = true, ack_timeout = "1s" }}"#,
        server.url()
    ))
    .await;
    let (store, relay, mut events) = start_relay(sink).await;
    server.stop();
    let id = enqueue(&store, draft()).await;
    let story = wait_for(&mut events, id, "a failed attempt", |e| {
        matches!(e, RelayEvent::Failed { .. })
    })
    .await;
    let RelayEvent::Failed { outcome, error, .. } = &story[0] else {
        unreachable!()
    };
    assert!(matches!(outcome, NackOutcome::Requeued), "{story:#?}");
    println!("while the server was down: {error}");

    server.restart();
    wait_for(&mut events, id, "the delivery", |e| {
        matches!(e, RelayEvent::Delivered { .. })
    })
    .await;
    let stored = store.get(id).await.unwrap().unwrap();
    assert_eq!(stored.status, OutboxStatus::Delivered);
    // Publishes buffered while the server was down may reach it after it is back; the
    // message id keeps them to one copy.
    let context = jetstream::new(async_nats::connect(server.url()).await.unwrap());
    let stream = context.get_stream("OUTAGE").await.unwrap();
    let message = stream.get_raw_message(1).await.unwrap();
    assert_eq!(
        message.headers.get("Nats-Msg-Id").map(|v| v.as_str()),
        Some(id.to_string().as_str())
    );
    assert_eq!(stored_count(&context, "OUTAGE").await, 1);
    relay.shutdown(Duration::from_secs(10)).await.unwrap();
}
