//! The relay's Prometheus exporter, installed once for this test binary on a free loopback
//! port, and scraped the way Prometheus does: `GET /metrics` over HTTP.

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::super::EVENT_TIMEOUT;

/// The process's exporter (a process has one global recorder).
#[derive(Debug, Clone, Copy)]
pub struct Scraper {
    addr: SocketAddr,
}

static EXPORTER: OnceLock<SocketAddr> = OnceLock::new();

impl Scraper {
    /// Installs the exporter the first time; later calls share it.
    pub fn global() -> Self {
        let addr = *EXPORTER.get_or_init(|| {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|listener| listener.local_addr())
                .expect("a free loopback port")
                .port();
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            outbox_relay::http::install_prometheus_exporter(addr)
                .unwrap_or_else(|error| panic!("the exporter starts on {addr}: {error}"));
            addr
        });
        Self { addr }
    }

    /// The body of `GET /metrics`.
    pub async fn scrape(&self) -> String {
        let mut stream = tokio::net::TcpStream::connect(self.addr)
            .await
            .expect("the exporter accepts");
        stream
            // HTTP/1.0: the body comes whole, closed by the server, never chunked.
            .write_all(b"GET /metrics HTTP/1.0\r\nHost: relay\r\n\r\n")
            .await
            .expect("request sent");
        let mut response = String::new();
        stream
            .read_to_string(&mut response)
            .await
            .expect("response read");
        let (head, body) = response
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("not an HTTP response: {response}"));
        assert!(
            head.lines()
                .next()
                .is_some_and(|status| status.contains(" 200 ")),
            "{head}"
        );
        body.to_owned()
    }

    /// Scrapes until `done` holds for the text, failing with the last scrape, what was
    /// awaited and the time waited after `EVENT_TIMEOUT`.
    pub async fn wait_for(&self, what: &str, done: impl Fn(&str) -> bool) -> String {
        let started = Instant::now();
        loop {
            let text = self.scrape().await;
            if done(&text) {
                return text;
            }
            assert!(
                started.elapsed() < EVENT_TIMEOUT,
                "waited {:?} for {what}; last scrape:\n{text}",
                started.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The sample lines of `text` whose labels include `label` (`name="value"`).
pub fn lines<'a>(text: &'a str, label: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|line| !line.starts_with('#') && line.contains(label))
        .collect()
}

/// The value of the first sample of `metric` whose labels include every one of `labels`.
pub fn value(text: &str, metric: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find(|line| {
            line.strip_prefix(metric)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
                && labels.iter().all(|label| line.contains(label))
        })
        .and_then(|line| line.rsplit_once(' '))
        .and_then(|(_, value)| value.parse().ok())
}
