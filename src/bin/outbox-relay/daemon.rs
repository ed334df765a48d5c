//! `outbox-relay run`: the relay as a daemon, until SIGINT or SIGTERM; SIGHUP reloads its
//! lanes ([`crate::reload`]).

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use outbox_relay::config::duration::format_duration;
use outbox_relay::config::file::ListenerSection;
use outbox_relay::config::file::MetricsListen;
use outbox_relay::config::ListenerConfig;
use outbox_relay::database::CreateMode;
use outbox_relay::http::health::{DEFAULT_LIVENESS_TIMEOUT, DEFAULT_READINESS_TIMEOUT};
use outbox_relay::http::{
    Liveness, Readiness, RelayLiveness, RelayReadiness, RelaySlot, RouteGroup, RouterConfig,
    TokenSlot,
};
use outbox_relay::relay::{RelayError, RelayEvent, RelayHandle, ShutdownReport};
use outbox_relay::OutboxRelay;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::broadcast::error::RecvError;

use crate::cli::{LogFormat, RunArgs};
use crate::otlp::OtlpExport;
use crate::reload::RunningLanes;
use crate::{Failure, Setup};

/// Runs the relay: config checked, metrics endpoint up, store open, lanes started; then
/// waits for a signal and shuts down gracefully.
pub(crate) async fn run(
    setup: Setup,
    config_path: Option<PathBuf>,
    args: RunArgs,
) -> Result<(), Failure> {
    // Signals are hooked before anything else, even the first log line, so a SIGTERM
    // during start-up is not lost (nor does it kill the process with claims held).
    let signals = Signals::install()?;
    // SIGHUP (reload) is hooked as early: its default action would end the process.
    let hangup = signal(SignalKind::hangup())
        .map_err(|error| Failure::failed(format!("cannot install a signal handler: {error}")))?;
    // Before the logging, which exports through it.
    let otlp = OtlpExport::from_config(
        setup.config.otlp_endpoint.as_deref(),
        setup.config.otlp_ca_file.as_deref(),
    )?;
    init_logging(args.log_format, otlp.as_ref());
    match &otlp {
        Some(export) => tracing::info!(
            endpoint = %export.endpoint,
            ca_file = ?export.ca_file,
            "exporting spans over OTLP"
        ),
        None => {
            tracing::info!("OTLP export off (no otlp_endpoint, no OTEL_EXPORTER_OTLP_*ENDPOINT)")
        }
    }
    let outcome = serve(setup, config_path, args, signals, hangup).await;
    // Whatever the outcome, the spans of the last moments are sent.
    if let Some(export) = otlp {
        export.shutdown().await;
    }
    outcome
}

