//! `NatsSink`: one JetStream publish per message (async-nats), acked once the server's
//! PubAck says the stream stored it.
//!
//! ```toml
//! sink = { kind = "nats", url = "nats://127.0.0.1:4222", subject = "orders.{target}", stream = "ORDERS" }
//! ```
//!
//! - The subject is a [`Template`] over lane, target and headers.
//! - `Nats-Msg-Id` is the `outbox_id`: JetStream's duplicate window (2 minutes unless the
//!   stream says otherwise) drops a message the relay delivers twice, say after a crash
//!   between the publish and the ack. The message's headers go as NATS headers.
//! - The stream must exist when the sink is built (a clear error naming `stream`), unless
//!   `create_stream = true`, which creates it over `stream_subjects` (default: the subject,
//!   when it has no placeholders).
//! - `secret_env` names the variable holding the server's auth token.
//!
//! | answer | outcome |
//! |---|---|
//! | PubAck (a duplicate too: the stream holds the message) | ack |
//! | no PubAck within `ack_timeout`, a broken connection, no stream answering | retryable (the client reconnects by itself) |
//! | a message larger than the server's `max_payload`, a subject NATS refuses, a missing header the subject needs | permanent |

use std::str::FromStr;
use std::time::Duration;

use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::{self, stream};
use async_nats::{HeaderMap, HeaderName, HeaderValue};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::template::Template;
use super::{payload_bytes, read_secret, SinkBuildError};
use crate::config::duration::HumanDuration;
use crate::config::ConfigError;
use crate::delivery::{DeliveryError, DeliveryHandler};
use crate::message::OutboxMessage;
use crate::redact::redact;

/// The server, unless configured.
pub const DEFAULT_URL: &str = "nats://127.0.0.1:4222";
/// How long a publish waits for its PubAck, unless configured.
pub const DEFAULT_ACK_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the first connection may take when the sink is built.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

// ---- config ----------------------------------------------------------------------------

/// The settings of a NATS JetStream sink: `sink = { kind = "nats", subject = "…", stream = "…" }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsSinkConfig {
    /// The server(s), comma-separated. Default `nats://127.0.0.1:4222`.
    #[serde(default = "default_url")]
    pub url: String,
    /// The subject each message is published to: a [`Template`].
    pub subject: Template,
    /// The JetStream stream that must store the messages: checked when the sink is built.
    pub stream: String,
    /// Create the stream when it does not exist. Default false (a missing stream is an
    /// error at start).
    #[serde(default)]
    pub create_stream: bool,
    /// The subjects a created stream listens on. Default: the subject, when it has no
    /// placeholders (otherwise they must be given).
    #[serde(default)]
    pub stream_subjects: Vec<String>,
    /// The environment variable holding the server's auth token, if it needs one.
    #[serde(default)]
    pub secret_env: Option<String>,
    /// How long a publish waits for the server's PubAck. Default `5s`.
    #[serde(default = "default_ack_timeout")]
    pub ack_timeout: HumanDuration,
}

fn default_url() -> String {
    DEFAULT_URL.to_owned()
}

fn default_ack_timeout() -> HumanDuration {
    HumanDuration(DEFAULT_ACK_TIMEOUT)
}

impl NatsSinkConfig {
    /// A config publishing to `subject` into `stream` at the default server.
    pub fn new(subject: Template, stream: impl Into<String>) -> Self {
        Self {
            url: default_url(),
            subject,
            stream: stream.into(),
            create_stream: false,
            stream_subjects: Vec::new(),
            secret_env: None,
            ack_timeout: default_ack_timeout(),
        }
    }

    /// Checks the settings; `field` is where the sink sits in the config.
    pub fn validate(&self, field: &str) -> Result<(), ConfigError> {
        if self.url.trim().is_empty() {
            return Err(ConfigError::new(
                format!("{field}.url"),
                "must not be empty",
            ));
        }
        if let Some(subject) = self.subject.as_literal() {
            validate_subject(&subject)
                .map_err(|reason| ConfigError::new(format!("{field}.subject"), reason))?;
        }
        if self.stream.is_empty()
            || self
                .stream
                .contains(|c: char| c.is_whitespace() || matches!(c, '.' | '*' | '>'))
        {
            return Err(ConfigError::new(
                format!("{field}.stream"),
                format!(
                    "{:?} is not a stream name (no spaces, '.', '*' or '>')",
                    self.stream
                ),
            ));
        }
        if self.create_stream && self.stream_subjects.is_empty() && !self.subject.is_literal() {
            return Err(ConfigError::new(
                format!("{field}.stream_subjects"),
                "create_stream needs the stream's subjects when the subject is a template",
            ));
        }
        if self.ack_timeout.0.is_zero() {
            return Err(ConfigError::new(
                format!("{field}.ack_timeout"),
                "must be greater than zero",
            ));
        }
        Ok(())
    }
}

