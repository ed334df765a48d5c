//! The Kafka sink's settings: what the config file says, validated (in every build), and
//! the librdkafka producer settings they make (feature `kafka-sink`).

use std::collections::BTreeMap;
use std::time::Duration;

#[cfg(feature = "kafka-sink")]
use rdkafka::config::ClientConfig;
use serde::{Deserialize, Serialize};

use super::{
    DEFAULT_BATCH_SIZE, DEFAULT_BROKERS, DEFAULT_LINGER, DEFAULT_MESSAGE_TIMEOUT,
    DEFAULT_QUEUE_MAX_MESSAGES, DEFAULT_STATISTICS_INTERVAL,
};
use crate::config::duration::{format_duration, HumanDuration};
use crate::config::ConfigError;
use crate::sinks::template::Template;
#[cfg(feature = "kafka-sink")]
use crate::sinks::{read_secret, read_variable, SinkBuildError};

/// How the producer talks to the brokers (librdkafka's `security.protocol`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SecurityProtocol {
    /// No TLS, no SASL.
    #[default]
    Plaintext,
    /// TLS.
    Ssl,
    /// SASL without TLS.
    SaslPlaintext,
    /// SASL over TLS.
    SaslSsl,
}

impl SecurityProtocol {
    fn as_librdkafka(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "plaintext",
            SecurityProtocol::Ssl => "ssl",
            SecurityProtocol::SaslPlaintext => "sasl_plaintext",
            SecurityProtocol::SaslSsl => "sasl_ssl",
        }
    }

    fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }
}

/// The SASL mechanism (librdkafka's `sasl.mechanisms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SaslMechanism {
    /// `PLAIN`: the password in the clear (use it over TLS).
    #[serde(rename = "PLAIN")]
    Plain,
    /// `SCRAM-SHA-256`.
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    /// `SCRAM-SHA-512`.
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
}