/// The daemon's life, from the config check to the shutdown report.
async fn serve(
    setup: Setup,
    config_path: Option<PathBuf>,
    args: RunArgs,
    mut signals: Signals,
    mut hangup: Signal,
) -> Result<(), Failure> {
    let lanes = setup
        .config
        .lanes()
        .map_err(|error| Failure::input(format!("config error: {error}")))?;
    let supervisor = setup
        .config
        .supervisor()
        .map_err(|error| Failure::input(format!("config error: {error}")))?;
    let patterns = setup
        .config
        .lane_patterns()
        .map_err(|error| Failure::input(format!("config error: {error}")))?;
    for (lane, sink) in &lanes {
        sink.check_built(&format!("lanes[{}].sink", lane.key()))
            .map_err(|error| Failure::input(format!("config error: {error}")))?;
    }
    for (pattern, sink) in &patterns {
        sink.check_built(&format!("lane_patterns[{}].sink", pattern.key()))
            .map_err(|error| Failure::input(format!("config error: {error}")))?;
    }

    for (old, new) in setup.config.deprecated_keys() {
        tracing::warn!(
            key = old,
            replacement = new,
            "config key {old} is deprecated and still read; rename it to {new}"
        );
    }
    let metrics_listen = match args.metrics_listen {
        Some(address) => {
            // The flag bypasses the file's check: check it the same way.
            setup
                .config
                .listener
                .check_exposure(&address, "--metrics-listen")
                .map_err(|error| {
                    Failure::input(format!("config error: {}: {}", error.field, error.reason))
                })?;
            address
        }
        None => setup.config.listen_address(),
    };
    // `/readyz` answers 503 "starting" until the relay runs and the check is set below.
    let readiness = Readiness::new();
    // `/healthz` answers 200 until the relay runs, then fails once a lane has been failed
    // for longer than `supervisor.fail_liveness_after`.
    let liveness = Liveness::new();
    // The API acts on the relay once it runs; its mutations need the token, and without
    // one configured they are off (403).
    let token = setup.config.listener.control_token().map_err(|error| {
        Failure::input(format!("config error: {}: {}", error.field, error.reason))
    })?;
    let slot = RelaySlot::new();
    let listener = &setup.config.listener;
    let api = listener.api_settings();
    let mut routes = RouterConfig::new()
        .readiness(readiness.clone())
        .liveness(liveness.clone())
        .relay(slot.clone())
        .allowed_hosts(api.allowed_hosts)
        .open_lane_reads(api.open_lane_reads)
        .secure_cookies(api.secure_cookies)
        .api_store_calls(api.api_store_calls)
        .api_store_timeout(api.api_store_timeout);
    if let Some(groups) = &listener.routes {
        // Validated with the config: every name is a group.
        routes = routes.routes(groups.iter().filter_map(|name| name.parse().ok()));
    }
    if let Some(token) = token {
        routes = routes.token(token);
    }
    // SIGHUP reads the token again through this slot (a rotation).
    let tokens = routes.token_slot();
    if let MetricsListen::Listen(addr) = metrics_listen {
        let limits = listener.to_config();
        let served = served_routes(&routes, tokens.current().is_some(), api.open_lane_reads);
        install_metrics_exporter(addr, routes, limits)?;
        tracing::info!(
            %addr,
            max_connections = limits.max_connections,
            "serving {served}"
        );
    }

    // Sinks are built before the store is opened: a sink that cannot be built (a secret
    // missing from the environment, a broker that cannot be reached, a missing JetStream
    // stream) stops the start with exit 2, naming the lane's field (and the variable).
    // Connecting to a broker can take up to its connect_timeout; a signal meanwhile stops
    // the relay at once (nothing is claimed yet).
    let building = async {
        let mut handlers = Vec::with_capacity(lanes.len());
        for (lane, sink) in &lanes {
            let handler = sink
                .build(&format!("lanes[{}].sink", lane.key()))
                .await
                .map_err(|error| Failure::input(format!("config error: {error}")))?;
            handlers.push(handler);
        }
        // One handler per pattern, shared by its lanes (one connection to its target).
        let mut pattern_handlers = Vec::with_capacity(patterns.len());
        for (pattern, sink) in &patterns {
            let handler = sink
                .build(&format!("lane_patterns[{}].sink", pattern.key()))
                .await
                .map_err(|error| Failure::input(format!("config error: {error}")))?;
            pattern_handlers.push(handler);
        }
        Ok::<_, Failure>((handlers, pattern_handlers))
    };
    let (handlers, pattern_handlers) = tokio::select! {
        handlers = building => handlers?,
        signal = signals.next() => {
            tracing::info!(signal, "stopped during start-up, while the sinks were being built");
            return Ok(());
        }
    };

    // Reaching the database can take up to connect_timeout; a signal meanwhile stops the
    // relay at once (nothing is claimed yet, so there is nothing to hand back).
    let store = tokio::select! {
        store = setup.open(if args.no_migrate { CreateMode::MustExist } else { CreateMode::CreateIfMissing }) => store?,
        signal = signals.next() => {
            tracing::info!(signal, "stopped during start-up, before the database was reached");
            return Ok(());
        }
    };
    tracing::info!(database = %setup.url, "store open");

    // Retention runs beside the lanes, each by its own settings, and stops with the relay.
    let mut builder = OutboxRelay::builder(&store).supervisor(supervisor);
    for ((lane, sink), handler) in lanes.iter().zip(handlers) {
        tracing::info!(
            lane = %lane.name,
            target = %lane.target,
            sink = sink.kind(),
            concurrency = lane.concurrency,
            lease = %format_duration(lane.lease),
            "lane configured"
        );
        builder = builder.lane_shared(lane.clone(), handler);
    }
    for ((pattern, sink), handler) in patterns.iter().zip(pattern_handlers) {
        tracing::info!(
            pattern = %pattern.pattern(),
            target = %pattern.target(),
            sink = sink.kind(),
            max_lanes = pattern.max_lanes,
            "lane pattern configured"
        );
        builder = builder.lane_pattern_shared(pattern.clone(), handler);
    }
    let relay = builder
        .start()
        .await
        .map_err(|error| Failure::failed(format!("cannot start the relay: {error}")))?;
    let relay = Arc::new(relay);
    slot.set(
        relay.clone(),
        store.clone(),
        tokio::runtime::Handle::current(),
    );
    readiness.set(
        RelayReadiness::new(store, relay.clone()),
        tokio::runtime::Handle::current(),
        DEFAULT_READINESS_TIMEOUT,
    );
    liveness.set(
        RelayLiveness::new(relay.clone()),
        tokio::runtime::Handle::current(),
        DEFAULT_LIVENESS_TIMEOUT,
    );
    tokio::spawn(log_events(relay.subscribe()));
    tracing::info!(
        lanes = lanes.len(),
        "relay running; SIGINT or SIGTERM stops it, SIGHUP reloads the lanes"
    );

    let mut running = RunningLanes::new(lanes);
    let mut refused = tokio::spawn(watch_for_refusal(relay.subscribe()));
    let mut dead = tokio::spawn(watch_liveness(relay.clone()));
    let cause = loop {
        tokio::select! {
            signal = signals.next() => break Stop::Signal(signal),
            // A reload reads the file and builds the new sinks first, which a signal cuts
            // short (a broker that does not answer must not keep the relay from stopping);
            // the lane changes then run to their end (a drain takes at most
            // shutdown_timeout): a SIGTERM meanwhile waits for them rather than cut a lane
            // change in half.
            _ = hangup.recv() => {
                reread_token(&setup.config.listener, &tokens);
                let prepared = tokio::select! {
                    prepared = running.prepare(config_path.as_deref()) => prepared,
                    signal = signals.next() => {
                        tracing::info!(signal, "SIGHUP: reload abandoned while its sinks were being built; lanes unchanged");
                        break Stop::Signal(signal);
                    }
                };
                if let Some(prepared) = prepared {
                    running
                        .apply(prepared, &relay, setup.config.shutdown_timeout())
                        .await;
                }
            }
            refusal = &mut refused => break match refusal {
                Ok(refusal) => Stop::Refused(refusal),
                // The watcher only ends with a refusal, or with the relay; either way, stop.
                Err(_) => Stop::Refused("the store-error watcher ended".to_owned()),
            },
            dead = &mut dead => break Stop::Dead(match dead {
                Ok(reason) => reason,
                Err(_) => "the liveness watcher ended".to_owned(),
            }),
        }
    };
    let signal = match &cause {
        Stop::Signal(signal) => *signal,
        Stop::Refused(refusal) => {
            tracing::error!(%refusal, "the store refuses this relay for good; stopping");
            "store refusal"
        }
        Stop::Dead(reason) => {
            tracing::error!(%reason, "not alive; stopping, so that the service manager restarts the relay");
            "failed lanes"
        }
    };
    let timeout = setup.config.shutdown_timeout();
    tracing::info!(
        signal,
        timeout = %format_duration(timeout),
        "shutting down: finishing deliveries in flight, releasing the rest"
    );
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
    if let Stop::Refused(reason) | Stop::Dead(reason) = cause {
        return Err(Failure::failed(reason));
    }
    if report.is_clean() {
        Ok(())
    } else {
        Err(Failure::failed(unclean_shutdown(&report)))
    }
}

