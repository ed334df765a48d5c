//! The claim gates column of `status`: what the config file sets up per lane (rate limit,
//! breaker, Retry-After hold), and, when the relay's listener (`listener.address`) answers,
//! the live breaker state and time throttled that relay reports.
//!
//! Why the listener: `status` is a separate process that reads the store; the breaker
//! lives in the relay's memory. `GET /api/v1/lanes` is the relay's read-only window,
//! JSON of its `LaneStatus`. It is asked once, briefly; a relay that does not answer
//! leaves the live fields empty.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use outbox_relay::config::file::{FileConfig, MetricsListen};
use outbox_relay::config::ControlToken;
use serde_json::{json, Value};

/// How long `status` waits for the relay's listener.
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
    // With a token configured, lane reads need it too (unless opened).
    let token = config.listener.control_token().ok().flatten();
    let live = match config.listen_address() {
        MetricsListen::Listen(addr) => scrape(addr, token.as_ref()).await.unwrap_or_default(),
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

/// Asks the relay's `GET /api/v1/lanes`, with the token when there is one; `None` when it
/// does not answer in time, or refuses.
async fn scrape(
    addr: SocketAddr,
    token: Option<&ControlToken>,
) -> Option<HashMap<(String, String), LiveGates>> {
    let client = reqwest::Client::builder()
        .timeout(SCRAPE_TIMEOUT)
        .tls_backend_preconfigured(outbox_relay::tls::client_config(None).ok()?)
        .build()
        .ok()?;
    let mut request = client.get(format!("http://{addr}/api/v1/lanes"));
    if let Some(token) = token {
        request = request.bearer_auth(token.as_str());
    }
    let response = request.send().await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    let body: Value = serde_json::from_slice(&response.bytes().await.ok()?).ok()?;
    Some(live_gates(&body))
}

/// The breaker state and throttled time per lane, from the API's answer (each lane as
/// `RelayHandle::status` reports it).
pub(crate) fn live_gates(answer: &Value) -> HashMap<(String, String), LiveGates> {
    let lanes = answer["lanes"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    lanes
        .iter()
        .filter_map(|lane| {
            let key = (
                lane["lane"]["lane"].as_str()?.to_owned(),
                lane["lane"]["target"].as_str()?.to_owned(),
            );
            let gates = &lane["gates"];
            let live = LiveGates {
                breaker: gates["breaker"].as_str().map(str::to_owned),
                throttled_seconds: gates["throttled_ms"].as_f64().unwrap_or(0.0) / 1000.0,
            };
            Some((key, live))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_breaker_state_and_throttled_time_per_lane() {
        let answer = json!({"lanes": [
            {"lane": {"lane": "orders", "target": "webhook"}, "state": "running",
             "gates": {"rate_limit": null, "breaker": "open", "retry_after_holds_lane": false,
                       "throttled_ms": 31500}},
            {"lane": {"lane": "a \"quoted\" lane", "target": "t"}, "state": "running",
             "gates": {"rate_limit": null, "breaker": null, "retry_after_holds_lane": false,
                       "throttled_ms": 0}}
        ]});
        let lanes = live_gates(&answer);
        let orders = &lanes[&("orders".to_owned(), "webhook".to_owned())];
        assert_eq!(orders.breaker.as_deref(), Some("open"));
        assert_eq!(orders.throttled_seconds, 31.5);
        let quoted = &lanes[&("a \"quoted\" lane".to_owned(), "t".to_owned())];
        assert_eq!(quoted.breaker, None);
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
        assert!(live_gates(&json!({"error": "starting"})).is_empty());
    }
}
