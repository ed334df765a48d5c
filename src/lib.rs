//! # outbox-relay
//!
//! Delivers transactional-outbox messages at least once, in order per key, under actor
//! supervision. A service writes its business rows and an outbox row in one transaction;
//! the relay claims outbox rows under a lease and hands each to its target.
//!
//! ## Example
//!
//! A handler, a store, a relay with one lane; enqueue a message and see it delivered.
//! (A service enqueues inside its own transaction: `Outbox::enqueue_in_tx` on PostgreSQL,
//! or `Outbox::begin` on SQLite.)
//!
//! ```
//! use std::time::Duration;
//! use outbox_relay::{
//!     async_trait, DeliveryError, DeliveryHandler, InMemoryOutboxStore, LaneConfig,
//!     OutboxMessage, OutboxMessageDraft, OutboxRelay, Outbox,
//! };
//! use tokio::sync::mpsc;
//!
//! struct Billing(mpsc::UnboundedSender<String>);
//!
//! #[async_trait]
//! impl DeliveryHandler for Billing {
//!     async fn deliver(&self, message: &OutboxMessage) -> Result<(), DeliveryError> {
//!         // `message.outbox_id` is the idempotency key: delivery is at least once.
//!         let order: serde_json::Value = message.payload.deserialize().map_err(DeliveryError::permanent)?;
//!         self.0.send(order["order"].to_string()).map_err(DeliveryError::retryable)
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = Outbox::new(InMemoryOutboxStore::new()); // records the store metrics
//! let (delivered, mut seen) = mpsc::unbounded_channel();
//! let relay = OutboxRelay::builder(&store)
//!     .lane(LaneConfig::new("orders", "billing"), Billing(delivered))
//!     .start()
//!     .await?;
//! store
//!     .enqueue(OutboxMessageDraft::new("orders", "billing", serde_json::json!({"order": 42}))?)
//!     .await?;
//! assert_eq!(seen.recv().await.as_deref(), Some("42"));
//! let report = relay.shutdown(Duration::from_secs(10)).await?;
//! assert!(report.is_clean());
//! # Ok(()) }
//! ```
//!
//! ## Features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `sqlite` | yes | `SqliteOutboxStore`, the embedded store (one WAL file); re-exports `outbox_relay::sqlx` |
//! | `prometheus` | yes | `metrics::prometheus_builder`: the Prometheus recorder with the dashboard's buckets |
//! | `http` | yes | `http::router` (one axum router: `/metrics`, `/healthz`, `/readyz`, `/api/v1`) and `http::install_prometheus_exporter` (adds `axum`) |
//! | `postgres` | no | `PostgresOutboxStore` (rustls TLS), enqueue inside your `sqlx` transaction; re-exports `outbox_relay::sqlx` |
//! | `mysql` | no | `MysqlOutboxStore` for MySQL 8.0.19+ and MariaDB 10.6+ (rustls TLS), enqueue inside your `sqlx` transaction; re-exports `outbox_relay::sqlx` |
//! | `file-config` | no | `config::file`: a relay described by a TOML file (adds `toml`) |
//! | `webhook-sink` | no | `sinks::webhook`: Standard Webhooks, signed (adds `reqwest`) |
//! | `nats-sink` | no | `sinks::nats`: NATS JetStream (adds `async-nats`) |
//! | `rabbitmq-sink` | no | `sinks::rabbitmq`: AMQP 0.9.1 with publisher confirms (adds `lapin`) |
//! | `redis-sink` | no | `sinks::redis`: Redis Streams (adds `redis`) |
//! | `kafka-sink` | no | `sinks::kafka`: Kafka, idempotent producer, Debezium-style routing (adds `rdkafka`, which builds librdkafka from source with cmake) |
//! | `testing` | no | `testing`: the store conformance suite for your own `OutboxBackend` |
//! | `otel` | no | W3C trace context: `enqueue` writes the caller's into the headers, the delivery span takes it as parent (adds `opentelemetry`) |
//! | `otlp` | no | `otel`, plus the binary's OTLP/HTTP export when an endpoint is configured |
//! | `cli` | no | the `outbox-relay` binary (every feature above but `testing`, plus `clap` and `tracing-subscriber`) |
//!
//! The library needs a tokio runtime (any flavour) and records metrics with the `metrics`
//! crate; it installs no exporter and no tracing subscriber of its own.
//!
//! ## sqlx
//!
//! The SQL stores are built on sqlx 0.9, re-exported as `outbox_relay::sqlx` under
//! the `sqlite` and `postgres` features: use it (or sqlx 0.9 itself) for the pool and the
//! transaction you enqueue in, since two sqlx versions do not share types. A major bump of
//! sqlx is a major bump of this crate.
//!
//! ## Layout
//!
//! - [`message`]: the draft a service writes, the stored message, its status, `ClaimRef`
//!   (a claim's message and fencing token); `message/validation.rs`: the rules a draft
//!   must pass, `DraftLimits` and `ValidationError` (the crate's one "field + reason" error);
//!   `message/payload.rs`: `Payload`, the body kept as the exact JSON text it was given.
//! - [`store`]: the state machine of a row, `StoreOp` (`store/op.rs`, the one name of a
//!   store operation) and the request and answer types; `store/backend.rs`: the
//!   `OutboxBackend` trait, the primitives a backend implements, and its `Capabilities`;
//!   `store/outbox.rs`: `Outbox`, the one store type everybody holds, which validates,
//!   plans dedupe within a batch (`store/enqueue.rs`), captures trace context, keeps the
//!   hand-off (`store/hand_off.rs`) and reports every call to its `StoreHook`s
//!   (`store/hook.rs`), so no backend does; `store/error.rs`:
//!   `StoreError` (the operation and the driver's error as its source, `sqlstate()`);
//!   `store/unreadable.rs`: what a claim does with a row it cannot read back into a message
//!   (dead-letters it alone, `ClaimBatch::unreadable`);
//!   [`store::memory`] (the reference: per-lane indexes of key heads and leases),
//!   `store::sqlite` (feature `sqlite`, the embedded default; `hot_query_plans` and
//!   `list_query_plan` show how its claims and listings read their indexes),
//!   `store::postgres` (feature `postgres`; `store/postgres/list.rs` builds a listing's SQL
//!   from its filter, `Explained::List` shows its plan; its `call.rs` is the connection of
//!   one call, a transaction of its own behind PgBouncer in transaction mode) and
//!   `store::mysql` (feature `mysql`: MySQL 8 and MariaDB, per-key heads under a key-row
//!   lock, `heads.rs`) implement it; [`store::lane_control`] is the fleet-wide pause of a
//!   lane (`LanePause`, one
//!   block of `OutboxBackend`, each backend's in its `lane_control.rs`);
//!   [`store::served`] is the record of the lanes running relays serve, and the lanes
//!   nobody serves (each backend's in its `served.rs`);
//!   [`store::key_state`] is where an ordering key stands (`KeyState`, `BlockedKeys`: the
//!   key's head, the dead letters before it; provided `OutboxBackend` methods over `list`);
//!   [`store::slow_log`] is the hook that logs a slow call by its name and duration.
//! - [`time`]: `UnixMillis`, the type of every timestamp in the API (an instant to the
//!   millisecond: `SystemTime` both ways, RFC 3339 in `Display` and JSON, saturating
//!   arithmetic with `Duration`), and the clocks a store reads (`Clock`, `SystemClock`,
//!   `ManualClock`, `TokioClock`; also at their old `store::` paths).
//! - `testing` (feature `testing`): the store conformance suite, `Harness` and the
//!   `conformance!` macro, so a backend outside the crate runs the same cases
//!   (`testing/cases/`).
//! - [`retry`]: `RetryPolicy`, exponential backoff with cap, jitter and a `Retry-After` floor
//!   (held to the lane's `retry_after_max` by `LaneCore` before it asks).
//! - [`delivery`]: the `DeliveryHandler` extension point, `DeliveryError` and its
//!   `FailureKind`, `handler_fn` (a handler from a closure) and `DeliveryResultExt`.
//! - [`sinks`]: ready-made handlers and `SinkConfig`, a lane's `sink` table, built async
//!   and fallibly: `sinks::log` (always), `sinks::webhook`, `sinks::nats`,
//!   `sinks::rabbitmq`, `sinks::redis`, `sinks::kafka` (one feature each: `webhook-sink`,
//!   `nats-sink`, `rabbitmq-sink`, `redis-sink`, `kafka-sink`), and `sinks::template`
//!   (destinations over lane, target, headers and payload fields).
//! - [`config`]: `LaneConfig` and `SupervisorConfig`, defaults as named consts, `validate()`,
//!   the gates' `RateLimit` and `CircuitBreakerConfig`, the listener's `ListenerConfig` and
//!   `ControlToken` (`config/listener.rs`);
//!   `config::duration` (`30s`-style durations) and `config::file` (feature `file-config`:
//!   the relay as a TOML file, as the binary reads it; `config/file/env.rs` its settings
//!   from `OUTBOX_…` variables, `ENV_SETTINGS`).
//! - [`relay`]: the builder and `RelayHandle`, the public face of the actor system, and
//!   `LaneState`; `relay/event.rs` (`RelayEvent`) and `relay/status.rs` (`LaneStatus` and
//!   the counters behind it);
//!   `relay::supervisor` (restarts lanes; `supervisor/fleet.rs`: a lane's process-local
//!   and fleet-wide pauses, apart), `relay/lane_control.rs` (the watcher that reads the
//!   store's lane pauses every 500 ms and hands changes to the supervisor),
//!   `relay/upkeep.rs` (retention passes and the served-lanes record and report, beside
//!   the lanes), `relay::lane`
//!   (the lane actor, `LaneShell`: glue that runs store calls off its mailbox),
//!   `relay::lane::core` (`LaneCore`, the lane's logic as a sans-IO state machine:
//!   `ClaimLoop` (when to claim, ask `next_due` or sleep), handler pool, lease book,
//!   prefetch buffer, pending acks, and its claim gates: rate limit, circuit breaker,
//!   Retry-After hold; one store-call, one timer and one delivery mechanism in
//!   `core/io.rs`),
//!   `relay::handler` (one delivery at a time under a timeout).
//! - `sim` (tests, and feature `simulate`): the deterministic simulation of several relays
//!   on one store in virtual time, its invariant checker, and (tests only) the seed runs
//!   and the mutations it must catch.
//! - `simulate` (feature `simulate`, in `cli`): one lane's real settings against a stated
//!   load and target on that simulation, for `outbox-relay simulate`.
//! - [`metrics`]: metric names and labels as consts (label values are the domain's
//!   `FailureKind`, `LaneState`, `BreakerState`, `GateKind` and `StoreOp`; the three lane
//!   ones live in `lane_state.rs`, apart from `relay`, which `metrics` never imports), `describe()`,
//!   `record_store_call` (what every `Outbox` records of its calls), `LaneMetrics` (the
//!   relay's recording helpers, with `StoreCallTimer` for store call durations),
//!   `metrics::process` (`outbox_build_info` and the `process_*` catalogue; `build.rs`
//!   stamps the git commit), `metrics::kafka` (feature `kafka-sink`: the Kafka sink's
//!   `outbox_kafka_*`, recorded by `sinks/kafka/statistics.rs` from the sink and
//!   librdkafka's statistics) and, with feature `prometheus`, the recorder's buckets
//!   (`metrics/prometheus.rs`).
//! - `http` (feature `http`): one axum router for every route, to mount in a service's
//!   own server (`http::router`, `RouterConfig`, `RouteGroup`); `http/health.rs` (the
//!   probes and the readiness check, run at most once a second), `http/api.rs` (`GET
//!   /api/v1/lanes`, the JSON error shape), `http/control.rs` (`RelaySlot`, the bearer
//!   token, the fleet-wide `pause|resume` routes), `http/messages.rs` (`GET
//!   /api/v1/messages`, `GET /api/v1/messages/{id}`, `POST /api/v1/dead-letters/…`),
//!   `http::ui` (the web UI at `/ui`: `ui/session.rs` the login, CSRF and Host checks,
//!   `ui/throughput.rs` the last hour's chart, one file per page group, `ui/assets/` the
//!   stylesheet and script compiled in), `http/listener.rs` (the connections:
//!   header-read and idle timeouts, a connection cap) and `http/exporter.rs`
//!   (`install_prometheus_exporter`: the global recorder, the process metrics and the
//!   router on a thread of their own).
//!   `src/named.rs` (private) holds `label_values!`, the macro that makes those fixed sets.
//! - [`trace_context`]: W3C trace context in message headers (feature `otel`): captured
//!   at enqueue, the delivery span's parent.
//! - [`retention`]: automatic retention: `RetentionConfig` (per-lane ages of delivered
//!   messages and dead letters, defaults as consts; a `Block` lane's keyed dead letters are
//!   kept) and `RetentionTask`, one pass that purges them in bounded batches, which every
//!   relay runs beside its lanes (`relay/upkeep.rs`).
//! - [`database`]: `DatabaseUrl` (`sqlite:…` or `postgres://…`) and `open_store`, which
//!   opens the store a URL names; `database/postgres.rs`: `PostgresOptions` (the pool and
//!   session settings of `[postgres]`) and `Pooler` (direct, or PgBouncer's transaction
//!   mode); `database/migrations.rs`: `schema_state` and
//!   `migration_sql` (`migrate --check` and `--print-sql`). The PostgreSQL migrations are
//!   in `store/postgres/schema.rs` (how to add one), run by `schema/run.rs` and rendered
//!   for DBAs by `schema/script.rs`; `schema/producer.rs` is the `{prefix}_enqueue`
//!   function. `migrations/` holds the SQL of both stores as checked-in files.
//! - `src/redact.rs` (private): `redact`, which keeps credentials (user info, query
//!   values) out of every URL the crate prints: database and sink URLs alike.
//! - `src/bin/outbox-relay/`: the binary (feature `cli`): the daemon (`run`,
//!   `daemon.rs`) and the admin commands (`admin.rs`: `status`, `enqueue`, `dead-letters`,
//!   `purge`, `migrate`), `pause` and `resume` (`control.rs`: the fleet-wide pause, in the
//!   store), the SIGHUP reload (`reload.rs`), the OTLP export (`otlp.rs`) and the GATES
//!   column of `status` (`gates.rs`, from the daemon's `GET /api/v1/lanes`).
//!
//! Beside `src/`:
//!
//! - `grafana/`: the dashboard, the Prometheus alert rules and their `promtool` tests.
//! - `deploy/kubernetes/`: Deployment, ConfigMap, Service, ServiceMonitor and the
//!   PrometheusRule generated from `grafana/alerts.yml`.
//! - `examples/`: `quickstart.rs` (an order service and its relay on SQLite, the README's
//!   first command), `service.rs` (a service mounting `http::router` beside its own route), `relay.toml` (the binary's config, every field), `claim_plans.rs`
//!   (the PostgreSQL claim's, `next_due`'s and stats' plans and timings at 10 k–1 M rows,
//!   and a relay cycle's server cost per message, keyed against keyless, beside its layout
//!   floor), `benchmark/` (the benchmark: `main.rs` and its modules; `throughput.svg`, the
//!   README's plot; `HISTORY.md`, dated results, design decisions and what was rejected;
//!   `callgrind.sh`, a PostgreSQL cycle's backend instructions per build) and
//!   `readme-crate/` (the README's embedding snippet as a crate of its own).
//! - `tests/`: the conformance suite per backend (`conformance/`), relay scenarios
//!   (`relay/`), store-specific tests (`sqlite.rs`, `postgres.rs`, `postgres_tls.rs` with
//!   its own `ssl=on` cluster; `support/pgbouncer.rs` starts a private PgBouncer), monitoring (`relay_metrics.rs`, `store_metrics.rs`,
//!   `grafana_assets.rs`, `prometheus_e2e.rs` against a real Prometheus,
//!   `kubernetes_assets.rs` for `deploy/kubernetes/`), the binary end to
//!   end (`cli.rs`, `cli/`), faults injected for real (`chaos.rs`: a relay process killed,
//!   PostgreSQL cut away and restored, a fleet-wide pause across three relay processes
//!   and their restarts), every sink against its real server (`sinks/`), one
//!   trace from enqueue to delivery (`otel.rs`), the README kept equal to its crate
//!   (`readme_crate.rs`) and `.ci/run`'s rules (`ci_script.rs`).
#![deny(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]
#![forbid(unsafe_code)]
// docs.rs builds with `--cfg docsrs` on nightly: each feature-gated item then shows the
// feature it needs (`doc(cfg)`, not yet stable).
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(test)]
mod captured_log;
pub mod config;
pub mod database;
pub mod delivery;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod http;
mod lane_state;
pub mod message;
pub mod metrics;
mod named;
mod redact;
pub mod relay;
pub mod retention;
pub mod retry;
#[cfg(any(test, feature = "simulate"))]
mod sim;
#[cfg(feature = "simulate")]
#[cfg_attr(docsrs, doc(cfg(feature = "simulate")))]
pub mod simulate;
pub mod sinks;
pub mod store;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
pub mod time;

