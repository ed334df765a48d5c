//! The Kafka row: the real relay at concurrency 64 delivering with the Kafka sink (an
//! idempotent librdkafka producer, `acks=all`) to a local tansu broker, against the same
//! relay delivering with the log sink, alternating on fresh stores per round, as the
//! webhook row does. The ratio says what a broker acknowledgement per message costs next
//! to a sink that costs almost nothing.
//!
//! The broker is `--kafka-brokers ADDR` when given, else a private `tansu broker` (in
//! memory, on a free loopback port) that this row starts and stops.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_relay::sinks::kafka::{KafkaSink, KafkaSinkConfig};
use outbox_relay::sinks::LogSink;
use outbox_relay::DeliveryHandler;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;

use crate::options::StoreKind;
use crate::webhook::{one_run, Round, SinkRow, CONCURRENCY};

/// Partitions of the row's topic.
const PARTITIONS: i32 = 3;

/// Runs `rounds` rounds of `messages` messages per sink on `kind`, log sink first in each.
pub async fn run(
    kind: StoreKind,
    pg_url: &str,
    brokers: Option<&str>,
    messages: usize,
    rounds: usize,
    timeout: Duration,
) -> Result<SinkRow, String> {
    let broker = match brokers {
        Some(brokers) => Broker::External(brokers.to_owned()),
        None => Broker::start().await?,
    };
    let topic = format!("outbox_benchmark_{}", uuid::Uuid::new_v4().simple());
    create_topic(&broker.brokers(), &topic).await?;
    let config = KafkaSinkConfig::new(topic.parse().map_err(|e| format!("topic {topic:?}: {e}"))?)
        .brokers(broker.brokers());
    let kafka: Arc<dyn DeliveryHandler> = Arc::new(
        KafkaSink::build(&config, "kafka row")
            .await
            .map_err(|e| format!("Kafka sink: {e}"))?,
    );
    let mut row = SinkRow {
        store: kind,
        messages,
        concurrency: CONCURRENCY,
        rounds: Vec::with_capacity(rounds),
    };
    for round in 0..rounds {
        let log = Arc::new(LogSink::new(std::io::sink()));
        let log = one_run(kind, pg_url, log, messages, timeout)
            .await
            .map_err(|e| format!("round {round}, log sink: {e}"))?;
        let sink = one_run(kind, pg_url, kafka.clone(), messages, timeout)
            .await
            .map_err(|e| format!("round {round}, Kafka sink: {e}"))?;
        let round = Round { log, sink };
        println!(
            "{} Kafka row round {}: log {:.0} msg/s, Kafka {:.0} msg/s, {:.2}×",
            kind.label(),
            row.rounds.len(),
            round.log,
            round.sink,
            round.ratio()
        );
        row.rounds.push(round);
    }
    Ok(row)
}

async fn create_topic(brokers: &str, topic: &str) -> Result<(), String> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .map_err(|e| format!("Kafka admin client: {e}"))?;
    let results = admin
        .create_topics(
            &[NewTopic::new(topic, PARTITIONS, TopicReplication::Fixed(1))],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        )
        .await
        .map_err(|e| format!("create topic {topic}: {e}"))?;
    for result in results {
        result.map_err(|(topic, code)| format!("create topic {topic}: {code}"))?;
    }
    Ok(())
}

/// The broker the row produces to.
enum Broker {
    External(String),
    /// A tansu process of the row's own, killed when dropped.
    Private {
        child: Child,
        port: u16,
    },
}

impl Broker {
    async fn start() -> Result<Self, String> {
        let binary = tansu_binary()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map_err(|e| format!("a free port for tansu: {e}"))?
            .port();
        let url = format!("tcp://127.0.0.1:{port}");
        let child = Command::new(&binary)
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
            ])
            .args(["--storage-engine", "memory://tansu/", "--silent"])
            .env("RUST_LOG", "error")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("start {}: {e}", binary.display()))?;
        let broker = Broker::Private { child, port };
        let started = Instant::now();
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            if started.elapsed() > Duration::from_secs(60) {
                return Err(format!("tansu did not listen on {port} within 60 s"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(broker)
    }

    fn brokers(&self) -> String {
        match self {
            Broker::External(brokers) => brokers.clone(),
            Broker::Private { port, .. } => format!("127.0.0.1:{port}"),
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Broker::Private { child, .. } = self {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `$TANSU`, else `tansu` on `PATH`, else `~/.cargo/bin/tansu`.
fn tansu_binary() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("TANSU") {
        return Ok(PathBuf::from(path));
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("tansu"))
            .find(|candidate| candidate.is_file())
    });
    if let Some(path) = on_path {
        return Ok(path);
    }
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")))
        .ok_or("neither CARGO_HOME nor HOME is set")?;
    let path = home.join("bin/tansu");
    if path.is_file() {
        Ok(path)
    } else {
        Err("no Kafka broker: pass --kafka-brokers, or install tansu (cargo install tansu --locked --features dynostore,libsql)".to_owned())
    }
}
