//! A private tansu broker per test (a Kafka-protocol broker from crates.io that `.ci/run`
//! installs), on a free loopback port, and a plain librdkafka consumer that reads records
//! back: not the sink, so the sink's records are checked by an independent reader.
//!
//! tansu 0.6 listens in plaintext only; [`Tansu::start_behind_tls`] puts `socat` (Debian's,
//! built with OpenSSL) in front of it as a TLS terminator, with a CA and a server
//! certificate the test makes with `openssl`, and has tansu advertise the TLS port, so
//! every client reaches the broker through TLS.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};

/// How long a broker may take to start listening.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Where the broker keeps its records.
#[derive(Debug, Clone)]
pub enum Storage {
    /// In memory: gone when the broker stops.
    Memory,
    /// An SQLite file that outlives the broker process, so a restarted broker has every
    /// record it acknowledged before.
    Sqlite(PathBuf),
}

/// SASL settings the broker enforces (`--authentication`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    /// Anyone may produce.
    None,
    /// Clients must authenticate (SCRAM users are created with `tansu user create`).
    Sasl,
}

/// A tansu broker process, stopped when dropped.
#[derive(Debug)]
pub struct Tansu {
    child: Option<Child>,
    port: u16,
    tls: Option<TlsFront>,
    storage: Storage,
    auth: Auth,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

/// The tansu binary: `$TANSU`, else `tansu` on `PATH`, else `~/.cargo/bin/tansu`.
fn binary() -> PathBuf {
    if let Some(path) = std::env::var_os("TANSU") {
        return PathBuf::from(path);
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("tansu"))
            .find(|candidate| candidate.is_file())
    });
    if let Some(path) = on_path {
        return path;
    }
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")))
        .expect("HOME is set");
    let path = home.join("bin/tansu");
    assert!(
        path.is_file(),
        "the tansu broker is not installed (.ci/run installs it: cargo install tansu --locked --features dynostore,libsql)"
    );
    path
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}

