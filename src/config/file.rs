//! The relay as a TOML file: the database, the metrics address, the restart policy and the
//! lanes with their sinks. `examples/relay.toml` documents every field; [`EMBEDDED_DEFAULT`]
//! is what the binary runs without a file.
//!
//! Every table refuses unknown keys, so a misspelt field is an error, not a silent default.
//! Durations are strings such as `"250ms"`, `"30s"`, `"5m"`, `"1h"` (see [`super::duration`]).
//! The database URL may come from the `OUTBOX_DATABASE_URL` environment variable instead
//! (the binary gives it precedence), so a password need not sit in the file.
//!
//! ```
//! use outbox_relay::config::file::FileConfig;
//!
//! let config = FileConfig::from_toml_str("relay.toml", r#"
//!     database_url = "sqlite:relay.db"
//!     [[lanes]]
//!     lane = "orders"
//!     target = "audit"
//!     lease = "10s"
//!     sink = { kind = "log" }
//! "#)?;
//! let lanes = config.lanes()?;
//! assert_eq!(lanes[0].0.lease, std::time::Duration::from_secs(10));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::duration::HumanDuration;
use super::{default_consumer_id, ConfigError, LaneConfig, SupervisorConfig};
use crate::database::{DatabaseUrl, StoreOptions, DEFAULT_CONNECT_TIMEOUT};
use crate::relay::LaneKey;
use crate::retention::RetentionConfig;
use crate::retry::RetryPolicy;
use crate::sinks::SinkConfig;
use crate::store::OrderingPolicy;

/// The database used when neither the file, the flag nor the environment names one: the
/// file `outbox.db` in the working directory.
pub const DEFAULT_DATABASE_URL: &str = "sqlite:outbox.db";
/// The address the Prometheus endpoint listens on unless configured otherwise.
pub const DEFAULT_METRICS_LISTEN: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::LOCALHOST,
    9464,
));
/// How long a graceful shutdown lets deliveries finish before releasing their claims.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

/// What the binary runs without `--config`: the SQLite file `./outbox.db`, and one lane,
/// `default`, delivered to target `log` by the log sink (JSON lines on stdout).
///
/// The lane polls every second, not every five: SQLite wake-ups reach only the process that
/// enqueued, and with this config messages usually come from another process (`enqueue`,
/// or a service writing the same file).
pub const EMBEDDED_DEFAULT: &str = r#"
database_url = "sqlite:outbox.db"

[[lanes]]
lane = "default"
target = "log"
max_poll_interval = "1s"
sink = { kind = "log" }
"#;

/// A relay config file, as written. Every field but `lanes` has a default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// `sqlite:PATH`, `sqlite://PATH` or `postgres://…`. Default [`DEFAULT_DATABASE_URL`].
    #[serde(default)]
    pub database_url: Option<String>,
    /// The outbox tables' name prefix; the store's default when absent.
    #[serde(default)]
    pub table_prefix: Option<String>,
    /// The PostgreSQL schema; the store's default (`public`) when absent. Not for SQLite.
    #[serde(default)]
    pub schema: Option<String>,
    /// How long to keep trying to reach the database at start. Default 10s.
    #[serde(default)]
    pub connect_timeout: Option<HumanDuration>,
    /// Where the Prometheus endpoint listens, or `false` for none. Default 127.0.0.1:9464.
    #[serde(default)]
    pub metrics_listen: MetricsListen,
    /// How long a graceful shutdown lets deliveries finish. Default 30s.
    #[serde(default)]
    pub shutdown_timeout: Option<HumanDuration>,
    /// Written to `claimed_by` by every lane. Default `<host>-<pid>`.
    #[serde(default)]
    pub consumer_id: Option<String>,
    /// How crashed lanes are restarted.
    #[serde(default)]
    pub supervisor: SupervisorSection,
    /// The lanes: at least one.
    #[serde(default)]
    pub lanes: Vec<LaneSection>,
    /// Where the binary exports its spans over OTLP/HTTP (protobuf, plain HTTP), e.g.
    /// `http://127.0.0.1:4318` (`/v1/traces` is appended). Default: none, unless the
    /// environment names one (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`); without either, nothing is exported.
    #[serde(default)]
    pub otlp_endpoint: Option<String>,
}