/// Credentials a NATS URL carries in its user info.
#[derive(Debug, PartialEq, Eq)]
enum UrlCredentials {
    /// `nats://user:password@host`.
    UserAndPassword(String, String),
    /// `nats://token@host`.
    Token(String),
}

/// `urls` (comma-separated) without user info, query or fragment, and the first
/// credentials found in them (percent-decoded). A URL the `url` crate cannot parse (no
/// scheme: `127.0.0.1:4222`) is kept as it is.
fn split_credentials(urls: &str) -> (String, Option<UrlCredentials>) {
    let mut credentials = None;
    let servers: Vec<String> = urls
        .split(',')
        .map(|server| {
            let server = server.trim();
            let Ok(mut url) = url::Url::parse(server) else {
                return server.to_owned();
            };
            if !url.has_host() {
                return server.to_owned();
            }
            let user = percent_decode(url.username());
            let password = url.password().map(percent_decode);
            if credentials.is_none() && !user.is_empty() {
                credentials = Some(match password {
                    Some(password) => UrlCredentials::UserAndPassword(user, password),
                    None => UrlCredentials::Token(user),
                });
            }
            let _ = url.set_username("");
            let _ = url.set_password(None);
            url.set_query(None);
            url.set_fragment(None);
            url.to_string()
        })
        .collect();
    (servers.join(","), credentials)
}