impl Tansu {
    /// Starts a broker on a free port.
    pub async fn start(storage: Storage, auth: Auth) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut broker = Self {
            child: None,
            port: free_port(),
            tls: None,
            storage,
            auth,
            log: dir.path().join("tansu.log"),
            _dir: dir,
        };
        broker.spawn().await;
        broker
    }

    /// Starts a broker on a free port behind a TLS terminator on another: clients connect
    /// with TLS (`client_config` has the settings), verifying the broker against
    /// [`Tansu::ca`].
    pub async fn start_behind_tls(storage: Storage) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let port = free_port();
        let tls = TlsFront::start(dir.path(), port);
        let mut broker = Self {
            child: None,
            port,
            tls: Some(tls),
            storage,
            auth: Auth::None,
            log: dir.path().join("tansu.log"),
            _dir: dir,
        };
        broker.spawn().await;
        broker
    }

    /// The bootstrap address: the TLS terminator's when there is one.
    pub fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.advertised_port())
    }

    /// The CA certificate (PEM) that signed the TLS terminator's certificate.
    pub fn ca(&self) -> &Path {
        &self.tls.as_ref().expect("a broker behind TLS").ca
    }

    fn advertised_port(&self) -> u16 {
        self.tls.as_ref().map_or(self.port, |tls| tls.port)
    }

    fn storage_url(&self) -> String {
        match &self.storage {
            // Each broker has its own cluster id, so even a shared store would not mix.
            Storage::Memory => "memory://tansu/".to_owned(),
            // tansu joins the URL's path, less its first '/', to its working directory:
            // one more '/' keeps an absolute path absolute.
            Storage::Sqlite(path) => format!("sqlite:///{}", path.display()),
        }
    }

    async fn spawn(&mut self) {
        let url = format!("tcp://127.0.0.1:{}", self.port);
        // Metadata answers name the advertised listener: behind TLS, the terminator.
        let advertised = format!("tcp://127.0.0.1:{}", self.advertised_port());
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("the broker's log file");
        let mut command = Command::new(binary());
        command
            .arg("broker")
            .arg("--listener-url")
            .arg(&url)
            .arg("--advertised-listener-url")
            .arg(&advertised)
            .arg("--storage-engine")
            .arg(self.storage_url())
            .arg("--silent")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log);
        if self.auth == Auth::Sasl {
            command.arg("--authentication");
        }
        let child = command.spawn().expect("the tansu broker starts");
        self.child = Some(child);
        let started = Instant::now();
        loop {
            if tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                .await
                .is_ok()
            {
                return;
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "tansu exited with {status} before listening:\n{}",
                    self.log_text()
                );
            }
            assert!(
                started.elapsed() < START_TIMEOUT,
                "tansu did not listen on {} within {START_TIMEOUT:?}:\n{}",
                self.port,
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// What the broker wrote to stdout and stderr.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Stops the broker: SIGTERM, then SIGKILL if it has not exited within 10 s.
    pub async fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        let started = Instant::now();
        while child.try_wait().ok().flatten().is_none() {
            if started.elapsed() > Duration::from_secs(10) {
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Starts the broker again, on the same port and storage.
    pub async fn restart(&mut self) {
        self.stop().await;
        self.spawn().await;
    }

    /// Starts the broker again, on the same port and storage, with `auth`.
    pub async fn restart_with(&mut self, auth: Auth) {
        self.stop().await;
        self.auth = auth;
        self.spawn().await;
    }

    /// Creates `topic` with `partitions` partitions.
    pub async fn create_topic(&self, topic: &str, partitions: i32) {
        let admin: AdminClient<DefaultClientContext> =
            self.client_config().create().expect("an admin client");
        let results = admin
            .create_topics(
                &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
                &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
            )
            .await
            .expect("CreateTopics answered");
        for result in results {
            result.unwrap_or_else(|(topic, code)| panic!("creating {topic}: {code}"));
        }
    }

    /// Creates the SCRAM user `name` (`tansu user create`).
    pub fn create_scram_user(&self, name: &str, password: &str, mechanism: &str) {
        let output = Command::new(binary())
            .args(["user", "create", "--broker"])
            .arg(format!("tcp://127.0.0.1:{}", self.port))
            .args(["--mechanism", mechanism, name, password])
            .output()
            .expect("tansu user create runs");
        assert!(
            output.status.success(),
            "tansu user create failed: {}\n{}",
            String::from_utf8_lossy(&output.stderr),
            self.log_text()
        );
    }

    /// Client settings that reach this broker, TLS included (SASL added by the caller when
    /// needed).
    pub fn client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", self.brokers());
        if let Some(tls) = &self.tls {
            config
                .set("security.protocol", "ssl")
                .set("ssl.ca.location", tls.ca.display().to_string());
        }
        config
    }
}

impl Drop for Tansu {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `socat` terminating TLS on its own port and forwarding each connection to tansu's
/// plaintext port; killed when dropped.
#[derive(Debug)]
struct TlsFront {
    child: Child,
    port: u16,
    ca: PathBuf,
}

impl TlsFront {
    /// Makes a CA and a server certificate for 127.0.0.1 in `dir`, and starts `socat` on a
    /// free port in front of `backend`.
    fn start(dir: &Path, backend: u16) -> Self {
        crate::certificates::make_certificates(dir, "outbox-relay Kafka test CA", "server");
        let port = free_port();
        let listen = format!(
            "OPENSSL-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork,cert={},key={},verify=0",
            dir.join("server.pem").display(),
            dir.join("server.key").display()
        );
        let log = std::fs::File::create(dir.join("socat.log")).expect("socat's log file");
        // Its own process group: `fork` makes a child per connection, and dropping the
        // front ends them all.
        let child = Command::new("socat")
            .process_group(0)
            .arg(listen)
            .arg(format!("TCP:127.0.0.1:{backend}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("socat runs (.ci/run installs it)");
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < START_TIMEOUT,
                "socat did not listen on {port} within {START_TIMEOUT:?}: {}",
                std::fs::read_to_string(dir.join("socat.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Self {
            child,
            port,
            ca: dir.join("ca.pem"),
        }
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.wait();
    }
}

/// A record as a consumer reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The partition.
    pub partition: i32,
    /// The offset in it.
    pub offset: i64,
    /// The key.
    pub key: Option<Vec<u8>>,
    /// The value.
    pub value: Vec<u8>,
    /// The headers, in order.
    pub headers: Vec<(String, Vec<u8>)>,
}

impl Record {
    /// The header `name` as text.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| String::from_utf8_lossy(value).into_owned())
    }
}

/// Reads `topic`'s `partitions` from their beginning until `expected` records came, or
/// `timeout` passed (then it returns what it has: the caller's assertion says what lacks).
/// `config` reaches the broker (SASL included).
pub async fn read_back(
    mut config: ClientConfig,
    topic: &str,
    partitions: i32,
    expected: usize,
    timeout: Duration,
) -> Vec<Record> {
    let topic = topic.to_owned();
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = config
            .set("group.id", format!("reader-{topic}"))
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .create()
            .expect("a consumer");
        let mut assignment = TopicPartitionList::new();
        for partition in 0..partitions {
            assignment
                .add_partition_offset(&topic, partition, Offset::Beginning)
                .expect("assignable");
        }
        consumer.assign(&assignment).expect("assigned");
        let started = Instant::now();
        let mut records = Vec::new();
        while records.len() < expected && started.elapsed() < timeout {
            match consumer.poll(Duration::from_millis(200)) {
                Some(Ok(message)) => records.push(Record {
                    partition: message.partition(),
                    offset: message.offset(),
                    key: message.key().map(<[u8]>::to_vec),
                    value: message.payload().map(<[u8]>::to_vec).unwrap_or_default(),
                    headers: message
                        .headers()
                        .map(|headers| {
                            headers
                                .iter()
                                .map(|h| {
                                    (
                                        h.key.to_owned(),
                                        h.value.map(<[u8]>::to_vec).unwrap_or_default(),
                                    )
                                })
                                .collect()
                        })
                        .unwrap_or_default(),
                }),
                Some(Err(error)) => eprintln!("consumer: {error}"),
                None => {}
            }
        }
        records
    })
    .await
    .expect("the consumer thread")
}

/// The partition the Java producer's default partitioner picks for `key` among
/// `partitions`: murmur2 of the key bytes, made positive, modulo the count. Written out
/// here from Kafka's `Utils.murmur2`, independent of librdkafka's.
pub fn java_partition(key: &[u8], partitions: i32) -> i32 {
    ((murmur2(key) & 0x7fff_ffff) % partitions as u32) as i32
}

/// Kafka's `Utils.murmur2`, as an unsigned word.
pub fn murmur2(key: &[u8]) -> u32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let length = key.len() as u32;
    let mut h = SEED ^ length;
    let chunks = key.chunks_exact(4);
    let tail = chunks.remainder();
    for chunk in chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    match tail.len() {
        3 => {
            h ^= u32::from(tail[2]) << 16;
            h ^= u32::from(tail[1]) << 8;
            h ^= u32::from(tail[0]);
            h = h.wrapping_mul(M);
        }
        2 => {
            h ^= u32::from(tail[1]) << 8;
            h ^= u32::from(tail[0]);
            h = h.wrapping_mul(M);
        }
        1 => {
            h ^= u32::from(tail[0]);
            h = h.wrapping_mul(M);
        }
        _ => {}
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}

#[test]
fn murmur2_matches_the_java_clients_test_vectors() {
    // From Kafka's UtilsTest.testMurmur2 (the Java client's values, as signed ints).
    for (key, expected) in [
        ("21", -973_932_308),
        ("foobar", -790_332_482),
        ("a-little-bit-long-string", -985_981_536),
        ("a-little-bit-longer-string", -1_486_304_829),
        (
            "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
            -58_897_971,
        ),
        ("abc", 479_470_107),
    ] {
        assert_eq!(murmur2(key.as_bytes()) as i32, expected, "{key}");
    }
}