/// Where the Prometheus endpoint listens: an address, or `false` for no endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsListen {
    /// Serve on this address.
    Listen(SocketAddr),
    /// No endpoint (metrics are still recorded, for an embedding application's recorder).
    Off,
}

impl Default for MetricsListen {
    fn default() -> Self {
        MetricsListen::Listen(DEFAULT_METRICS_LISTEN)
    }
}

impl std::str::FromStr for MetricsListen {
    type Err = String;

    /// An address such as `127.0.0.1:9464`, or `off` / `false`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "off" | "false" => Ok(MetricsListen::Off),
            addr => addr.parse().map(MetricsListen::Listen).map_err(|_| {
                format!("{addr:?} is not an address such as 127.0.0.1:9464 (or `off`)")
            }),
        }
    }
}

impl fmt::Display for MetricsListen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetricsListen::Listen(addr) => write!(f, "{addr}"),
            MetricsListen::Off => f.write_str("off"),
        }
    }
}

impl Serialize for MetricsListen {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            MetricsListen::Listen(addr) => serializer.collect_str(addr),
            MetricsListen::Off => serializer.serialize_bool(false),
        }
    }
}

impl<'de> Deserialize<'de> for MetricsListen {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = MetricsListen;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an address such as \"127.0.0.1:9464\", or false")
            }

            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<MetricsListen, E> {
                Ok(if v {
                    MetricsListen::default()
                } else {
                    MetricsListen::Off
                })
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<MetricsListen, E> {
                v.parse::<SocketAddr>()
                    .map(MetricsListen::Listen)
                    .map_err(|_| E::custom(format!("{v:?} is not an address such as \"127.0.0.1:9464\" (write false for no endpoint)")))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// `lease_extend_margin`: a duration, or `false` to turn lease extension off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtendMargin {
    /// Extend a running delivery's lease when this little of it is left.
    Margin(Duration),
    /// Never extend: a slow delivery lapses and may be redelivered elsewhere.
    Off,
}

impl Serialize for ExtendMargin {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            ExtendMargin::Margin(margin) => HumanDuration(*margin).serialize(serializer),
            ExtendMargin::Off => serializer.serialize_bool(false),
        }
    }
}

