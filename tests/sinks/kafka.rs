//! The Kafka sink against a real Kafka-protocol broker: tansu, one private broker per test
//! on its own port (`.ci/run` installs it), records read back with a plain librdkafka
//! consumer. Topics are unique per test as well.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use outbox_relay::relay::RelayEvent;
use outbox_relay::store::{MessageFilter, NackOutcome};
use outbox_relay::{
    DeliveryHandler, InMemoryOutboxStore, LaneConfig, Outbox, OutboxMessageDraft, OutboxRelay,
    OutboxStatus, RetryPolicy,
};
use tokio::sync::broadcast;

use super::{build, claimed, draft, sink_from_toml, unique, wait_for, EVENT_TIMEOUT};

mod broker;
mod scrape;

use broker::{java_partition, read_back, Auth, Record, Storage, Tansu};
use scrape::Scraper;

/// Partitions of every test topic: enough that a wrong partitioner shows.
const PARTITIONS: i32 = 3;

/// A topic name of this test's own.
fn topic(prefix: &str) -> String {
    unique(&format!("outbox_{prefix}"))
}

/// A relay over a fresh in-memory store delivering `orders/billing` with `handler` at
/// `concurrency`; its event subscription is taken before the start.
async fn relay(
    handler: Arc<dyn DeliveryHandler>,
    concurrency: usize,
) -> (
    Outbox,
    outbox_relay::RelayHandle,
    broadcast::Receiver<RelayEvent>,
) {
    let store = Outbox::new(InMemoryOutboxStore::new());
    let lane = LaneConfig::new("orders", "billing")
        .consumer_id("kafka-test")
        .concurrency(concurrency)
        .retry(RetryPolicy::new(
            Duration::from_millis(100),
            Duration::from_millis(500),
        ))
        .delivery_timeout(Duration::from_secs(30))
        .max_poll_interval(Duration::from_millis(200));
    let builder = OutboxRelay::builder(&store).lane_shared(lane, handler);
    let events = builder.subscribe();
    let relay = builder.start().await.expect("relay starts");
    (store, relay, events)
}

