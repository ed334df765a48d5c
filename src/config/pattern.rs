//! Lane patterns: "every lane whose name begins with `tenant-`, toward `billing`, with
//! these settings". A lane a producer writes to for the first time is started by the relay
//! within the pattern's `max_poll_interval` (`relay/patterns.rs`), up to the pattern's
//! [`LanePattern::max_lanes`]; one idle for [`LanePattern::idle_stop`] is stopped.
//!
//! The syntax is a prefix and a `*` at its end: `tenant-*` matches `tenant-7` and
//! `tenant-` itself, `*` alone every lane of the target. Lane names cannot hold a `*`, so
//! nothing else is needed, and a prefix is what the store can match without reading
//! messages.

use std::time::Duration;

use super::{ConfigError, LaneConfig};
use crate::lane::LaneKey;
use crate::message::validate_name;

/// The most lanes one pattern runs unless configured otherwise.
pub const DEFAULT_MAX_PATTERN_LANES: usize = 100;
/// How long a pattern's lane may have nothing pending and nothing in flight before it is
/// stopped, unless configured otherwise: long enough that a tenant writing every few
/// minutes keeps its lane, short enough that tenants gone free their lanes within the hour.
pub const DEFAULT_PATTERN_IDLE_STOP: Duration = Duration::from_secs(10 * 60);

/// Every lane whose name matches [`pattern`](Self::pattern), toward its lane settings'
/// target, relayed with those settings.
///
/// ```
/// use outbox_relay::config::{LanePattern, LaneConfig};
/// let tenants = LanePattern::new(LaneConfig::new("tenant-*", "billing").concurrency(2))
///     .max_lanes(500);
/// assert!(tenants.validate().is_ok());
/// assert!(tenants.matches("tenant-1041"));
/// assert_eq!(tenants.lane_config("tenant-1041").name, "tenant-1041");
/// assert!(LanePattern::new(LaneConfig::new("tenant-*-eu", "billing")).validate().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LanePattern {
    /// The settings of every lane the pattern serves; its `name` is the pattern (a prefix
    /// and `*`), its `target` the lanes' target.
    pub lane: LaneConfig,
    /// The most lanes the pattern runs at once. Past it, a lane with pending messages is
    /// not started: it is logged, counted in `outbox_pattern_lanes_over_limit`, and
    /// reported as unserved. Default [`DEFAULT_MAX_PATTERN_LANES`].
    pub max_lanes: usize,
    /// How long a lane of the pattern may have nothing pending and nothing in flight before
    /// it is drained and stopped (its memory and metrics freed; a message written later
    /// starts it again); `None`: never. Default [`DEFAULT_PATTERN_IDLE_STOP`].
    pub idle_stop: Option<Duration>,
}

impl LanePattern {
    /// A pattern with `lane`'s settings; `lane.name` is the pattern. Its lanes share their
    /// histograms ([`LaneConfig::shared_histograms`] on): see
    /// [`shared_histograms`](Self::shared_histograms).
    pub fn new(lane: LaneConfig) -> Self {
        Self {
            lane: lane.shared_histograms(true),
            max_lanes: DEFAULT_MAX_PATTERN_LANES,
            idle_stop: Some(DEFAULT_PATTERN_IDLE_STOP),
        }
    }

    /// Sets [`max_lanes`](Self::max_lanes).
    pub fn max_lanes(mut self, max_lanes: usize) -> Self {
        self.max_lanes = max_lanes;
        self
    }

    /// Sets [`idle_stop`](Self::idle_stop).
    pub fn idle_stop(mut self, after: Option<Duration>) -> Self {
        self.idle_stop = after;
        self
    }

    /// Whether the pattern's lanes record their histograms under `lane="*"` (the default)
    /// or each under its own name: a lane's own histograms are most of what it adds to a
    /// scrape, and one per tenant multiplies the series by the tenants.
    pub fn shared_histograms(mut self, shared: bool) -> Self {
        self.lane.shared_histograms = shared;
        self
    }

    /// The pattern as written: a prefix and `*`.
    pub fn pattern(&self) -> &str {
        &self.lane.name
    }

    /// The target of the pattern's lanes.
    pub fn target(&self) -> &str {
        &self.lane.target
    }

    /// What a lane's name must begin with.
    pub fn prefix(&self) -> &str {
        self.lane.name.strip_suffix('*').unwrap_or(&self.lane.name)
    }

    /// The pattern and its target, `tenant-*/billing`, as logs, errors and metrics name it.
    pub fn key(&self) -> LaneKey {
        self.lane.key()
    }

    /// Whether the pattern matches lane `name` (of any target).
    pub fn matches(&self, name: &str) -> bool {
        name.starts_with(self.prefix()) && validate_name("lane", name).is_ok()
    }

    /// The config of the pattern's lane `name`: the pattern's settings under that name.
    pub fn lane_config(&self, name: &str) -> LaneConfig {
        let mut config = self.lane.clone();
        config.name = name.to_owned();
        config
    }

    /// Checks the pattern, its limit and the settings its lanes take; the error names the
    /// field at fault (`lane_patterns[tenant-*/billing].…`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let field = |name: &str| format!("lane_patterns[{}].{name}", self.key());
        let pattern = self.pattern();
        let prefix = match pattern.strip_suffix('*') {
            Some(prefix) if !prefix.contains('*') => prefix,
            _ => {
                return Err(ConfigError::new(
                    field("lane"),
                    format!("{pattern:?} is not a pattern: write a lane name prefix and one `*` at its end, such as \"tenant-*\""),
                ))
            }
        };
        if !prefix.is_empty() {
            validate_name("lane", prefix)
                .map_err(|e| ConfigError::new(field("lane"), format!("its prefix {}", e.reason)))?;
        }
        if self.max_lanes == 0 {
            return Err(ConfigError::new(
                field("max_lanes"),
                "must be greater than zero",
            ));
        }
        if self.idle_stop.is_some_and(|after| after.is_zero()) {
            return Err(ConfigError::new(
                field("idle_stop"),
                "must be greater than zero (or off)",
            ));
        }
        // The settings, as a lane of the pattern has them.
        self.lane_config(&format!("{prefix}x"))
            .validate()
            .map_err(|e| ConfigError::new(field(last_segment(&e.field)), e.reason))
    }
}

/// `lanes[a/b].concurrency` → `concurrency`.
fn last_segment(field: &str) -> &str {
    field.rsplit_once("].").map_or(field, |(_, name)| name)
}

/// Refuses two patterns of one target where one's prefix begins the other's: a lane would
/// match both, and which settings it runs with would depend on their order.
pub(crate) fn check_overlap(patterns: &[LanePattern]) -> Result<(), ConfigError> {
    for (i, a) in patterns.iter().enumerate() {
        for b in &patterns[i + 1..] {
            if a.target() == b.target()
                && (a.prefix().starts_with(b.prefix()) || b.prefix().starts_with(a.prefix()))
            {
                return Err(ConfigError::new(
                    format!("lane_patterns[{}]", b.key()),
                    format!(
                        "overlaps lane_patterns[{}]: a lane would match both; make the prefixes disjoint",
                        a.key()
                    ),
                ));
            }
        }
    }
    Ok(())
}