impl<'de> Deserialize<'de> for ExtendMargin {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = ExtendMargin;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as \"10s\", or false")
            }

            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<ExtendMargin, E> {
                if v {
                    Err(E::custom(
                        "write a duration such as \"10s\", or false to turn extension off",
                    ))
                } else {
                    Ok(ExtendMargin::Off)
                }
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ExtendMargin, E> {
                super::duration::parse_duration(v)
                    .map(ExtendMargin::Margin)
                    .map_err(E::custom)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// `[supervisor]`: how crashed lanes are restarted. Absent fields keep their defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SupervisorSection {
    /// Restarts allowed within `restart_window` before the lane is marked failed. Default 5.
    pub max_restarts: Option<u32>,
    /// The window restarts are counted in. Default 60s.
    pub restart_window: Option<HumanDuration>,
    /// The first wait before a restart; doubles per restart in the window. Default 100ms.
    pub restart_backoff: Option<HumanDuration>,
    /// The longest wait before a restart. Default 30s.
    pub restart_backoff_max: Option<HumanDuration>,
}

impl SupervisorSection {
    /// The supervisor config, defaults filled in.
    pub fn to_config(&self) -> SupervisorConfig {
        let mut config = SupervisorConfig::default();
        if let Some(n) = self.max_restarts {
            config.max_restarts = n;
        }
        if let Some(window) = self.restart_window {
            config.restart_window = window.0;
        }
        if let Some(base) = self.restart_backoff {
            config.restart_backoff.base = base.0;
        }
        if let Some(max) = self.restart_backoff_max {
            config.restart_backoff.max = max.0;
        }
        config
    }
}

/// One `[[lanes]]` entry: a (lane, target) and the sink that delivers it. Absent fields
/// take [`LaneConfig::new`]'s defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaneSection {
    /// The lane.
    pub lane: String,
    /// The target.
    pub target: String,
    /// Deliveries in flight at once.
    pub concurrency: Option<usize>,
    /// The most messages one claim takes.
    pub batch_size: Option<usize>,
    /// Claimed messages kept waiting for a free handler. Default: the concurrency.
    pub prefetch: Option<usize>,
    /// How long a claim may wait for running handlers to finish. Default 500µs.
    pub claim_linger: Option<HumanDuration>,
    /// The most messages of one ordering key a claim takes at once (1: heads only).
    /// Default 16.
    pub key_run: Option<usize>,
    /// How long a claim holds.
    pub lease: Option<HumanDuration>,
    /// Extend a running delivery's lease when this little is left, or `false`. Default a
    /// third of the lease.
    pub lease_extend_margin: Option<ExtendMargin>,
    /// How long one delivery may run.
    pub delivery_timeout: Option<HumanDuration>,
    /// The delay after the first failed attempt.
    pub retry_base: Option<HumanDuration>,
    /// The longest delay between attempts.
    pub retry_max: Option<HumanDuration>,
    /// Draw each retry delay at random below the backoff. Default true.
    pub jitter: Option<bool>,
    /// `skip` or `block`: what a dead-lettered head does to its ordering key.
    pub ordering: Option<OrderingPolicy>,
    /// The longest an idle lane sleeps before looking at the store again.
    pub max_poll_interval: Option<HumanDuration>,
    /// How often backlog gauges are sampled from the store.
    pub stats_interval: Option<HumanDuration>,
    /// The first wait after a store error (doubling per further error).
    pub store_backoff: Option<HumanDuration>,
    /// The longest wait after repeated store errors.
    pub store_backoff_max: Option<HumanDuration>,
    /// Claim at most this fast, e.g. `"200/s"`, `"30/m"`, `"5/10s"`. Default: no limit.
    pub rate_limit: Option<RateSpec>,
    /// The rate limit's burst (the bucket's size). Default: the rate's count.
    pub rate_burst: Option<u32>,
    /// A circuit breaker: `{ consecutive_failures = 5, cool_down = "30s", … }`. Default:
    /// none.
    pub breaker: Option<BreakerSection>,
    /// A target's Retry-After holds the whole lane (capped at `retry_max`). Default false.
    pub retry_after_holds_lane: Option<bool>,
    /// Take what this process enqueues through the relay's store without a claim
    /// (PostgreSQL; embedded relays). Default true.
    pub hand_off: Option<bool>,
    /// How long finished messages are kept, e.g. `{ delivered = "7d", dead_letter = "30d" }`.
    /// Absent ages take [`DEFAULT_DELIVERED_RETENTION`](crate::retention::DEFAULT_DELIVERED_RETENTION)
    /// and [`DEFAULT_DEAD_LETTER_RETENTION`](crate::retention::DEFAULT_DEAD_LETTER_RETENTION).
    #[serde(default)]
    pub retention: Option<RetentionSection>,
    /// What delivers the lane's messages.
    pub sink: SinkConfig,
}

/// A lane's `retention` table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionSection {
    /// How long delivered messages are kept.
    pub delivered: Option<HumanDuration>,
    /// How long dead letters are kept.
    pub dead_letter: Option<HumanDuration>,
}

impl RetentionSection {
    /// The retention, defaults filled in (not yet validated).
    pub fn to_config(&self) -> RetentionConfig {
        let defaults = RetentionConfig::default();
        RetentionConfig {
            delivered: self.delivered.map(|age| age.0).or(defaults.delivered),
            dead_letter: self.dead_letter.map(|age| age.0).or(defaults.dead_letter),
        }
    }
}

