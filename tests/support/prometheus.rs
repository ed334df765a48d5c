//! A real Prometheus server for a test: started on a free loopback port with a data
//! directory of its own, scraping one target every second and evaluating rule files, and
//! killed (its directory removed) when the guard drops, panics included.
//!
//! Its HTTP API is read with a tiny HTTP/1.1 GET over `tokio::net::TcpStream` and
//! `serde_json`: the crate has no HTTP client, and one GET does not justify adding one.

use std::fmt::Write as _;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Where Debian's `prometheus` package puts the server (`.ci/run` installs it).
pub const DEFAULT_BINARY: &str = "/usr/bin/prometheus";

/// The server's stdout and stderr, in its directory.
const LOG: &str = "prometheus.log";

/// How long one HTTP request to Prometheus may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// How long the server has to start answering `/-/ready` (a loaded CI machine, a TSDB to
/// create).
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A loopback address with a port nobody listened on a moment ago. Another process may
/// take it before we bind it again: callers retry on a clash.
pub fn free_loopback_addr() -> SocketAddr {
    let probe = TcpListener::bind("127.0.0.1:0").expect("bind a probe socket on loopback");
    probe.local_addr().expect("the probe's address")
}

/// The Prometheus binary: `$PROMETHEUS`, else [`DEFAULT_BINARY`]. Missing is a failure,
/// never a skip: without it the dashboard is not proven against real data.
pub fn binary() -> PathBuf {
    let path = std::env::var_os("PROMETHEUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_BINARY));
    assert!(
        path.is_file(),
        "the Prometheus server {} is missing, so the dashboard and the alert rules cannot be \
         checked against real data. Install Debian's prometheus package \
         (apt-get install -y prometheus; .ci/run does), or set PROMETHEUS to the binary.",
        path.display()
    );
    path
}

/// A running Prometheus. Dropping it kills the process and removes its data directory.
#[derive(Debug)]
pub struct Prometheus {
    child: Child,
    addr: SocketAddr,
    /// Config, log and data; removed after `drop` below has killed the process.
    dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Starts Prometheus scraping `target` (job `job`, with the extra target labels
    /// `labels`, as a Kubernetes service discovery adds `namespace`) every second and
    /// evaluating `rule_files` every second, and waits until it is ready. Retries on
    /// another port when its port was taken meanwhile.
    pub async fn start(
        job: &str,
        target: SocketAddr,
        labels: &[(&str, &str)],
        rule_files: &[&Path],
    ) -> Prometheus {
        let binary = binary();
        for _ in 0..5 {
            let mut server = Self::spawn(&binary, job, target, labels, rule_files);
            match server.wait_ready().await {
                Ok(()) => return server,
                Err(log) if log.contains("address already in use") => {
                    eprintln!("Prometheus port {} was taken; retrying", server.addr);
                }
                Err(log) => panic!("Prometheus did not start on {}: {log}", server.addr),
            }
        }
        panic!("no free loopback port for Prometheus after 5 attempts");
    }

    fn spawn(
        binary: &Path,
        job: &str,
        target: SocketAddr,
        labels: &[(&str, &str)],
        rule_files: &[&Path],
    ) -> Prometheus {
        let dir = tempfile::tempdir().expect("a data directory for Prometheus");
        let addr = free_loopback_addr();
        let mut config = String::from(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n",
        );
        config.push_str("rule_files:\n");
        for file in rule_files {
            writeln!(config, "  - {:?}", file.display().to_string()).unwrap();
        }
        write!(
            config,
            "scrape_configs:\n  - job_name: {job:?}\n    static_configs:\n      - targets: [\"{target}\"]\n"
        )
        .unwrap();
        if !labels.is_empty() {
            config.push_str("        labels:\n");
            for (name, value) in labels {
                writeln!(config, "          {name}: {value:?}").unwrap();
            }
        }
        let config_file = dir.path().join("prometheus.yml");
        std::fs::write(&config_file, config).expect("write prometheus.yml");
        let log_file =
            std::fs::File::create(dir.path().join(LOG)).expect("create the Prometheus log");
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config_file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("clone the log handle"))
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", binary.display()));
        Prometheus { child, addr, dir }
    }

    /// Waits for `/-/ready`; on failure, the server's log.
    async fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        loop {
            if let Ok((200, _)) = http_get(self.addr, "/-/ready").await {
                return Ok(());
            }
            let exited = matches!(self.child.try_wait(), Ok(Some(_)) | Err(_));
            if exited || tokio::time::Instant::now() > deadline {
                let why = if exited {
                    "it exited"
                } else {
                    "not ready in time"
                };
                return Err(format!("{why}; its log:\n{}", self.log_tail(40)));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Where the server listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server's log so far, for failure messages.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = std::fs::read_to_string(self.dir.path().join(LOG)).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// `GET /api/v1/<endpoint>?<params>`, answered `"status": "success"`: its `data`.
    pub async fn api(&self, endpoint: &str, params: &[(&str, &str)]) -> Result<Value, String> {
        let mut path = format!("/api/v1/{endpoint}");
        for (i, (name, value)) in params.iter().enumerate() {
            path.push(if i == 0 { '?' } else { '&' });
            path.push_str(&percent_encode(name));
            path.push('=');
            path.push_str(&percent_encode(value));
        }
        let (status, body) = http_get(self.addr, &path).await?;
        let json: Value = serde_json::from_str(&body)
            .map_err(|e| format!("GET {path}: HTTP {status}, not JSON ({e}): {body}"))?;
        if json["status"] != "success" {
            return Err(format!("GET {path}: HTTP {status}: {json}"));
        }
        Ok(json["data"].clone())
    }

    /// An instant query: the result's series, each as (labels, value). A scalar result
    /// counts as one series without labels.
    pub async fn query(&self, promql: &str) -> Result<Vec<(Value, f64)>, String> {
        let data = self.api("query", &[("query", promql)]).await?;
        let value = |sample: &Value| -> f64 {
            sample[1]
                .as_str()
                .and_then(|v| v.parse().ok())
                .unwrap_or(f64::NAN)
        };
        match data["resultType"].as_str() {
            Some("vector") => Ok(data["result"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|series| (series["metric"].clone(), value(&series["value"])))
                .collect()),
            Some("scalar") => Ok(vec![(Value::Null, value(&data["result"]))]),
            other => Err(format!(
                "{promql}: unexpected result type {other:?}: {data}"
            )),
        }
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
pub fn percent_encode(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len() * 3);
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                encoded.push(byte as char)
            }
            _ => write!(encoded, "%{byte:02X}").unwrap(),
        }
    }
    encoded
}

/// One HTTP/1.1 GET with `Connection: close`: the status code and the body (de-chunked).
pub async fn http_get(addr: SocketAddr, path: &str) -> Result<(u16, String), String> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        Ok::<_, std::io::Error>(response)
    };
    let response = tokio::time::timeout(REQUEST_TIMEOUT, exchange)
        .await
        .map_err(|_| format!("GET {path} on {addr}: no answer within {REQUEST_TIMEOUT:?}"))?
        .map_err(|e| format!("GET {path} on {addr}: {e}"))?;
    let end_of_head = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("GET {path}: no end of headers"))?;
    let head = String::from_utf8_lossy(&response[..end_of_head]);
    let body = &response[end_of_head + 4..];
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("GET {path}: bad status line in {head:?}"))?;
    let chunked = head.lines().any(|line| {
        let line = line.to_ascii_lowercase();
        line.starts_with("transfer-encoding:") && line.contains("chunked")
    });
    let body = if chunked {
        dechunk(body).ok_or_else(|| format!("GET {path}: bad chunked body"))?
    } else {
        body.to_vec()
    };
    let body = String::from_utf8(body).map_err(|e| format!("GET {path}: {e}"))?;
    Ok((status, body))
}

