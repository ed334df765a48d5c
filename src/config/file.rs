//! The relay as a TOML file: the database, the metrics address, the restart policy and the
//! lanes with their sinks. `examples/relay.toml` documents every field; [`EMBEDDED_DEFAULT`]
//! is what the binary runs without a file.
//!
//! Every table refuses unknown keys, so a misspelt field is an error, not a silent default.
//! Durations are strings such as `"250ms"`, `"30s"`, `"5m"`, `"1h"` (see [`super::duration`]).
//! The database URL may come from the `OUTBOX_DATABASE_URL` environment variable instead
//! (the binary gives it precedence), so a password need not sit in the file.
//!
//! This file holds the top level ([`FileConfig`], its defaults, loading and validation);
//! `file/listener.rs` the `[listener]` table, `file/lane.rs` a `[[lanes]]` entry,
//! `file/gates.rs` its claim gates' fields, and
//! `file/error.rs` the error that names the file, the position and the field. The
//! `[postgres]` table is read straight into [`PostgresOptions`], the store's own settings.
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
use super::{default_consumer_id, ConfigError, LaneConfig, LanePattern, SupervisorConfig};
use crate::database::{DatabaseUrl, PostgresOptions, StoreOptions, DEFAULT_CONNECT_TIMEOUT};
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
pub use crate::relay::DEFAULT_SHUTDOWN_TIMEOUT;

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
    /// The older name of `listener.address`: where the listener binds, or `false` for
    /// none. Read when `listener.address` is absent; [`Self::listen_address`] resolves them.
    #[serde(default)]
    pub metrics_listen: Option<MetricsListen>,
    /// The HTTP listener: its address, limits, control token and route groups.
    #[serde(default)]
    pub listener: ListenerSection,
    /// The PostgreSQL pool and session settings (ignored for SQLite).
    #[serde(default)]
    pub postgres: PostgresOptions,
    /// How long a graceful shutdown lets deliveries finish. Default 30s.
    #[serde(default)]
    pub shutdown_timeout: Option<HumanDuration>,
    /// Written to `claimed_by` by every lane. Default `<host>-<pid>`.
    #[serde(default)]
    pub consumer_id: Option<String>,
    /// How crashed lanes are restarted.
    #[serde(default)]
    pub supervisor: SupervisorSection,
    /// The lanes: at least one, or a lane pattern.
    #[serde(default)]
    pub lanes: Vec<LaneSection>,
    /// The lane patterns (`lane = "tenant-*"`): every lane matching one, toward its target,
    /// with its settings ([`LanePattern`]). Each entry takes a `[[lanes]]` entry's keys and
    /// `max_lanes` and `idle_stop`.
    #[serde(default)]
    pub lane_patterns: Vec<LaneSection>,
    /// Where the binary exports its spans over OTLP/HTTP (protobuf), e.g.
    /// `http://127.0.0.1:4318` or `https://otlp.example.com` (`/v1/traces` is appended).
    /// Default: none, unless the environment names one
    /// (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`); without
    /// either, nothing is exported.
    #[serde(default)]
    pub otlp_endpoint: Option<String>,
    /// A PEM file of CA certificates the OTLP export trusts besides the system's roots,
    /// for an https collector with a private CA. Default: none, unless the environment
    /// names one (`OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE` or
    /// `OTEL_EXPORTER_OTLP_CERTIFICATE`).
    #[serde(default)]
    pub otlp_ca_file: Option<std::path::PathBuf>,
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
    /// How long a lane may stay failed before `/healthz` fails and the daemon exits (exit
    /// 1), so that Kubernetes or systemd restart it; `false`: never. Default 5m.
    pub fail_liveness_after: Option<DurationOrOff>,
}

/// A duration, or `false` for none (`supervisor.fail_liveness_after`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurationOrOff(pub Option<Duration>);

impl Serialize for DurationOrOff {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Some(duration) => HumanDuration(duration).serialize(serializer),
            None => serializer.serialize_bool(false),
        }
    }
}

