//! The claim gates column of `status`: what the config file sets up per lane (rate limit,
//! breaker, Retry-After hold), and, when the relay's metrics endpoint (`metrics_listen`)
//! answers, the live breaker state and time throttled that relay reports.
//!
//! Why the metrics endpoint: `status` is a separate process that reads the store; the
//! breaker lives in the relay's memory. The endpoint is the relay's one read-only window,
//! already served, so no admin protocol is added. It is asked once, briefly; a relay that
//! does not answer leaves the live fields empty.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use outbox_relay::config::file::{FileConfig, MetricsListen};
use outbox_relay::metrics::{BREAKER_STATE, LABEL_GATE, LABEL_STATE, THROTTLED_SECONDS};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long `status` waits for the relay's metrics endpoint.
const SCRAPE_TIMEOUT: Duration = Duration::from_millis(500);

/// What one relay reports for one lane.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct LiveGates {
    pub(crate) breaker: Option<String>,
    pub(crate) throttled_seconds: f64,
}

/// A lane's gates: configured, and live when the relay answered.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct LaneGates {
    rate_limit: Option<String>,
    breaker: bool,
    retry_after_holds_lane: bool,
    live: Option<LiveGates>,
}

impl LaneGates {
    /// One cell of the status table.
    pub(crate) fn cell(&self) -> String {
        let mut parts = Vec::new();
        if let Some(rate) = &self.rate_limit {
            parts.push(format!("rate {rate}"));
        }
        if self.breaker {
            let state = self
                .live
                .as_ref()
                .and_then(|live| live.breaker.clone())
                .unwrap_or_else(|| "on".to_owned());
            parts.push(format!("breaker {state}"));
        }
        if self.retry_after_holds_lane {
            parts.push("retry-after holds".to_owned());
        }
        if let Some(live) = self.live.as_ref().filter(|l| l.throttled_seconds > 0.0) {
            parts.push(format!("throttled {:.1}s", live.throttled_seconds));
        }
        if parts.is_empty() {
            "-".to_owned()
        } else {
            parts.join(", ")
        }
    }

    pub(crate) fn json(&self) -> Value {
        json!({
            "rate_limit": self.rate_limit,
            "breaker": self.breaker,
            "retry_after_holds_lane": self.retry_after_holds_lane,
            "breaker_state": self.live.as_ref().and_then(|l| l.breaker.clone()),
            "throttled_seconds": self.live.as_ref().map(|l| l.throttled_seconds),
        })
    }
}

/// The gates of every configured lane, by (lane, target), with what the relay reports.
pub(crate) async fn lane_gates(config: &FileConfig) -> HashMap<(String, String), LaneGates> {
    let live = match config.metrics_listen {
        MetricsListen::Listen(addr) => scrape(addr).await.unwrap_or_default(),
        MetricsListen::Off => HashMap::new(),
    };
    let Ok(lanes) = config.lanes() else {
        return HashMap::new();
    };
    lanes
        .into_iter()
        .map(|(lane, _)| {
            let key = (lane.name.clone(), lane.target.clone());
            let gates = LaneGates {
                rate_limit: lane.rate_limit.map(|limit| limit.to_string()),
                breaker: lane.circuit_breaker.is_some(),
                retry_after_holds_lane: lane.retry_after_holds_lane,
                live: live.get(&key).cloned(),
            };
            (key, gates)
        })
        .collect()
}

/// Asks the relay's metrics endpoint; `None` when it does not answer in time.
async fn scrape(addr: SocketAddr) -> Option<HashMap<(String, String), LiveGates>> {
    let body = tokio::time::timeout(SCRAPE_TIMEOUT, async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        let request = format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut text = String::new();
        stream.read_to_string(&mut text).await.ok()?;
        Some(text)
    })
    .await
    .ok()??;
    let (head, body) = body.split_once("\r\n\r\n")?;
    let ok = head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200");
    ok.then(|| parse_metrics(body))
}

/// The breaker state and throttled time per lane, from Prometheus text format.
pub(crate) fn parse_metrics(text: &str) -> HashMap<(String, String), LiveGates> {
    let mut lanes: HashMap<(String, String), LiveGates> = HashMap::new();
    let throttled_sum = format!("{THROTTLED_SECONDS}_sum");
    for line in text.lines() {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Some((name, labels)) = series.split_once('{') else {
            continue;
        };
        let labels = parse_labels(labels.trim_end_matches('}'));
        let (Some(lane), Some(target)) = (labels.get("lane"), labels.get("target")) else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let entry = lanes.entry((lane.clone(), target.clone())).or_default();
        if name == BREAKER_STATE && value == 1.0 {
            entry.breaker = labels.get(LABEL_STATE).cloned();
        } else if name == throttled_sum && labels.contains_key(LABEL_GATE) {
            entry.throttled_seconds += value;
        }
    }
    lanes
}

/// `a="x",b="y"` into a map (Prometheus escapes `\"`, `\\` and `\n` in values).
fn parse_labels(text: &str) -> HashMap<String, String> {
    let mut labels = HashMap::new();
    let mut rest = text;
    while let Some((key, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, escaped)) = chars.next() {
                        value.push(if escaped == 'n' { '\n' } else { escaped });
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        labels.insert(key.trim_start_matches(',').trim().to_owned(), value);
        rest = &after[end..];
    }
    labels
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_breaker_state_and_sums_throttled_time_per_lane() {
        let text = r#"# TYPE outbox_breaker_state gauge
outbox_breaker_state{lane="orders",target="webhook",state="closed"} 0
outbox_breaker_state{lane="orders",target="webhook",state="open"} 1
outbox_breaker_state{lane="orders",target="webhook",state="half_open"} 0
outbox_breaker_state{lane="a \"quoted\" lane",target="t",state="closed"} 1
outbox_throttled_seconds_sum{lane="orders",target="webhook",gate="rate_limit"} 1.5
outbox_throttled_seconds_sum{lane="orders",target="webhook",gate="breaker"} 30
outbox_throttled_seconds_count{lane="orders",target="webhook",gate="breaker"} 2
"#;
        let lanes = parse_metrics(text);
        let orders = &lanes[&("orders".to_owned(), "webhook".to_owned())];
        assert_eq!(orders.breaker.as_deref(), Some("open"));
        assert_eq!(orders.throttled_seconds, 31.5);
        let quoted = &lanes[&("a \"quoted\" lane".to_owned(), "t".to_owned())];
        assert_eq!(quoted.breaker.as_deref(), Some("closed"));
        let gates = LaneGates {
            rate_limit: Some("200/1s (burst 200)".to_owned()),
            breaker: true,
            retry_after_holds_lane: false,
            live: Some(orders.clone()),
        };
        assert_eq!(
            gates.cell(),
            "rate 200/1s (burst 200), breaker open, throttled 31.5s"
        );
        assert_eq!(LaneGates::default().cell(), "-");
    }
}
