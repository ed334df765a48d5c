//! A service that serves its own routes and the relay's on one axum server: it mounts
//! `outbox_relay::http::router` beside its `POST /orders`, with its own metrics recorder.
//!
//! Run: `cargo run --example service` and, in another shell:
//!
//! ```text
//! curl -X POST localhost:8080/orders      # enqueues an order event, delivered to the log
//! curl -H "Authorization: Bearer $OUTBOX_API_TOKEN" localhost:8080/api/v1/lanes   # the relay's lanes, as JSON
//! curl localhost:8080/metrics             # Prometheus text
//! curl localhost:8080/readyz
//! curl localhost:8080/healthz             # 503 once a lane has been failed for 5 minutes
//! ```
//!
//! What it shows: one `Router::merge` gives a service the relay's `/metrics`, `/healthz`,
//! `/readyz` and `/api/v1` on its own port, from its own runtime; the API's routes (its
//! lane and message reads, its mutations) answer 401 without the token
//! (`OUTBOX_API_TOKEN`, else a demo token printed at start), as the binary's listener does
//! (`docs/src/security.md`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use outbox_relay::config::ControlToken;
use outbox_relay::http::{
    Liveness, Readiness, RelayLiveness, RelayReadiness, RelaySlot, RouterConfig,
};
use outbox_relay::{
    handler_fn, InMemoryOutboxStore, LaneConfig, Outbox, OutboxMessageDraft, OutboxRelay,
    RelayHandle,
};
use serde_json::json;

/// The service: its address, and what it needs to stop.
struct Service {
    addr: SocketAddr,
    relay: Arc<RelayHandle>,
    server: tokio::task::JoinHandle<()>,
}

#[derive(Clone)]
struct Orders {
    store: Outbox,
    next: Arc<AtomicU64>,
}

/// `POST /orders`: the service's own route, which enqueues an event for the relay.
async fn place_order(State(orders): State<Orders>) -> Json<serde_json::Value> {
    let order = orders.next.fetch_add(1, Ordering::Relaxed);
    let answer = match OutboxMessageDraft::new("orders", "log", json!({ "order": order })) {
        Ok(draft) => match orders.store.enqueue(draft).await {
            Ok(enqueued) => json!({ "order": order, "outbox_id": enqueued.message.outbox_id }),
            Err(error) => json!({ "error": error.to_string() }),
        },
        Err(error) => json!({ "error": error.to_string() }),
    };
    Json(answer)
}

