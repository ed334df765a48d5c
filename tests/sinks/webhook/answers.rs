//! What the webhook sink takes from a target's answer, and no more: the first bytes of an
//! error body (a target answering with an endless body does not hold the delivery), and a
//! `Retry-After` no longer than the lane's ceiling (a target asking for a year does not
//! park its message, and its ordering key, for a year).

use std::sync::Arc;
use std::time::Duration;

use outbox_relay::relay::RelayEvent;
use outbox_relay::time::UnixMillis;
use outbox_relay::time::{Clock, ManualClock};
use outbox_relay::{InMemoryOutboxStore, Outbox, OutboxRelay, OutboxStatus};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::time::Instant;

use super::{Answer, Receiver};
use crate::{build, claimed, draft, enqueue, fast_lane, wait_for, EVENT_TIMEOUT};

/// What the endless body starts with: the error must carry it.
const BODY_START: &str = "upstream exploded; details follow";

/// Reads one request (headers, then a `content-length` body) from `stream`.
async fn read_request(stream: &mut BufReader<tokio::net::TcpStream>) {
    let mut length = 0;
    loop {
        let mut line = String::new();
        stream.read_line(&mut line).await.unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap();
            }
        }
    }
    let mut body = vec![0; length];
    stream.read_exact(&mut body).await.unwrap();
}

#[tokio::test]
async fn an_endless_error_body_is_cut_at_its_first_bytes_and_the_connection_dropped() {
    // A target that answers 500 with a chunked body that never ends: chunk after chunk,
    // as fast as the client takes them, until the client goes away.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (gone, client_gone) = tokio::sync::oneshot::channel::<u64>();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let mut stream = BufReader::new(stream);
        read_request(&mut stream).await;
        let head = format!(
            "HTTP/1.1 500 Internal Server Error\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{BODY_START}\r\n",
            BODY_START.len()
        );
        let stream = stream.get_mut();
        stream.write_all(head.as_bytes()).await.unwrap();
        let chunk = format!("{:x}\r\n{}\r\n", 64 * 1024, "x".repeat(64 * 1024));
        let mut sent = 0u64;
        while stream.write_all(chunk.as_bytes()).await.is_ok() {
            sent += chunk.len() as u64;
        }
        let _ = gone.send(sent);
    });
    // A request timeout far beyond the test's wait: only reading less can end the delivery.
    let sink = build(&format!(
        r#"sink = {{ kind = "webhook", url = "http://127.0.0.1:{port}/in", timeout = "1h" }}"#
    ))
    .await;
    let message = claimed(draft()).await;

    let started = Instant::now();
    let error = tokio::time::timeout(EVENT_TIMEOUT, sink.deliver(&message))
        .await
        .unwrap_or_else(|_| {
            panic!("the delivery still reads the endless body after {EVENT_TIMEOUT:?}")
        })
        .unwrap_err();
    let failed_after = started.elapsed();
    let text = error.to_string();
    println!("failed after {failed_after:?}: {text}");
    assert!(
        matches!(error, outbox_relay::DeliveryError::Retryable(_)),
        "{error:?}"
    );
    assert!(
        text.contains("500") && text.contains(BODY_START),
        "the error carries the status and the body's first bytes: {text}"
    );
    // The body, as the error quotes it (ASCII: nothing escaped).
    let kept = text
        .split_once(": \"")
        .map(|(_, body)| body.trim_end_matches('"'))
        .unwrap_or_default();
    assert!(kept.starts_with(BODY_START), "{text}");
    assert_eq!(
        kept.len(),
        outbox_relay::sinks::webhook::ERROR_BODY_PREFIX,
        "the first {} bytes of the body are kept, no more: {text}",
        outbox_relay::sinks::webhook::ERROR_BODY_PREFIX
    );
    // The sink dropped the connection: the target's writes fail once the socket buffers
    // are full, and it stops.
    let sent = tokio::time::timeout(EVENT_TIMEOUT, client_gone)
        .await
        .expect("the target sees the connection closed")
        .unwrap();
    println!("the target wrote {sent} bytes before the connection closed");
}

#[tokio::test]
async fn a_retry_after_of_a_year_is_held_to_the_lanes_ceiling() {
    // 503 with Retry-After of a year, then 200.
    let receiver = Receiver::start(vec![Answer {
        headers: vec![("retry-after", "31536000".to_owned())],
        ..Answer::status(503)
    }])
    .await;
    let sink = receiver.sink().await;
    // The store's clock is manual: the retry comes due only when the test moves it.
    let clock = ManualClock::new(UnixMillis::from_millis(1_700_000_000_000));
    let store = Outbox::new(InMemoryOutboxStore::with_clock(Arc::new(clock.clone())));
    let ceiling = Duration::from_secs(60);
    let lane = fast_lane().retry_after_max(ceiling);
    let builder = OutboxRelay::builder(&store).lane_shared(lane, sink);
    let mut events = builder.subscribe();
    let relay = builder.start().await.expect("relay starts");
    let id = enqueue(&store, draft()).await;

    let story = wait_for(&mut events, id, "the 503's nack", |e| {
        matches!(e, RelayEvent::Failed { .. })
    })
    .await;
    assert!(
        story.iter().any(|e| matches!(
            e,
            RelayEvent::RetryAfterClamped { asked, ceiling: held, .. }
                if *asked == Duration::from_secs(31_536_000) && *held == ceiling
        )),
        "the clamp is reported: {story:#?}"
    );
    let stored = store.get(id).await.unwrap().unwrap();
    assert_eq!(stored.status, OutboxStatus::Pending);
    let wait = stored
        .available_at
        .saturating_duration_since(clock.now_millis());
    assert_eq!(
        wait, ceiling,
        "due after the ceiling, not the year the target asked for"
    );

    // The ceiling later (store time), the lane's next poll claims and delivers it.
    clock.advance(ceiling);
    wait_for(&mut events, id, "the delivery after the ceiling", |e| {
        matches!(e, RelayEvent::Delivered { .. })
    })
    .await;
    assert_eq!(receiver.requests().len(), 2);
    relay.shutdown(Duration::from_secs(10)).await.unwrap();
}
