//! What the Kafka sink measures (feature `kafka-sink`, which records them): its producer's
//! records waiting for their delivery report, librdkafka's queue, and each broker's round
//! trip.
//!
//! A producer belongs to a sink, and one sink may serve several lanes (a library user can
//! hand the same `KafkaSink` to `lane_shared` twice), so these carry no `lane` or `target`
//! label: they carry [`LABEL_SINK`], the name the sink was built under (the binary's is where
//! the sink sits in the config file, `lanes[orders/billing].sink`), and the round trip adds
//! [`LABEL_BROKER`]. Both are bounded: sinks are configured, brokers are the cluster's.
//!
//! The queue and round-trip gauges come from librdkafka's statistics, which it emits every
//! `statistics_interval` (the sink's setting, librdkafka's `statistics.interval.ms`,
//! default 5 s; `0s` turns them off and leaves those gauges unrecorded). The in-flight gauge
//! and the replacement counter are the sink's own, exact at every moment.

use super::*;

/// Gauge: records this sink handed to its producer that wait for their delivery report.
pub const KAFKA_IN_FLIGHT: &str = "outbox_kafka_in_flight";
/// Gauge: messages in the producer's queues, sent or not, as librdkafka last reported
/// (`msg_cnt`); bounded by the sink's `queue_max_messages`.
pub const KAFKA_QUEUE_MESSAGES: &str = "outbox_kafka_queue_messages";
/// Gauge, bytes: the size of the messages in the producer's queues (`msg_size`).
pub const KAFKA_QUEUE_BYTES: &str = "outbox_kafka_queue_bytes";
/// Gauge, seconds: the mean round trip of the requests to a broker (produce included)
/// over the last statistics interval that had any, by [`LABEL_BROKER`].
pub const KAFKA_BROKER_RTT_SECONDS: &str = "outbox_kafka_broker_rtt_seconds";
/// Gauge, seconds: the 99th percentile of the same round trips.
pub const KAFKA_BROKER_RTT_P99_SECONDS: &str = "outbox_kafka_broker_rtt_p99_seconds";
/// Counter: producers librdkafka declared failed for good (a fatal idempotence error)
/// that the sink replaced with a fresh one.
pub const KAFKA_PRODUCERS_REPLACED_TOTAL: &str = "outbox_kafka_producers_replaced_total";

/// Label of every Kafka metric: the name the sink was built under.
pub const LABEL_SINK: &str = "sink";
/// Label of the round-trip gauges: the broker, as librdkafka names it (`host:port/id`).
pub const LABEL_BROKER: &str = "broker";

const SINK: &[&str] = &[LABEL_SINK];
const SINK_BROKER: &[&str] = &[LABEL_SINK, LABEL_BROKER];

/// Every metric of the Kafka sink, each once.
#[rustfmt::skip] // one metric per line reads as a table
pub const KAFKA: &[MetricInfo] = &[
    info(KAFKA_IN_FLIGHT, Gauge, Unit::Count, "Records the Kafka sink handed to its producer that wait for their delivery report.", SINK),
    info(KAFKA_QUEUE_MESSAGES, Gauge, Unit::Count, "Messages in the Kafka producer's queues, as librdkafka last reported.", SINK),
    info(KAFKA_QUEUE_BYTES, Gauge, Unit::Bytes, "Size of the messages in the Kafka producer's queues, as librdkafka last reported.", SINK),
    info(KAFKA_BROKER_RTT_SECONDS, Gauge, Unit::Seconds, "Mean round trip of the Kafka producer's requests to a broker over the last statistics interval that had any.", SINK_BROKER),
    info(KAFKA_BROKER_RTT_P99_SECONDS, Gauge, Unit::Seconds, "99th percentile round trip of the Kafka producer's requests to a broker over the last statistics interval that had any.", SINK_BROKER),
    info(KAFKA_PRODUCERS_REPLACED_TOTAL, Counter, Unit::Count, "Kafka producers declared failed for good and replaced by a fresh one.", SINK),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_metrics_are_prometheus_names_labelled_by_sink() {
        for metric in KAFKA {
            assert!(metric.name.starts_with("outbox_kafka_"), "{}", metric.name);
            assert!(
                !ALL.iter().any(|m| m.name == metric.name),
                "{}",
                metric.name
            );
            assert_eq!(
                metric.kind == MetricKind::Counter,
                metric.name.ends_with("_total"),
                "{}",
                metric.name
            );
            assert_eq!(metric.labels[0], LABEL_SINK, "{}", metric.name);
        }
    }
}
