//! `RedisSink`: one `XADD` to a Redis stream per message (redis-rs, with a connection
//! manager that reconnects).
//!
//! ```toml
//! sink = { kind = "redis", url = "redis://127.0.0.1:6379", stream = "outbox:{lane}:{target}", maxlen = 100000 }
//! ```
//!
//! Each entry has three fields: `outbox_id`, `payload` (the payload's JSON bytes) and
//! `headers` (the message's headers as a JSON object). `maxlen` trims the stream to about
//! that many entries (`MAXLEN ~`). `secret_env` names the variable holding the password.
//! `connect_timeout` (default `5s`) bounds each connection attempt and the whole first
//! connect at build: a server that accepts the TCP connection and never answers fails the
//! build instead of hanging it.
//!
//! **Redis Streams cannot dedupe**: a message the relay delivers twice (after a crash between
//! the `XADD` and the ack) is two entries. Consumers must dedupe on `outbox_id`.
//!
//! | answer | outcome |
//! |---|---|
//! | the entry id | ack |
//! | a lost connection, a timeout, a server loading or busy | retryable (the manager reconnects) |
//! | an error retrying cannot fix (`WRONGTYPE`: the key is not a stream) | permanent |

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use serde::{Deserialize, Serialize};

use super::template::Template;
use super::{payload_bytes, read_secret, url_with_password, SinkBuildError};
use crate::config::duration::{format_duration, HumanDuration};
use crate::config::ConfigError;
use crate::delivery::{DeliveryError, DeliveryHandler};
use crate::message::OutboxMessage;
use crate::redact::redact;

/// The server, unless configured.
pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379";
/// How long connecting to the server may take, unless configured.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

// ---- config ----------------------------------------------------------------------------

/// The settings of a Redis Streams sink: `sink = { kind = "redis", stream = "…" }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisSinkConfig {
    /// The server's URL. Default `redis://127.0.0.1:6379`.
    #[serde(default = "default_url")]
    pub url: String,
    /// The stream key, a [`Template`].
    pub stream: Template,
    /// Trim the stream to about this many entries. Default: no trimming.
    #[serde(default)]
    pub maxlen: Option<u64>,
    /// The environment variable holding the password (put into the URL).
    #[serde(default)]
    pub secret_env: Option<String>,
    /// How long connecting may take: each attempt, and the first connect at build in all.
    /// Default `5s`.
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout: HumanDuration,
}

fn default_url() -> String {
    DEFAULT_URL.to_owned()
}

fn default_connect_timeout() -> HumanDuration {
    HumanDuration(DEFAULT_CONNECT_TIMEOUT)
}

impl RedisSinkConfig {
    /// A config adding to `stream` on the default server.
    pub fn new(stream: Template) -> Self {
        Self {
            url: default_url(),
            stream,
            maxlen: None,
            secret_env: None,
            connect_timeout: default_connect_timeout(),
        }
    }

    /// Checks the settings; `field` is where the sink sits in the config.
    pub fn validate(&self, field: &str) -> Result<(), ConfigError> {
        redis::Client::open(self.url.as_str()).map_err(|error| {
            ConfigError::new(
                format!("{field}.url"),
                format!("{:?}: {}", redact(&self.url), redact(&error.to_string())),
            )
        })?;
        if self.connect_timeout.0.is_zero() {
            return Err(ConfigError::new(
                format!("{field}.connect_timeout"),
                "must be greater than zero",
            ));
        }
        if self.stream.as_str().is_empty() {
            return Err(ConfigError::new(
                format!("{field}.stream"),
                "must not be empty",
            ));
        }
        if self.maxlen == Some(0) {
            return Err(ConfigError::new(
                format!("{field}.maxlen"),
                "must be greater than zero (leave it out for no trimming)",
            ));
        }
        Ok(())
    }
}

// ---- build -----------------------------------------------------------------------------

/// Delivers a message as an entry of a Redis stream.
#[derive(Clone)]
pub struct RedisSink {
    // Cheap to clone, and all clones share one multiplexed connection, which the manager
    // re-establishes after a loss.
    connection: ConnectionManager,
    stream: Template,
    maxlen: Option<u64>,
}

impl fmt::Debug for RedisSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSink")
            .field("stream", &self.stream)
            .field("maxlen", &self.maxlen)
            .finish_non_exhaustive()
    }
}

impl RedisSink {
    /// Connects to the server `config` names. `field` is where the sink sits in the config,
    /// for errors.
    pub async fn build(config: &RedisSinkConfig, field: &str) -> Result<Self, SinkBuildError> {
        config.validate(field)?;
        let url = match &config.secret_env {
            Some(variable) => {
                let password = read_secret(field, variable)?;
                url_with_password(&config.url, "", &password)
                    .ok_or_else(|| SinkBuildError::new(format!("{field}.url"), "not a URL"))?
            }
            None => config.url.clone(),
        };
        let unreachable = |reason: String| {
            SinkBuildError::new(
                format!("{field}.url"),
                format!(
                    "cannot connect to Redis at {}: {}",
                    redact(&config.url),
                    redact(&reason)
                ),
            )
        };
        let client = redis::Client::open(url).map_err(|error| unreachable(error.to_string()))?;
        let timeout = config.connect_timeout.0;
        let manager = ConnectionManagerConfig::new().set_connection_timeout(Some(timeout));
        // Each attempt is bounded by the manager; the whole connect, retries included, here.
        let connection =
            tokio::time::timeout(timeout, ConnectionManager::new_with_config(client, manager))
                .await
                .map_err(|_| unreachable(format!("no answer within {}", format_duration(timeout))))?
                .map_err(|error| unreachable(error.to_string()))?;
        Ok(Self {
            connection,
            stream: config.stream.clone(),
            maxlen: config.maxlen,
        })
    }
}

// ---- handler ---------------------------------------------------------------------------

#[async_trait]
impl DeliveryHandler for RedisSink {
    async fn deliver(&self, message: &OutboxMessage) -> Result<(), DeliveryError> {
        let key = self
            .stream
            .render(message)
            .map_err(DeliveryError::permanent)?;
        let headers = serde_json::to_vec(&message.headers).map_err(|error| {
            DeliveryError::permanent(format!("could not encode the headers as JSON: {error}"))
        })?;
        let mut command = redis::cmd("XADD");
        command.arg(&key);
        if let Some(maxlen) = self.maxlen {
            command.arg("MAXLEN").arg("~").arg(maxlen);
        }
        command
            .arg("*")
            .arg("outbox_id")
            .arg(message.outbox_id.to_string())
            .arg("payload")
            .arg(payload_bytes(message))
            .arg("headers")
            .arg(headers);
        let mut connection = self.connection.clone();
        command
            .query_async::<String>(&mut connection)
            .await
            .map(drop)
            .map_err(|source| {
                let permanent = matches!(source.retry_method(), redis::RetryMethod::NoRetry)
                    && !source.is_io_error()
                    && !source.is_timeout()
                    && !source.is_connection_dropped();
                let error = RedisError { key, source };
                if permanent {
                    DeliveryError::permanent(error)
                } else {
                    DeliveryError::retryable(error)
                }
            })
    }
}

// ---- errors ----------------------------------------------------------------------------

/// Why an `XADD` failed.
#[derive(Debug, thiserror::Error)]
#[error("XADD to Redis stream {key:?}: {source}")]
pub struct RedisError {
    /// The stream key.
    pub key: String,
    /// What redis-rs said.
    #[source]
    pub source: redis::RedisError,
}
