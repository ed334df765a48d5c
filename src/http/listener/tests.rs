//! The listener over real sockets: its timeouts, its cap and its reserved slots.

use super::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Generous: other builds share the machine.
const WAIT: Duration = Duration::from_secs(60);

/// Serves an empty recorder's metrics within `config` on a port of its own.
async fn listen(config: ListenerConfig) -> std::net::SocketAddr {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a port");
    let addr = listener.local_addr().expect("its address");
    tokio::spawn(serve(
        listener,
        super::super::router(super::super::RouterConfig::new().metrics(recorder.handle())),
        config,
    ));
    addr
}

/// Reads until the peer closes the connection (or resets it): what it sent.
async fn read_until_closed(stream: &mut TcpStream) -> String {
    let mut received = Vec::new();
    let mut buffer = [0u8; 1024];
    loop {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return String::from_utf8_lossy(&received).into_owned(),
            Ok(n) => received.extend_from_slice(&buffer[..n]),
        }
    }
}

#[tokio::test]
async fn a_partial_request_is_closed_within_the_header_read_timeout() {
    let header_read_timeout = Duration::from_millis(300);
    let addr = listen(ListenerConfig {
        header_read_timeout,
        ..ListenerConfig::default()
    })
    .await;
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let started = Instant::now();
    // A request line and one header, then nothing.
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n")
        .await
        .expect("send");
    let closed = tokio::time::timeout(WAIT, read_until_closed(&mut stream)).await;
    let took = started.elapsed();
    println!(
        "a partial request was closed after {took:?} (header_read_timeout {header_read_timeout:?})"
    );
    assert!(
        closed.is_ok(),
        "still open after {took:?}, header_read_timeout {header_read_timeout:?}"
    );
    // A timer never fires early; the upper bound is the generous wait above.
    assert!(
        took >= header_read_timeout,
        "closed after {took:?}, before header_read_timeout {header_read_timeout:?}"
    );
}

#[tokio::test]
async fn a_connection_with_no_traffic_is_closed_after_the_idle_timeout() {
    let idle_timeout = Duration::from_millis(300);
    let addr = listen(ListenerConfig {
        header_read_timeout: WAIT,
        idle_timeout,
        ..ListenerConfig::default()
    })
    .await;
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let started = Instant::now();
    let closed = tokio::time::timeout(WAIT, read_until_closed(&mut stream)).await;
    let took = started.elapsed();
    println!("a silent connection was closed after {took:?} (idle_timeout {idle_timeout:?})");
    assert!(
        closed.is_ok(),
        "still open after {took:?}, idle_timeout {idle_timeout:?}"
    );
    assert!(
        took >= idle_timeout,
        "closed after {took:?}, before idle_timeout {idle_timeout:?}"
    );
}

/// The token of [`listen_with_control`].
const TOKEN: &str = "0123456789abcdef-listener-token";

/// Serves metrics, the probes and the mutating routes (with [`TOKEN`]) within `config`.
async fn listen_with_control(config: ListenerConfig) -> std::net::SocketAddr {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a port");
    let addr = listener.local_addr().expect("its address");
    let routes = super::super::RouterConfig::new()
        .metrics(recorder.handle())
        .token(crate::config::ControlToken::new(TOKEN).expect("a token"));
    tokio::spawn(serve(listener, super::super::router(routes), config));
    addr
}

/// GETs `path` on a connection of its own: the whole answer.
async fn get(addr: std::net::SocketAddr, path: &str) -> String {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.expect("send");
        read_until_closed(&mut stream).await
    };
    tokio::time::timeout(WAIT, exchange)
        .await
        .expect("an answer")
}

/// The status code of an answer.
fn status_of(answer: &str) -> u16 {
    answer
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {answer:?}"))
}

#[tokio::test]
async fn past_the_cap_only_the_probes_and_the_scrape_are_answered() {
    let max_connections = 3;
    // Timeouts far beyond the test: only the cap decides.
    let addr = listen(ListenerConfig {
        header_read_timeout: WAIT,
        request_timeout: WAIT,
        idle_timeout: WAIT,
        max_connections,
    })
    .await;
    // Every slot held by a connection that sent half a request. The kernel hands
    // connections to `accept` in the order they came, so the next ones are past the cap.
    let mut held = Vec::new();
    for _ in 0..max_connections {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\n")
            .await
            .expect("send");
        held.push(stream);
    }
    // A reserved slot answers the scrape and the probe, one request each, and closes.
    assert_eq!(status_of(&get(addr, "/metrics").await), 200);
    assert_eq!(status_of(&get(addr, "/healthz").await), 200);
    // Any other path there is refused.
    let refused = get(addr, "/api/v1/lanes").await;
    assert!(
        refused.starts_with("HTTP/1.1 503") && refused.contains("too many connections"),
        "{refused:?}"
    );
    // The held connections stay open.
    for stream in &mut held {
        let mut byte = [0u8; 1];
        let still_open = tokio::time::timeout(Duration::from_millis(10), stream.read(&mut byte))
            .await
            .is_err();
        assert!(still_open, "a held connection was closed");
    }
}