/// Waits until the store holds `delivered` delivered messages of the lane, failing with
/// the counts after `EVENT_TIMEOUT`.
async fn wait_delivered(store: &Outbox, delivered: u64) {
    let started = tokio::time::Instant::now();
    loop {
        let stats = store
            .stats(&MessageFilter::lane("orders", "billing"))
            .await
            .unwrap();
        let done = stats.first().map_or(0, |s| s.delivered);
        if done >= delivered {
            return;
        }
        assert!(
            started.elapsed() < EVENT_TIMEOUT,
            "{done} of {delivered} delivered after {:?}: {stats:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Why the sink `sink_line` describes does not build.
async fn build_error(sink_line: &str) -> outbox_relay::sinks::SinkBuildError {
    match super::sink_from_toml(sink_line)
        .build("lanes[orders/billing].sink")
        .await
    {
        Ok(_) => panic!("the sink built: {sink_line}"),
        Err(error) => error,
    }
}

/// A message of key `key` numbered `n`, routed by its payload's `aggregatetype`.
fn numbered(key: usize, n: usize) -> OutboxMessageDraft {
    OutboxMessageDraft::new(
        "orders",
        "billing",
        serde_json::json!({"aggregatetype": "Order", "key": key, "n": n}),
    )
    .unwrap()
    .with_ordering_key(format!("order-{key}"))
}

/// The payload's `(key, n)` of a record of [`numbered`].
fn key_and_n(record: &Record) -> (u64, u64) {
    let value: serde_json::Value = serde_json::from_slice(&record.value).unwrap();
    (value["key"].as_u64().unwrap(), value["n"].as_u64().unwrap())
}

/// Checks that every `(key, n)` with `n < per_key` came, that each key stayed in the
/// partition the Java partitioner picks, and that within it a key's numbers never go
/// back: a redelivery repeats the last one at most (the relay sends a key's next message
/// only after the broker acknowledged the previous one).
fn assert_complete_and_in_order(records: &[Record], keys: usize, per_key: usize) {
    let mut by_key: BTreeMap<u64, Vec<(i32, i64, u64)>> = BTreeMap::new();
    for record in records {
        let (key, n) = key_and_n(record);
        by_key
            .entry(key)
            .or_default()
            .push((record.partition, record.offset, n));
    }
    assert_eq!(by_key.len(), keys, "keys read back");
    for (key, mut seen) in by_key {
        let expected_partition = java_partition(format!("order-{key}").as_bytes(), PARTITIONS);
        assert!(
            seen.iter().all(|(p, _, _)| *p == expected_partition),
            "key {key} left partition {expected_partition}: {seen:?}"
        );
        seen.sort_by_key(|(_, offset, _)| *offset);
        let numbers: Vec<u64> = seen.iter().map(|(_, _, n)| *n).collect();
        let mut highest = None;
        for (i, n) in numbers.iter().enumerate() {
            if let Some(highest) = highest {
                assert!(
                    *n == highest || *n == highest + 1,
                    "key {key}: {n} after {highest} at record {i}: {numbers:?}"
                );
            } else {
                assert_eq!(*n, 0, "key {key} starts at 0: {numbers:?}");
            }
            highest = Some(*n);
        }
        assert_eq!(
            highest,
            Some(per_key as u64 - 1),
            "key {key} is missing its last messages: {numbers:?}"
        );
    }
}

#[tokio::test]
async fn a_record_carries_the_payload_bytes_key_topic_and_headers() {
    let broker = Tansu::start(Storage::Memory, Auth::None).await;
    let prefix = topic("exact");
    let routed = format!("{prefix}.Order");
    broker.create_topic(&routed, PARTITIONS).await;
    let sink = build(&format!(
        r#"sink = {{ kind = "kafka", brokers = "{}", topic = "{prefix}.{{payload.aggregatetype}}" }}"#,
        broker.brokers()
    ))
    .await;
    let enqueued = OutboxMessageDraft::new(
        "orders",
        "billing",
        serde_json::json!({"aggregatetype": "Order", "total": "19.90", "note": "ünïcode ✓"}),
    )
    .unwrap()
    .with_header(
        "traceparent",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    )
    .with_header("x-tenant", "acme")
    .with_ordering_key("order-42");
    let message = claimed(enqueued).await;
    sink.deliver(&message).await.expect("delivered");

    let records = read_back(
        broker.client_config(),
        &routed,
        PARTITIONS,
        1,
        EVENT_TIMEOUT,
    )
    .await;
    assert_eq!(records.len(), 1, "{records:?}");
    let record = &records[0];
    println!("kafka read back from {routed}: {record:?}");
    assert_eq!(record.value, message.payload.as_bytes());
    assert_eq!(record.key.as_deref(), Some(&b"order-42"[..]));
    assert_eq!(record.partition, java_partition(b"order-42", PARTITIONS));
    assert_eq!(record.header("id"), Some(message.outbox_id.to_string()));
    assert_eq!(
        record.header("traceparent").as_deref(),
        Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    );
    assert_eq!(record.header("x-tenant").as_deref(), Some("acme"));
    assert_eq!(
        record.headers.len(),
        message.headers.len() + 1,
        "{:?}",
        record.headers
    );
}

#[tokio::test]
async fn a_key_template_and_a_partition_override_route_the_record() {
    let broker = Tansu::start(Storage::Memory, Auth::None).await;
    let name = topic("routed");
    broker.create_topic(&name, PARTITIONS).await;
    let sink = build(&format!(
        r#"sink = {{ kind = "kafka", brokers = "{}", topic = "{name}", key = "{{lane}}/{{header.x-tenant}}", partition = "{{header.partition}}" }}"#,
        broker.brokers()
    ))
    .await;
    let message = claimed(draft().with_header("partition", "2")).await;
    sink.deliver(&message).await.expect("delivered");
    let records = read_back(broker.client_config(), &name, PARTITIONS, 1, EVENT_TIMEOUT).await;
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].key.as_deref(), Some(&b"orders/acme"[..]));
    assert_eq!(records[0].partition, 2);

    // A partition the topic lacks is the broker's refusal: permanent.
    let beyond = claimed(draft().with_header("partition", "7")).await;
    let error = tokio::time::timeout(EVENT_TIMEOUT, sink.deliver(&beyond))
        .await
        .expect("a missing partition fails the delivery")
        .unwrap_err();
    assert!(error.is_permanent(), "{error:?}");
}

#[tokio::test]
async fn ten_thousand_messages_on_a_hundred_keys_keep_their_order_at_concurrency_64() {
    const KEYS: usize = 100;
    const PER_KEY: usize = 100;
    let broker = Tansu::start(Storage::Memory, Auth::None).await;
    let name = topic("order");
    broker.create_topic(&name, PARTITIONS).await;
    let sink = build(&format!(
        r#"sink = {{ kind = "kafka", brokers = "{}", topic = "{name}" }}"#,
        broker.brokers()
    ))
    .await;
    let (store, relay, _events) = relay(sink, 64).await;
    let drafts: Vec<_> = (0..PER_KEY)
        .flat_map(|n| (0..KEYS).map(move |key| numbered(key, n)))
        .collect();
    store.enqueue_many(drafts).await.unwrap();
    wait_delivered(&store, (KEYS * PER_KEY) as u64).await;
    relay.shutdown(Duration::from_secs(30)).await.unwrap();

    let records = read_back(
        broker.client_config(),
        &name,
        PARTITIONS,
        KEYS * PER_KEY,
        EVENT_TIMEOUT,
    )
    .await;
    assert_eq!(records.len(), KEYS * PER_KEY, "every record once");
    assert_complete_and_in_order(&records, KEYS, PER_KEY);
}

#[tokio::test]
async fn a_broker_restart_mid_run_loses_nothing_and_keeps_each_keys_order() {
    const KEYS: usize = 20;
    const PER_KEY: usize = 100;
    const CONCURRENCY: usize = 16;
    // The sink's in-flight gauge is the signal that the relay is stuck on the outage.
    let scraper = Scraper::global();
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Tansu::start(Storage::Sqlite(dir.path().join("tansu.db")), Auth::None).await;
    let name = topic("restart");
    broker.create_topic(&name, PARTITIONS).await;
    // The outage (a second or two) stays well inside the 15 s librdkafka gives a record
    // (`message_timeout`'s default): records wait in the producer and go out after the
    // restart. A record that timed out instead is the case tansu 0.6.0 cannot take (see
    // the test below). The producer tries to reconnect at least every second, not
    // librdkafka's 10 s at most.
    let sink_name = unique("kafka_restart");
    let sink = sink_from_toml(&format!(
        r#"sink = {{ kind = "kafka", brokers = "{}", topic = "{name}", properties = {{ "reconnect.backoff.max.ms" = "1000" }} }}"#,
        broker.brokers()
    ))
    .build(&sink_name)
    .await
    .unwrap_or_else(|error| panic!("sink does not build: {error}"));
    let sink_label = format!("sink=\"{sink_name}\"");
    let (store, relay, _events) = relay(sink, CONCURRENCY).await;
    const BEFORE: usize = PER_KEY / 10;
    let drafts = |numbers: std::ops::Range<usize>| -> Vec<_> {
        numbers
            .flat_map(|n| (0..KEYS).map(move |key| numbered(key, n)))
            .collect()
    };
    store.enqueue_many(drafts(0..BEFORE)).await.unwrap();
    wait_delivered(&store, (KEYS * BEFORE) as u64).await;
    broker.stop().await;
    store.enqueue_many(drafts(BEFORE..PER_KEY)).await.unwrap();
    // Every handler of the lane holds a record the stopped broker cannot acknowledge.
    scraper
        .wait_for("every handler waiting on the stopped broker", |text| {
            scrape::value(text, "outbox_kafka_in_flight", &[&sink_label])
                == Some(CONCURRENCY as f64)
        })
        .await;
    let stats = store
        .stats(&MessageFilter::lane("orders", "billing"))
        .await
        .unwrap();
    assert!(stats[0].delivered < (KEYS * PER_KEY) as u64, "{stats:?}");

    broker.restart().await;
    wait_delivered(&store, (KEYS * PER_KEY) as u64).await;
    relay.shutdown(Duration::from_secs(30)).await.unwrap();
    let stats = store
        .stats(&MessageFilter::lane("orders", "billing"))
        .await
        .unwrap();
    assert_eq!(stats[0].dead_letter, 0, "nothing dead-lettered: {stats:?}");

    let records = read_back(
        broker.client_config(),
        &name,
        PARTITIONS,
        KEYS * PER_KEY,
        EVENT_TIMEOUT,
    )
    .await;
    // A record the broker wrote just before it stopped, unanswered, may come twice: at least
    // once, never out of order.
    assert!(records.len() >= KEYS * PER_KEY, "{} records", records.len());
    assert_complete_and_in_order(&records, KEYS, PER_KEY);
}

// Ignored, not skipped silently: tansu 0.6.0 takes its storage down here. A record that
// times out (`message_timeout`) while the broker is down leaves a gap in its partition's
// sequence numbers; librdkafka then bumps its idempotent producer's epoch locally (KIP-360;
// its debug log: "All partitions drained, bumped epoch to PID{Id:1,Epoch:1}") and produces
// with the new epoch. tansu's SQLite engine has no row for an epoch it did not hand out:
// `producer_select_for_update.sql` through `query_one` panics ("more or less than one row",
// tansu-storage-0.6.0/src/lite.rs:503), the panic ends its storage task, and from then on
// every request, any producer's, is `Storage(UnableToSend)` in its log and
// UNKNOWN_SERVER_ERROR ("Unknown broker error") to the client, until the broker restarts.
// With `enable.idempotence=false` (no epoch), or without a timed-out record, it goes on
// serving. Kafka accepts the bump. With `TANSU` pointing at a build that accepts it too,
// run it with `-- --ignored`.
#[ignore = "tansu 0.6.0's SQLite engine panics on a produce with a locally bumped producer epoch (lite.rs:503, after a record timed out) and answers everything after with UNKNOWN_SERVER_ERROR"]
#[tokio::test]
async fn a_broker_outage_past_message_timeout_retries_and_loses_nothing_after_the_restart() {
    const KEYS: usize = 20;
    const PER_KEY: usize = 100;
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Tansu::start(Storage::Sqlite(dir.path().join("tansu.db")), Auth::None).await;
    let name = topic("restart");
    broker.create_topic(&name, PARTITIONS).await;
    // librdkafka gives up on a record after 3 s, well inside the lane's 30 s.
    let sink = build(&format!(
        r#"sink = {{ kind = "kafka", brokers = "{}", topic = "{name}", message_timeout = "3s" }}"#,
        broker.brokers()
    ))
    .await;
    let (store, relay, mut events) = relay(sink, 16).await;
    // The first tenth of every key goes through before the stop; the rest is enqueued
    // while the broker is down, so the relay meets the outage whatever its pace.
    const BEFORE: usize = PER_KEY / 10;
    let drafts = |numbers: std::ops::Range<usize>| -> Vec<_> {
        numbers
            .flat_map(|n| (0..KEYS).map(move |key| numbered(key, n)))
            .collect()
    };
    store.enqueue_many(drafts(0..BEFORE)).await.unwrap();
    wait_delivered(&store, (KEYS * BEFORE) as u64).await;
    broker.stop().await;
    store.enqueue_many(drafts(BEFORE..PER_KEY)).await.unwrap();
    // The relay sees the outage: a delivery fails, retryable, and is requeued.
    let failure = tokio::time::timeout(EVENT_TIMEOUT, async {
        loop {
            match events.recv().await {
                Ok(RelayEvent::Failed { outcome, error, .. }) => return (outcome, error),
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => panic!("relay stopped"),
            }
        }
    })
    .await
    .expect("a delivery fails while the broker is down");
    println!("while the broker was down: {failure:?}");
    assert_eq!(failure.0, NackOutcome::Requeued, "{failure:?}");
    let stats = store
        .stats(&MessageFilter::lane("orders", "billing"))
        .await
        .unwrap();
    assert!(stats[0].delivered < (KEYS * PER_KEY) as u64, "{stats:?}");

    broker.restart().await;
    wait_delivered(&store, (KEYS * PER_KEY) as u64).await;
    relay.shutdown(Duration::from_secs(30)).await.unwrap();
    let dead = store
        .stats(&MessageFilter::lane("orders", "billing"))
        .await
        .unwrap()[0]
        .dead_letter;
    assert_eq!(dead, 0, "nothing dead-lettered");

    let records = read_back(
        broker.client_config(),
        &name,
        PARTITIONS,
        KEYS * PER_KEY,
        EVENT_TIMEOUT,
    )
    .await;
    // Records the broker wrote while the relay no longer waited (a timed-out report) come
    // again: at least once, never out of order.
    assert!(records.len() >= KEYS * PER_KEY, "{} records", records.len());
    assert_complete_and_in_order(&records, KEYS, PER_KEY);
}

#[tokio::test]
async fn the_sinks_metrics_show_records_waiting_the_queue_and_the_round_trip_when_scraped() {
    const RECORDS: usize = 20;
    // Installed before the sink is built: its metrics register with this recorder.
    let scraper = Scraper::global();
    let broker = Tansu::start(Storage::Memory, Auth::None).await;
    let name = topic("metrics");
    broker.create_topic(&name, PARTITIONS).await;
    // The records linger 5 s in the producer before it sends them, so the waiting shows in
    // the statistics reported every 100 ms.
    let sink_name = unique("kafka_metrics");
    let sink = sink_from_toml(&format!(
        r#"sink = {{ kind = "kafka", brokers = "{}", topic = "{name}", linger = "5s", statistics_interval = "100ms" }}"#,
        broker.brokers()
    ))
    .build(&sink_name)
    .await
    .unwrap_or_else(|error| panic!("sink does not build: {error}"));
    let sink_label = format!("sink=\"{sink_name}\"");
    let value = |text: &str, metric: &str| scrape::value(text, metric, &[&sink_label]);

    let text = scraper.scrape().await;
    assert_eq!(value(&text, "outbox_kafka_in_flight"), Some(0.0), "{text}");
    assert_eq!(
        value(&text, "outbox_kafka_producers_replaced_total"),
        Some(0.0),
        "{text}"
    );
    assert!(
        text.contains("# HELP outbox_kafka_queue_messages "),
        "described: {text}"
    );

    let mut deliveries = tokio::task::JoinSet::new();
    for _ in 0..RECORDS {
        let sink = sink.clone();
        let message = claimed(draft()).await;
        deliveries.spawn(async move { sink.deliver(&message).await });
    }
    let waiting = scraper
        .wait_for(
            "every record in flight and in the producer's queue",
            |text| {
                value(text, "outbox_kafka_in_flight") == Some(RECORDS as f64)
                    && value(text, "outbox_kafka_queue_messages") == Some(RECORDS as f64)
            },
        )
        .await;
    let bytes = value(&waiting, "outbox_kafka_queue_bytes").unwrap_or(0.0);
    assert!(
        bytes >= RECORDS as f64 * 50.0,
        "queue bytes {bytes}: {waiting}"
    );

    while let Some(delivered) = deliveries.join_next().await {
        delivered.unwrap().expect("delivered");
    }
    let done = scraper
        .wait_for(
            "nothing waiting, and the broker's round trip reported",
            |text| {
                value(text, "outbox_kafka_in_flight") == Some(0.0)
                    && value(text, "outbox_kafka_queue_messages") == Some(0.0)
                    && value(text, "outbox_kafka_broker_rtt_seconds").is_some()
            },
        )
        .await;
    println!("{}", scrape::lines(&done, &sink_label).join("\n"));
    let broker_label = |metric: &str| {
        scrape::lines(&done, &sink_label)
            .into_iter()
            .find(|line| line.starts_with(&format!("{metric}{{")))
            .unwrap_or_else(|| panic!("no {metric}: {done}"))
    };
    // librdkafka names the broker by the address tansu advertises and its node id.
    assert!(
        broker_label("outbox_kafka_broker_rtt_seconds")
            .contains(&format!("broker=\"{}/", broker.brokers())),
        "{done}"
    );
    for metric in [
        "outbox_kafka_broker_rtt_seconds",
        "outbox_kafka_broker_rtt_p99_seconds",
    ] {
        let rtt = value(&done, metric).unwrap();
        // A loopback round trip: above zero, below the 5 s the records lingered.
        assert!(rtt > 0.0 && rtt < 5.0, "{metric} {rtt}: {done}");
    }
    let records = read_back(
        broker.client_config(),
        &name,
        PARTITIONS,
        RECORDS,
        EVENT_TIMEOUT,
    )
    .await;
    assert_eq!(records.len(), RECORDS);
}

#[tokio::test]
async fn a_record_over_message_max_bytes_is_dead_lettered_with_the_error() {
    let broker = Tansu::start(Storage::Memory, Auth::None).await;
    let name = topic("large");
    broker.create_topic(&name, PARTITIONS).await;
    let sink = build(&format!(
        r#"sink = {{ kind = "kafka", brokers = "{}", topic = "{name}", message_max_bytes = 1000 }}"#,
        broker.brokers()
    ))
    .await;
    let (store, relay, mut events) = relay(sink, 4).await;
    let big = OutboxMessageDraft::new(
        "orders",
        "billing",
        serde_json::json!({"blob": "x".repeat(4000)}),
    )
    .unwrap();
    let id = store.enqueue(big).await.unwrap().message.outbox_id;
    let seen = wait_for(&mut events, id, "the dead letter", |event| {
        matches!(event, RelayEvent::Failed { .. })
    })
    .await;
    let Some(RelayEvent::Failed { outcome, error, .. }) = seen.last() else {
        panic!("{seen:?}")
    };
    assert_eq!(*outcome, NackOutcome::DeadLettered, "{error}");
    assert!(error.contains("Message size too large"), "{error}");
    let stored = store.get(id).await.unwrap().unwrap();
    assert_eq!(stored.status, OutboxStatus::DeadLetter);
    assert_eq!(stored.attempt_count, 1, "permanent: no retry");
    assert!(
        stored
            .last_error
            .as_deref()
            .unwrap_or("")
            .contains("Message size too large"),
        "{stored:?}"
    );
    relay.shutdown(Duration::from_secs(30)).await.unwrap();
}

#[tokio::test]
async fn an_unknown_literal_topic_fails_the_build_naming_it() {
    let broker = Tansu::start(Storage::Memory, Auth::None).await;
    let missing = topic("missing");
    let error = build_error(&format!(
        r#"sink = {{ kind = "kafka", brokers = "{}", topic = "{missing}" }}"#,
        broker.brokers()
    ))
    .await;
    assert_eq!(error.field(), "lanes[orders/billing].sink.topic", "{error}");
    assert!(error.to_string().contains(&missing), "{error}");
}

#[tokio::test]
async fn an_unreachable_broker_fails_the_build_naming_the_brokers() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let error = build_error(&format!(
        r#"sink = {{ kind = "kafka", brokers = "127.0.0.1:{port}", topic = "nowhere" }}"#
    ))
    .await;
    assert_eq!(
        error.field(),
        "lanes[orders/billing].sink.brokers",
        "{error}"
    );
    assert!(
        error.to_string().contains(&format!("127.0.0.1:{port}")),
        "{error}"
    );
}

