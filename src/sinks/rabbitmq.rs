//! `RabbitMqSink`: one AMQP publish per message (lapin), acked once the broker confirmed it.
//!
//! ```toml
//! sink = { kind = "rabbitmq", url = "amqp://relay@127.0.0.1:5672/%2f", exchange = "orders", routing_key = "{target}", secret_env = "AMQP_PASSWORD" }
//! ```
//!
//! - Publisher confirms are on, and messages are persistent (delivery mode 2).
//! - The exchange and the routing key are [`Template`]s over lane, target and headers.
//! - `message_id` is the `outbox_id`; the message's headers go as AMQP headers;
//!   `content_type` is `application/json`.
//! - `mandatory` (default true) asks the broker to return a message no queue takes.
//! - `secret_env` names the variable holding the password, put into the URL.
//! - `connect_timeout` (default `5s`) bounds each connect, at build and at every reconnect:
//!   a broker that accepts the TCP connection and never answers fails it instead of hanging.
//!
//! | answer | outcome |
//! |---|---|
//! | confirm (ack) | ack |
//! | ack with the message returned (unroutable, `mandatory`) | permanent, naming the exchange and the routing key |
//! | nack, a lost connection or channel | retryable; the next delivery reconnects |
//! | a missing header a template needs | permanent |

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::Confirmation;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

use super::template::Template;
use super::{payload_bytes, read_secret, url_with_password, SinkBuildError};
use crate::config::duration::{format_duration, HumanDuration};
use crate::config::ConfigError;
use crate::delivery::{DeliveryError, DeliveryHandler};
use crate::message::OutboxMessage;
use crate::redact::redact;

/// The broker, unless configured.
pub const DEFAULT_URL: &str = "amqp://127.0.0.1:5672/%2f";
/// How long one connect (TCP, AMQP handshake, channel, confirm mode) may take, unless
/// configured.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// AMQP's persistent delivery mode: the broker writes the message to disk.
const PERSISTENT: u8 = 2;

// ---- config ----------------------------------------------------------------------------

/// The settings of a RabbitMQ sink: `sink = { kind = "rabbitmq", exchange = "…", routing_key = "…" }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RabbitMqSinkConfig {
    /// The broker's AMQP URL. Default `amqp://127.0.0.1:5672/%2f`.
    #[serde(default = "default_url")]
    pub url: String,
    /// The exchange to publish to, a [`Template`]; `""` is the default exchange.
    #[serde(default)]
    pub exchange: Template,
    /// The routing key, a [`Template`].
    pub routing_key: Template,
    /// Have the broker return a message no queue takes, which then dead-letters. Default true.
    #[serde(default = "default_mandatory")]
    pub mandatory: bool,
    /// The environment variable holding the password (put into the URL).
    #[serde(default)]
    pub secret_env: Option<String>,
    /// How long one connect may take, at build and at every reconnect. Default `5s`.
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout: HumanDuration,
}

fn default_url() -> String {
    DEFAULT_URL.to_owned()
}

fn default_connect_timeout() -> HumanDuration {
    HumanDuration(DEFAULT_CONNECT_TIMEOUT)
}

fn default_mandatory() -> bool {
    true
}

impl RabbitMqSinkConfig {
    /// A config publishing to `exchange` with `routing_key`, on the default broker.
    pub fn new(exchange: Template, routing_key: Template) -> Self {
        Self {
            url: default_url(),
            exchange,
            routing_key,
            mandatory: true,
            secret_env: None,
            connect_timeout: default_connect_timeout(),
        }
    }

    /// Checks the settings; `field` is where the sink sits in the config.
    pub fn validate(&self, field: &str) -> Result<(), ConfigError> {
        if !(self.url.starts_with("amqp://") || self.url.starts_with("amqps://")) {
            return Err(ConfigError::new(
                format!("{field}.url"),
                format!("{:?} is not an amqp:// or amqps:// URL", redact(&self.url)),
            ));
        }
        self.url.parse::<lapin::uri::AMQPUri>().map_err(|error| {
            ConfigError::new(
                format!("{field}.url"),
                format!("{:?}: {}", redact(&self.url), redact(&error)),
            )
        })?;
        if self.connect_timeout.0.is_zero() {
            return Err(ConfigError::new(
                format!("{field}.connect_timeout"),
                "must be greater than zero",
            ));
        }
        Ok(())
    }

    fn url_with_secret(&self, field: &str) -> Result<String, SinkBuildError> {
        let Some(variable) = &self.secret_env else {
            return Ok(self.url.clone());
        };
        let password = read_secret(field, variable)?;
        url_with_password(&self.url, "guest", &password)
            .ok_or_else(|| SinkBuildError::new(format!("{field}.url"), "not a URL"))
    }
}

