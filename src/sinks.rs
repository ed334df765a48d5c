//! Ready-made [`DeliveryHandler`]s, and [`SinkConfig`], the `sink = { kind = … }` table of a
//! lane in the config file.
//!
//! Every sink lives in its own module with the same shape, in the same order: its config
//! struct (what the file says, validated), its build (async and fallible: it reads secrets
//! from the environment and connects), its handler (what delivers), its error mapping (the
//! target's answer as retryable, permanent or retry-after). Adding a sink is a module of that
//! shape, a cargo feature and one variant of [`SinkConfig`].
//!
//! - [`log`]: one JSON line per message on stdout (or any writer). The default sink of the
//!   binary, and a way to watch a lane without a broker.
//! - `webhook` (feature `webhook-sink`): an HTTP request per message, signed the Standard
//!   Webhooks way.
//! - `nats` (feature `nats-sink`): a JetStream publish per message, deduplicated by
//!   `Nats-Msg-Id`.
//! - `rabbitmq` (feature `rabbitmq-sink`): an AMQP publish per message, with publisher
//!   confirms.
//! - `redis` (feature `redis-sink`): an `XADD` to a Redis stream per message.
//! - [`kafka`] (feature `kafka-sink`; its settings in every build): a Kafka record per
//!   message from an idempotent producer, routed as Debezium's outbox event router routes.
//!
//! Every sink hands the message's `outbox_id` to its target as the idempotency key, in the
//! target's own idiom, sends the payload's JSON bytes unchanged, forwards the message's
//! headers, and acks only once the target confirmed.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::config::ConfigError;
use crate::delivery::{BoxError, DeliveryHandler};

pub mod kafka;
pub mod log;
#[cfg(feature = "nats-sink")]
#[cfg_attr(docsrs, doc(cfg(feature = "nats-sink")))]
pub mod nats;
#[cfg(feature = "rabbitmq-sink")]
#[cfg_attr(docsrs, doc(cfg(feature = "rabbitmq-sink")))]
pub mod rabbitmq;
#[cfg(feature = "redis-sink")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis-sink")))]
pub mod redis;
pub mod template;
#[cfg(feature = "webhook-sink")]
#[cfg_attr(docsrs, doc(cfg(feature = "webhook-sink")))]
pub mod webhook;

pub use self::log::{LogSink, LogSinkConfig};
pub use self::template::Template;

/// Every sink kind the crate has, as `(kind, the cargo feature that builds it, whether this
/// build parses it)`; the log sink is always built (its feature is empty). A config naming a
/// kind this build cannot parse is refused with the feature that brings it, not as an
/// unknown word. Kafka's settings parse in every build: without `kafka-sink`, building the
/// sink is refused at start instead, naming the lane's field and the feature.
pub const KINDS: [(&str, &str, bool); 6] = [
    ("log", "", true),
    ("webhook", "webhook-sink", cfg!(feature = "webhook-sink")),
    ("nats", "nats-sink", cfg!(feature = "nats-sink")),
    ("rabbitmq", "rabbitmq-sink", cfg!(feature = "rabbitmq-sink")),
    ("redis", "redis-sink", cfg!(feature = "redis-sink")),
    ("kafka", "kafka-sink", true),
];

/// The cargo feature that builds the sink `kind` when this build lacks it; `None` for a kind
/// this build has, and for a word that is no sink kind at all.
pub fn missing_feature(kind: &str) -> Option<&'static str> {
    KINDS
        .iter()
        .find(|(known, _, built)| *known == kind && !built)
        .map(|(_, feature, _)| *feature)
}

/// Why a Kafka lane is refused by a build without the feature `kafka-sink`
/// ([`SinkConfig::check_built`], and [`SinkConfig::build`]).
#[cfg(not(feature = "kafka-sink"))]
const NO_KAFKA: &str = "this build has no Kafka sink: build with the feature `kafka-sink`";