impl SaslMechanism {
    #[cfg(feature = "kafka-sink")]
    fn as_librdkafka(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// The settings of a Kafka sink: `sink = { kind = "kafka", topic = "…" }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSinkConfig {
    /// The bootstrap brokers, comma-separated `host:port`. Default `127.0.0.1:9092`.
    #[serde(default = "default_brokers")]
    pub brokers: String,
    /// The topic of each record: a [`Template`].
    pub topic: Template,
    /// The record key: a [`Template`]. Default: the message's ordering key (none without).
    /// The relay orders deliveries by ordering key, not by this key: records that share a
    /// Kafka key but not an ordering key may reach their partition out of enqueue order
    /// (the sink logs a warning the first time a record's key is not its ordering key).
    #[serde(default)]
    pub key: Option<Template>,
    /// The partition: a number, or a [`Template`] rendering one. Default: the partitioner's
    /// choice.
    #[serde(default)]
    pub partition: Option<Template>,
    /// Whether the brokers create a topic on first use: an unknown topic is then retryable
    /// instead of permanent. Default false.
    #[serde(default)]
    pub auto_create_topics: bool,
    /// Whether the broker refusing the sink's credentials or permissions (SASL
    /// authentication, topic or cluster authorization) is retried, the default, rather
    /// than dead-lettered: a rotated password or an ACL granted late heals, and meanwhile
    /// the lane's breaker opens instead of the backlog being dead-lettered at full speed.
    #[serde(default = "retry_auth_failures")]
    pub retry_auth_failures: bool,
    /// `plaintext` (default), `ssl`, `sasl_plaintext` or `sasl_ssl`.
    #[serde(default)]
    pub security_protocol: SecurityProtocol,
    /// `PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`; needed with a `sasl_*` protocol.
    #[serde(default)]
    pub sasl_mechanism: Option<SaslMechanism>,
    /// The SASL user; needed with a `sasl_*` protocol.
    #[serde(default)]
    pub sasl_username: Option<String>,
    /// The environment variable holding the SASL password; needed with a `sasl_*` protocol.
    #[serde(default)]
    pub secret_env: Option<String>,
    /// The CA certificate(s) (PEM file) that verify the brokers, with `ssl`/`sasl_ssl`.
    /// Default: the system's.
    #[serde(default)]
    pub ssl_ca_location: Option<String>,
    /// The client certificate (PEM file), for brokers that authenticate clients by TLS.
    #[serde(default)]
    pub ssl_certificate_location: Option<String>,
    /// The client certificate's key (PEM file).
    #[serde(default)]
    pub ssl_key_location: Option<String>,
    /// The environment variable holding the client key's password, if it has one.
    #[serde(default)]
    pub ssl_key_password_env: Option<String>,
    /// How long librdkafka may try to deliver a record, retries included
    /// (`message.timeout.ms`). Must be below the lane's `delivery_timeout`. Default `15s`.
    #[serde(default = "default_message_timeout")]
    pub message_timeout: HumanDuration,
    /// How long the producer waits to fill a batch (`linger.ms`). Default `5ms`.
    #[serde(default = "default_linger")]
    pub linger: HumanDuration,
    /// The largest batch in bytes (`batch.size`). Default 1,000,000.
    #[serde(default = "default_batch_size")]
    pub batch_size: u32,
    /// The most records waiting in the producer (`queue.buffering.max.messages`): the bound
    /// of the sink's queue. Default 100,000.
    #[serde(default = "default_queue_max_messages")]
    pub queue_max_messages: u32,
    /// The largest record the producer sends (`message.max.bytes`); keep it at or below the
    /// brokers' own limit. Default librdkafka's (1,000,000).
    #[serde(default)]
    pub message_max_bytes: Option<u32>,
    /// How often librdkafka reports the statistics the queue and broker round-trip gauges
    /// come from (`statistics.interval.ms`); `0s` turns them off. Default `5s`.
    #[serde(default = "default_statistics_interval")]
    pub statistics_interval: HumanDuration,
    /// Further librdkafka producer settings, passed as they are.
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
}

fn retry_auth_failures() -> bool {
    true
}

fn default_brokers() -> String {
    DEFAULT_BROKERS.to_owned()
}

fn default_message_timeout() -> HumanDuration {
    HumanDuration(DEFAULT_MESSAGE_TIMEOUT)
}

fn default_linger() -> HumanDuration {
    HumanDuration(DEFAULT_LINGER)
}

fn default_batch_size() -> u32 {
    DEFAULT_BATCH_SIZE
}

fn default_queue_max_messages() -> u32 {
    DEFAULT_QUEUE_MAX_MESSAGES
}

fn default_statistics_interval() -> HumanDuration {
    HumanDuration(DEFAULT_STATISTICS_INTERVAL)
}

/// librdkafka settings this sink sets itself, and the setting of ours that stands for each.
const OWNED_PROPERTIES: &[(&str, &str)] = &[
    ("bootstrap.servers", "brokers"),
    ("metadata.broker.list", "brokers"),
    ("enable.idempotence", "(always true)"),
    ("acks", "(always all)"),
    ("request.required.acks", "(always all)"),
    ("partitioner", "partition"),
    ("security.protocol", "security_protocol"),
    ("sasl.mechanisms", "sasl_mechanism"),
    ("sasl.mechanism", "sasl_mechanism"),
    ("sasl.username", "sasl_username"),
    ("sasl.password", "secret_env"),
    ("ssl.key.password", "ssl_key_password_env"),
    ("ssl.ca.location", "ssl_ca_location"),
    ("ssl.certificate.location", "ssl_certificate_location"),
    ("ssl.key.location", "ssl_key_location"),
    ("message.timeout.ms", "message_timeout"),
    ("delivery.timeout.ms", "message_timeout"),
    ("linger.ms", "linger"),
    ("queue.buffering.max.ms", "linger"),
    ("batch.size", "batch_size"),
    ("queue.buffering.max.messages", "queue_max_messages"),
    ("message.max.bytes", "message_max_bytes"),
    ("statistics.interval.ms", "statistics_interval"),
];

impl KafkaSinkConfig {
    /// A config producing to `topic` on the default brokers.
    pub fn new(topic: Template) -> Self {
        Self {
            brokers: default_brokers(),
            topic,
            key: None,
            partition: None,
            auto_create_topics: false,
            retry_auth_failures: true,
            security_protocol: SecurityProtocol::default(),
            sasl_mechanism: None,
            sasl_username: None,
            secret_env: None,
            ssl_ca_location: None,
            ssl_certificate_location: None,
            ssl_key_location: None,
            ssl_key_password_env: None,
            message_timeout: default_message_timeout(),
            linger: default_linger(),
            batch_size: default_batch_size(),
            queue_max_messages: default_queue_max_messages(),
            message_max_bytes: None,
            statistics_interval: default_statistics_interval(),
            properties: BTreeMap::new(),
        }
    }

