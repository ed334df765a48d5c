//! The claim gates' fields of a `[[lanes]]` entry: `rate_limit` as written, and the
//! `breaker` table.

use serde::{Deserialize, Serialize};

use crate::config::duration::HumanDuration;
use crate::config::{
    CircuitBreakerConfig, FailureRatio, RateLimit, DEFAULT_BREAKER_MIN_REQUESTS,
    DEFAULT_BREAKER_WINDOW,
};

/// A rate as written in the file, such as `"200/s"` (see [`RateLimit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateSpec(pub RateLimit);

impl Serialize for RateSpec {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let per = crate::config::duration::format_duration(self.0.per);
        serializer.collect_str(&format_args!("{}/{per}", self.0.count))
    }
}

impl<'de> Deserialize<'de> for RateSpec {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map(RateSpec).map_err(serde::de::Error::custom)
    }
}

/// A lane's `breaker` table. Absent keys take the defaults of [`CircuitBreakerConfig`];
/// with `failure_ratio` given and `consecutive_failures` absent, only the ratio opens it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BreakerSection {
    /// Open after this many retryable failures in a row. Default 5.
    pub consecutive_failures: Option<u32>,
    /// Open when this share of the outcomes within `window` failed (0 < ratio ≤ 1).
    pub failure_ratio: Option<f64>,
    /// How far back the ratio looks. Default 60s.
    pub window: Option<HumanDuration>,
    /// Outcomes the window needs before the ratio counts. Default 20.
    pub min_requests: Option<u32>,
    /// How long an opening holds claims back before the probe. Default 30s.
    pub cool_down: Option<HumanDuration>,
    /// The longest cool-down (it doubles with each failed probe). Default 5m.
    pub max_cool_down: Option<HumanDuration>,
}

impl BreakerSection {
    /// The breaker config, defaults filled in (not yet validated).
    pub fn to_config(&self) -> CircuitBreakerConfig {
        let mut config = CircuitBreakerConfig::default();
        let ratio = self.failure_ratio.map(|ratio| FailureRatio {
            // Out-of-range ratios land outside 1..=1000, which validation refuses.
            permille: (ratio * 1000.0).round().clamp(0.0, f64::from(u16::MAX)) as u16,
            window: self.window.map_or(DEFAULT_BREAKER_WINDOW, |w| w.0),
            min_requests: self.min_requests.unwrap_or(DEFAULT_BREAKER_MIN_REQUESTS),
        });
        config.failure_ratio = ratio;
        config.consecutive_failures = match (self.consecutive_failures, ratio) {
            (Some(n), _) => Some(n),
            (None, Some(_)) => None,
            (None, None) => config.consecutive_failures,
        };
        if let Some(cool_down) = self.cool_down {
            config = config.cool_down(cool_down.0);
        }
        if let Some(max) = self.max_cool_down {
            config.max_cool_down = max.0;
        }
        config
    }
}