impl LaneSection {
    /// The lane config, defaults filled in (not yet validated).
    pub fn to_config(&self, consumer_id: &str) -> LaneConfig {
        let mut config = LaneConfig::new(&self.lane, &self.target).consumer_id(consumer_id);
        let set = |value: Option<usize>, slot: &mut usize| {
            if let Some(value) = value {
                *slot = value;
            }
        };
        if let Some(concurrency) = self.concurrency {
            // Also sets the prefetch to match, unless given below.
            config = config.concurrency(concurrency);
        }
        set(self.batch_size, &mut config.batch_size);
        set(self.prefetch, &mut config.prefetch);
        set(self.key_run, &mut config.key_run);
        if let Some(lease) = self.lease {
            config = config.lease(lease.0);
        }
        match self.lease_extend_margin {
            Some(ExtendMargin::Margin(margin)) => config.lease_extend_margin = Some(margin),
            Some(ExtendMargin::Off) => config.lease_extend_margin = None,
            None => {}
        }
        let durations = [
            (self.delivery_timeout, &mut config.delivery_timeout),
            (self.retry_base, &mut config.retry.base),
            (self.retry_max, &mut config.retry.max),
            (self.max_poll_interval, &mut config.max_poll_interval),
            (self.claim_linger, &mut config.claim_linger),
            (self.stats_interval, &mut config.stats_interval),
            (self.store_backoff, &mut config.store_backoff.base),
            (self.store_backoff_max, &mut config.store_backoff.max),
        ];
        for (value, slot) in durations {
            if let Some(value) = value {
                *slot = value.0;
            }
        }
        if let Some(jitter) = self.jitter {
            config.retry = RetryPolicy {
                jitter,
                ..config.retry
            };
        }
        if let Some(ordering) = self.ordering {
            config.ordering = ordering;
        }
        config.rate_limit = self.rate_limit.map(|spec| match self.rate_burst {
            Some(burst) => spec.0.burst(burst),
            None => spec.0,
        });
        config.circuit_breaker = self.breaker.map(|section| section.to_config());
        if let Some(hold) = self.retry_after_holds_lane {
            config.retry_after_holds_lane = hold;
        }
        if let Some(hand_off) = self.hand_off {
            config.hand_off = hand_off;
        }
        config
    }
}

/// A config file that could not be used. It names the file, and the field and position when
/// known; the binary prints it and exits with code 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileConfigError {
    origin: String,
    line: Option<usize>,
    column: Option<usize>,
    field: Option<String>,
    message: String,
}

impl FileConfigError {
    fn new(origin: &str, field: Option<String>, message: impl Into<String>) -> Self {
        Self {
            origin: origin.to_owned(),
            line: None,
            column: None,
            field,
            message: message.into(),
        }
    }

    /// The file (or `embedded default`).
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The field at fault, when known (e.g. `lease`, `lanes[orders/billing].concurrency`).
    pub fn field(&self) -> Option<&str> {
        self.field.as_deref()
    }

    /// The 1-based line and column, when the TOML parser gave a position.
    pub fn position(&self) -> Option<(usize, usize)> {
        self.line.zip(self.column)
    }

    /// What is wrong.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for FileConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.origin)?;
        if let Some((line, column)) = self.position() {
            write!(f, ", line {line}, column {column}")?;
        }
        if let Some(field) = &self.field {
            write!(f, ", field `{field}`")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for FileConfigError {}

impl FileConfig {
    /// Reads, parses and validates the file at `path`.
    pub fn load(path: &Path) -> Result<Self, FileConfigError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|error| {
            FileConfigError::new(&origin, None, format!("cannot read the file: {error}"))
        })?;
        Self::from_toml_str(&origin, &text)
    }

    /// The built-in config: see [`EMBEDDED_DEFAULT`].
    pub fn embedded_default() -> Result<Self, FileConfigError> {
        Self::from_toml_str("embedded default config", EMBEDDED_DEFAULT)
    }

    /// Parses and validates TOML `text`; `origin` names it in errors.
    pub fn from_toml_str(origin: &str, text: &str) -> Result<Self, FileConfigError> {
        let config: FileConfig =
            toml::from_str(text).map_err(|error| parse_error(origin, text, &error))?;
        config
            .validate()
            .map_err(|error| FileConfigError::new(origin, Some(error.field), error.reason))?;
        Ok(config)
    }