/// Which sink delivers a lane, as the config file names it:
/// `sink = { kind = "log" }`, `sink = { kind = "webhook", url = "…" }`, …
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum SinkConfig {
    /// [`LogSink`]: a JSON line per message.
    Log(LogSinkConfig),
    /// `webhook::WebhookSink`: an HTTP request per message.
    #[cfg(feature = "webhook-sink")]
    #[cfg_attr(docsrs, doc(cfg(feature = "webhook-sink")))]
    Webhook(webhook::WebhookSinkConfig),
    /// `nats::NatsSink`: a JetStream publish per message.
    #[cfg(feature = "nats-sink")]
    #[cfg_attr(docsrs, doc(cfg(feature = "nats-sink")))]
    Nats(nats::NatsSinkConfig),
    /// `rabbitmq::RabbitMqSink`: an AMQP publish per message, confirmed.
    #[cfg(feature = "rabbitmq-sink")]
    #[cfg_attr(docsrs, doc(cfg(feature = "rabbitmq-sink")))]
    #[serde(rename = "rabbitmq")]
    RabbitMq(rabbitmq::RabbitMqSinkConfig),
    /// `redis::RedisSink`: an `XADD` per message.
    #[cfg(feature = "redis-sink")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis-sink")))]
    Redis(redis::RedisSinkConfig),
    /// `kafka::KafkaSink`: a Kafka record per message, acknowledged by the brokers. Boxed:
    /// its settings are several times the size of the other sinks'. Parsed and validated in
    /// every build; building the sink needs the feature `kafka-sink`.
    Kafka(Box<kafka::KafkaSinkConfig>),
}

impl SinkConfig {
    /// The `kind` word of this sink.
    pub fn kind(&self) -> &'static str {
        match self {
            SinkConfig::Log(_) => "log",
            #[cfg(feature = "webhook-sink")]
            SinkConfig::Webhook(_) => "webhook",
            #[cfg(feature = "nats-sink")]
            SinkConfig::Nats(_) => "nats",
            #[cfg(feature = "rabbitmq-sink")]
            SinkConfig::RabbitMq(_) => "rabbitmq",
            #[cfg(feature = "redis-sink")]
            SinkConfig::Redis(_) => "redis",
            SinkConfig::Kafka(_) => "kafka",
        }
    }

    /// Checks the sink's settings without touching the network or the environment; `field`
    /// is where the sink sits in the config (e.g. `lanes[orders/billing].sink`), so the error
    /// can name it.
    pub fn validate(&self, field: &str) -> Result<(), ConfigError> {
        match self {
            SinkConfig::Log(config) => config.validate(field),
            #[cfg(feature = "webhook-sink")]
            SinkConfig::Webhook(config) => config.validate(field),
            #[cfg(feature = "nats-sink")]
            SinkConfig::Nats(config) => config.validate(field),
            #[cfg(feature = "rabbitmq-sink")]
            SinkConfig::RabbitMq(config) => config.validate(field),
            #[cfg(feature = "redis-sink")]
            SinkConfig::Redis(config) => config.validate(field),
            SinkConfig::Kafka(config) => config.validate(field),
        }
    }

    /// Refuses a sink this build cannot deliver with: Kafka without the feature
    /// `kafka-sink`, naming the field and the feature. Its settings still parse and validate
    /// in every build (the docs' snippets and `outbox-relay check` read them); the daemon
    /// calls this with the config check, before it opens its listener.
    pub fn check_built(&self, field: &str) -> Result<(), ConfigError> {
        #[cfg(not(feature = "kafka-sink"))]
        if let SinkConfig::Kafka(_) = self {
            return Err(ConfigError::new(field, NO_KAFKA));
        }
        let _ = field;
        Ok(())
    }

    /// Checks the sink's settings against its lane's: a sink whose own timeout must end
    /// before the lane's `delivery_timeout` (Kafka's `message_timeout`) is refused when it
    /// does not.
    pub fn validate_for_lane(
        &self,
        lane: &crate::config::LaneConfig,
        field: &str,
    ) -> Result<(), ConfigError> {
        self.validate(field)?;
        match self {
            SinkConfig::Kafka(config) => {
                config.validate_delivery_timeout(lane.delivery_timeout, field)
            }
            _ => {
                let _ = lane;
                Ok(())
            }
        }
    }

    /// Builds the handler: reads the secrets the config names from the environment and
    /// connects to the target. `field` is where the sink sits in the config (e.g.
    /// `lanes[orders/billing].sink`); errors name it and the key at fault.
    pub async fn build(&self, field: &str) -> Result<Arc<dyn DeliveryHandler>, SinkBuildError> {
        self.validate(field).map_err(SinkBuildError::from)?;
        Ok(match self {
            SinkConfig::Log(config) => Arc::new(LogSink::from_config(config)),
            #[cfg(feature = "webhook-sink")]
            SinkConfig::Webhook(config) => Arc::new(webhook::WebhookSink::build(config, field)?),
            #[cfg(feature = "nats-sink")]
            SinkConfig::Nats(config) => Arc::new(nats::NatsSink::build(config, field).await?),
            #[cfg(feature = "rabbitmq-sink")]
            SinkConfig::RabbitMq(config) => {
                Arc::new(rabbitmq::RabbitMqSink::build(config, field).await?)
            }
            #[cfg(feature = "redis-sink")]
            SinkConfig::Redis(config) => Arc::new(redis::RedisSink::build(config, field).await?),
            #[cfg(feature = "kafka-sink")]
            SinkConfig::Kafka(config) => Arc::new(kafka::KafkaSink::build(config, field).await?),
            #[cfg(not(feature = "kafka-sink"))]
            SinkConfig::Kafka(_) => return Err(SinkBuildError::new(field, NO_KAFKA)),
        })
    }
}