#[tokio::test]
async fn sasl_scram_with_the_password_from_the_environment_delivers_and_a_wrong_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Tansu::start(Storage::Sqlite(dir.path().join("tansu.db")), Auth::None).await;
    sasl_scram_delivers_and_a_wrong_password_is_refused(broker, "sasl_plaintext").await;
}

#[tokio::test]
async fn sasl_scram_over_tls_delivers_and_a_wrong_password_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Tansu::start_behind_tls(Storage::Sqlite(dir.path().join("tansu.db"))).await;
    sasl_scram_delivers_and_a_wrong_password_is_refused(broker, "sasl_ssl").await;
}

/// SCRAM-SHA-256 against `broker` with `protocol` (`sasl_plaintext`, or `sasl_ssl` for a
/// broker behind TLS): the password from the environment delivers, a wrong one is refused
/// at build without showing up in the error.
async fn sasl_scram_delivers_and_a_wrong_password_is_refused(mut broker: Tansu, protocol: &str) {
    // tansu creates users over the Kafka protocol, which it refuses before a login once
    // authentication is on: the user is created first, on durable storage, and the broker
    // restarted with authentication required.
    broker.create_scram_user("relay", "s3cret-pw", "scram256");
    broker.restart_with(Auth::Sasl).await;
    let name = topic("sasl");
    let mut admin = broker.client_config();
    admin
        .set("security.protocol", protocol)
        .set("sasl.mechanisms", "SCRAM-SHA-256")
        .set("sasl.username", "relay")
        .set("sasl.password", "s3cret-pw");
    {
        let client: rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> =
            admin.create().unwrap();
        let created = client
            .create_topics(
                &[rdkafka::admin::NewTopic::new(
                    &name,
                    PARTITIONS,
                    rdkafka::admin::TopicReplication::Fixed(1),
                )],
                &rdkafka::admin::AdminOptions::new(),
            )
            .await
            .expect("CreateTopics over SASL");
        for result in created {
            result.unwrap_or_else(|(topic, code)| panic!("creating {topic}: {code}"));
        }
    }
    let right = unique("KAFKA_TEST_PASSWORD");
    let wrong = unique("KAFKA_TEST_WRONG_PASSWORD");
    std::env::set_var(&right, "s3cret-pw");
    std::env::set_var(&wrong, "not-the-password");
    let ca = match protocol {
        "sasl_ssl" => format!(r#", ssl_ca_location = "{}""#, broker.ca().display()),
        _ => String::new(),
    };
    let line = |variable: &str| {
        format!(
            r#"sink = {{ kind = "kafka", brokers = "{}", topic = "{name}", security_protocol = "{protocol}", sasl_mechanism = "SCRAM-SHA-256", sasl_username = "relay", secret_env = "{variable}"{ca} }}"#,
            broker.brokers()
        )
    };
    let sink = build(&line(&right)).await;
    let message = claimed(draft()).await;
    sink.deliver(&message).await.expect("delivered over SCRAM");
    let records = read_back(admin, &name, PARTITIONS, 1, EVENT_TIMEOUT).await;
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].header("id"), Some(message.outbox_id.to_string()));

    let refused = build_error(&line(&wrong)).await;
    println!("a wrong SCRAM password ({protocol}): {refused}");
    assert_eq!(
        refused.field(),
        "lanes[orders/billing].sink.brokers",
        "{refused}"
    );
    assert!(
        !refused.to_string().contains("not-the-password"),
        "{refused}"
    );

    // A password variable that is not set is named before any connection is tried.
    let unset = unique("KAFKA_TEST_UNSET_PASSWORD");
    let missing = build_error(&line(&unset)).await;
    assert_eq!(
        missing.missing_variable_name(),
        Some(unset.as_str()),
        "{missing}"
    );
    assert_eq!(
        missing.field(),
        "lanes[orders/billing].sink.secret_env",
        "{missing}"
    );
}

