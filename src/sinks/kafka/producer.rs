//! The producer: building the sink (librdkafka's producer, the brokers' metadata), the
//! handler, and what a failed produce means.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::RwLock;
use std::time::Duration;

use async_trait::async_trait;
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};

use super::config::{parse_partition, validate_topic};
use super::statistics::{ProducerContext, SinkMetrics};
use super::{KafkaSinkConfig, CONNECT_TIMEOUT, ID_HEADER};
use crate::config::duration::format_duration;
use crate::delivery::{DeliveryError, DeliveryHandler};
use crate::message::OutboxMessage;
use crate::redact::redact;
use crate::sinks::template::Template;
use crate::sinks::SinkBuildError;

/// The sink's producer: its context records librdkafka's statistics.
type SinkProducer = FutureProducer<ProducerContext>;

// ---- build -----------------------------------------------------------------------------

/// Delivers a message as a Kafka record, through one idempotent producer per sink.
pub struct KafkaSink {
    /// Replaced by a fresh one when librdkafka declares it failed for good (a fatal
    /// idempotence error: the broker lost the producer's sequence state, say).
    producer: RwLock<SinkProducer>,
    client_config: ClientConfig,
    metrics: SinkMetrics,
    topic: Template,
    key: Option<Template>,
    partition: Option<Template>,
    outcomes: Outcomes,
    message_timeout: Duration,
    /// Whether the warning about a record key that is not the ordering key went out.
    key_warned: AtomicBool,
}

impl fmt::Debug for KafkaSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaSink")
            .field("topic", &self.topic)
            .field("key", &self.key)
            .field("partition", &self.partition)
            .finish_non_exhaustive()
    }
}

impl KafkaSink {
    /// Creates the producer `config` describes and waits for the brokers' metadata, so an
    /// unreachable broker or a refused login fails here, naming the setting. When the topic
    /// is literal and the brokers do not create topics, it must exist. `field` is where the
    /// sink sits in the config, for errors; it also names the sink in its metrics (the
    /// `sink` label of `outbox_kafka_*`), which register with the recorder current now.
    pub async fn build(config: &KafkaSinkConfig, field: &str) -> Result<Self, SinkBuildError> {
        config.validate(field)?;
        let client_config = config.client_config(field)?;
        let metrics = SinkMetrics::new(field);
        let context = ProducerContext {
            metrics: metrics.clone(),
        };
        let producer: SinkProducer =
            client_config
                .create_with_context(context)
                .map_err(|error| {
                    SinkBuildError::new(
                        field,
                        format!(
                            "cannot create the Kafka producer: {}",
                            redact(&error.to_string())
                        ),
                    )
                    .with_source(error)
                })?;
        // librdkafka's metadata call blocks its thread: off the runtime's workers.
        let literal_topic = config.topic.as_literal();
        let probe = producer.clone();
        let topic = literal_topic.clone();
        let metadata = tokio::task::spawn_blocking(move || {
            probe
                .client()
                .fetch_metadata(topic.as_deref(), CONNECT_TIMEOUT)
                .map(|metadata| {
                    metadata.topics().first().and_then(|topic| {
                        topic
                            .error()
                            .map(|code| RDKafkaErrorCode::from(code).to_string())
                    })
                })
        })
        .await
        .map_err(|error| {
            SinkBuildError::new(field, format!("the metadata call failed: {error}"))
        })?;
        match metadata {
            Err(error) => {
                return Err(SinkBuildError::new(
                    format!("{field}.brokers"),
                    format!(
                        "no answer from the Kafka brokers {} within {}: {}",
                        redact(&config.brokers),
                        format_duration(CONNECT_TIMEOUT),
                        redact(&error.to_string())
                    ),
                )
                .with_source(error))
            }
            Ok(Some(topic_error)) if !config.auto_create_topics => {
                return Err(SinkBuildError::new(
                    format!("{field}.topic"),
                    format!(
                        "the topic {:?}: {topic_error} (create it, or set auto_create_topics = true if the brokers create topics)",
                        literal_topic.unwrap_or_default()
                    ),
                ))
            }
            Ok(_) => {}
        }
        Ok(Self {
            producer: RwLock::new(producer),
            client_config,
            metrics,
            topic: config.topic.clone(),
            key: config.key.clone(),
            partition: config.partition.clone(),
            outcomes: Outcomes {
                auto_create_topics: config.auto_create_topics,
                retry_auth_failures: config.retry_auth_failures,
            },
            message_timeout: config.message_timeout.0,
            key_warned: AtomicBool::new(false),
        })
    }

