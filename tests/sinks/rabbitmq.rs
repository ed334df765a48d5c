//! The RabbitMQ sink against the shared broker at 127.0.0.1:5672 (guest/guest), each test
//! with its own exchange and queue.

use std::time::Duration;

use lapin::options::{
    BasicGetOptions, ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{Channel, Connection, ConnectionProperties, ExchangeKind};
use outbox_relay::relay::RelayEvent;
use outbox_relay::store::NackOutcome;
use outbox_relay::{DeliveryError, OutboxStatus};

use super::tcp_proxy::{Cut, TcpProxy};
use super::{
    build, claimed, draft, enqueue, payload_bytes, start_relay, unique, wait_for, EVENT_TIMEOUT,
};

const BROKER: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// An exchange of the test's own; with `queue`, a queue bound to it for `routing_key`.
struct Topology {
    _connection: Connection,
    channel: Channel,
    exchange: String,
    queue: Option<String>,
}

impl Topology {
    async fn new(routing_key: Option<&str>) -> Self {
        let connection = Connection::connect(BROKER, ConnectionProperties::default())
            .await
            .expect("RabbitMQ is up (.ci/run starts it)");
        let channel = connection.create_channel().await.unwrap();
        let exchange = unique("sinktest");
        channel
            .exchange_declare(
                ShortString::from(exchange.as_str()),
                ExchangeKind::Direct,
                ExchangeDeclareOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
        let mut queue = None;
        if let Some(key) = routing_key {
            let name = unique("sinktest_q");
            channel
                .queue_declare(
                    ShortString::from(name.as_str()),
                    QueueDeclareOptions::default(),
                    FieldTable::default(),
                )
                .await
                .unwrap();
            channel
                .queue_bind(
                    ShortString::from(name.as_str()),
                    ShortString::from(exchange.as_str()),
                    ShortString::from(key),
                    QueueBindOptions::default(),
                    FieldTable::default(),
                )
                .await
                .unwrap();
            queue = Some(name);
        }
        Self {
            _connection: connection,
            channel,
            exchange,
            queue,
        }
    }

    async fn get(&self) -> Option<lapin::message::BasicGetMessage> {
        let queue = self.queue.as_deref().unwrap();
        self.channel
            .basic_get(ShortString::from(queue), BasicGetOptions { no_ack: true })
            .await
            .unwrap()
    }

    async fn remove(self) {
        if let Some(queue) = &self.queue {
            self.channel
                .queue_delete(
                    ShortString::from(queue.as_str()),
                    QueueDeleteOptions::default(),
                )
                .await
                .unwrap();
        }
        self.channel
            .exchange_delete(
                ShortString::from(self.exchange.as_str()),
                ExchangeDeleteOptions::default(),
            )
            .await
            .unwrap();
    }
}

fn header_text(table: &FieldTable, name: &str) -> Option<String> {
    match table.inner().get(name)? {
        AMQPValue::LongString(value) => {
            Some(String::from_utf8_lossy(value.as_bytes()).into_owned())
        }
        other => panic!("header {name} is {other:?}"),
    }
}

#[tokio::test]
async fn publishes_a_persistent_confirmed_message_with_its_id_and_headers() {
    let topology = Topology::new(Some("billing.acme")).await;
    let sink = build(&format!(
        r#"sink = {{ kind = "rabbitmq", url = "{BROKER}", exchange = "{}", routing_key = "{{target}}.{{header.x-tenant}}" }}"#,
        topology.exchange
    ))
    .await;
    let message = claimed(draft()).await;
    sink.deliver(&message).await.expect("delivered");

    let got = topology.get().await.expect("the message is in the queue");
    let delivery = &got.delivery;
    let properties = &delivery.properties;
    println!(
        "rabbitmq read back: exchange {} routing key {}\n  properties: {:?}\n  body: {}",
        delivery.exchange,
        delivery.routing_key,
        properties,
        String::from_utf8_lossy(&delivery.data)
    );
    assert_eq!(delivery.data, payload_bytes(&message));
    assert_eq!(delivery.routing_key.as_str(), "billing.acme");
    assert_eq!(
        properties
            .message_id()
            .as_ref()
            .map(|id| id.as_str().to_owned()),
        Some(message.outbox_id.to_string())
    );
    assert_eq!(*properties.delivery_mode(), Some(2), "persistent");
    assert_eq!(
        properties.content_type().as_ref().map(|t| t.as_str()),
        Some("application/json")
    );
    let headers = properties.headers().as_ref().expect("headers");
    assert_eq!(headers.inner().len(), 2, "{headers:?}");
    assert_eq!(header_text(headers, "x-tenant").as_deref(), Some("acme"));
    assert_eq!(
        header_text(headers, "traceparent").as_deref(),
        Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    );
    assert!(topology.get().await.is_none(), "one message, once");
    topology.remove().await;
}

#[tokio::test]
async fn an_unroutable_message_is_dead_lettered_naming_the_exchange_and_key() {
    // An exchange with no queue bound: nothing takes the message.
    let topology = Topology::new(None).await;
    let sink = build(&format!(
        r#"sink = {{ kind = "rabbitmq", url = "{BROKER}", exchange = "{}", routing_key = "nobody.{{target}}", mandatory = true }}"#,
        topology.exchange
    ))
    .await;
    let (store, relay, mut events) = start_relay(sink).await;
    let id = enqueue(&store, draft()).await;
    let story = wait_for(&mut events, id, "the dead letter", |e| {
        matches!(e, RelayEvent::Failed { .. })
    })
    .await;
    let RelayEvent::Failed { outcome, error, .. } = &story[0] else {
        unreachable!()
    };
    assert!(matches!(outcome, NackOutcome::DeadLettered), "{story:#?}");
    assert!(error.contains("unroutable"), "{error}");
    assert!(
        error.contains(&topology.exchange),
        "names the exchange: {error}"
    );
    assert!(
        error.contains("nobody.billing"),
        "names the routing key: {error}"
    );
    let stored = store.get(id).await.unwrap().unwrap();
    assert_eq!(stored.status, OutboxStatus::DeadLetter);
    assert_eq!(stored.attempt_count, 1);
    relay.shutdown(Duration::from_secs(10)).await.unwrap();
    topology.remove().await;
}

#[tokio::test]
async fn a_lost_connection_is_retryable_and_the_sink_reconnects() {
    let topology = Topology::new(Some("billing")).await;
    let mut proxy = TcpProxy::start("127.0.0.1:5672".parse().unwrap()).await;
    let sink = build(&format!(
        r#"sink = {{ kind = "rabbitmq", url = "amqp://guest:guest@{}/%2f", exchange = "{}", routing_key = "{{target}}" }}"#,
        proxy.addr(),
        topology.exchange
    ))
    .await;
    let first = claimed(draft()).await;
    sink.deliver(&first)
        .await
        .expect("delivered before the cut");

    proxy.cut(Cut::Reset).await;
    let during = claimed(draft()).await;
    let error = tokio::time::timeout(EVENT_TIMEOUT, sink.deliver(&during))
        .await
        .expect("a lost connection fails the delivery, it does not hang")
        .unwrap_err();
    assert!(matches!(error, DeliveryError::Retryable(_)), "{error:?}");

    proxy.restore().await;
    sink.deliver(&during)
        .await
        .expect("delivered after reconnecting");
    let mut ids = Vec::new();
    while let Some(got) = topology.get().await {
        ids.push(
            got.delivery
                .properties
                .message_id()
                .clone()
                .unwrap()
                .to_string(),
        );
    }
    assert_eq!(
        ids,
        [first.outbox_id.to_string(), during.outbox_id.to_string()]
    );
    topology.remove().await;
}

#[tokio::test]
async fn a_missing_exchange_is_retryable_and_the_channel_comes_back() {
    let topology = Topology::new(Some("billing")).await;
    let sink = build(&format!(
        r#"sink = {{ kind = "rabbitmq", url = "{BROKER}", exchange = "{{header.exchange}}", routing_key = "{{target}}" }}"#
    ))
    .await;
    // The broker closes the channel on a publish to an exchange that does not exist.
    let nowhere = claimed(draft().with_header("exchange", unique("sinktest_missing"))).await;
    let error = tokio::time::timeout(EVENT_TIMEOUT, sink.deliver(&nowhere))
        .await
        .expect("does not hang")
        .unwrap_err();
    assert!(matches!(error, DeliveryError::Retryable(_)), "{error:?}");
    let good = claimed(draft().with_header("exchange", topology.exchange.clone())).await;
    sink.deliver(&good).await.expect("a fresh channel delivers");
    assert!(topology.get().await.is_some());
    topology.remove().await;
}
