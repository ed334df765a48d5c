//! The Prometheus exporter: the process's global recorder, served with the router on a
//! listener of its own thread.

use std::fmt;
use std::net::SocketAddr;
use std::sync::mpsc;
use std::thread;

use std::time::Duration;

use axum::Router;
use metrics_exporter_prometheus::{BuildError, PrometheusHandle};

use super::{listener, router, RouterConfig};
use crate::config::ListenerConfig;
use crate::metrics::{describe, prometheus_builder};

/// Installs the Prometheus exporter as the process's global metrics recorder, serving
/// [`router`] with every group on (`/metrics`, `/healthz`, `/readyz`, the API) over HTTP on
/// `addr`, and [describes](describe) every metric. [`DEFAULT_EXPORTER_ADDR`] is the usual
/// `addr`. Until a relay is given ([`install_prometheus_exporter_with_router`]), `/readyz`
/// and the API answer 503 "starting", and with no token the mutating routes answer 403.
///
/// The histograms are exported as Prometheus histograms with the bucket bounds
/// [`DELIVERY_DURATION_BUCKETS`], [`END_TO_END_LATENCY_BUCKETS`],
/// [`CLAIM_BATCH_SIZE_BUCKETS`] and [`THROTTLED_BUCKETS`].
///
/// # Where the endpoint runs
///
/// On a thread of its own, with its own single-threaded tokio runtime, whether or not the
/// caller is inside a runtime. So it may be called from synchronous `main` or from async
/// code (it blocks only while the socket is bound, not for I/O), and the endpoint does not
/// share the fate of the caller's runtime: it keeps answering scrapes while the
/// application's workers are saturated or its runtime shuts down, and a runtime created
/// just for setup (or a `#[tokio::test]`) cannot take it down when dropped.
/// The thread lives as long as the process.
///
/// # Errors
///
/// [`MetricsError`], naming `addr`, when the address cannot be bound (already in use, not
/// an address of this host, a privileged port) or a global recorder is already installed
/// (only one per process: call this once, early).
///
/// [`DEFAULT_EXPORTER_ADDR`]: crate::metrics::DEFAULT_EXPORTER_ADDR
/// [`DELIVERY_DURATION_BUCKETS`]: crate::metrics::DELIVERY_DURATION_BUCKETS
/// [`END_TO_END_LATENCY_BUCKETS`]: crate::metrics::END_TO_END_LATENCY_BUCKETS
/// [`CLAIM_BATCH_SIZE_BUCKETS`]: crate::metrics::CLAIM_BATCH_SIZE_BUCKETS
/// [`THROTTLED_BUCKETS`]: crate::metrics::THROTTLED_BUCKETS
pub fn install_prometheus_exporter(addr: SocketAddr) -> Result<PrometheusHandle, MetricsError> {
    install_prometheus_exporter_with_router(addr, RouterConfig::new(), ListenerConfig::default())
}

/// [`install_prometheus_exporter`], serving the routes of `routes` (its metrics handle is
/// the installed recorder's) within the limits of `limits` (header-read and idle timeouts,
/// a connection cap; see [`listener`]).
///
/// # Errors
///
/// As [`install_prometheus_exporter`], and when `limits` does not validate.
pub fn install_prometheus_exporter_with_router(
    addr: SocketAddr,
    routes: RouterConfig,
    limits: ListenerConfig,
) -> Result<PrometheusHandle, MetricsError> {
    let fail = |failure| MetricsError { addr, failure };
    limits
        .validate()
        .map_err(|error| fail(Failure::Config(error)))?;
    let recorder = prometheus_builder()
        .map_err(Failure::Build)
        .map_err(fail)?
        .build_recorder();
    // Bound here, so that a taken address is reported before the recorder is installed
    // (the caller may then retry on another address).
    let listener = std::net::TcpListener::bind(addr)
        .and_then(|listener| listener.set_nonblocking(true).map(|()| listener))
        .map_err(Failure::Bind)
        .map_err(fail)?;
    let handle = recorder.handle();
    let app = router(routes.metrics(handle.clone()));
    metrics::set_global_recorder(recorder)
        .map_err(|e| Failure::Build(BuildError::from(e)))
        .map_err(fail)?;
    let (report, outcome) = mpsc::sync_channel(1);
    let upkeep = handle.clone();
    thread::Builder::new()
        .name("outbox-metrics-exporter".to_owned())
        .spawn(move || serve(listener, app, upkeep, limits, report))
        .map_err(Failure::Runtime)
        .map_err(fail)?;
    // The thread reports once its runtime runs the listener (or could not).
    outcome
        .recv()
        .unwrap_or(Err(Failure::ThreadEnded))
        .map_err(fail)?;
    describe();
    crate::metrics::record_build_info();
    Ok(handle)
}