    /// The bootstrap brokers.
    pub fn brokers(mut self, brokers: impl Into<String>) -> Self {
        self.brokers = brokers.into();
        self
    }

    /// The record key template (default: the ordering key).
    pub fn key(mut self, key: Template) -> Self {
        self.key = Some(key);
        self
    }

    /// The partition template (default: the partitioner's choice).
    pub fn partition(mut self, partition: Template) -> Self {
        self.partition = Some(partition);
        self
    }

    /// `linger.ms`.
    pub fn linger(mut self, linger: Duration) -> Self {
        self.linger = HumanDuration(linger);
        self
    }

    /// `message.timeout.ms`.
    pub fn message_timeout(mut self, timeout: Duration) -> Self {
        self.message_timeout = HumanDuration(timeout);
        self
    }

    /// `message.max.bytes`.
    pub fn message_max_bytes(mut self, bytes: u32) -> Self {
        self.message_max_bytes = Some(bytes);
        self
    }

    /// `statistics.interval.ms` (`Duration::ZERO` turns the statistics off).
    pub fn statistics_interval(mut self, interval: Duration) -> Self {
        self.statistics_interval = HumanDuration(interval);
        self
    }

    /// A further librdkafka setting.
    pub fn property(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.insert(name.into(), value.into());
        self
    }

    /// Checks the settings; `field` is where the sink sits in the config.
    pub fn validate(&self, field: &str) -> Result<(), ConfigError> {
        let at = |key: &str| format!("{field}.{key}");
        if self
            .brokers
            .split(',')
            .any(|broker| broker.trim().is_empty())
        {
            return Err(ConfigError::new(
                at("brokers"),
                "must list brokers as host:port, comma-separated",
            ));
        }
        if let Some(topic) = self.topic.as_literal() {
            validate_topic(&topic).map_err(|reason| ConfigError::new(at("topic"), reason))?;
        }
        if let Some(partition) = self.partition.as_ref().and_then(Template::as_literal) {
            parse_partition(&partition)
                .map_err(|reason| ConfigError::new(at("partition"), reason))?;
        }
        let sasl = self.security_protocol.uses_sasl();
        for (key, set) in [
            ("sasl_mechanism", self.sasl_mechanism.is_some()),
            ("sasl_username", self.sasl_username.is_some()),
            ("secret_env", self.secret_env.is_some()),
        ] {
            if sasl && !set {
                return Err(ConfigError::new(
                    at(key),
                    format!(
                        "is needed with security_protocol = \"{}\"",
                        self.security_protocol.as_librdkafka()
                    ),
                ));
            }
            if !sasl && set {
                return Err(ConfigError::new(
                    at(key),
                    "is set, but security_protocol is not sasl_plaintext or sasl_ssl",
                ));
            }
        }
        if self.message_timeout.0 < Duration::from_millis(1) {
            return Err(ConfigError::new(
                at("message_timeout"),
                "must be at least 1ms",
            ));
        }
        let statistics = self.statistics_interval.0;
        if statistics != Duration::ZERO
            && (statistics < Duration::from_millis(1) || statistics > Duration::from_secs(86_400))
        {
            return Err(ConfigError::new(
                at("statistics_interval"),
                format!(
                    "{} is outside 1ms to 24h (0s turns the statistics off)",
                    format_duration(statistics)
                ),
            ));
        }
        if self.batch_size == 0 || self.queue_max_messages == 0 {
            let key = if self.batch_size == 0 {
                "batch_size"
            } else {
                "queue_max_messages"
            };
            return Err(ConfigError::new(at(key), "must be greater than zero"));
        }
        for name in self.properties.keys() {
            if let Some((_, ours)) = OWNED_PROPERTIES.iter().find(|(owned, _)| owned == name) {
                return Err(ConfigError::new(
                    format!("{field}.properties.{name}"),
                    format!("is set by the sink: use {ours}"),
                ));
            }
        }
        Ok(())
    }