#[test]
fn reserved_slots_are_bounded_in_all_and_per_peer() {
    let reserved = Reserved::default();
    let a: IpAddr = "10.0.0.1".parse().unwrap();
    let mut held: Vec<ReservedSlot> = (0..RESERVED_PER_PEER)
        .map(|_| reserved.take(a).expect("a slot"))
        .collect();
    assert!(
        reserved.take(a).is_none(),
        "one peer holds its share at most"
    );
    let mut n = 2u8;
    while held.len() < RESERVED_CONNECTIONS {
        let peer = IpAddr::from([10, 0, 0, n]);
        held.push(reserved.take(peer).expect("a slot for another peer"));
        n += 1;
    }
    assert!(
        reserved.take("10.0.1.1".parse().unwrap()).is_none(),
        "all taken"
    );
    held.remove(0);
    assert!(
        reserved.take(a).is_some(),
        "a slot given back is free again"
    );
}

/// `max_connections` connections that each send POST headers with the token, `{`, then
/// one byte of the body now and then, and so hold every slot (the request deadline is
/// beyond the test here; it has a test of its own below): the probes answer 200 throughout,
/// from the reserved slots.
#[tokio::test]
async fn probes_answer_while_slow_bodies_hold_every_connection() {
    let max_connections = 8;
    let addr = listen_with_control(ListenerConfig {
        header_read_timeout: WAIT,
        request_timeout: WAIT,
        idle_timeout: WAIT,
        max_connections,
    })
    .await;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut drips = Vec::new();
    let mut started = Vec::new();
    for _ in 0..max_connections {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        let (begun, begin) = tokio::sync::oneshot::channel();
        started.push(begin);
        let mut stopped = stopped.clone();
        drips.push(tokio::spawn(async move {
            let head = format!(
                "POST /api/v1/dead-letters/requeue HTTP/1.1\r\nHost: localhost\r\n\
                 Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n\
                 Content-Length: 100000\r\n\r\n{{"
            );
            stream.write_all(head.as_bytes()).await.expect("send");
            let _ = begun.send(());
            let mut drip = tokio::time::interval(Duration::from_millis(100));
            loop {
                tokio::select! {
                    _ = drip.tick() => {
                        if stream.write_all(b" ").await.is_err() {
                            return;
                        }
                    }
                    _ = stopped.changed() => return,
                }
            }
        }));
    }
    for begin in started {
        begin.await.expect("a drip began");
    }
    for probe in 0..20 {
        let answer = get(addr, "/healthz").await;
        assert_eq!(status_of(&answer), 200, "probe {probe}: {answer:?}");
    }
    let _ = stop.send(true);
    for drip in drips {
        drip.await.expect("a drip ended");
    }
}

#[tokio::test]
async fn a_body_dripped_a_byte_at_a_time_is_cut_at_the_request_deadline() {
    let request_timeout = Duration::from_millis(300);
    let addr = listen_with_control(ListenerConfig {
        header_read_timeout: WAIT,
        request_timeout,
        idle_timeout: WAIT,
        max_connections: 4,
    })
    .await;
    let stream = TcpStream::connect(addr).await.expect("connect");
    let (mut reader, mut writer) = stream.into_split();
    let head = format!(
        "POST /api/v1/dead-letters/requeue HTTP/1.1\r\nHost: localhost\r\n\
         Authorization: Bearer {TOKEN}\r\nContent-Length: 100000\r\n\r\n{{"
    );
    writer.write_all(head.as_bytes()).await.expect("send");
    let started = Instant::now();
    // One byte every 20 ms, well inside the idle timeout: only the deadline can end it.
    let drip = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        loop {
            tick.tick().await;
            if writer.write_all(b" ").await.is_err() {
                return;
            }
        }
    });
    let answer = tokio::time::timeout(WAIT, async {
        let mut received = Vec::new();
        let mut buffer = [0u8; 1024];
        loop {
            match reader.read(&mut buffer).await {
                Ok(0) | Err(_) => return String::from_utf8_lossy(&received).into_owned(),
                Ok(n) => received.extend_from_slice(&buffer[..n]),
            }
        }
    })
    .await;
    let took = started.elapsed();
    drip.abort();
    println!("a dripped body was answered and closed after {took:?} (request_timeout {request_timeout:?})");
    let answer = answer.unwrap_or_else(|_| panic!("still open after {took:?}"));
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    assert!(
        took >= request_timeout,
        "cut after {took:?}, before {request_timeout:?}"
    );
}