/// A sink that could not be built: a bad setting, a secret missing from the environment, a
/// target that cannot be reached or lacks what the config expects (a JetStream stream).
/// It names the field at fault, e.g. `lanes[orders/billing].sink.secret_env`.
#[derive(Debug, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct SinkBuildError {
    field: String,
    reason: String,
    missing_variable: Option<String>,
    #[source]
    source: Option<BoxError>,
}

impl SinkBuildError {
    /// An error about `field`.
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            reason: reason.into(),
            missing_variable: None,
            source: None,
        }
    }

    /// The same, keeping the underlying error as its source.
    pub fn with_source(mut self, source: impl Into<BoxError>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// `field` names the environment variable `variable`, which is not set.
    pub fn missing_variable(field: impl Into<String>, variable: &str) -> Self {
        let mut error = Self::new(
            field,
            format!("the environment variable {variable} is not set"),
        );
        error.missing_variable = Some(variable.to_owned());
        error
    }

    /// The field at fault.
    pub fn field(&self) -> &str {
        &self.field
    }

    /// What is wrong.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// The environment variable that is not set, when that is the problem.
    pub fn missing_variable_name(&self) -> Option<&str> {
        self.missing_variable.as_deref()
    }
}

impl From<ConfigError> for SinkBuildError {
    fn from(error: ConfigError) -> Self {
        Self::new(error.field, error.reason)
    }
}

/// Reads the secret that `secret_env = "NAME"` names. Secrets never sit in the config file;
/// a variable that is not set (or is empty) is an error naming it.
#[cfg_attr(
    not(any(
        feature = "webhook-sink",
        feature = "nats-sink",
        feature = "rabbitmq-sink",
        feature = "redis-sink",
        feature = "kafka-sink"
    )),
    allow(dead_code)
)]
pub(crate) fn read_secret(field: &str, variable: &str) -> Result<String, SinkBuildError> {
    read_variable(&format!("{field}.secret_env"), variable)
}

