//! # outbox-relay
//!
//! Delivers transactional-outbox messages at least once, in order per key, under actor
//! supervision. A service writes its business rows and an outbox row in one transaction;
//! the relay claims outbox rows under a lease and hands each to its target.
//!
//! ## Layout
//!
//! - [`message`]: the draft a service writes, the stored message, its status, validation.
//! - [`store`]: the `OutboxStore` contract and the state machine of a row;
//!   [`store::memory`] (the reference: per-lane indexes of key heads and leases),
//!   `store::sqlite` (feature `sqlite`, the embedded default; `hot_query_plans` shows how
//!   its claims read their indexes) and `store::postgres` (feature `postgres`) implement it.
//! - [`retry`]: `RetryPolicy`, exponential backoff with cap, jitter and a `Retry-After` floor.
//! - [`delivery`]: the `DeliveryHandler` extension point and `DeliveryError`.
//! - [`sinks`]: ready-made handlers (`LogSink`) and `SinkConfig`, a lane's `sink` table.
//! - [`config`]: `LaneConfig` and `SupervisorConfig`, defaults as named consts, `validate()`;
//!   `config::duration` (`30s`-style durations) and `config::file` (feature `file-config`:
//!   the relay as a TOML file, as the binary reads it).
//! - [`relay`]: the builder and `RelayHandle`, the public face of the actor system:
//!   `relay::supervisor` (restarts lanes), `relay::lane` (claims, lease timers, batched
//!   acks), `relay::handler` (one delivery at a time under a timeout).
//! - [`metrics`]: metric names and labels as consts, `describe()`, `LaneMetrics` (the
//!   relay's recording helpers) and, with feature `prometheus`, the exporter install.
//! - [`database`]: `DatabaseUrl` (`sqlite:…` or `postgres://…`) and `open_store`, which
//!   opens the store a URL names.
//! - `src/bin/outbox-relay/`: the binary (feature `cli`): the daemon (`run`) and the admin
//!   commands (`status`, `enqueue`, `dead-letters`, `purge`).
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
pub mod retry;
pub mod sinks;
pub mod store;

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
