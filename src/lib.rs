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
//!   [`store::memory`], `store::sqlite` (feature `sqlite`, the embedded default) and
//!   `store::postgres` (feature `postgres`) implement it.
//! - [`retry`]: `RetryPolicy`, exponential backoff with cap, jitter and a `Retry-After` floor.
//! - [`delivery`]: the `DeliveryHandler` extension point and `DeliveryError`.
//! - [`sinks`]: ready-made handlers (`LogSink`) and `SinkConfig`, a lane's `sink` table.
//! - [`relay`]: the builder and `RelayHandle`, the public face of the supervised actors.
//! - [`config`]: `LaneConfig` and `SupervisorConfig` with their defaults and `validate()`;
//!   `config::duration` (`30s`-style durations) and `config::file` (feature `file-config`:
//!   the relay as a TOML file, as the binary reads it).
//! - [`database`]: `DatabaseUrl` (`sqlite:…` or `postgres://…`) and `open_store`, which
//!   opens the store a URL names.
//! - [`metrics`]: metric names.
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
pub use store::{OrderingPolicy, OutboxStore, StoreError};