    /// Checks that librdkafka gives up on a record (`message_timeout`) before the relay
    /// gives up on its delivery (the lane's `delivery_timeout`): otherwise a record could be
    /// written after the relay counted it failed, and the report would be lost.
    pub fn validate_delivery_timeout(
        &self,
        delivery_timeout: Duration,
        field: &str,
    ) -> Result<(), ConfigError> {
        if self.message_timeout.0 >= delivery_timeout {
            return Err(ConfigError::new(
                format!("{field}.message_timeout"),
                format!(
                    "{} must be below the lane's delivery_timeout ({})",
                    format_duration(self.message_timeout.0),
                    format_duration(delivery_timeout)
                ),
            ));
        }
        Ok(())
    }

    /// The producer's librdkafka settings, secrets read from the environment.
    #[cfg(feature = "kafka-sink")]
    pub(super) fn client_config(&self, field: &str) -> Result<ClientConfig, SinkBuildError> {
        let mut config = ClientConfig::new();
        // A default that `properties` may replace; the sink's own settings come after them
        // (and are refused there).
        config.set("client.id", "outbox-relay");
        for (name, value) in &self.properties {
            config.set(name, value);
        }
        config
            .set("bootstrap.servers", &self.brokers)
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("partitioner", "murmur2_random")
            .set("message.timeout.ms", millis(self.message_timeout.0))
            .set("linger.ms", millis(self.linger.0))
            .set("batch.size", self.batch_size.to_string())
            .set(
                "queue.buffering.max.messages",
                self.queue_max_messages.to_string(),
            )
            .set("security.protocol", self.security_protocol.as_librdkafka())
            // Not `millis`: 0 is librdkafka's "off".
            .set(
                "statistics.interval.ms",
                self.statistics_interval.0.as_millis().to_string(),
            );
        if let Some(bytes) = self.message_max_bytes {
            config.set("message.max.bytes", bytes.to_string());
        }
        if let Some(mechanism) = self.sasl_mechanism {
            config.set("sasl.mechanisms", mechanism.as_librdkafka());
        }
        if let Some(user) = &self.sasl_username {
            config.set("sasl.username", user);
        }
        if let Some(variable) = &self.secret_env {
            config.set("sasl.password", read_secret(field, variable)?);
        }
        for (key, value) in [
            ("ssl.ca.location", &self.ssl_ca_location),
            ("ssl.certificate.location", &self.ssl_certificate_location),
            ("ssl.key.location", &self.ssl_key_location),
        ] {
            if let Some(value) = value {
                config.set(key, value);
            }
        }
        if let Some(variable) = &self.ssl_key_password_env {
            let password = read_variable(&format!("{field}.ssl_key_password_env"), variable)?;
            config.set("ssl.key.password", password);
        }
        Ok(config)
    }
}

#[cfg(feature = "kafka-sink")]
fn millis(duration: Duration) -> String {
    duration.as_millis().max(1).to_string()
}

/// A topic name Kafka accepts: 1 to 249 of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub(super) fn validate_topic(topic: &str) -> Result<(), String> {
    let legal = !topic.is_empty()
        && topic.len() <= 249
        && topic != "."
        && topic != ".."
        && topic
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if legal {
        Ok(())
    } else {
        Err(format!(
            "{topic:?} is not a Kafka topic (1 to 249 of a-z, A-Z, 0-9, '.', '_', '-')"
        ))
    }
}