// ---- build -----------------------------------------------------------------------------

/// Delivers a message as a confirmed AMQP publish.
pub struct RabbitMqSink {
    url: String,
    connect_timeout: Duration,
    exchange: Template,
    routing_key: Template,
    mandatory: bool,
    // One connection and channel for all the lane's deliveries: confirms are matched to
    // publishes by delivery tag, so concurrent publishes on one channel are fine. Replaced
    // when broken, under the lock, so concurrent deliveries reconnect once.
    link: Mutex<Option<Link>>,
    /// The last link's generation.
    generations: AtomicU64,
}

/// A connection and its confirm-mode channel. The connection is kept: dropping it would
/// close the channel.
struct Link {
    _connection: Connection,
    channel: Channel,
    /// Which connection this is (counted from 1), so a delivery that failed on it forgets
    /// it only if no other delivery has replaced it meanwhile.
    generation: u64,
}

impl fmt::Debug for RabbitMqSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not the URL: it may hold the password.
        f.debug_struct("RabbitMqSink")
            .field("exchange", &self.exchange)
            .field("routing_key", &self.routing_key)
            .field("mandatory", &self.mandatory)
            .finish_non_exhaustive()
    }
}

impl RabbitMqSink {
    /// Connects to the broker `config` names. `field` is where the sink sits in the config,
    /// for errors.
    pub async fn build(config: &RabbitMqSinkConfig, field: &str) -> Result<Self, SinkBuildError> {
        config.validate(field)?;
        let url = config.url_with_secret(field)?;
        let connect_timeout = config.connect_timeout.0;
        let link = connect(&url, 1, connect_timeout).await.map_err(|error| {
            SinkBuildError::new(
                format!("{field}.url"),
                format!(
                    "cannot connect to RabbitMQ at {}: {}",
                    redact(&config.url),
                    redact(&error.to_string())
                ),
            )
        })?;
        Ok(Self {
            url,
            connect_timeout,
            exchange: config.exchange.clone(),
            routing_key: config.routing_key.clone(),
            mandatory: config.mandatory,
            link: Mutex::new(Some(link)),
            generations: AtomicU64::new(1),
        })
    }

    /// The channel to publish on and its link's generation, reconnecting if the last one
    /// broke or was forgotten.
    async fn channel(&self) -> Result<(Channel, u64), ConnectFailure> {
        let mut link = self.link.lock().await;
        if let Some(current) = link.as_ref() {
            if current.channel.status().connected() {
                return Ok((current.channel.clone(), current.generation));
            }
        }
        *link = None;
        let generation = self.generations.fetch_add(1, Ordering::Relaxed) + 1;
        let fresh = connect(&self.url, generation, self.connect_timeout).await?;
        let channel = fresh.channel.clone();
        *link = Some(fresh);
        Ok((channel, generation))
    }

    /// Drops the link of `generation` after a failure on it: lapin may not have marked the
    /// channel broken yet (its I/O loop notices a reset socket later), and the next delivery
    /// must reconnect rather than fail again on the dead socket. A link that another
    /// delivery already replaced is left alone.
    async fn forget(&self, generation: u64) {
        let mut link = self.link.lock().await;
        if link.as_ref().is_some_and(|l| l.generation == generation) {
            *link = None;
        }
    }

    fn properties(message: &OutboxMessage) -> BasicProperties {
        let mut headers = FieldTable::default();
        for (name, value) in &message.headers {
            headers.insert(
                ShortString::from(name.as_str()),
                AMQPValue::LongString(LongString::from(value.as_str())),
            );
        }
        BasicProperties::default()
            .with_message_id(ShortString::from(message.outbox_id.to_string()))
            .with_delivery_mode(PERSISTENT)
            .with_content_type(ShortString::from("application/json"))
            .with_headers(headers)
    }
}

