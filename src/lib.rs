//! # outbox-relay
//!
//! Delivers transactional-outbox messages at least once, in order per key, under actor
//! supervision. A service writes its business rows and an outbox row in one transaction;
//! the relay claims outbox rows under a lease and hands each to its target.
//!
//! ## Layout
//!
//! - [`message`]: the draft a service writes, the stored message, its status, validation;
//!   `message/payload.rs`: `Payload`, the body kept as the exact JSON text it was given.
//! - [`store`]: the `OutboxStore` contract and the state machine of a row;
//!   [`store::memory`] (the reference: per-lane indexes of key heads and leases),
//!   `store::sqlite` (feature `sqlite`, the embedded default; `hot_query_plans` shows how
//!   its claims read their indexes) and `store::postgres` (feature `postgres`) implement
//!   it; [`store::slow_log`] wraps any of them to log a slow call by its name and duration.
//! - [`retry`]: `RetryPolicy`, exponential backoff with cap, jitter and a `Retry-After` floor.
//! - [`delivery`]: the `DeliveryHandler` extension point and `DeliveryError`.
//! - [`sinks`]: ready-made handlers and `SinkConfig`, a lane's `sink` table, built async
//!   and fallibly: `sinks::log` (always), `sinks::webhook`, `sinks::nats`,
//!   `sinks::rabbitmq`, `sinks::redis` (one feature each: `webhook-sink`, `nats-sink`,
//!   `rabbitmq-sink`, `redis-sink`), and `sinks::template` (destinations over lane, target
//!   and headers).
//! - [`config`]: `LaneConfig` and `SupervisorConfig`, defaults as named consts, `validate()`,
//!   the gates' `RateLimit` and `CircuitBreakerConfig`;
//!   `config::duration` (`30s`-style durations) and `config::file` (feature `file-config`:
//!   the relay as a TOML file, as the binary reads it).
//! - [`relay`]: the builder and `RelayHandle`, the public face of the actor system:
//!   `relay::supervisor` (restarts lanes), `relay::lane` (the lane actor: glue that runs
//!   store calls off its mailbox), `relay::lane::core` (`LaneCore`, the lane's logic as a
//!   sans-IO state machine: handler pool, lease book, prefetch buffer, pending acks, and
//!   its claim gates: rate limit, circuit breaker, Retry-After hold),
//!   `relay::handler` (one delivery at a time under a timeout).
//! - [`metrics`]: metric names and labels as consts, `describe()`, `LaneMetrics` (the
//!   relay's recording helpers) and, with feature `prometheus`, the exporter install and
//!   `metrics::health` (the listener's `/metrics`, `/healthz` and `/readyz`) and
//!   `metrics::control` (its `/lanes/…/pause|resume`).
//! - [`trace_context`]: W3C trace context in message headers (feature `otel`): captured
//!   at enqueue, the delivery span's parent.
//! - [`retention`]: automatic retention: `RetentionConfig` (per-lane ages of delivered
//!   messages and dead letters, defaults as consts) and `RetentionTask`, which purges
//!   them in bounded batches apart from the lanes.
//! - [`database`]: `DatabaseUrl` (`sqlite:…` or `postgres://…`) and `open_store`, which
//!   opens the store a URL names; `database/redact.rs` keeps passwords out of every
//!   printed URL.
//! - `src/bin/outbox-relay/`: the binary (feature `cli`): the daemon (`run`) and the admin
//!   commands (`status`, `enqueue`, `dead-letters`, `purge`, `migrate`), `pause` and
//!   `resume` of a running daemon, and the SIGHUP reload (`reload.rs`).
#![deny(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]
#![forbid(unsafe_code)]

pub mod config;
pub mod database;
pub mod delivery;
pub mod message;
pub mod metrics;
pub mod relay;
pub mod retention;
pub mod retry;
pub mod sinks;
pub mod store;
pub mod trace_context;

pub use config::{LaneConfig, SupervisorConfig};
pub use delivery::{DeliveryError, DeliveryHandler};
pub use message::{OutboxMessage, OutboxMessageDraft, OutboxStatus};
pub use relay::{OutboxRelay, RelayEvent, RelayHandle};
pub use retry::RetryPolicy;
pub use store::memory::InMemoryOutboxStore;
#[cfg(feature = "postgres")]
pub use store::postgres::PostgresOutboxStore;
#[cfg(feature = "sqlite")]
pub use store::sqlite::SqliteOutboxStore;
pub use store::{OrderingPolicy, OutboxStore, StoreError};

/// The README's examples, compiled as doc-tests so the front door stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
