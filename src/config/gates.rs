//! Claim gates of a lane, as configured: a rate limit (a token bucket) and a circuit
//! breaker. Both act before a claim, so a throttled or broken target costs no attempts.
//! The policies themselves live in the lane's sans-IO core (`relay::lane::core::gate`).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use super::duration::parse_duration;

/// The highest rate count accepted, per period: a typo such as `2000000000/s` is refused
/// rather than treated as unlimited.
pub const MAX_RATE_COUNT: u32 = 1_000_000;
/// Consecutive retryable failures that open a breaker unless configured otherwise.
pub const DEFAULT_BREAKER_CONSECUTIVE_FAILURES: u32 = 5;
/// How long an open breaker waits before its probe, the first time.
pub const DEFAULT_BREAKER_COOL_DOWN: Duration = Duration::from_secs(30);
/// The longest cool-down: each re-open after a failed probe doubles it up to this.
pub const DEFAULT_BREAKER_MAX_COOL_DOWN: Duration = Duration::from_secs(300);
/// The window a failure ratio is measured over unless configured otherwise.
pub const DEFAULT_BREAKER_WINDOW: Duration = Duration::from_secs(60);
/// Outcomes a window must hold before its failure ratio may open the breaker.
pub const DEFAULT_BREAKER_MIN_REQUESTS: u32 = 20;

/// A lane's rate limit: at most `count` claims per `per`, with bursts up to `burst`.
///
/// Written `"200/s"`, `"30/m"`, `"1000/h"` or `"5/10s"`; the burst defaults to the count
/// (one period's worth) and is set apart (`rate_burst` in the config file).
///
/// ```
/// use std::time::Duration;
/// use outbox_relay::config::RateLimit;
///
/// let limit: RateLimit = "200/s".parse()?;
/// assert_eq!((limit.count, limit.per, limit.burst), (200, Duration::from_secs(1), 200));
/// assert_eq!("5/10s".parse::<RateLimit>()?.per, Duration::from_secs(10));
/// assert!("200".parse::<RateLimit>().is_err());
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RateLimit {
    /// Messages per period.
    pub count: u32,
    /// The period.
    pub per: Duration,
    /// The most messages claimable at once after a quiet spell (the bucket's size).
    pub burst: u32,
}

impl RateLimit {
    /// `count` messages per `per`, burst `count`.
    pub fn new(count: u32, per: Duration) -> Self {
        Self {
            count,
            per,
            burst: count,
        }
    }

    /// Sets the burst.
    pub fn burst(mut self, burst: u32) -> Self {
        self.burst = burst;
        self
    }

    /// Messages per second, for display.
    pub fn per_second(&self) -> f64 {
        f64::from(self.count) / self.per.as_secs_f64()
    }

    /// Why this rate cannot be used, if it cannot.
    pub fn problem(&self) -> Option<String> {
        if self.count == 0 || self.count > MAX_RATE_COUNT {
            return Some(format!(
                "count {} must be between 1 and {MAX_RATE_COUNT}",
                self.count
            ));
        }
        if self.per.is_zero() || self.per > Duration::from_secs(24 * 3600) {
            return Some(format!(
                "period {:?} must be above zero and at most a day",
                self.per
            ));
        }
        if self.burst == 0 || self.burst > MAX_RATE_COUNT {
            return Some(format!(
                "burst {} must be between 1 and {MAX_RATE_COUNT}",
                self.burst
            ));
        }
        None
    }
}

impl FromStr for RateLimit {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let usage = || format!("{s:?} is not a rate such as \"200/s\", \"30/m\" or \"5/10s\"");
        let (count, period) = s.trim().split_once('/').ok_or_else(usage)?;
        let count: u32 = count.trim().parse().map_err(|_| usage())?;
        let period = period.trim();
        let per = match period {
            "s" | "sec" | "second" => Duration::from_secs(1),
            "m" | "min" | "minute" => Duration::from_secs(60),
            "h" | "hour" => Duration::from_secs(3600),
            other => parse_duration(other).map_err(|_| usage())?,
        };
        let limit = RateLimit::new(count, per);
        match limit.problem() {
            Some(problem) => Err(format!("{s:?}: {problem}")),
            None => Ok(limit),
        }
    }
}

impl fmt::Display for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{} (burst {})",
            self.count,
            super::duration::format_duration(self.per),
            self.burst
        )
    }
}

