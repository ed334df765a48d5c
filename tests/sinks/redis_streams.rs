//! The Redis Streams sink against the shared server at 127.0.0.1:6379, each test with its
//! own key.

use std::collections::HashMap;

use outbox_relay::DeliveryError;

use super::tcp_proxy::{Cut, TcpProxy};
use super::{build, claimed, draft, payload_bytes, unique, EVENT_TIMEOUT};

const SERVER: &str = "redis://127.0.0.1:6379";

async fn connection() -> redis::aio::MultiplexedConnection {
    redis::Client::open(SERVER)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("Redis is up (.ci/run starts it)")
}

type Entry = (String, HashMap<String, Vec<u8>>);

async fn entries(key: &str) -> Vec<Entry> {
    redis::cmd("XRANGE")
        .arg(key)
        .arg("-")
        .arg("+")
        .query_async(&mut connection().await)
        .await
        .unwrap()
}

async fn remove(key: &str) {
    let _: i64 = redis::cmd("DEL")
        .arg(key)
        .query_async(&mut connection().await)
        .await
        .unwrap();
}

#[tokio::test]
async fn adds_the_payload_id_and_headers_to_the_stream() {
    let prefix = unique("sinktest");
    let sink = build(&format!(
        r#"sink = {{ kind = "redis", url = "{SERVER}", stream = "{prefix}:{{lane}}:{{target}}", maxlen = 1000 }}"#
    ))
    .await;
    let message = claimed(draft()).await;
    sink.deliver(&message).await.expect("delivered");

    let key = format!("{prefix}:orders:billing");
    let first = entries(&key).await;
    assert_eq!(first.len(), 1);
    let (entry_id, fields) = &first[0];
    let text = |name: &str| String::from_utf8_lossy(&fields[name]).into_owned();
    println!(
        "redis read back: XRANGE {key} -> {entry_id}\n  outbox_id: {}\n  headers: {}\n  payload: {}",
        text("outbox_id"),
        text("headers"),
        text("payload")
    );
    assert_eq!(fields.len(), 3, "{fields:?}");
    assert_eq!(fields["payload"], payload_bytes(&message));
    assert_eq!(text("outbox_id"), message.outbox_id.to_string());
    assert_eq!(
        text("headers"),
        r#"{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","x-tenant":"acme"}"#
    );
    // Streams cannot dedupe: a redelivery is a second entry with the same outbox_id, which
    // is why consumers dedupe on it.
    sink.deliver(&message).await.expect("delivered again");
    let again = entries(&key).await;
    assert_eq!(again.len(), 2);
    assert_eq!(again[1].1["outbox_id"], again[0].1["outbox_id"]);
    remove(&key).await;
}

#[tokio::test]
async fn a_key_that_is_not_a_stream_is_permanent() {
    let key = unique("sinktest_string");
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("not a stream")
        .query_async(&mut connection().await)
        .await
        .unwrap();
    let sink = build(&format!(
        r#"sink = {{ kind = "redis", url = "{SERVER}", stream = "{key}" }}"#
    ))
    .await;
    let error = sink.deliver(&claimed(draft()).await).await.unwrap_err();
    assert!(error.is_permanent(), "{error:?}");
    assert!(error.to_string().contains("WRONGTYPE"), "{error}");
    remove(&key).await;
}

#[tokio::test]
async fn a_lost_connection_is_retryable_and_the_sink_reconnects() {
    let key = unique("sinktest_outage");
    let mut proxy = TcpProxy::start("127.0.0.1:6379".parse().unwrap()).await;
    let sink = build(&format!(
        r#"sink = {{ kind = "redis", url = "redis://{}", stream = "{key}" }}"#,
        proxy.addr()
    ))
    .await;
    sink.deliver(&claimed(draft()).await)
        .await
        .expect("delivered before the cut");
    proxy.cut(Cut::Reset).await;
    let during = claimed(draft()).await;
    let error = tokio::time::timeout(EVENT_TIMEOUT, sink.deliver(&during))
        .await
        .expect("a lost connection fails the delivery, it does not hang")
        .unwrap_err();
    assert!(matches!(error, DeliveryError::Retryable(_)), "{error:?}");

    proxy.restore().await;
    // The manager reconnects in the background: the relay would retry after its backoff;
    // here the test retries until the reconnect is done (bounded).
    let deadline = tokio::time::Instant::now() + EVENT_TIMEOUT;
    loop {
        match sink.deliver(&during).await {
            Ok(()) => break,
            Err(error) => {
                assert!(matches!(error, DeliveryError::Retryable(_)), "{error:?}");
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "never reconnected: {error}"
                );
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
    let ids: Vec<Vec<u8>> = entries(&key)
        .await
        .into_iter()
        .map(|(_, fields)| fields["outbox_id"].clone())
        .collect();
    assert_eq!(ids.len(), 2, "one before the cut, one after");
    assert_eq!(ids[1], during.outbox_id.to_string().into_bytes());
    remove(&key).await;
}
