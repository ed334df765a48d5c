//! The HTTP listener's connections: what [`serve`] accepts, for how long, and how many at
//! once; the routes are the router's ([`super::router`]). Each request carries the peer's
//! address as axum's `ConnectInfo<SocketAddr>`.
//!
//! - At most [`ListenerConfig::max_connections`] connections are served at once. Past it, a
//!   connection takes one of [`RESERVED_CONNECTIONS`] slots kept for `/healthz`, `/readyz`
//!   and `/metrics` (at most [`RESERVED_PER_PEER`] of them per peer address): one request,
//!   whose headers must arrive within [`RESERVED_HEADER_READ_TIMEOUT`], answered and
//!   closed; any other path there is answered `503`. Past those too, a connection is
//!   answered `503` (one non-blocking write, no task) and closed. So clients that hold
//!   every connection cannot starve the kubelet's probes (a liveness probe that fails
//!   restarts a healthy pod) or the scrape.
//! - hyper closes a connection whose request headers take longer than
//!   [`ListenerConfig::header_read_timeout`], counted from its start or from the end of its
//!   previous answer (hyper needs a timer for it: without one it waits for ever).
//! - Once its headers are in, a request has [`ListenerConfig::request_timeout`] for the
//!   rest: its body read and its answer made. Past it the answer is `408` and the
//!   connection is closed, however steadily a client drips its body.
//! - A connection with no byte read or written for [`ListenerConfig::idle_timeout`] is
//!   closed: a client that stops reading an answer, or holds a keep-alive connection.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{header, HeaderValue, Response, StatusCode};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tower::ServiceExt;

use crate::config::ListenerConfig;

/// What a connection past the cap is told before it is closed.
const TOO_MANY_CONNECTIONS: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\ncontent-length: 21\r\nconnection: close\r\n\r\ntoo many connections\n";

/// Connections served past [`ListenerConfig::max_connections`], for the probes and the
/// scrape only.
pub const RESERVED_CONNECTIONS: usize = 8;
/// The most reserved connections one peer address holds at once (a kubelet's liveness and
/// readiness probes may coincide).
pub const RESERVED_PER_PEER: usize = 2;
/// How long a reserved connection waits for its request's headers (a probe sends them at
/// once).
pub const RESERVED_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(2);
/// The paths a reserved connection answers.
const RESERVED_PATHS: [&str; 3] = ["/healthz", "/readyz", "/metrics"];

/// Serves `router` on `listener`, one task per connection, at most
/// `config.max_connections` at once (and [`RESERVED_CONNECTIONS`] for the probes), within
/// `config`'s timeouts, until the future is dropped.
/// [`install_prometheus_exporter_with_router`](super::install_prometheus_exporter_with_router)
/// runs it on a thread of its own; a service may run it on its own runtime.
pub async fn serve(listener: tokio::net::TcpListener, router: Router, config: ListenerConfig) {
    let slots = Arc::new(Semaphore::new(config.max_connections));
    let reserved = Reserved::default();
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
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => Slot::Full(slot),
            Err(_) => match reserved.take(peer.ip()) {
                Some(slot) => Slot::Reserved(slot),
                None => {
                    // A fresh socket's send buffer is empty: the write does not block, and
                    // if it does not go through either, the close alone says it.
                    let _ = stream.try_write(TOO_MANY_CONNECTIONS);
                    tracing::debug!(%peer, max_connections = config.max_connections, "HTTP listener at max_connections and its reserved slots: connection refused");
                    continue;
                }
            },
        };
        let router = router.clone();
        tokio::spawn(async move {
            serve_connection(stream, peer, router, config, slot).await;
        });
    }
}

/// The slot a connection holds while it is served.
enum Slot {
    /// One of `max_connections`: any route, keep-alive.
    Full(#[allow(dead_code)] OwnedSemaphorePermit),
    /// A reserved one: the probes and the scrape, one request.
    Reserved(#[allow(dead_code)] ReservedSlot),
}

/// The reserved slots, and how many each peer address holds.
#[derive(Debug, Clone, Default)]
struct Reserved(Arc<Mutex<HashMap<IpAddr, usize>>>);

impl Reserved {
    /// A reserved slot for `peer`, unless all are taken or the peer holds its share.
    fn take(&self, peer: IpAddr) -> Option<ReservedSlot> {
        let mut held = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let total: usize = held.values().sum();
        let mine = held.get(&peer).copied().unwrap_or(0);
        if total >= RESERVED_CONNECTIONS || mine >= RESERVED_PER_PEER {
            return None;
        }
        held.insert(peer, mine + 1);
        Some(ReservedSlot {
            reserved: self.clone(),
            peer,
        })
    }
}

/// A reserved slot held; given back when dropped.
struct ReservedSlot {
    reserved: Reserved,
    peer: IpAddr,
}

impl Drop for ReservedSlot {
    fn drop(&mut self) {
        let mut held = self
            .reserved
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(mine) = held.get_mut(&self.peer) {
            *mine -= 1;
            if *mine == 0 {
                held.remove(&self.peer);
            }
        }
    }
}

/// A plain-text answer that closes the connection.
fn closing(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut response = Response::new(Body::from(text));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// One connection: hyper with a header-read timeout and a deadline per request, closed
/// when idle too long; on a reserved slot, one request to the probes or the scrape.
async fn serve_connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    router: Router,
    config: ListenerConfig,
    slot: Slot,
) {
    let reserved = matches!(slot, Slot::Reserved(_));
    let activity = Arc::new(Activity::new());
    let io = Tracked {
        inner: stream,
        activity: activity.clone(),
    };
    let request_timeout = config.request_timeout;
    let service =
        hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            let router = router.clone();
            async move {
                if reserved && !RESERVED_PATHS.contains(&request.uri().path()) {
                    return Ok::<_, std::convert::Infallible>(closing(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "too many connections\n",
                    ));
                }
                // A router is always ready, and its errors are `Infallible`: every failure
                // is an answer.
                match tokio::time::timeout(request_timeout, router.oneshot(request)).await {
                    Ok(answer) => answer,
                    Err(_) => Ok(closing(
                        StatusCode::REQUEST_TIMEOUT,
                        "the request took longer than the listener's request_timeout\n",
                    )),
                }
            }
        });
    let header_read_timeout = if reserved {
        config.header_read_timeout.min(RESERVED_HEADER_READ_TIMEOUT)
    } else {
        config.header_read_timeout
    };
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout)
        .keep_alive(!reserved)
        .serve_connection(TokioIo::new(io), service);
    tokio::pin!(connection);
    loop {
        let idle_until = activity.last() + config.idle_timeout;
        tokio::select! {
            ended = connection.as_mut() => {
                if let Err(error) = ended {
                    tracing::debug!(%error, "an HTTP listener connection ended with an error");
                }
                break;
            }
            () = tokio::time::sleep_until(idle_until) => {
                if activity.last() + config.idle_timeout <= Instant::now() {
                    tracing::debug!(%peer, "an HTTP listener connection was idle too long: closed");
                    // Dropping the connection closes the socket.
                    break;
                }
            }
        }
    }
    drop(slot);
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
mod tests;
