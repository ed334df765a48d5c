//! The Kafka sink's metrics (`outbox_kafka_*`, listed in `metrics::kafka`): the records
//! waiting for their report, counted by the sink, and librdkafka's statistics (queue depth,
//! broker round trips), read in the producer's context.
//!
//! [`ProducerGauges::read`] is the pure part: what a statistics report says, as gauge
//! values. [`SinkMetrics`] holds the handles and records.

use std::time::Duration;

use metrics::{Counter, Gauge, Label};
use rdkafka::client::ClientContext;
use rdkafka::statistics::Statistics;

use crate::metrics::kafka::{
    KAFKA_BROKER_RTT_P99_SECONDS, KAFKA_BROKER_RTT_SECONDS, KAFKA_IN_FLIGHT,
    KAFKA_PRODUCERS_REPLACED_TOTAL, KAFKA_QUEUE_BYTES, KAFKA_QUEUE_MESSAGES, LABEL_BROKER,
    LABEL_SINK,
};

/// What one statistics report says about the producer.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct ProducerGauges {
    /// Messages in the producer's queues (`msg_cnt`).
    pub(super) queue_messages: u64,
    /// Their size in bytes (`msg_size`).
    pub(super) queue_bytes: u64,
    /// The round trips of each broker that answered requests in the report's window.
    pub(super) brokers: Vec<BrokerRoundTrip>,
}

/// A broker's round trips over one statistics window.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct BrokerRoundTrip {
    /// librdkafka's name of the broker, `host:port/id`.
    pub(super) broker: String,
    /// The mean.
    pub(super) mean: Duration,
    /// The 99th percentile.
    pub(super) p99: Duration,
}

impl ProducerGauges {
    /// The gauges of `statistics`. Only brokers learned from the cluster's metadata count:
    /// the bootstrap entries (`…/bootstrap`) and librdkafka's internal one stand for no
    /// broker of their own. A broker without requests in the window has no round trip to
    /// report (librdkafka gives 0 then), so its gauges keep their last value.
    pub(super) fn read(statistics: &Statistics) -> Self {
        let micros = |value: i64| Duration::from_micros(u64::try_from(value).unwrap_or(0));
        let mut brokers: Vec<BrokerRoundTrip> = statistics
            .brokers
            .values()
            .filter(|broker| broker.source == "learned" && broker.nodeid >= 0)
            .filter_map(|broker| {
                let rtt = broker.rtt.as_ref().filter(|rtt| rtt.cnt > 0)?;
                Some(BrokerRoundTrip {
                    broker: broker.name.clone(),
                    mean: micros(rtt.avg),
                    p99: micros(rtt.p99),
                })
            })
            .collect();
        brokers.sort_by(|a, b| a.broker.cmp(&b.broker));
        Self {
            queue_messages: statistics.msg_cnt,
            queue_bytes: statistics.msg_size,
            brokers,
        }
    }
}

/// The handles of one sink's metrics, registered with the recorder current when the sink
/// was built (so every series exists, at zero, from then on). Cloning shares them.
#[derive(Clone)]
pub(super) struct SinkMetrics {
    sink: String,
    in_flight: Gauge,
    queue_messages: Gauge,
    queue_bytes: Gauge,
    replaced: Counter,
}

impl std::fmt::Debug for SinkMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SinkMetrics")
            .field("sink", &self.sink)
            .finish_non_exhaustive()
    }
}

impl SinkMetrics {
    /// Registers the metrics of the sink called `sink`.
    pub(super) fn new(sink: &str) -> Self {
        let labels = vec![Label::new(LABEL_SINK, sink.to_owned())];
        Self {
            sink: sink.to_owned(),
            in_flight: metrics::gauge!(KAFKA_IN_FLIGHT, labels.clone()),
            queue_messages: metrics::gauge!(KAFKA_QUEUE_MESSAGES, labels.clone()),
            queue_bytes: metrics::gauge!(KAFKA_QUEUE_BYTES, labels.clone()),
            replaced: metrics::counter!(KAFKA_PRODUCERS_REPLACED_TOTAL, labels),
        }
    }

    /// Counts a record handed to the producer until the returned guard drops (its report
    /// came, or the relay stopped waiting for it).
    pub(super) fn in_flight(&self) -> InFlight {
        self.in_flight.increment(1.0);
        InFlight(self.in_flight.clone())
    }

    /// Counts a producer replaced after a fatal error.
    pub(super) fn replaced(&self) {
        self.replaced.increment(1);
    }