/// Why the daemon stops.
enum Stop {
    /// SIGINT or SIGTERM.
    Signal(&'static str),
    /// A lane's store refused it for good, this many times in a row; the cause.
    Refused(String),
    /// A lane has been failed for longer than `supervisor.fail_liveness_after`.
    Dead(String),
}

/// How often the daemon asks the relay whether it is still alive.
const LIVENESS_POLL: std::time::Duration = std::time::Duration::from_secs(10);

/// Waits until the relay says it is not alive ([`RelayHandle::liveness`]); returns why.
/// Exiting then lets systemd or Kubernetes restart the relay (a failed lane stays down
/// until its process restarts); `/healthz` says the same to a probe.
async fn watch_liveness(relay: Arc<RelayHandle>) -> String {
    let mut poll = tokio::time::interval(LIVENESS_POLL);
    loop {
        poll.tick().await;
        // A relay stopped or too slow to answer is not this watcher's: the shutdown path
        // and the probe cover those.
        if let Err(error @ RelayError::LanesFailed { .. }) = relay.liveness().await {
            return error.to_string();
        }
    }
}

/// How many permanent store errors in a row a lane may see before the daemon gives up: a
/// read-only database or a role without rights does not heal by itself, and backing off
/// forever would hide it.
const PERMANENT_STORE_ERROR_LIMIT: u32 = 5;

/// Waits until some lane has seen [`PERMANENT_STORE_ERROR_LIMIT`] permanent store errors
/// with no successful store call between them; returns the cause. Never returns while
/// the store answers.
async fn watch_for_refusal(mut events: tokio::sync::broadcast::Receiver<RelayEvent>) -> String {
    let mut in_a_row: std::collections::HashMap<String, u32> = std::collections::HashMap::new();
    loop {
        let event = match events.recv().await {
            Ok(event) => event,
            Err(RecvError::Lagged(_)) => continue,
            Err(RecvError::Closed) => std::future::pending().await,
        };
        match event {
            RelayEvent::StoreError {
                lane,
                op,
                error,
                permanent: true,
            } => {
                let count = in_a_row.entry(lane.to_string()).or_default();
                *count += 1;
                if *count >= PERMANENT_STORE_ERROR_LIMIT {
                    return format!("lane {lane}: gave up after {count} attempts: {op}: {error}");
                }
            }
            RelayEvent::Claimed { lane, .. }
            | RelayEvent::Idle { lane, .. }
            | RelayEvent::Delivered { lane, .. } => {
                in_a_row.remove(&lane.to_string());
            }
            _ => {}
        }
    }
}

/// What a shutdown that did not record everything left behind, for the exit message: no
/// message is lost, but these will be delivered again.
fn unclean_shutdown(report: &ShutdownReport) -> String {
    let mut parts = Vec::new();
    if report.unrecorded() > 0 {
        parts.push(format!(
            "{} finished deliveries whose acks or nacks the store did not record",
            report.unrecorded()
        ));
    }
    if report.unreleased() > 0 {
        parts.push(format!(
            "{} unfinished claims the store would not take back",
            report.unreleased()
        ));
    }
    let abandoned: Vec<&str> = report.abandoned().collect();
    if !abandoned.is_empty() {
        parts.push(format!(
            "lanes stopped at the deadline with store calls still running: {}",
            abandoned.join(", ")
        ));
    }
    format!(
        "shutdown incomplete: {}; those messages will be delivered again when their leases lapse",
        parts.join("; ")
    )
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
            unrecorded = drain.unrecorded,
            unreleased = drain.unreleased,
            abandoned = drain.abandoned,
            "lane stopped"
        );
    }
    if report.is_clean() {
        tracing::info!(
            completed = report.completed(),
            released = report.released(),
            "relay stopped: in-flight deliveries finished and recorded, unfinished claims released"
        );
    } else {
        tracing::error!(
            completed = report.completed(),
            released = report.released(),
            unrecorded = report.unrecorded(),
            unreleased = report.unreleased(),
            "relay stopped, but not everything was recorded: some messages will be delivered again"
        );
    }
}