/// Opening on a failure ratio: at least `min_requests` outcomes within `window`, of which
/// at least `permille`/1000 failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FailureRatio {
    /// The failed share that opens the breaker, in thousandths (500 is half).
    pub permille: u16,
    /// How far back outcomes count.
    pub window: Duration,
    /// Outcomes the window must hold before the ratio counts.
    pub min_requests: u32,
}

impl FailureRatio {
    /// Opens when at least `permille`/1000 of at least `min_requests` outcomes within
    /// `window` failed.
    pub fn new(permille: u16, window: Duration, min_requests: u32) -> Self {
        Self {
            permille,
            window,
            min_requests,
        }
    }
}

/// A lane's circuit breaker. Retryable failures (errors, timeouts, panics) count against
/// the target; a success or a permanent rejection shows it answering.
///
/// ```
/// use std::time::Duration;
/// use outbox_relay::config::CircuitBreakerConfig;
///
/// let breaker = CircuitBreakerConfig::default().cool_down(Duration::from_secs(10));
/// assert!(breaker.problem().is_none());
/// assert!(CircuitBreakerConfig::default().consecutive_failures(None).problem().is_some());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CircuitBreakerConfig {
    /// Open after this many retryable failures in a row (`None`: only the ratio opens it).
    pub consecutive_failures: Option<u32>,
    /// Open on a failure ratio over a window (`None`: only the consecutive count opens it).
    pub failure_ratio: Option<FailureRatio>,
    /// How long the first opening holds claims back before the probe.
    pub cool_down: Duration,
    /// The longest cool-down: it doubles with each failed probe, up to this.
    pub max_cool_down: Duration,
}

impl Default for CircuitBreakerConfig {
    fn default() -> Self {
        Self {
            consecutive_failures: Some(DEFAULT_BREAKER_CONSECUTIVE_FAILURES),
            failure_ratio: None,
            cool_down: DEFAULT_BREAKER_COOL_DOWN,
            max_cool_down: DEFAULT_BREAKER_MAX_COOL_DOWN,
        }
    }
}

impl CircuitBreakerConfig {
    /// Sets (or with `None` turns off) opening on consecutive failures.
    pub fn consecutive_failures(mut self, n: Option<u32>) -> Self {
        self.consecutive_failures = n;
        self
    }

    /// Sets (or with `None` turns off) opening on a failure ratio.
    pub fn failure_ratio(mut self, ratio: Option<FailureRatio>) -> Self {
        self.failure_ratio = ratio;
        self
    }

    /// Sets the first cool-down, and the longest to at least that.
    pub fn cool_down(mut self, cool_down: Duration) -> Self {
        self.cool_down = cool_down;
        self.max_cool_down = self.max_cool_down.max(cool_down);
        self
    }

    /// Sets the longest cool-down.
    pub fn max_cool_down(mut self, max: Duration) -> Self {
        self.max_cool_down = max;
        self
    }

    /// What is wrong with this breaker, as `(field, reason)`, if anything.
    pub fn problem(&self) -> Option<(&'static str, String)> {
        if self.consecutive_failures.is_none() && self.failure_ratio.is_none() {
            return Some((
                "breaker",
                "needs consecutive_failures or failure_ratio, else it never opens".to_owned(),
            ));
        }
        if self.consecutive_failures == Some(0) {
            return Some((
                "breaker.consecutive_failures",
                "must be at least 1".to_owned(),
            ));
        }
        if let Some(ratio) = self.failure_ratio {
            if ratio.permille == 0 || ratio.permille > 1000 {
                return Some((
                    "breaker.failure_ratio",
                    format!(
                        "{} must be above 0 and at most 1",
                        f64::from(ratio.permille) / 1000.0
                    ),
                ));
            }
            if ratio.window.is_zero() {
                return Some(("breaker.window", "must be greater than zero".to_owned()));
            }
            if ratio.min_requests == 0 {
                return Some(("breaker.min_requests", "must be at least 1".to_owned()));
            }
        }
        if self.cool_down.is_zero() {
            return Some(("breaker.cool_down", "must be greater than zero".to_owned()));
        }
        if self.max_cool_down < self.cool_down {
            return Some((
                "breaker.max_cool_down",
                format!(
                    "{:?} is below the cool-down {:?}",
                    self.max_cool_down, self.cool_down
                ),
            ));
        }
        None
    }
}
