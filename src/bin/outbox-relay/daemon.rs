//! `outbox-relay run`: the relay as a daemon, until SIGINT or SIGTERM.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::sync::Arc;

use outbox_relay::config::duration::format_duration;
use outbox_relay::config::file::MetricsListen;
use outbox_relay::database::CreateMode;
use outbox_relay::metrics::health::{Readiness, RelayReadiness, DEFAULT_READINESS_TIMEOUT};
use outbox_relay::relay::{RelayEvent, ShutdownReport};
use outbox_relay::retention::RetentionTask;
use outbox_relay::store::NackOutcome;
use outbox_relay::OutboxRelay;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::broadcast::error::RecvError;

use crate::{Failure, LogFormat, RunArgs, Setup};

/// Runs the relay: config checked, metrics endpoint up, store open, lanes started; then
/// waits for a signal and shuts down gracefully.
pub(crate) async fn run(setup: Setup, args: RunArgs) -> Result<(), Failure> {
    init_logging(args.log_format);
    let lanes = setup
        .config
        .lanes()
        .map_err(|error| Failure::input(format!("config error: {error}")))?;
    let supervisor = setup
        .config
        .supervisor()
        .map_err(|error| Failure::input(format!("config error: {error}")))?;
    let retention = setup
        .config
        .retention()
        .map_err(|error| Failure::input(format!("config error: {error}")))?;
    // Signals are hooked before anything starts, so a SIGTERM during start-up is not lost
    // (nor does it kill the process with claims held).
    let mut signals = Signals::install()?;

    let metrics_listen = args.metrics_listen.unwrap_or(setup.config.metrics_listen);
    // `/readyz` answers 503 "starting" until the relay runs and the check is set below.
    let readiness = Readiness::new();
    if let MetricsListen::Listen(addr) = metrics_listen {
        install_metrics_exporter(addr, readiness.clone())?;
        tracing::info!(%addr, "serving Prometheus metrics, /healthz and /readyz");
    }

    let store = setup.open(CreateMode::CreateIfMissing).await?;
    tracing::info!(database = %setup.url, "store open");

    let mut builder = OutboxRelay::builder(store.clone()).supervisor(supervisor);
    for (lane, sink) in &lanes {
        tracing::info!(
            lane = %lane.lane,
            target = %lane.target,
            sink = sink.kind(),
            concurrency = lane.concurrency,
            lease = %format_duration(lane.lease),
            "lane configured"
        );
        builder = builder.lane_shared(lane.clone(), sink.build());
    }
    let relay = builder
        .start()
        .await
        .map_err(|error| Failure::failed(format!("cannot start the relay: {error}")))?;
    let relay = Arc::new(relay);
    // Retention runs beside the lanes, never on their paths; it stops before the relay.
    let (stop_retention, retention_stopped) = tokio::sync::oneshot::channel::<()>();
    let retention = tokio::spawn(RetentionTask::new(store.clone(), retention).run(async {
        let _ = retention_stopped.await;
    }));
    readiness.set(
        RelayReadiness::new(store, relay.clone()),
        tokio::runtime::Handle::current(),
        DEFAULT_READINESS_TIMEOUT,
    );
    tokio::spawn(log_events(relay.subscribe()));
    tracing::info!(
        lanes = lanes.len(),
        "relay running; SIGINT or SIGTERM stops it"
    );

    let signal = signals.next().await;
    let timeout = setup.config.shutdown_timeout();
    tracing::info!(
        signal,
        timeout = %format_duration(timeout),
        "shutting down: finishing deliveries in flight, releasing the rest"
    );
    let _ = stop_retention.send(());
    if let Err(error) = retention.await {
        tracing::warn!(%error, "the retention task ended abnormally");
    }
    let report = tokio::select! {
        report = relay.shutdown(timeout) => report,
        signal = signals.next() => {
            // The operator insists. Claims still held lapse after their lease and are
            // delivered again: at least once holds, only sooner-than-lease redelivery is lost.
            return Err(Failure::failed(format!(
                "{signal} during shutdown: stopping now; claims still held will lapse and be redelivered"
            )));
        }
    }
    .map_err(|error| Failure::failed(format!("shutdown failed: {error}")))?;
    log_report(&report);
    Ok(())
}