    /// The producer deliveries use now.
    fn producer(&self) -> SinkProducer {
        match self.producer.read() {
            Ok(producer) => producer.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// `error` as the relay should take it. A fatal error means librdkafka will refuse
    /// every record of this producer from now on: the sink swaps in a fresh one (a new
    /// producer id, so sequence numbers start over) and the delivery is retried.
    fn failed(&self, used: &SinkProducer, topic: &str, error: KafkaError) -> DeliveryError {
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::Fatal) {
            self.replace_producer(used);
        }
        produce_failed(topic, error, self.outcomes)
    }

    fn replace_producer(&self, used: &SinkProducer) {
        let context = ProducerContext {
            metrics: self.metrics.clone(),
        };
        let Ok(fresh) = self.client_config.create_with_context(context) else {
            // The settings made a producer at build; if they cannot now, the old one
            // stays and the next fatal error tries again.
            return;
        };
        let mut current = match self.producer.write() {
            Ok(current) => current,
            Err(poisoned) => poisoned.into_inner(),
        };
        // Only the delivery that saw the failed producer replaces it, once.
        if std::ptr::eq(current.client().native_ptr(), used.client().native_ptr()) {
            tracing::warn!("the Kafka producer failed for good; a fresh one takes over");
            *current = fresh;
            self.metrics.replaced();
        }
    }

    /// The record's topic, key and partition for `message`.
    fn route(
        &self,
        message: &OutboxMessage,
    ) -> Result<(String, Option<String>, Option<i32>), DeliveryError> {
        let topic = self
            .topic
            .render(message)
            .map_err(DeliveryError::permanent)?;
        validate_topic(&topic).map_err(DeliveryError::permanent)?;
        let key = match &self.key {
            Some(template) => {
                let key = template.render(message).map_err(DeliveryError::permanent)?;
                if message.ordering_key.as_deref() != Some(key.as_str())
                    && !self.key_warned.swap(true, Ordering::Relaxed)
                {
                    tracing::warn!(
                        lane = %message.lane,
                        target = %message.target,
                        outbox_id = %message.outbox_id,
                        key = %key,
                        ordering_key = message.ordering_key.as_deref().unwrap_or(""),
                        "a Kafka record's key is not its ordering key: the relay orders deliveries by ordering key, so records that share this key but not an ordering key may reach their partition out of enqueue order (logged once per sink)"
                    );
                }
                Some(key)
            }
            None => message.ordering_key.clone(),
        };
        let partition = match &self.partition {
            Some(template) => {
                let text = template.render(message).map_err(DeliveryError::permanent)?;
                Some(parse_partition(&text).map_err(DeliveryError::permanent)?)
            }
            None => None,
        };
        Ok((topic, key, partition))
    }
}

/// The record's headers: the message's, and `id` = the `outbox_id`.
fn record_headers(message: &OutboxMessage) -> OwnedHeaders {
    let id = message.outbox_id.to_string();
    let mut headers = OwnedHeaders::new_with_capacity(message.headers.len() + 1);
    for (name, value) in &message.headers {
        if name == ID_HEADER {
            continue;
        }
        headers = headers.insert(Header {
            key: name,
            value: Some(value.as_bytes()),
        });
    }
    headers.insert(Header {
        key: ID_HEADER,
        value: Some(id.as_bytes()),
    })
}

// ---- handler ---------------------------------------------------------------------------

#[async_trait]
impl DeliveryHandler for KafkaSink {
    /// `message_timeout`: librdkafka gives up on a record after it, and the relay must not
    /// give up on the delivery before.
    fn own_timeout(&self) -> Option<(&'static str, Duration)> {
        Some(("message_timeout", self.message_timeout))
    }

    async fn deliver(&self, message: &OutboxMessage) -> Result<(), DeliveryError> {
        let (topic, key, partition) = self.route(message)?;
        let mut record = FutureRecord::to(&topic)
            .payload(message.payload.as_bytes())
            .headers(record_headers(message));
        if let Some(key) = &key {
            record = record.key(key.as_str());
        }
        if let Some(partition) = partition {
            record = record.partition(partition);
        }
        // Enqueueing fails at once on what the client itself refuses: a record over
        // `message.max.bytes`, a full queue.
        let producer = self.producer();
        let _in_flight = self.metrics.in_flight();
        let report = producer
            .send_result(record)
            .map_err(|(error, _)| self.failed(&producer, &topic, error))?;
        match report.await {
            Ok(Ok(_partition_and_offset)) => Ok(()),
            Ok(Err((error, _))) => Err(self.failed(&producer, &topic, error)),
            // The producer went away with the record in its queue (it is only dropped with
            // the sink): whether the broker has it is unknown, so try again.
            Err(_canceled) => Err(DeliveryError::retryable(KafkaProduceError {
                topic,
                source: KafkaError::Canceled,
            })),
        }
    }
}

// ---- errors ----------------------------------------------------------------------------

/// Why a Kafka produce failed: the topic and what librdkafka (or the broker) said.
#[derive(Debug, thiserror::Error)]
#[error("produce to Kafka topic {topic:?}: {source}")]
pub struct KafkaProduceError {
    /// The topic.
    pub topic: String,
    /// What librdkafka said; the broker's error text is in it.
    #[source]
    pub source: KafkaError,
}

/// Whether retrying can fix a failed produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Retryable,
    Permanent,
}