/// Why a connect failed: the broker's (or the network's) error, or no answer in time.
#[derive(Debug, thiserror::Error)]
enum ConnectFailure {
    #[error(transparent)]
    Broker(#[from] lapin::Error),
    #[error("no answer within {}", format_duration(*.0))]
    TimedOut(Duration),
}

/// Connects, opens a channel and puts it in confirm mode, all within `timeout`: a broker
/// that accepts the TCP connection and never speaks AMQP would otherwise hold the caller
/// (the start of the daemon, a delivery) for ever.
async fn connect(url: &str, generation: u64, timeout: Duration) -> Result<Link, ConnectFailure> {
    let connecting = async {
        let connection = Connection::connect(url, ConnectionProperties::default()).await?;
        let channel = connection.create_channel().await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        Ok::<_, lapin::Error>(Link {
            _connection: connection,
            channel,
            generation,
        })
    };
    match tokio::time::timeout(timeout, connecting).await {
        Ok(link) => Ok(link?),
        Err(_) => Err(ConnectFailure::TimedOut(timeout)),
    }
}

// ---- handler ---------------------------------------------------------------------------

#[async_trait]
impl DeliveryHandler for RabbitMqSink {
    async fn deliver(&self, message: &OutboxMessage) -> Result<(), DeliveryError> {
        let exchange = self
            .exchange
            .render(message)
            .map_err(DeliveryError::permanent)?;
        let routing_key = self
            .routing_key
            .render(message)
            .map_err(DeliveryError::permanent)?;
        let payload = payload_bytes(message);
        let failed = |source: lapin::Error| {
            DeliveryError::retryable(RabbitMqError::Broker {
                exchange: exchange.clone(),
                routing_key: routing_key.clone(),
                source,
            })
        };
        let (channel, generation) = self.channel().await.map_err(|failure| match failure {
            ConnectFailure::Broker(source) => failed(source),
            ConnectFailure::TimedOut(after) => {
                DeliveryError::retryable(RabbitMqError::ConnectTimedOut {
                    exchange: exchange.clone(),
                    routing_key: routing_key.clone(),
                    after,
                })
            }
        })?;
        let options = BasicPublishOptions {
            mandatory: self.mandatory,
            ..BasicPublishOptions::default()
        };
        let published = channel
            .basic_publish(
                ShortString::from(exchange.as_str()),
                ShortString::from(routing_key.as_str()),
                options,
                &payload,
                Self::properties(message),
            )
            .await;
        let confirmed = match published {
            Ok(confirm) => confirm.await,
            Err(error) => Err(error),
        };
        let confirmation = match confirmed {
            Ok(confirmation) => confirmation,
            Err(error) => {
                self.forget(generation).await;
                return Err(failed(error));
            }
        };
        match confirmation {
            Confirmation::Ack(None) => Ok(()),
            // The broker confirms a returned message too: it took it, and dropped it.
            Confirmation::Ack(Some(returned)) => {
                Err(DeliveryError::permanent(RabbitMqError::Unroutable {
                    exchange,
                    routing_key,
                    reply: format!("{} {}", returned.reply_code, returned.reply_text),
                }))
            }
            Confirmation::Nack(_) => Err(DeliveryError::retryable(RabbitMqError::Nacked {
                exchange,
                routing_key,
            })),
            Confirmation::NotRequested => {
                Err(DeliveryError::retryable(RabbitMqError::NotConfirmed {
                    exchange,
                    routing_key,
                }))
            }
        }
    }
}

// ---- errors ----------------------------------------------------------------------------

/// Why an AMQP publish failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RabbitMqError {
    /// No queue took the message (published with `mandatory`).
    #[error("unroutable: no queue is bound to exchange {exchange:?} for routing key {routing_key:?} (broker: {reply})")]
    Unroutable {
        /// The exchange.
        exchange: String,
        /// The routing key.
        routing_key: String,
        /// The broker's reply code and text.
        reply: String,
    },
    /// The broker refused to take the message.
    #[error(
        "the broker nacked the publish to exchange {exchange:?} with routing key {routing_key:?}"
    )]
    Nacked {
        /// The exchange.
        exchange: String,
        /// The routing key.
        routing_key: String,
    },
    /// The channel was not in confirm mode (it was replaced meanwhile).
    #[error(
        "the publish to exchange {exchange:?} with routing key {routing_key:?} was not confirmed"
    )]
    NotConfirmed {
        /// The exchange.
        exchange: String,
        /// The routing key.
        routing_key: String,
    },
    /// Reconnecting to the broker took longer than `connect_timeout`.
    #[error("publish to exchange {exchange:?} with routing key {routing_key:?}: the broker did not answer the connect within {}", format_duration(*.after))]
    ConnectTimedOut {
        /// The exchange.
        exchange: String,
        /// The routing key.
        routing_key: String,
        /// The connect timeout.
        after: Duration,
    },
    /// The connection or channel failed.
    #[error("publish to exchange {exchange:?} with routing key {routing_key:?}: {source}")]
    Broker {
        /// The exchange.
        exchange: String,
        /// The routing key.
        routing_key: String,
        /// What lapin said.
        #[source]
        source: lapin::Error,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_names_the_bad_field() {
        let config =
            RabbitMqSinkConfig::new("orders".parse().unwrap(), "{target}".parse().unwrap());
        assert!(config.validate("s").is_ok());
        let mut bad = config;
        bad.url = "http://x".into();
        assert_eq!(bad.validate("s").unwrap_err().field, "s.url");
    }
}