/// Joins the chunks of a `Transfer-Encoding: chunked` body.
fn dechunk(mut body: &[u8]) -> Option<Vec<u8>> {
    let mut joined = Vec::new();
    loop {
        let line_end = body.windows(2).position(|w| w == b"\r\n")?;
        let size_line = std::str::from_utf8(&body[..line_end]).ok()?;
        let size = usize::from_str_radix(size_line.split(';').next()?.trim(), 16).ok()?;
        let rest = &body[line_end + 2..];
        if size == 0 {
            return Some(joined);
        }
        joined.extend_from_slice(rest.get(..size)?);
        body = rest.get(size..)?.strip_prefix(b"\r\n")?;
    }
}

#[test]
fn percent_encoding_and_dechunking() {
    assert_eq!(
        percent_encode(r#"sum(rate(x{lane=~".*"}[1m])) > 0"#),
        "sum%28rate%28x%7Blane%3D~%22.%2A%22%7D%5B1m%5D%29%29%20%3E%200"
    );
    assert_eq!(percent_encode("é"), "%C3%A9");
    assert_eq!(
        dechunk(b"4\r\nWiki\r\n6;ext=1\r\npedia \r\n0\r\n\r\n").as_deref(),
        Some(&b"Wikipedia "[..])
    );
    assert_eq!(dechunk(b"5\r\nab"), None);
}