/// Logs what only the daemon knows to say: a lane (re)started. Deliveries, failures and
/// dead letters are logged once, by the library, where they happen (a dead letter at WARN,
/// a delivery at DEBUG, with `lane`, `target` and `outbox_id` as separate fields): logging
/// them here too printed each twice.
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
        if let RelayEvent::LaneStarted { lane, incarnation } = event {
            tracing::info!(
                lane = %lane.name,
                target = %lane.target,
                incarnation,
                "lane started"
            );
        }
    }
}

/// Logs to stderr (stdout belongs to the log sink), filtered by `RUST_LOG` (default
/// `info`).
///
/// Without ractor's `Actor{id=… name=…}` span: ractor opens it (at INFO) around every
/// actor's loop, so every line of the library would carry an actor id that tells an
/// operator nothing; the lines name their lane and target themselves. Only that span is
/// dropped (by name and target), not ractor's own events.
fn init_logging(format: LogFormat, otlp: Option<&OtlpExport>) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;

    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let fmt = match format {
        LogFormat::Compact => fmt.compact().boxed(),
        LogFormat::Json => fmt.json().boxed(),
    };
    let no_actor_span = tracing_subscriber::filter::filter_fn(|meta| {
        !(meta.is_span() && meta.name() == "Actor" && meta.target().starts_with("ractor"))
    });
    let otel = otlp.map(|export| tracing_opentelemetry::layer().with_tracer(export.tracer()));
    // A second subscriber cannot be installed; there is only ever one here.
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(no_actor_span)
        .with(fmt)
        .with(otel)
        .try_init();
}