/// The attribute that implements [`DeliveryHandler`] (and [`OutboxBackend`]), re-exported so a
/// service needs no `async-trait` line of its own.
pub use async_trait::async_trait;
/// The sqlx this crate is built on (0.9), for the pools and transactions a service enqueues
/// in; the crate docs (section "sqlx") state the version policy.
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
#[cfg_attr(
    docsrs,
    doc(cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql")))
)]
pub use sqlx;
pub mod trace_context;

pub use config::{LaneConfig, SupervisorConfig};
pub use delivery::{handler_fn, DeliveryError, DeliveryHandler, DeliveryResultExt};
pub use message::{OutboxMessage, OutboxMessageDraft, OutboxStatus, ValidationError};
pub use relay::{OutboxRelay, RelayEvent, RelayHandle};
pub use retry::RetryPolicy;
pub use store::memory::InMemoryOutboxStore;
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub use store::mysql::MysqlOutboxStore;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use store::postgres::PostgresOutboxStore;
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use store::sqlite::SqliteOutboxStore;
pub use store::{OrderingPolicy, Outbox, OutboxBackend, StoreError};

/// The README's examples, compiled as doc-tests so the front door stays true.
#[cfg(all(doctest, feature = "sqlite", feature = "postgres", feature = "http"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