#[tokio::test]
async fn tls_to_the_broker_delivers_with_the_configured_ca_and_an_untrusted_certificate_is_refused()
{
    // tansu listens in plaintext; socat terminates TLS in front of it with a certificate of
    // the test's own CA, and tansu advertises the TLS port, so every connection (metadata,
    // produce, the reader's fetches) goes through TLS.
    let broker = Tansu::start_behind_tls(Storage::Memory).await;
    let name = topic("tls");
    broker.create_topic(&name, PARTITIONS).await;
    let line = |ca: &str| {
        format!(
            r#"sink = {{ kind = "kafka", brokers = "{}", topic = "{name}", security_protocol = "ssl"{ca} }}"#,
            broker.brokers()
        )
    };
    let sink = build(&line(&format!(
        r#", ssl_ca_location = "{}""#,
        broker.ca().display()
    )))
    .await;
    let message = claimed(draft().with_ordering_key("order-7")).await;
    sink.deliver(&message).await.expect("delivered over TLS");
    let records = read_back(broker.client_config(), &name, PARTITIONS, 1, EVENT_TIMEOUT).await;
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].value, message.payload.as_bytes());
    assert_eq!(records[0].header("id"), Some(message.outbox_id.to_string()));

    // Without the test's CA the broker's certificate is not trusted (the system's CAs did
    // not sign it): the sink does not build, naming the brokers.
    let refused = build_error(&line("")).await;
    println!("TLS without the broker's CA: {refused}");
    assert_eq!(
        refused.field(),
        "lanes[orders/billing].sink.brokers",
        "{refused}"
    );
    // Plaintext to the TLS port gets no Kafka answer either.
    let plaintext = build_error(&format!(
        r#"sink = {{ kind = "kafka", brokers = "{}", topic = "{name}" }}"#,
        broker.brokers()
    ))
    .await;
    assert_eq!(
        plaintext.field(),
        "lanes[orders/billing].sink.brokers",
        "{plaintext}"
    );
}

