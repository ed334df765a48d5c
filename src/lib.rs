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
//! ## The main types
//!
//! - [`Outbox`]: the store a service enqueues through and the relay claims from, over a
//!   backend: `SqliteOutboxStore` (the embedded default), `PostgresOutboxStore`,
//!   `MysqlOutboxStore` or [`InMemoryOutboxStore`]. `Outbox::enqueue_in_tx` writes inside
//!   your transaction (PostgreSQL, MySQL); `Outbox::begin` opens one on SQLite.
//! - [`OutboxMessageDraft`] (what you write) and [`OutboxMessage`] (what a handler gets).
//! - [`DeliveryHandler`] and [`DeliveryError`]: your delivery code, or a ready-made
//!   [`sinks`] handler (webhook, Kafka, NATS JetStream, RabbitMQ, Redis Streams; a feature
//!   each).
//! - [`OutboxRelay::builder`], [`LaneConfig`] and [`RelayHandle`]: lanes started, changed,
//!   paused, watched ([`RelayEvent`]) and shut down at run time.
//! - [`metrics`]: the metric names (every `Outbox` records the store's); `http` (feature
//!   `http`): the router for `/metrics`, the probes, the JSON API and the web UI.
//!
//! The library needs a tokio runtime (any flavour) and records metrics with the `metrics`
//! crate; it installs no exporter and no tracing subscriber of its own. The SQL stores are
//! built on sqlx 0.9, re-exported as `outbox_relay::sqlx`: use it for the pool and the
//! transactions you enqueue in, since two sqlx versions do not share types (a major bump of
//! sqlx is a major bump of this crate). Features: `sqlite`, `prometheus` and `http` by
//! default; `postgres`, `mysql`, a sink's (`webhook-sink`, …), `file-config`, `otel`,
//! `otlp`, `testing`, `plans`, and `cli` for the binary.
//!
//! ## Components
//!
//! - [`message`]: drafts, stored messages, the payload as exact JSON text, validation.
//! - [`store`]: the row's state machine; [`OutboxBackend`], the primitives a backend
//!   implements; [`Outbox`], which validates, plans dedupe, captures trace context, hands
//!   off to idle lanes and reports every call to its hooks; the backends.
//! - [`relay`]: the builder and [`RelayHandle`]; the supervisor, the lane actors around the
//!   pure `LaneCore` (claims, leases, acks, claim gates) and the handler actors.
//! - [`delivery`], [`retry`], [`sinks`]: handlers, their errors, backoff, ready-made sinks.
//! - [`config`]: lane and supervisor settings, defaults as named constants, `validate()`;
//!   `config::file` (feature `file-config`) the TOML file the binary reads.
//! - [`metrics`], `http`, [`trace_context`]: what the relay exports and serves.
//! - [`retention`], [`database`], [`time`]: purging, opening a store by URL, timestamps.
//! - `testing` (feature `testing`): the conformance suite for a backend of your own.
//!
//! The user guide (`docs/` in the repository, an mdBook) has the rest: getting started on
//! PostgreSQL, embedding, the daemon and its configuration, sinks, operations, migrations
//! for DBAs, guarantees and how they are tested, the architecture, and the benchmark.
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
mod lane;
pub mod message;
pub mod metrics;
mod mutation;
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
#[cfg(any(feature = "webhook-sink", feature = "otlp"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "webhook-sink", feature = "otlp"))))]
pub mod tls;

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

/// The Rust snippets of the README and the user guide, compiled as doc tests, so what a
/// reader copies builds (`tests/docs.rs` checks that every page with a snippet is here).
#[cfg(all(doctest, feature = "sqlite", feature = "postgres", feature = "http"))]
mod docs {
    #[doc = include_str!("../README.md")]
    struct Readme;
    #[doc = include_str!("../docs/src/getting-started.md")]
    struct GettingStarted;
    #[doc = include_str!("../docs/src/embedding.md")]
    struct Embedding;
    #[doc = include_str!("../docs/src/operations/metrics.md")]
    struct Metrics;
    #[doc = include_str!("../docs/src/operations/dashboard.md")]
    struct Dashboard;
}
