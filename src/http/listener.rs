//! The HTTP listener's connections: what [`serve`] accepts, for how long, and how many at
//! once; the routes are the router's ([`super::router`]). Each request carries the peer's
//! address as axum's `ConnectInfo<SocketAddr>`.
//!
//! - A connection past [`ListenerConfig::max_connections`] is answered `503` (one
//!   non-blocking write, no task) and closed, so a flood of connections costs the listener
//!   almost nothing and the connections it already serves (a scrape) go on.
//! - hyper closes a connection whose request headers take longer than
//!   [`ListenerConfig::header_read_timeout`], counted from its start or from the end of its
//!   previous answer (hyper needs a timer for it: without one it waits for ever).
//! - A connection with no byte read or written for [`ListenerConfig::idle_timeout`] is
//!   closed: a client that stops reading an answer, or holds a keep-alive connection.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tower::ServiceExt;

use crate::config::ListenerConfig;

/// What a connection past the cap is told before it is closed.
const TOO_MANY_CONNECTIONS: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\ncontent-length: 21\r\nconnection: close\r\n\r\ntoo many connections\n";

/// Serves `router` on `listener`, one task per connection, at most
/// `config.max_connections` at once, within `config`'s timeouts, until the future is
/// dropped. [`install_prometheus_exporter_with_router`](super::install_prometheus_exporter_with_router)
/// runs it on a thread of its own; a service may run it on its own runtime.
pub async fn serve(listener: tokio::net::TcpListener, router: Router, config: ListenerConfig) {
    let slots = Arc::new(Semaphore::new(config.max_connections));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok((stream, peer)) => (stream, peer),
            Err(error) => {
                // Out of file descriptors, typically: back off rather than spin.
                tracing::warn!(%error, "the HTTP listener cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            // A fresh socket's send buffer is empty: the write does not block, and if it
            // does not go through either, the close alone says it.
            let _ = stream.try_write(TOO_MANY_CONNECTIONS);
            tracing::debug!(%peer, max_connections = config.max_connections, "HTTP listener at max_connections: connection refused");
            continue;
        };
        let router = router.clone();
        tokio::spawn(async move {
            let _slot = slot;
            serve_connection(stream, peer, router, config).await;
        });
    }
}

/// One connection: hyper with a header-read timeout, closed when idle too long.
async fn serve_connection(
    stream: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    router: Router,
    config: ListenerConfig,
) {
    let activity = Arc::new(Activity::new());
    let io = Tracked {
        inner: stream,
        activity: activity.clone(),
    };
    let service =
        hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            // A router is always ready, and its errors are `Infallible`: every failure is an
            // answer.
            router.clone().oneshot(request)
        });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(config.header_read_timeout)
        .serve_connection(TokioIo::new(io), service);
    tokio::pin!(connection);
    loop {
        let idle_until = activity.last() + config.idle_timeout;
        tokio::select! {
            ended = connection.as_mut() => {
                if let Err(error) = ended {
                    tracing::debug!(%error, "an HTTP listener connection ended with an error");
                }
                return;
            }
            () = tokio::time::sleep_until(idle_until) => {
                if activity.last() + config.idle_timeout <= Instant::now() {
                    tracing::debug!(%peer, "an HTTP listener connection was idle too long: closed");
                    // Dropping the connection closes the socket.
                    return;
                }
            }
        }
    }
}

/// When a connection last read or wrote a byte.
#[derive(Debug)]
struct Activity {
    start: Instant,
    /// Milliseconds from `start`.
    last_ms: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Self {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }
}

/// A stream that records its reads and writes in an [`Activity`].
struct Tracked<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
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

    /// GETs `/metrics` on a connection of its own: the status code.
    async fn scrape(addr: std::net::SocketAddr) -> u16 {
        let exchange = async {
            let mut stream = TcpStream::connect(addr).await.expect("connect");
            stream
                .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                .await
                .expect("send");
            read_until_closed(&mut stream).await
        };
        let response = tokio::time::timeout(WAIT, exchange)
            .await
            .expect("an answer");
        response
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("no status line in {response:?}"))
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
        println!("a partial request was closed after {took:?} (header_read_timeout {header_read_timeout:?})");
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

    #[tokio::test]
    async fn connections_past_the_cap_are_refused_while_a_scrape_still_answers() {
        let max_connections = 3;
        // Timeouts far beyond the test: only the cap decides.
        let addr = listen(ListenerConfig {
            header_read_timeout: WAIT,
            idle_timeout: WAIT,
            max_connections,
        })
        .await;
        // Every slot held by a connection that sent half a request. The kernel hands
        // connections to `accept` in the order they came, so the next one is past the cap.
        let mut held = Vec::new();
        for _ in 0..max_connections {
            let mut stream = TcpStream::connect(addr).await.expect("connect");
            stream
                .write_all(b"GET /metrics HTTP/1.1\r\n")
                .await
                .expect("send");
            held.push(stream);
        }
        let mut refused = TcpStream::connect(addr).await.expect("connect");
        let answer = tokio::time::timeout(WAIT, read_until_closed(&mut refused))
            .await
            .expect("the connection past the cap is answered and closed at once");
        assert!(
            answer.starts_with("HTTP/1.1 503") && answer.contains("too many connections"),
            "{answer:?}"
        );
        // One slot frees: a scrape answers while the other held connections stay open.
        drop(held.pop());
        let started = Instant::now();
        let status = tokio::time::timeout(WAIT, async {
            loop {
                // The slot frees when the closed connection's task ends; until then a
                // scrape may still be refused.
                let status = scrape(addr).await;
                if status != 503 {
                    return status;
                }
                tokio::task::yield_now().await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no scrape answered within {WAIT:?} of a slot freeing"));
        println!(
            "a scrape answered {:?} after a slot freed",
            started.elapsed()
        );
        assert_eq!(status, 200);
        for stream in &mut held {
            let mut byte = [0u8; 1];
            let still_open =
                tokio::time::timeout(Duration::from_millis(10), stream.read(&mut byte))
                    .await
                    .is_err();
            assert!(still_open, "a held connection was closed");
        }
    }
}