#[tokio::test]
async fn a_missing_tls_key_password_is_named() {
    // The client key's password, like every secret, comes from the environment.
    let error = build_error(
        r#"sink = { kind = "kafka", brokers = "127.0.0.1:9", topic = "t", security_protocol = "ssl", ssl_ca_location = "/etc/ssl/certs/ca-certificates.crt", ssl_certificate_location = "client.pem", ssl_key_location = "client.key", ssl_key_password_env = "KAFKA_TEST_SURELY_UNSET_KEY_PASSWORD" }"#,
    )
    .await;
    assert_eq!(
        error.missing_variable_name(),
        Some("KAFKA_TEST_SURELY_UNSET_KEY_PASSWORD"),
        "{error}"
    );
    assert_eq!(
        error.field(),
        "lanes[orders/billing].sink.ssl_key_password_env"
    );
}

#[tokio::test]
async fn a_message_timeout_past_the_lanes_delivery_timeout_is_refused_by_the_config_file() {
    let text = r#"
database_url = "sqlite:never-opened.db"
[[lanes]]
lane = "orders"
target = "billing"
delivery_timeout = "10s"
sink = { kind = "kafka", topic = "t", message_timeout = "15s" }
"#;
    // The file is refused as it is read, naming the sink's field and both timeouts.
    let error = match outbox_relay::config::file::FileConfig::from_toml_str("test", text) {
        Ok(config) => config.lanes().unwrap_err().to_string(),
        Err(error) => error.to_string(),
    };
    assert!(
        error.contains("lanes[orders/billing].sink.message_timeout"),
        "{error}"
    );
    assert!(error.contains("15s") && error.contains("10s"), "{error}");
}