    /// Checks everything that can be checked without the database; the error names the
    /// field at fault.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.database_url()
            .map_err(|error| ConfigError::new("database_url", error.to_string()))?;
        if self.lanes.is_empty() {
            return Err(ConfigError::new(
                "lanes",
                "at least one [[lanes]] entry is required",
            ));
        }
        if self.shutdown_timeout().is_zero() {
            return Err(ConfigError::new(
                "shutdown_timeout",
                "must be greater than zero",
            ));
        }
        if self.connect_timeout().is_zero() {
            return Err(ConfigError::new(
                "connect_timeout",
                "must be greater than zero",
            ));
        }
        if let Some(id) = &self.consumer_id {
            super::validate_consumer_id(id)
                .map_err(|reason| ConfigError::new("consumer_id", reason))?;
        }
        if let Some(endpoint) = &self.otlp_endpoint {
            super::validate_otlp_endpoint(endpoint)
                .map_err(|reason| ConfigError::new("otlp_endpoint", reason))?;
        }
        self.supervisor()?;
        self.lanes()?;
        Ok(())
    }

    /// The database URL the file names (or the default), parsed.
    pub fn database_url(&self) -> Result<DatabaseUrl, crate::database::DatabaseUrlError> {
        self.database_url
            .as_deref()
            .unwrap_or(DEFAULT_DATABASE_URL)
            .parse()
    }

    /// Where in the database the outbox lives, and how long to try reaching it.
    pub fn store_options(&self) -> StoreOptions {
        StoreOptions {
            table_prefix: self.table_prefix.clone(),
            schema: self.schema.clone(),
            connect_timeout: self.connect_timeout(),
            ..StoreOptions::default()
        }
    }

    /// How long to keep trying to reach the database.
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
            .map_or(DEFAULT_CONNECT_TIMEOUT, Duration::from)
    }

    /// How long a graceful shutdown lets deliveries finish.
    pub fn shutdown_timeout(&self) -> Duration {
        self.shutdown_timeout
            .map_or(DEFAULT_SHUTDOWN_TIMEOUT, Duration::from)
    }

    /// The restart policy, validated.
    pub fn supervisor(&self) -> Result<SupervisorConfig, ConfigError> {
        let config = self.supervisor.to_config();
        config.validate()?;
        Ok(config)
    }

    /// Each lane's config and sink, validated; duplicates refused.
    pub fn lanes(&self) -> Result<Vec<(LaneConfig, SinkConfig)>, ConfigError> {
        let consumer_id = self.consumer_id.clone().unwrap_or_else(default_consumer_id);
        let mut seen = std::collections::HashSet::new();
        let mut lanes = Vec::with_capacity(self.lanes.len());
        for section in &self.lanes {
            let config = section.to_config(&consumer_id);
            if section.rate_burst.is_some() && section.rate_limit.is_none() {
                return Err(ConfigError::new(
                    format!("lanes[{}].rate_burst", config.name()),
                    "is set without a rate_limit",
                ));
            }
            config.validate()?;
            section
                .sink
                .validate(&format!("lanes[{}].sink", config.name()))?;
            if !seen.insert((config.lane.clone(), config.target.clone())) {
                return Err(ConfigError::new(
                    format!("lanes[{}]", config.name()),
                    "this lane and target are configured twice",
                ));
            }
            lanes.push((config, section.sink.clone()));
        }
        Ok(lanes)
    }

    /// Each lane's retention, defaults filled in, validated (the field named with its lane).
    pub fn retention(&self) -> Result<Vec<(LaneKey, RetentionConfig)>, ConfigError> {
        self.lanes
            .iter()
            .map(|section| {
                let retention = section
                    .retention
                    .map(|table| table.to_config())
                    .unwrap_or_default();
                retention.validate().map_err(|error| {
                    ConfigError::new(
                        format!("lanes[{}/{}].{}", section.lane, section.target, error.field),
                        error.reason,
                    )
                })?;
                Ok((LaneKey::new(&section.lane, &section.target), retention))
            })
            .collect()
    }

    /// The ordering policy of a configured (lane, target), if configured.
    pub fn ordering_of(&self, lane: &str, target: &str) -> Option<OrderingPolicy> {
        self.lanes
            .iter()
            .find(|l| l.lane == lane && l.target == target)
            .map(|l| l.ordering.unwrap_or_default())
    }
}

/// Turns toml's error into one line naming the file, the position and, when the position
/// points at a `key = value` line, the key.
fn parse_error(origin: &str, text: &str, error: &toml::de::Error) -> FileConfigError {
    let mut out = FileConfigError::new(origin, None, error.message().trim().to_owned());
    if let Some(span) = error.span() {
        let start = span.start.min(text.len());
        let before = &text[..start];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        out.line = Some(line);
        out.column = Some(before[line_start..].chars().count() + 1);
        // Name the key when the error points into a `key = value` line: serde's messages for
        // a bad value (a duration, an address) do not say which field held it.
        let line_text = text[line_start..].lines().next().unwrap_or("");
        if let Some((key, _)) = line_text.split_once('=') {
            let key = key.trim();
            let is_key = !key.is_empty()
                && key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if is_key && !out.message.contains(&format!("`{key}`")) {
                out.field = Some(key.to_owned());
            }
        }
    }
    out
}

mod gates;
#[cfg(test)]
mod tests;

pub use gates::{BreakerSection, RateSpec};