/// The sink's settings that decide what a failed produce means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Outcomes {
    /// An unknown topic may exist on the next try.
    auto_create_topics: bool,
    /// An authorization or authentication failure may heal (a rotation, an ACL change).
    retry_auth_failures: bool,
}

impl Default for Outcomes {
    fn default() -> Self {
        Self {
            auto_create_topics: false,
            retry_auth_failures: true,
        }
    }
}

/// The broker's (or the client's) answer, as the relay should take it. What a later try
/// cannot change is permanent; whatever a restarted or re-elected broker may accept is
/// retryable, the unknown included.
fn outcome(code: RDKafkaErrorCode, settings: Outcomes) -> Outcome {
    use RDKafkaErrorCode as C;
    match code {
        C::TopicAuthorizationFailed
        | C::ClusterAuthorizationFailed
        | C::TransactionalIdAuthorizationFailed
        | C::SaslAuthenticationFailed
        | C::Authentication
            if settings.retry_auth_failures =>
        {
            Outcome::Retryable
        }
        C::MessageSizeTooLarge
        | C::InvalidMessageSize
        | C::MessageBatchTooLarge
        | C::InvalidRecord
        | C::InvalidMessage
        | C::InvalidTopic
        | C::UnknownPartition
        | C::TopicAuthorizationFailed
        | C::ClusterAuthorizationFailed
        | C::TransactionalIdAuthorizationFailed
        | C::SaslAuthenticationFailed
        | C::Authentication
        | C::UnsupportedForMessageFormat
        | C::PolicyViolation
        | C::InvalidRequiredAcks => Outcome::Permanent,
        C::UnknownTopic | C::UnknownTopicOrPartition if !settings.auto_create_topics => {
            Outcome::Permanent
        }
        _ => Outcome::Retryable,
    }
}

fn produce_failed(topic: &str, source: KafkaError, settings: Outcomes) -> DeliveryError {
    let permanent = source
        .rdkafka_error_code()
        .is_some_and(|code| outcome(code, settings) == Outcome::Permanent);
    let error = KafkaProduceError {
        topic: topic.to_owned(),
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
    fn refusals_are_permanent_and_outages_retryable() {
        use RDKafkaErrorCode as C;
        let defaults = Outcomes::default();
        for code in [
            C::MessageSizeTooLarge,
            C::UnknownTopicOrPartition,
            C::UnknownTopic,
            C::InvalidRecord,
        ] {
            assert_eq!(outcome(code, defaults), Outcome::Permanent, "{code:?}");
        }
        for code in [
            C::AllBrokersDown,
            C::BrokerTransportFailure,
            C::MessageTimedOut,
            C::RequestTimedOut,
            C::QueueFull,
            C::NotLeaderForPartition,
            C::NotEnoughReplicas,
            C::LeaderNotAvailable,
        ] {
            assert_eq!(outcome(code, defaults), Outcome::Retryable, "{code:?}");
        }
        // With topics created on first use, an unknown topic may exist on the next try.
        let created = Outcomes {
            auto_create_topics: true,
            ..defaults
        };
        assert_eq!(outcome(C::UnknownTopic, created), Outcome::Retryable);
        assert_eq!(
            outcome(C::UnknownTopicOrPartition, created),
            Outcome::Retryable
        );
        assert!(!produce_failed("t", KafkaError::Canceled, defaults).is_permanent());
    }

    #[test]
    fn authorization_and_sasl_failures_are_retried_unless_the_sink_says_otherwise() {
        use RDKafkaErrorCode as C;
        let dead_letter = Outcomes {
            retry_auth_failures: false,
            ..Outcomes::default()
        };
        for code in [
            C::TopicAuthorizationFailed,
            C::ClusterAuthorizationFailed,
            C::TransactionalIdAuthorizationFailed,
            C::SaslAuthenticationFailed,
            C::Authentication,
        ] {
            assert_eq!(
                outcome(code, Outcomes::default()),
                Outcome::Retryable,
                "{code:?}"
            );
            assert_eq!(outcome(code, dead_letter), Outcome::Permanent, "{code:?}");
        }
        let config: KafkaSinkConfig = serde_json::from_str(r#"{"topic": "t"}"#).expect("a config");
        assert!(config.retry_auth_failures, "retried by default");
    }
}