/// Reads the environment variable `variable`, which the setting `field` names; a variable
/// that is not set (or is empty, or not UTF-8) is an error naming both, never a value.
#[cfg_attr(
    not(any(
        feature = "webhook-sink",
        feature = "nats-sink",
        feature = "rabbitmq-sink",
        feature = "redis-sink",
        feature = "kafka-sink"
    )),
    allow(dead_code)
)]
pub(crate) fn read_variable(field: &str, variable: &str) -> Result<String, SinkBuildError> {
    if variable.trim().is_empty() {
        return Err(SinkBuildError::new(
            field,
            "must name an environment variable",
        ));
    }
    match std::env::var(variable) {
        Ok(value) if !value.is_empty() => Ok(value),
        Ok(_) => Err(SinkBuildError::new(
            field,
            format!("the environment variable {variable} is empty"),
        )),
        Err(std::env::VarError::NotPresent) => {
            Err(SinkBuildError::missing_variable(field, variable))
        }
        Err(std::env::VarError::NotUnicode(_)) => Err(SinkBuildError::new(
            field,
            format!("the environment variable {variable} is not valid UTF-8"),
        )),
    }
}

/// The payload as the bytes every sink sends: its JSON text, exactly as `serde_json` writes it.
#[cfg_attr(
    not(any(
        feature = "webhook-sink",
        feature = "nats-sink",
        feature = "rabbitmq-sink",
        feature = "redis-sink"
    )),
    allow(dead_code)
)]
pub(crate) fn payload_bytes(message: &crate::message::OutboxMessage) -> Vec<u8> {
    // The exact bytes the service enqueued: a relay never re-encodes a payload.
    message.payload.as_bytes().to_vec()
}

/// `url` with `password` put in its user-info (`scheme://user:password@host…`), percent-
/// encoded; for the AMQP and Redis URLs, whose clients take the password there.
#[cfg_attr(
    not(any(feature = "rabbitmq-sink", feature = "redis-sink")),
    allow(dead_code)
)]
pub(crate) fn url_with_password(url: &str, default_user: &str, password: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let (user, host) = match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
            (user, host)
        }
        None => (default_user, authority),
    };
    let password = template::percent_encode(password);
    Some(format!("{scheme}://{user}:{password}@{host}{tail}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_goes_into_the_url_user_info() {
        assert_eq!(
            url_with_password("amqp://guest@127.0.0.1:5672/%2f", "", "p@ss/w").as_deref(),
            Some("amqp://guest:p%40ss%2Fw@127.0.0.1:5672/%2f")
        );
        assert_eq!(
            url_with_password("redis://old:secret@host:6379/0", "", "new").as_deref(),
            Some("redis://old:new@host:6379/0")
        );
        assert_eq!(
            url_with_password("redis://host", "", "pw").as_deref(),
            Some("redis://:pw@host")
        );
        assert_eq!(url_with_password("no scheme", "", "pw"), None);
    }

    #[test]
    fn a_missing_secret_names_the_variable_and_the_field() {
        let error =
            read_secret("lanes[a/b].sink", "OUTBOX_TEST_SURELY_UNSET_VARIABLE").unwrap_err();
        assert_eq!(error.field(), "lanes[a/b].sink.secret_env");
        assert_eq!(
            error.missing_variable_name(),
            Some("OUTBOX_TEST_SURELY_UNSET_VARIABLE")
        );
        assert_eq!(
            error.to_string(),
            "lanes[a/b].sink.secret_env: the environment variable OUTBOX_TEST_SURELY_UNSET_VARIABLE is not set"
        );
    }

    /// A build without Kafka refuses a Kafka lane when the config is checked, so the daemon
    /// stops with exit 2 before it opens its listener or reaches the database.
    #[cfg(not(feature = "kafka-sink"))]
    #[test]
    fn a_build_without_kafka_refuses_a_kafka_lane_at_the_config_check() {
        let sink: SinkConfig = serde_json::from_value(serde_json::json!({
            "kind": "kafka", "brokers": "127.0.0.1:9092", "topic": "orders"
        }))
        .unwrap();
        assert!(
            sink.validate("lanes[orders/ledger].sink").is_ok(),
            "its settings are valid"
        );
        let error = sink.check_built("lanes[orders/ledger].sink").unwrap_err();
        assert_eq!(error.field, "lanes[orders/ledger].sink");
        assert_eq!(
            error.reason,
            "this build has no Kafka sink: build with the feature `kafka-sink`"
        );
    }
}