/// A partition number: 0 or more.
pub(super) fn parse_partition(text: &str) -> Result<i32, String> {
    text.trim()
        .parse::<i32>()
        .ok()
        .filter(|partition| *partition >= 0)
        .ok_or_else(|| format!("{text:?} is not a partition number (0 or more)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> KafkaSinkConfig {
        KafkaSinkConfig::new("outbox.event.{header.aggregatetype}".parse().unwrap())
    }

    #[test]
    fn topics_and_partitions_are_checked() {
        assert!(validate_topic("outbox.event.Order_1-x").is_ok());
        for bad in ["", ".", "..", "a b", "a/b", &"x".repeat(250)] {
            assert!(validate_topic(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_partition(" 3 "), Ok(3));
        assert!(parse_partition("-1").is_err());
        assert!(parse_partition("two").is_err());
    }

    #[test]
    fn the_config_names_the_bad_field() {
        assert!(config().validate("s").is_ok());
        let field = |config: KafkaSinkConfig| config.validate("s").unwrap_err().field;
        let mut literal = config();
        literal.topic = "a topic".parse().unwrap();
        assert_eq!(field(literal), "s.topic");
        assert_eq!(
            field(config().partition("x".parse().unwrap())),
            "s.partition"
        );
        let mut sasl = config();
        sasl.security_protocol = SecurityProtocol::SaslSsl;
        sasl.sasl_mechanism = Some(SaslMechanism::ScramSha512);
        assert_eq!(field(sasl.clone()), "s.sasl_username");
        sasl.sasl_username = Some("relay".into());
        assert_eq!(field(sasl.clone()), "s.secret_env");
        sasl.secret_env = Some("KAFKA_PASSWORD".into());
        assert!(sasl.validate("s").is_ok());
        let mut stray = config();
        stray.sasl_username = Some("relay".into());
        assert_eq!(field(stray), "s.sasl_username");
        let owned = config().property("enable.idempotence", "false");
        let error = owned.validate("s").unwrap_err();
        assert_eq!(error.field, "s.properties.enable.idempotence");
        assert!(error.reason.contains("set by the sink"), "{}", error.reason);
        assert!(config()
            .property("compression.type", "lz4")
            .validate("s")
            .is_ok());
        assert_eq!(
            field(config().statistics_interval(Duration::from_micros(500))),
            "s.statistics_interval"
        );
        assert!(config()
            .statistics_interval(Duration::ZERO)
            .validate("s")
            .is_ok());
    }

    #[test]
    fn the_message_timeout_must_end_before_the_delivery_timeout() {
        let config = config().message_timeout(Duration::from_secs(20));
        assert!(config
            .validate_delivery_timeout(Duration::from_secs(30), "s")
            .is_ok());
        let error = config
            .validate_delivery_timeout(Duration::from_secs(20), "s")
            .unwrap_err();
        assert_eq!(error.field, "s.message_timeout");
        assert!(
            error.reason.contains("delivery_timeout"),
            "{}",
            error.reason
        );
    }

    #[cfg(feature = "kafka-sink")]
    #[test]
    fn the_producer_is_idempotent_and_takes_its_password_from_the_environment() {
        let mut config = config();
        config.security_protocol = SecurityProtocol::SaslPlaintext;
        config.sasl_mechanism = Some(SaslMechanism::ScramSha256);
        config.sasl_username = Some("relay".into());
        config.secret_env = Some("OUTBOX_TEST_KAFKA_UNSET_PASSWORD".into());
        let error = config.client_config("s").unwrap_err();
        assert_eq!(
            error.missing_variable_name(),
            Some("OUTBOX_TEST_KAFKA_UNSET_PASSWORD")
        );
        config.secret_env = Some("PATH".into());
        let client = config.client_config("s").unwrap();
        for (key, value) in [
            ("enable.idempotence", "true"),
            ("acks", "all"),
            ("partitioner", "murmur2_random"),
            ("security.protocol", "sasl_plaintext"),
            ("sasl.mechanisms", "SCRAM-SHA-256"),
            ("message.timeout.ms", "15000"),
            ("linger.ms", "5"),
            ("statistics.interval.ms", "5000"),
        ] {
            assert_eq!(client.get(key), Some(value), "{key}");
        }
        assert!(client.get("sasl.password").is_some_and(|p| !p.is_empty()));
        assert_eq!(client.get("client.id"), Some("outbox-relay"));
        let named = super::KafkaSinkConfig::new("t".parse().unwrap())
            .property("client.id", "billing-relay")
            .client_config("s")
            .unwrap();
        assert_eq!(named.get("client.id"), Some("billing-relay"));
    }

    #[test]
    fn the_guide_lists_every_setting() {
        let page = include_str!("../../../docs/src/sinks.md");
        let start = page
            .find("\n## Kafka\n")
            .expect("the sinks page's Kafka section");
        let section = &page[start..];
        let section = &section[..section.find("\n## From Debezium").unwrap_or(section.len())];
        let rows: Vec<&str> = section.lines().filter(|l| l.starts_with("| `")).collect();
        let settings = serde_json::to_value(config()).unwrap();
        for key in settings.as_object().unwrap().keys() {
            let named = format!("`{key}`");
            assert!(
                rows.iter()
                    .any(|row| row.split('|').nth(1).is_some_and(|c| c.contains(&named))),
                "docs/src/sinks.md's Kafka settings table lacks {named}"
            );
        }
    }
}