#[tokio::test]
async fn a_message_timeout_past_the_lanes_delivery_timeout_is_refused_by_the_library() {
    let broker = Tansu::start(Storage::Memory, Auth::None).await;
    let name = topic("timeouts");
    broker.create_topic(&name, PARTITIONS).await;
    let sink = build(&format!(
        r#"sink = {{ kind = "kafka", brokers = "{}", topic = "{name}", message_timeout = "15s" }}"#,
        broker.brokers()
    ))
    .await;
    let lane = LaneConfig::new("orders", "billing").delivery_timeout(Duration::from_secs(10));
    let refused = OutboxRelay::builder(&Outbox::new(InMemoryOutboxStore::new()))
        .lane_shared(lane, sink.clone())
        .start()
        .await
        .expect_err("a delivery_timeout below message_timeout");
    let text = refused.to_string();
    assert!(
        text.contains("delivery_timeout")
            && text.contains("message_timeout")
            && text.contains("15s")
            && text.contains("10s"),
        "{text}"
    );
    let lane = LaneConfig::new("orders", "billing").delivery_timeout(Duration::from_secs(20));
    let relay = OutboxRelay::builder(&Outbox::new(InMemoryOutboxStore::new()))
        .lane_shared(lane, sink)
        .start()
        .await
        .expect("a delivery_timeout above message_timeout starts");
    relay.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// The log lines of a subscriber installed for this task.
#[derive(Clone, Default)]
struct Lines(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Lines {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_record_key_that_is_not_the_ordering_key_is_warned_about_once() {
    let lines = Lines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let broker = Tansu::start(Storage::Memory, Auth::None).await;
    let name = topic("keyed");
    broker.create_topic(&name, PARTITIONS).await;
    let sink = build(&format!(
        r#"sink = {{ kind = "kafka", brokers = "{}", topic = "{name}", key = "{{header.x-tenant}}" }}"#,
        broker.brokers()
    ))
    .await;
    let warnings = |lines: &Lines| {
        String::from_utf8_lossy(&lines.0.lock().unwrap())
            .matches("is not its ordering key")
            .count()
    };
    // The key is the ordering key: nothing to say.
    let same = claimed(draft().with_ordering_key("acme")).await;
    sink.deliver(&same).await.expect("delivered");
    assert_eq!(warnings(&lines), 0);
    // Another ordering key, then none: one warning for the sink.
    for message in [
        claimed(draft().with_ordering_key("order-7")).await,
        claimed(draft()).await,
    ] {
        sink.deliver(&message).await.expect("delivered");
    }
    assert_eq!(
        warnings(&lines),
        1,
        "{}",
        String::from_utf8_lossy(&lines.0.lock().unwrap())
    );
}