    fn record(&self, gauges: &ProducerGauges) {
        // Gauges are f64: exact up to 2^53, far past any queue.
        self.queue_messages.set(gauges.queue_messages as f64);
        self.queue_bytes.set(gauges.queue_bytes as f64);
        // The broker set is the cluster's and can change, so these handles are looked up
        // per report (every `statistics_interval`), from the global recorder: the
        // statistics arrive on librdkafka's thread.
        for broker in &gauges.brokers {
            let labels = [
                (LABEL_SINK, self.sink.clone()),
                (LABEL_BROKER, broker.broker.clone()),
            ];
            metrics::gauge!(KAFKA_BROKER_RTT_SECONDS, &labels).set(broker.mean.as_secs_f64());
            metrics::gauge!(KAFKA_BROKER_RTT_P99_SECONDS, &labels).set(broker.p99.as_secs_f64());
        }
    }
}

/// One record waiting for its delivery report; dropping it ends the wait.
#[derive(Debug)]
pub(super) struct InFlight(Gauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

/// The producer's context: hands librdkafka's statistics to the sink's metrics.
#[derive(Debug, Clone)]
pub(super) struct ProducerContext {
    pub(super) metrics: SinkMetrics,
}

impl ClientContext for ProducerContext {
    fn stats(&self, statistics: Statistics) {
        self.metrics.record(&ProducerGauges::read(&statistics));
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use rdkafka::statistics::{Broker, Window};

    use super::*;

    fn broker(name: &str, nodeid: i32, source: &str, rtt: Option<(i64, i64, i64)>) -> Broker {
        Broker {
            name: name.to_owned(),
            nodeid,
            source: source.to_owned(),
            rtt: rtt.map(|(cnt, avg, p99)| Window {
                cnt,
                avg,
                p99,
                ..Window::default()
            }),
            ..Broker::default()
        }
    }

    #[test]
    fn a_report_gives_the_queue_and_the_round_trip_of_each_learned_broker() {
        let brokers: HashMap<String, Broker> = [
            broker("b:9092/2", 2, "learned", Some((4, 1_500, 9_000))),
            broker("a:9092/1", 1, "learned", Some((10, 800, 2_400))),
            // No request in the window: nothing to say about its round trip.
            broker("c:9092/3", 3, "learned", Some((0, 0, 0))),
            // The bootstrap entry and the internal broker are no broker of the cluster.
            broker(
                "a:9092/bootstrap",
                -1,
                "configured",
                Some((1, 50_000, 50_000)),
            ),
            broker(":0/internal", -1, "internal", None),
        ]
        .into_iter()
        .map(|b| (b.name.clone(), b))
        .collect();
        let statistics = Statistics {
            msg_cnt: 17,
            msg_size: 4_096,
            brokers,
            ..Statistics::default()
        };
        assert_eq!(
            ProducerGauges::read(&statistics),
            ProducerGauges {
                queue_messages: 17,
                queue_bytes: 4_096,
                brokers: vec![
                    BrokerRoundTrip {
                        broker: "a:9092/1".into(),
                        mean: Duration::from_micros(800),
                        p99: Duration::from_micros(2_400),
                    },
                    BrokerRoundTrip {
                        broker: "b:9092/2".into(),
                        mean: Duration::from_micros(1_500),
                        p99: Duration::from_micros(9_000),
                    },
                ],
            }
        );
    }

    #[test]
    fn the_in_flight_gauge_counts_until_the_guard_drops() {
        use metrics_util::debugging::{DebugValue, DebuggingRecorder};
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let in_flight = || {
            snapshotter
                .snapshot()
                .into_vec()
                .into_iter()
                .find_map(|(key, _, _, value)| match value {
                    DebugValue::Gauge(v) if key.key().name() == KAFKA_IN_FLIGHT => Some(v.0),
                    _ => None,
                })
        };
        let metrics = metrics::with_local_recorder(&recorder, || SinkMetrics::new("s"));
        // A debugging snapshot drains a gauge (sets it to 0): each shows the change since
        // the one before.
        let first = metrics.in_flight();
        let second = metrics.in_flight();
        assert_eq!(in_flight(), Some(2.0));
        drop(first);
        assert_eq!(in_flight(), Some(-1.0));
        drop(second);
        assert_eq!(in_flight(), Some(-1.0));
        assert_eq!(in_flight(), Some(0.0));
    }
}