/// SIGINT and SIGTERM, either of which stops the relay.
struct Signals {
    interrupt: Signal,
    terminate: Signal,
}

impl Signals {
    fn install() -> Result<Self, Failure> {
        let hook = |kind: SignalKind| {
            signal(kind).map_err(|error| {
                Failure::failed(format!("cannot install a signal handler: {error}"))
            })
        };
        Ok(Self {
            interrupt: hook(SignalKind::interrupt())?,
            terminate: hook(SignalKind::terminate())?,
        })
    }

    /// Waits for the next signal and names it.
    async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.interrupt.recv() => "SIGINT",
            _ = self.terminate.recv() => "SIGTERM",
        }
    }
}

fn log_report(report: &ShutdownReport) {
    for (lane, drain) in &report.lanes {
        tracing::info!(
            lane = %lane,
            completed = drain.completed,
            released = drain.released,
            "lane stopped"
        );
    }
    tracing::info!(
        completed = report.completed(),
        released = report.released(),
        "relay stopped: in-flight deliveries finished, unfinished claims released"
    );
}

/// Logs deliveries and failures with `lane`, `target` and `outbox_id` as separate fields,
/// so a log pipeline can filter on them (the library's own logs name the lane as
/// `lane/target`). Each delivery is logged at debug: at volume, one info line per message
/// would drown everything else.
async fn log_events(mut events: tokio::sync::broadcast::Receiver<RelayEvent>) {
    loop {
        let event = match events.recv().await {
            Ok(event) => event,
            Err(RecvError::Lagged(missed)) => {
                tracing::debug!(missed, "event log fell behind");
                continue;
            }
            Err(RecvError::Closed) => return,
        };
        match event {
            RelayEvent::Delivered {
                lane,
                outbox_id,
                attempt,
                duration,
                ..
            } => tracing::debug!(
                lane = %lane.lane,
                target = %lane.target,
                %outbox_id,
                attempt,
                duration_ms = duration.as_millis() as u64,
                "delivered"
            ),
            RelayEvent::Failed {
                lane,
                outbox_id,
                kind,
                outcome: NackOutcome::DeadLettered,
                error,
                ..
            } => tracing::warn!(
                lane = %lane.lane,
                target = %lane.target,
                %outbox_id,
                kind = kind.as_str(),
                %error,
                "delivery failed; message dead-lettered"
            ),
            RelayEvent::LeaseLapsedDeadLettered { lane, outbox_ids } => {
                for outbox_id in outbox_ids {
                    tracing::warn!(
                        lane = %lane.lane,
                        target = %lane.target,
                        %outbox_id,
                        "lease lapsed on the last attempt; message dead-lettered"
                    );
                }
            }
            RelayEvent::LaneStarted { lane, incarnation } => tracing::info!(
                lane = %lane.lane,
                target = %lane.target,
                incarnation,
                "lane started"
            ),
            _ => {}
        }
    }
}

/// Logs to stderr (stdout belongs to the log sink), filtered by `RUST_LOG` (default
/// `info`).
fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    // A second subscriber cannot be installed; there is only ever one here.
    let _ = match format {
        LogFormat::Compact => builder.compact().try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// Serves Prometheus metrics and the health probes on `addr`, on the exporter's own thread.
fn install_metrics_exporter(addr: SocketAddr, readiness: Readiness) -> Result<(), Failure> {
    outbox_relay::metrics::install_prometheus_exporter_with_readiness(addr, readiness)
        .map(drop)
        .map_err(|error| {
            Failure::input(format!(
                "cannot serve metrics: {error} (set metrics_listen to another address, or to false for no endpoint)"
            ))
        })
}