/// `%XX` sequences decoded (user info as the `url` crate keeps it); anything else as is.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|pair| std::str::from_utf8(pair).ok())
            .and_then(|pair| u8::from_str_radix(pair, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A subject NATS accepts for a publish: dot-separated non-empty tokens, no whitespace, no
/// wildcards.
fn validate_subject(subject: &str) -> Result<(), String> {
    let bad = subject.is_empty()
        || subject.split('.').any(|token| {
            token.is_empty() || token == "*" || token == ">" || token.contains(char::is_whitespace)
        });
    if bad {
        Err(format!(
            "{subject:?} is not a NATS subject to publish to (dot-separated tokens, no spaces or wildcards)"
        ))
    } else {
        Ok(())
    }
}

// ---- build -----------------------------------------------------------------------------

/// Delivers a message as a JetStream publish.
#[derive(Debug)]
pub struct NatsSink {
    jetstream: jetstream::Context,
    subject: Template,
}

impl NatsSink {
    /// Connects to the server `config` names and checks (or creates) its stream. `field` is
    /// where the sink sits in the config, for errors.
    pub async fn build(config: &NatsSinkConfig, field: &str) -> Result<Self, SinkBuildError> {
        config.validate(field)?;
        let mut options = async_nats::ConnectOptions::new().connection_timeout(CONNECT_TIMEOUT);
        // Credentials in the URL go to the client as options, and the URL it gets holds
        // none: the client logs its server addresses (at DEBUG) as given.
        let (servers, credentials) = split_credentials(&config.url);
        match credentials {
            Some(UrlCredentials::UserAndPassword(user, password)) => {
                options = options.user_and_password(user, password);
            }
            Some(UrlCredentials::Token(token)) => options = options.token(token),
            None => {}
        }
        if let Some(variable) = &config.secret_env {
            options = options.token(read_secret(field, variable)?);
        }
        let client = options.connect(servers.as_str()).await.map_err(|error| {
            SinkBuildError::new(
                format!("{field}.url"),
                format!(
                    "cannot connect to NATS at {}: {}",
                    redact(&config.url),
                    redact(&error.to_string())
                ),
            )
        })?;
        let mut jetstream = jetstream::new(client);
        jetstream.set_timeout(config.ack_timeout.0);
        ensure_stream(&jetstream, config, field).await?;
        Ok(Self {
            jetstream,
            subject: config.subject.clone(),
        })
    }

    fn headers(message: &OutboxMessage) -> Result<HeaderMap, DeliveryError> {
        let mut headers = HeaderMap::new();
        for (name, value) in &message.headers {
            let name = HeaderName::from_str(name).map_err(|_| {
                DeliveryError::permanent(format!("the header name {name:?} is not valid in NATS"))
            })?;
            let value = HeaderValue::from_str(value).map_err(|_| {
                DeliveryError::permanent(format!("the value of header {name} is not valid in NATS"))
            })?;
            headers.insert(name, value);
        }
        Ok(headers)
    }
}

/// Fails naming `stream` when the stream is missing, unless the config says to create it.
async fn ensure_stream(
    jetstream: &jetstream::Context,
    config: &NatsSinkConfig,
    field: &str,
) -> Result<(), SinkBuildError> {
    let missing = match jetstream.get_stream(&config.stream).await {
        Ok(_) => return Ok(()),
        Err(error) => match error.kind() {
            jetstream::context::GetStreamErrorKind::JetStream(inner)
                if inner.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND =>
            {
                error
            }
            _ => {
                return Err(SinkBuildError::new(
                    format!("{field}.stream"),
                    format!(
                        "cannot look up the JetStream stream {:?}: {error}",
                        config.stream
                    ),
                )
                .with_source(error))
            }
        },
    };
    if !config.create_stream {
        return Err(SinkBuildError::new(
            format!("{field}.stream"),
            format!(
                "the JetStream stream {:?} does not exist (create it, or set create_stream = true)",
                config.stream
            ),
        )
        .with_source(missing));
    }
    let subjects = if config.stream_subjects.is_empty() {
        // `validate` made sure the subject is literal when no subjects are given.
        config.subject.as_literal().into_iter().collect()
    } else {
        config.stream_subjects.clone()
    };
    jetstream
        .get_or_create_stream(stream::Config {
            name: config.stream.clone(),
            subjects,
            ..Default::default()
        })
        .await
        .map_err(|error| {
            SinkBuildError::new(
                format!("{field}.stream"),
                format!(
                    "cannot create the JetStream stream {:?}: {error}",
                    config.stream
                ),
            )
            .with_source(error)
        })?;
    Ok(())
}

// ---- handler ---------------------------------------------------------------------------

#[async_trait]
impl DeliveryHandler for NatsSink {
    async fn deliver(&self, message: &OutboxMessage) -> Result<(), DeliveryError> {
        let subject = self
            .subject
            .render(message)
            .map_err(DeliveryError::permanent)?;
        validate_subject(&subject).map_err(DeliveryError::permanent)?;
        let publish = PublishMessage::build()
            .payload(payload_bytes(message).into())
            .headers(Self::headers(message)?)
            // After the headers: `headers` replaces the map, this adds to it.
            .message_id(message.outbox_id.to_string());
        let ack = self
            .jetstream
            .send_publish(subject.clone(), publish)
            .await
            .map_err(|error| publish_failed(&subject, error))?;
        // The PubAck: only now does the stream hold the message. A duplicate (a redelivery
        // within the window) is acked too: the stream holds the first copy.
        ack.await.map_err(|error| publish_failed(&subject, error))?;
        Ok(())
    }
}

// ---- errors ----------------------------------------------------------------------------

/// Why a JetStream publish failed.
#[derive(Debug, thiserror::Error)]
#[error("publish to NATS subject {subject:?}: {source}")]
pub struct NatsPublishError {
    /// The subject.
    pub subject: String,
    /// What async-nats said.
    #[source]
    pub source: async_nats::jetstream::context::PublishError,
}

fn publish_failed(
    subject: &str,
    source: async_nats::jetstream::context::PublishError,
) -> DeliveryError {
    // Only a message too large for the server can never go through; a timeout, a broken
    // pipe or a stream that does not answer (a restart, a leader election) may pass later.
    let permanent = matches!(source.kind(), PublishErrorKind::MaxPayloadExceeded);
    let error = NatsPublishError {
        subject: subject.to_owned(),
        source,
    };
    if permanent {
        DeliveryError::permanent(error)
    } else {
        DeliveryError::retryable(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_leave_the_url_for_the_connect_options() {
        assert_eq!(
            split_credentials("nats://app:p%40ss@127.0.0.1:4222?token=x, nats://h2:4222"),
            (
                "nats://127.0.0.1:4222,nats://h2:4222".to_owned(),
                Some(UrlCredentials::UserAndPassword(
                    "app".to_owned(),
                    "p@ss".to_owned()
                ))
            )
        );
        assert_eq!(
            split_credentials("nats://s3cr3t@h:1").1,
            Some(UrlCredentials::Token("s3cr3t".to_owned()))
        );
        assert_eq!(
            split_credentials("127.0.0.1:4222"),
            ("127.0.0.1:4222".to_owned(), None)
        );
    }

    #[test]
    fn subjects_are_checked() {
        assert!(validate_subject("orders.billing").is_ok());
        for bad in ["", "a..b", "a.*", "a.>", "a b", ".a"] {
            assert!(validate_subject(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_config_names_the_bad_field() {
        let config = NatsSinkConfig::new("x.{lane}".parse().unwrap(), "ORDERS");
        assert!(config.validate("s").is_ok());
        let mut bad = config.clone();
        bad.stream = "a.b".into();
        assert_eq!(bad.validate("s").unwrap_err().field, "s.stream");
        let mut create = config;
        create.create_stream = true;
        assert_eq!(create.validate("s").unwrap_err().field, "s.stream_subjects");
    }
}
