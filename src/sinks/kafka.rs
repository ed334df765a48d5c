//! `KafkaSink`: one Kafka record per message (librdkafka through `rdkafka`), acked once the
//! broker acknowledged the record (its delivery report), routed the way Debezium's outbox
//! event router routes, so consumers written for Debezium read it unchanged.
//!
//! ```toml
//! sink = { kind = "kafka", brokers = "127.0.0.1:9092", topic = "outbox.event.{payload.aggregatetype}" }
//! ```
//!
//! - **Topic**: a [`Template`](crate::sinks::template::Template) over lane, target, headers and payload fields (Debezium's
//!   `route.by.field` and `route.topic.replacement`: `outbox.event.${routedByValue}` is
//!   `outbox.event.{header.aggregatetype}` or `outbox.event.{payload.aggregatetype}`).
//! - **Key**: the message's ordering key (Debezium's `aggregateid`), or the `key` template;
//!   no key when there is neither. Per-key order is the ordering key's: the relay delivers
//!   a key's messages one at a time, so a record key that is not the ordering key (a `key`
//!   template over another field) keeps no order among records that share it but not an
//!   ordering key. The sink logs a warning the first time it produces such a record.
//! - **Value**: the payload's bytes exactly as enqueued.
//! - **Headers**: the message's headers (the W3C `traceparent` and `tracestate` among
//!   them when a trace was captured at enqueue), and `id` = the `outbox_id`, as the router's
//!   `table.field.event.id`. A message header called `id` is replaced by it.
//! - **Partition**: chosen by the `murmur2_random` partitioner, so a key lands on the
//!   partition a Java producer picks; `partition` (a number, or a template rendering one,
//!   like Debezium's `table.field.event.partition`) overrides it.
//!
//! The producer is idempotent (`enable.idempotence=true`, `acks=all`): the broker keeps the
//! order of a partition's records across the producer's own retries, and the relay hands a
//! key's messages over one at a time, so per-key order holds. The concurrent deliveries of
//! a lane share the sink's one producer, so librdkafka batches them (`linger`,
//! `batch_size`). Its queue is bounded (`queue_max_messages`): a full queue is a retryable
//! failure. `message_timeout` (librdkafka's `message.timeout.ms`, default 15 s) must stay
//! below the lane's `delivery_timeout` (default 20 s), so the delivery report always comes
//! before the relay gives up on the call; the config file refuses a lane where it does not.
//!
//! TLS and SASL: `security_protocol` (`plaintext`, `ssl`, `sasl_plaintext`, `sasl_ssl`),
//! `sasl_mechanism` (`PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512`), `sasl_username`, and the
//! password from the environment variable `secret_env` names; `ssl_ca_location`,
//! `ssl_certificate_location`, `ssl_key_location` and `ssl_key_password_env` for TLS.
//! `properties` passes further librdkafka settings (`compression.type`, `client.id`, …);
//! the ones this sink owns (idempotence, acks, partitioner, credentials, …) are refused
//! there, naming the setting to use instead.
//!
//! | answer | outcome |
//! |---|---|
//! | the delivery report with an offset | ack |
//! | a broker unreachable or restarting, a request or the message timing out, a full queue, a leader moving | retryable |
//! | a fatal producer error (the broker lost the idempotence state, say) | retryable, and a fresh producer replaces the failed one |
//! | an authorization or SASL authentication failure | retryable (`retry_auth_failures`, default `true`): a rotated password or an ACL granted late heals, and meanwhile the lane's breaker opens instead of the backlog being dead-lettered; `retry_auth_failures = false` dead-letters them |
//! | a record larger than `message.max.bytes` (the client's or the broker's), an unknown topic (unless `auto_create_topics`), a record the broker calls invalid, a partition the topic lacks | permanent, with the broker's error text |
//!
//! Metrics: the relay's own per lane (`outbox_delivery_duration_seconds` of a Kafka lane is
//! a record's produce to its delivery report, `linger` included;
//! `outbox_delivery_failures_total{kind}` counts the broker's refusals), and the sink's,
//! labelled with the name it was built under (see `metrics::kafka`): `outbox_kafka_in_flight`
//! (records waiting for their report), `outbox_kafka_queue_messages` and
//! `outbox_kafka_queue_bytes` (librdkafka's queue), `outbox_kafka_broker_rtt_seconds` and
//! `outbox_kafka_broker_rtt_p99_seconds` per broker (from librdkafka's statistics, every
//! `statistics_interval`, default 5 s), `outbox_kafka_producers_replaced_total`.
//!
//! **Why librdkafka (`rdkafka`, built from source)**: it is the client the Java one is
//! measured against, with the idempotent producer, `acks=all`, TLS, SASL PLAIN and SCRAM
//! and the `murmur2_random` partitioner built in; the pure-Rust clients (rskafka) have no
//! idempotent producer. rdkafka's `cmake-build` compiles the librdkafka it ships (2.12)
//! and links it statically: the binary needs no librdkafka where it runs, and the build
//! needs cmake and a C compiler: librdkafka took about 3.5 minutes on 2 busy cores (load 13)
//! here, once per clean target directory. Linking Debian 12's `librdkafka-dev` instead
//! would build in seconds, but its librdkafka 2.0.2 cannot read the `ApiVersions` answer
//! of newer Kafka-protocol brokers (tansu 0.6 among them: "Read underflow"), and it pins
//! rdkafka to 0.33.

use std::time::Duration;

pub use self::config::{KafkaSinkConfig, SaslMechanism, SecurityProtocol};
#[cfg(feature = "kafka-sink")]
pub use self::producer::{KafkaProduceError, KafkaSink};

/// The brokers, unless configured.
pub const DEFAULT_BROKERS: &str = "127.0.0.1:9092";
/// How long librdkafka may try to deliver a record (`message.timeout.ms`), unless
/// configured: below the lane's default `delivery_timeout` (20 s).
pub const DEFAULT_MESSAGE_TIMEOUT: Duration = Duration::from_secs(15);
/// How long the producer waits to fill a batch (`linger.ms`), unless configured.
pub const DEFAULT_LINGER: Duration = Duration::from_millis(5);
/// The largest batch in bytes (`batch.size`), unless configured.
pub const DEFAULT_BATCH_SIZE: u32 = 1_000_000;
/// The most records the producer's queue holds (`queue.buffering.max.messages`), unless
/// configured.
pub const DEFAULT_QUEUE_MAX_MESSAGES: u32 = 100_000;
/// How long building the sink waits for the brokers' metadata.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The record header carrying the `outbox_id`, as Debezium's outbox event router names it.
pub const ID_HEADER: &str = "id";
/// How often librdkafka reports its statistics (`statistics.interval.ms`), the source of
/// the queue and round-trip gauges, unless configured.
pub const DEFAULT_STATISTICS_INTERVAL: Duration = Duration::from_secs(5);

// The settings parse and validate in every build, so a config file (and the guide's
// snippets) is checked without librdkafka, which is C built from source; the producer needs
// the feature.
mod config;
#[cfg(feature = "kafka-sink")]
mod producer;
#[cfg(feature = "kafka-sink")]
mod statistics;
