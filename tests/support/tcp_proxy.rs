//! A TCP proxy between a relay and PostgreSQL that a test can cut: a database that goes
//! away for real, as the relay's sockets see it.
//!
//! [`TcpProxy::cut`] closes the listening socket (new connections are refused, as by a
//! server that is down) and ends every forwarded connection, either closed
//! ([`Cut::Close`]: the relay reads end-of-stream, as when a server exits) or reset
//! ([`Cut::Reset`]: the relay reads "connection reset by peer", as from a crashed host, a
//! firewall or a load balancer). The server sees its sessions end either way.
//! [`TcpProxy::restore`] listens again on the same port. Loopback only: the proxy listens on
//! 127.0.0.1.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// How a cut ends the connections it finds open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// Closed (FIN): the peer reads end-of-stream.
    Close,
    /// Reset (RST): the peer reads ECONNRESET.
    Reset,
}

/// How long `cut` and `restore` may take before the test fails.
const PROXY_DEADLINE: Duration = Duration::from_secs(30);

pub struct TcpProxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    /// The accept loop while the proxy is up; `None` while it is cut.
    acceptor: Option<JoinHandle<()>>,
    /// Bumped by every cut, with how: each forwarded connection ends when it changes.
    epoch: watch::Sender<(u64, Cut)>,
    live: Arc<AtomicUsize>,
    accepted: Arc<AtomicUsize>,
}

impl TcpProxy {
    /// Listens on 127.0.0.1 at a free port and forwards every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("the proxy binds a loopback port");
        let addr = listener.local_addr().expect("the proxy's address");
        let (epoch, _) = watch::channel((0, Cut::Close));
        let mut proxy = Self {
            addr,
            upstream,
            acceptor: None,
            epoch,
            live: Arc::default(),
            accepted: Arc::default(),
        };
        proxy.acceptor = Some(proxy.spawn_acceptor(listener));
        proxy
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections being forwarded now.
    pub fn live(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }

    /// Connections accepted since the start.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// The database goes away: new connections are refused, open ones are ended as `how`
    /// says. Returns once no connection is forwarded any more.
    pub async fn cut(&mut self, how: Cut) {
        if let Some(acceptor) = self.acceptor.take() {
            acceptor.abort();
            // Awaiting the aborted task means its listener is dropped: connects are refused.
            let _ = acceptor.await;
        }
        self.epoch.send_modify(|(epoch, cut)| {
            *epoch += 1;
            *cut = how;
        });
        let deadline = Instant::now() + PROXY_DEADLINE;
        while self.live() > 0 {
            assert!(
                Instant::now() < deadline,
                "the proxy still forwards {} connections after the cut",
                self.live()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The database comes back on the same address.
    pub async fn restore(&mut self) {
        assert!(self.acceptor.is_none(), "restore without a cut");
        let deadline = Instant::now() + PROXY_DEADLINE;
        // The port was ours a moment ago and the listener sets SO_REUSEADDR, so this binds at
        // once; the loop only rides out a transient refusal.
        let listener = loop {
            match TcpListener::bind(self.addr).await {
                Ok(listener) => break listener,
                Err(error) => {
                    assert!(
                        Instant::now() < deadline,
                        "the proxy cannot listen on {} again: {error}",
                        self.addr
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
        self.acceptor = Some(self.spawn_acceptor(listener));
    }

    fn spawn_acceptor(&self, listener: TcpListener) -> JoinHandle<()> {
        let upstream = self.upstream;
        let epoch = self.epoch.subscribe();
        let live = Arc::clone(&self.live);
        let accepted = Arc::clone(&self.accepted);
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    // Out of file descriptors, say: let the moment pass.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                accepted.fetch_add(1, Ordering::SeqCst);
                // Counted from the accept, so `cut` waits for links still connecting too.
                let guard = LiveGuard::new(&live);
                let mut epoch = epoch.clone();
                let born = epoch.borrow_and_update().0;
                tokio::spawn(async move {
                    let _guard = guard;
                    let Ok(mut server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let mut client = client;
                    let cut = tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => None,
                        cut = epoch.wait_for(|(now, _)| *now != born) => cut.ok().map(|c| c.1),
                    };
                    if cut == Some(Cut::Reset) {
                        // A zero linger makes the drop below send RST instead of FIN.
                        let _ = client.set_zero_linger();
                        let _ = server.set_zero_linger();
                    }
                    // Dropping both sockets ends the connection.
                });
            }
        })
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        if let Some(acceptor) = self.acceptor.take() {
            acceptor.abort();
        }
        // Ends every forwarded connection.
        self.epoch.send_modify(|(epoch, _)| *epoch += 1);
    }
}

struct LiveGuard(Arc<AtomicUsize>);

impl LiveGuard {
    fn new(live: &Arc<AtomicUsize>) -> Self {
        live.fetch_add(1, Ordering::SeqCst);
        Self(Arc::clone(live))
    }
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