/// How often the recorder's upkeep runs (what the exporter's own listener would do): it
/// drains histogram samples into buckets, so memory stays bounded between scrapes.
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// The exporter thread: builds the runtime, reports, serves. A failure before serving is
/// reported back, and the runtime is dropped here, on a plain thread, where dropping it is
/// allowed.
fn serve(
    listener: std::net::TcpListener,
    app: Router,
    metrics: PrometheusHandle,
    config: ListenerConfig,
    report: mpsc::SyncSender<Result<(), Failure>>,
) {
    // Read before the install returns, so the first scrape has them, then on the upkeep's
    // beat: a scrape sees them at most one interval old.
    let process = metrics_process::Collector::default();
    process.describe();
    process.collect();
    let started = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(Failure::Runtime)
        .and_then(|runtime| {
            // Registering the socket with the reactor needs the runtime entered.
            let listener = {
                let _entered = runtime.enter();
                tokio::net::TcpListener::from_std(listener).map_err(Failure::Bind)?
            };
            Ok((runtime, listener))
        });
    let (runtime, listener) = match started {
        Ok(started) => {
            // The caller may have given up waiting only by panicking; serve regardless.
            let _ = report.send(Ok(()));
            started
        }
        Err(failure) => {
            let _ = report.send(Err(failure));
            return;
        }
    };
    runtime.spawn(async move {
        let mut upkeep = tokio::time::interval(UPKEEP_INTERVAL);
        loop {
            upkeep.tick().await;
            process.collect();
            metrics.run_upkeep();
        }
    });
    runtime.block_on(listener::serve(listener, app, config));
}

/// The Prometheus exporter could not be started on its address.
#[derive(Debug)]
pub struct MetricsError {
    addr: SocketAddr,
    failure: Failure,
}

#[derive(Debug)]
enum Failure {
    Config(crate::config::ConfigError),
    Build(BuildError),
    Bind(std::io::Error),
    Runtime(std::io::Error),
    ThreadEnded,
}

impl MetricsError {
    /// The address the exporter was asked to listen on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Whether the cause is that the process already has a global metrics recorder.
    pub fn recorder_already_installed(&self) -> bool {
        matches!(
            self.failure,
            Failure::Build(BuildError::FailedToSetGlobalRecorder(_))
        )
    }
}

impl fmt::Display for MetricsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot start the Prometheus exporter on {}: ", self.addr)?;
        match &self.failure {
            Failure::Build(BuildError::FailedToSetGlobalRecorder(_)) => {
                f.write_str("a metrics recorder is already installed in this process")
            }
            Failure::Config(error) => write!(f, "{}: {}", error.field, error.reason),
            Failure::Build(error) => write!(f, "{error}"),
            Failure::Bind(error) => write!(f, "cannot listen: {error}"),
            Failure::Runtime(error) => write!(f, "cannot start its thread: {error}"),
            Failure::ThreadEnded => f.write_str("its thread ended before reporting"),
        }
    }
}

// The cause is part of the message above; it is not also exposed as `source()`, which
// would print it twice in error chains.
impl std::error::Error for MetricsError {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::*;
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::Duration;