/// What the listener serves, for the start-up log line: every route group that is on, and
/// who may use it.
fn served_routes(routes: &RouterConfig, token: bool, open_lane_reads: bool) -> String {
    let mut parts = Vec::new();
    if routes.serves(RouteGroup::Metrics) {
        parts.push("Prometheus metrics at /metrics".to_owned());
    }
    if routes.serves(RouteGroup::Probes) {
        parts.push("/healthz and /readyz".to_owned());
    }
    if routes.serves(RouteGroup::Api) {
        let lanes = if !token || open_lane_reads {
            "open"
        } else {
            "with the token"
        };
        parts.push(format!("GET /api/v1/lanes ({lanes})"));
        parts.push(if token {
            "GET /api/v1/messages and /api/v1/messages/{id} (payloads and headers, with the token)"
                .to_owned()
        } else {
            "GET /api/v1/messages… (off: no token)".to_owned()
        });
    }
    if routes.serves(RouteGroup::Control) {
        parts.push(if token {
            "POST /api/v1/lanes/…/pause|resume and /api/v1/dead-letters/… (with the token)"
                .to_owned()
        } else {
            "POST /api/v1/… (off: no token)".to_owned()
        });
    }
    if routes.serves(RouteGroup::Ui) {
        parts.push(if token {
            "the web UI at /ui (a login with the token)".to_owned()
        } else {
            "the web UI at /ui (the lanes page only: no token)".to_owned()
        });
    }
    parts.join(", ")
}

/// SIGHUP: reads the control token again from where the listener's config says (its
/// `token_file`, rotated in place; a variable of this process cannot change) and serves
/// the new one from now on. A listener started without a token stays without one; a token
/// that cannot be read keeps the one in use, and says why.
fn reread_token(listener: &ListenerSection, tokens: &TokenSlot) {
    let Some(current) = tokens.current() else {
        return;
    };
    match listener.control_token() {
        Ok(Some(token)) if token == current => {
            tracing::info!("SIGHUP: the control token is unchanged")
        }
        Ok(Some(token)) => {
            tokens.set(token);
            tracing::info!("SIGHUP: the control token was read again and replaces the one before");
        }
        Ok(None) => {}
        Err(error) => tracing::error!(
            field = %error.field,
            reason = %error.reason,
            "SIGHUP: the control token cannot be read; the one in use stays"
        ),
    }
}

/// Serves Prometheus metrics and the health probes on `addr`, on the exporter's own thread.
fn install_metrics_exporter(
    addr: SocketAddr,
    routes: RouterConfig,
    limits: ListenerConfig,
) -> Result<(), Failure> {
    outbox_relay::http::install_prometheus_exporter_with_router(addr, routes, limits)
        .map(drop)
        .map_err(|error| {
            Failure::input(format!(
                "cannot serve metrics: {error} (set listener.address to another address, or to false for no endpoint)"
            ))
        })
}