impl<'de> Deserialize<'de> for DurationOrOff {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = DurationOrOff;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a duration such as \"5m\", or false")
            }

            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<DurationOrOff, E> {
                if v {
                    Err(E::custom(
                        "write a duration such as \"5m\", or false for never",
                    ))
                } else {
                    Ok(DurationOrOff(None))
                }
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<DurationOrOff, E> {
                crate::config::duration::parse_duration(v)
                    .map(|duration| DurationOrOff(Some(duration)))
                    .map_err(E::custom)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
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
        if let Some(after) = self.fail_liveness_after {
            config.fail_liveness_after = after.0;
        }
        config
    }
}

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
        if self.lanes.is_empty() && self.lane_patterns.is_empty() {
            return Err(ConfigError::new(
                "lanes",
                "at least one [[lanes]] or [[lane_patterns]] entry is required",
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
        self.listener.validate()?;
        let field = match (&self.listener.address, &self.metrics_listen) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::new(
                    "listener.address",
                    "set listener.address or its older name metrics_listen, not both",
                ))
            }
            (None, Some(_)) => "metrics_listen",
            _ => "listener.address",
        };
        self.listener
            .check_exposure(&self.listen_address(), field)?;
        self.postgres
            .validate()
            .map_err(|error| ConfigError::new(format!("postgres.{}", error.field), error.reason))?;
        self.supervisor()?;
        self.lanes()?;
        self.lane_patterns()?;
        Ok(())
    }

    /// Where the listener binds: `listener.address`, else the older `metrics_listen`,
    /// else the default (`127.0.0.1:9464`).
    pub fn listen_address(&self) -> MetricsListen {
        self.listener
            .address
            .or(self.metrics_listen)
            .unwrap_or_default()
    }

    /// The older keys the file sets, each with the key that replaces it: the daemon warns
    /// about them at start.
    pub fn deprecated_keys(&self) -> Vec<(&'static str, &'static str)> {
        let mut keys = Vec::new();
        if self.metrics_listen.is_some() {
            keys.push(("metrics_listen", "listener.address"));
        }
        keys.extend(self.listener.deprecated_keys());
        keys
    }

    /// The database URL the file names (or the default), parsed.
    pub fn database_url(&self) -> Result<DatabaseUrl, crate::database::DatabaseUrlError> {
        self.database_url
            .as_deref()
            .unwrap_or(DEFAULT_DATABASE_URL)
            .parse()
    }

    /// Where in the database the outbox lives, how long to try reaching it, and the
    /// PostgreSQL settings (`[postgres]`, as read: [`Self::load`] and [`Self::from_toml_str`]
    /// validate them, and opening the store does again).
    pub fn store_options(&self) -> StoreOptions {
        StoreOptions {
            table_prefix: self.table_prefix.clone(),
            schema: self.schema.clone(),
            connect_timeout: self.connect_timeout(),
            postgres: self.postgres.clone(),
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
                    format!("lanes[{}].rate_burst", config.key()),
                    "is set without a rate_limit",
                ));
            }
            for (key, set) in [
                ("max_lanes", section.max_lanes.is_some()),
                ("idle_stop", section.idle_stop.is_some()),
            ] {
                if set {
                    return Err(ConfigError::new(
                        format!("lanes[{}].{key}", config.key()),
                        "only a [[lane_patterns]] entry takes it",
                    ));
                }
            }
            config.validate()?;
            section
                .sink
                .validate_for_lane(&config, &format!("lanes[{}].sink", config.key()))?;
            if !seen.insert((config.name.clone(), config.target.clone())) {
                return Err(ConfigError::new(
                    format!("lanes[{}]", config.key()),
                    "this lane and target are configured twice",
                ));
            }
            lanes.push((config, section.sink.clone()));
        }
        Ok(lanes)
    }

    /// Each lane pattern and its sink, validated; patterns of one target whose prefixes
    /// overlap refused.
    pub fn lane_patterns(&self) -> Result<Vec<(LanePattern, SinkConfig)>, ConfigError> {
        let consumer_id = self.consumer_id.clone().unwrap_or_else(default_consumer_id);
        let mut patterns = Vec::with_capacity(self.lane_patterns.len());
        for section in &self.lane_patterns {
            let pattern = section.to_pattern(&consumer_id);
            if section.rate_burst.is_some() && section.rate_limit.is_none() {
                return Err(ConfigError::new(
                    format!("lane_patterns[{}].rate_burst", pattern.key()),
                    "is set without a rate_limit",
                ));
            }
            pattern.validate()?;
            section.sink.validate_for_lane(
                &pattern.lane,
                &format!("lane_patterns[{}].sink", pattern.key()),
            )?;
            patterns.push((pattern, section.sink.clone()));
        }
        let all: Vec<LanePattern> = patterns.iter().map(|(p, _)| p.clone()).collect();
        super::check_overlap(&all)?;
        Ok(patterns)
    }

    /// The ordering policy of a configured (lane, target), if configured: its `[[lanes]]`
    /// entry's, else that of the lane pattern that matches it.
    pub fn ordering_of(&self, lane: &str, target: &str) -> Option<OrderingPolicy> {
        let pattern = || {
            self.lane_patterns.iter().find(|p| {
                p.target == target
                    && p.lane
                        .strip_suffix('*')
                        .is_some_and(|prefix| lane.starts_with(prefix))
            })
        };
        self.lanes
            .iter()
            .find(|l| l.lane == lane && l.target == target)
            .or_else(pattern)
            .map(|l| l.ordering.unwrap_or_default())
    }
}

mod env;
mod error;
mod gates;
mod lane;
mod listener;
#[cfg(test)]
mod tests;

pub use env::{EnvKind, EnvSetting, ENV_SETTINGS};
use error::parse_error;
pub use error::FileConfigError;
pub use gates::{BreakerSection, RateSpec};
pub use lane::{ExtendMargin, LaneSection, RetentionAge, RetentionSection};
pub use listener::{ApiSettings, ListenerSection};