    #[test]
    fn histograms_are_exported_with_their_buckets() {
        let recorder = prometheus_builder()
            .expect("valid buckets")
            .build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            describe();
            let lane = LaneMetrics::new("orders", "webhook");
            lane.claimed(3);
            lane.delivered(Duration::from_micros(300), Duration::from_secs(400));
            lane.store_call(crate::store::StoreOp::Ack, Duration::from_micros(80));
        });
        let text = handle.render();
        let bucket = |name: &str, le: &str| {
            format!("{name}_bucket{{lane=\"orders\",target=\"webhook\",le=\"{le}\"}} 1")
        };
        for line in [
            bucket(DELIVERY_DURATION_SECONDS, "0.0005"),
            bucket(END_TO_END_LATENCY_SECONDS, "600"),
            bucket(CLAIM_BATCH_SIZE, "4"),
            format!("{STORE_CALL_DURATION_SECONDS}_bucket{{lane=\"orders\",target=\"webhook\",op=\"ack\",le=\"0.0001\"}} 1"),
            format!("{STORE_CALL_DURATION_SECONDS}_bucket{{lane=\"orders\",target=\"webhook\",op=\"ack\",le=\"10\"}} 1"),
            format!("# TYPE {DELIVERY_DURATION_SECONDS} histogram"),
            format!("# TYPE {END_TO_END_LATENCY_SECONDS} histogram"),
            format!("# TYPE {CLAIM_BATCH_SIZE} histogram"),
            format!("# HELP {DELIVERED_TOTAL} Messages their target accepted and the store marked delivered."),
            format!("{DELIVERED_TOTAL}{{lane=\"orders\",target=\"webhook\"}} 1"),
            format!("{LANE_STATE}{{lane=\"orders\",target=\"webhook\",state=\"failed\"}} 0"),
        ] {
            assert!(text.lines().any(|l| l == line), "no line {line:?} in\n{text}");
        }
        for metric in ALL {
            assert!(
                text.contains(&format!("# TYPE {} ", metric.name)),
                "{}",
                metric.name
            );
        }
    }

    fn scrape(addr: SocketAddr) -> String {
        let mut stream = TcpStream::connect(addr).expect("connect to the exporter");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .expect("send request");
        let mut response = String::new();
        stream.read_to_string(&mut response).expect("read response");
        response
    }

    fn free_loopback_port() -> SocketAddr {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a probe");
        probe.local_addr().expect("probe address")
    }

    /// The only test that installs a global recorder: a process gets one.
    #[tokio::test(flavor = "current_thread")]
    async fn installs_from_inside_a_runtime_serves_scrapes_and_refuses_a_second_install() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let busy = taken.local_addr().expect("address");
        let error = install_prometheus_exporter(busy).expect_err("address in use");
        assert_eq!(error.addr(), busy);
        assert!(!error.recorder_already_installed());
        assert!(
            error
                .to_string()
                .starts_with(&format!("cannot start the Prometheus exporter on {busy}: ")),
            "{error}"
        );

        let addr = free_loopback_port();
        let handle = install_prometheus_exporter(addr).expect("install");
        LaneMetrics::new("orders", "webhook").enqueued(2);
        // Scrape from a blocking thread: this current-thread runtime is not what serves it.
        let response = tokio::task::spawn_blocking(move || scrape(addr))
            .await
            .expect("scrape");
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert!(
            response.contains("outbox_enqueued_total{lane=\"orders\",target=\"webhook\"} 2"),
            "{response}"
        );
        assert!(response.contains("# HELP outbox_pending "), "{response}");
        let build_info = format!(
            "outbox_build_info{{version=\"{}\",git_sha=\"{}\",features=\"{}\"}} 1",
            process::VERSION,
            process::GIT_SHA,
            process::features()
        );
        assert!(response.lines().any(|l| l == build_info), "{response}");
        for metric in PROCESS {
            assert!(
                response.contains(&format!("# TYPE {} ", metric.name)),
                "no {} in {response}",
                metric.name
            );
        }
        assert!(handle.render().contains("outbox_enqueued_total"));

        let again = install_prometheus_exporter(free_loopback_port()).expect_err("second");
        assert!(again.recorder_already_installed(), "{again}");
        assert!(again.to_string().contains("already installed"), "{again}");
    }
}