/// Starts the relay and the server on `addr` (port 0: any free one).
async fn start(
    addr: SocketAddr,
    token: ControlToken,
) -> Result<Service, Box<dyn std::error::Error>> {
    // The service's own recorder, with the buckets the relay's dashboard expects.
    let metrics = outbox_relay::metrics::prometheus_builder()?.install_recorder()?;
    outbox_relay::metrics::describe();

    let store: Outbox = Outbox::new(InMemoryOutboxStore::new());
    let relay = OutboxRelay::builder(&store)
        .lane(
            LaneConfig::new("orders", "log"),
            handler_fn(|message| async move {
                println!("delivered {} {}", message.outbox_id, message.payload);
                Ok(())
            }),
        )
        .start()
        .await?;
    let relay = Arc::new(relay);

    let slot = RelaySlot::new();
    slot.set(
        relay.clone(),
        store.clone(),
        tokio::runtime::Handle::current(),
    );
    let readiness = Readiness::new();
    readiness.set(
        RelayReadiness::new(store.clone(), relay.clone()),
        tokio::runtime::Handle::current(),
        Duration::from_secs(2),
    );
    // `/healthz` fails once a lane has been failed for 5 minutes (the supervisor's
    // `fail_liveness_after`): a failed lane stays down until the process restarts.
    let liveness = Liveness::new();
    liveness.set(
        RelayLiveness::new(relay.clone()),
        tokio::runtime::Handle::current(),
        Duration::from_secs(2),
    );
    let relay_routes = outbox_relay::http::router(
        RouterConfig::new()
            .metrics(metrics)
            .readiness(readiness)
            .liveness(liveness)
            .relay(slot)
            .token(token),
    );
    let app = Router::new()
        .route("/orders", post(place_order))
        .with_state(Orders {
            store,
            next: Arc::new(AtomicU64::new(1)),
        })
        .merge(relay_routes);

    let listener = tokio::net::TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(async move {
        let app = app.into_make_service_with_connect_info::<SocketAddr>();
        if let Err(error) = axum::serve(listener, app).await {
            eprintln!("the server stopped: {error}");
        }
    });
    Ok(Service {
        addr,
        relay,
        server,
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let token = match std::env::var("OUTBOX_API_TOKEN") {
        Ok(text) => ControlToken::new(&text)?,
        Err(_) => {
            let demo = "demo-token-change-me-0123456789";
            println!("OUTBOX_API_TOKEN unset: the API takes `Bearer {demo}`");
            ControlToken::new(demo)?
        }
    };
    let service = start("127.0.0.1:8080".parse()?, token).await?;
    println!("serving on http://{} until Ctrl-C", service.addr);
    tokio::signal::ctrl_c().await?;
    service.server.abort();
    let report = service.relay.shutdown(Duration::from_secs(10)).await?;
    println!("relay stopped: clean = {}", report.is_clean());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Generous: other builds share the machine.
    const WAIT: Duration = Duration::from_secs(60);

    /// The token the test's service takes.
    const TOKEN: &str = "service-test-token-0123456789";

    /// One request on a connection of its own: the status and the body.
    async fn request(addr: SocketAddr, method: &str, path: &str) -> (u16, String) {
        request_with(addr, method, path, "").await
    }

    /// One request with extra header lines (`name: value\r\n` each).
    async fn request_with(
        addr: SocketAddr,
        method: &str,
        path: &str,
        headers: &str,
    ) -> (u16, String) {
        let exchange = async {
            let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
            let request = format!(
                "{method} {path} HTTP/1.1\r\nHost: localhost\r\n{headers}Content-Length: 0\r\nConnection: close\r\n\r\n"
            );
            stream.write_all(request.as_bytes()).await.expect("send");
            let mut response = String::new();
            stream.read_to_string(&mut response).await.expect("read");
            response
        };
        let response = tokio::time::timeout(WAIT, exchange)
            .await
            .expect("an answer");
        let status = response
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("no status line in {response:?}"));
        let body = response
            .split_once("\r\n\r\n")
            .map(|(_, body)| body.to_owned())
            .unwrap_or_default();
        (status, body)
    }

    /// The example is also a test: `cargo test` runs it (see Cargo.toml).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_service_serves_its_routes_and_the_relays_on_one_port() {
        let token = ControlToken::new(TOKEN).expect("a token");
        let service = start("127.0.0.1:0".parse().expect("an address"), token)
            .await
            .expect("the service starts");
        let (status, body) = request(service.addr, "POST", "/orders").await;
        assert_eq!(status, 200, "{body}");

        // The delivery shows in the relay's metrics, scraped from the service's port.
        let started = std::time::Instant::now();
        loop {
            let (status, body) = request(service.addr, "GET", "/metrics").await;
            assert_eq!(status, 200, "{body}");
            if body.contains("outbox_delivered_total{lane=\"orders\",target=\"log\"} 1") {
                break;
            }
            assert!(
                started.elapsed() < WAIT,
                "no delivery in the metrics:\n{body}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        let (status, body) = request(service.addr, "GET", "/api/v1/lanes").await;
        assert_eq!(status, 401, "lane reads need the token: {body}");
        let bearer = format!("Authorization: Bearer {TOKEN}\r\n");
        let (status, body) = request_with(service.addr, "GET", "/api/v1/lanes", &bearer).await;
        assert_eq!(status, 200, "{body}");
        let lanes: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(
            lanes["lanes"][0]["lane"],
            json!({"lane": "orders", "target": "log"})
        );
        assert_eq!(lanes["lanes"][0]["delivered"], 1, "{body}");

        let (status, body) = request(service.addr, "POST", "/api/v1/lanes/orders/log/pause").await;
        assert_eq!(status, 401, "{body}");
        let (status, _) = request(service.addr, "GET", "/readyz").await;
        assert_eq!(status, 200);

        service.server.abort();
        service
            .relay
            .shutdown(Duration::from_secs(10))
            .await
            .expect("shutdown");
    }
}
