//! One `[[lanes]]` entry ([`LaneSection`]) and its tables, as written, and how it becomes a
//! [`LaneConfig`]. The claim gates' fields are in `gates.rs`.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{BreakerSection, RateSpec};
use crate::config::duration::HumanDuration;
use crate::config::{LaneConfig, LanePattern};
use crate::retention::RetentionConfig;
use crate::retry::RetryPolicy;
use crate::sinks::SinkConfig;
use crate::store::OrderingPolicy;

/// `lease_extend_margin`: a duration, or `false` to turn lease extension off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtendMargin {
    /// Extend a running delivery's lease when this little of it is left.
    Margin(Duration),
    /// Never extend: a slow delivery lapses and may be redelivered elsewhere.
    Off,
}

impl Serialize for ExtendMargin {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            ExtendMargin::Margin(margin) => HumanDuration(*margin).serialize(serializer),
            ExtendMargin::Off => serializer.serialize_bool(false),
        }
    }
}

impl<'de> Deserialize<'de> for ExtendMargin {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = ExtendMargin;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as \"10s\", or false")
            }

            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<ExtendMargin, E> {
                if v {
                    Err(E::custom(
                        "write a duration such as \"10s\", or false to turn extension off",
                    ))
                } else {
                    Ok(ExtendMargin::Off)
                }
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ExtendMargin, E> {
                crate::config::duration::parse_duration(v)
                    .map(ExtendMargin::Margin)
                    .map_err(E::custom)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// One `[[lanes]]` entry: a (lane, target) and the sink that delivers it. Absent fields
/// take [`LaneConfig::new`]'s defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaneSection {
    /// The lane.
    pub lane: String,
    /// The target.
    pub target: String,
    /// Deliveries in flight at once.
    pub concurrency: Option<usize>,
    /// The most messages one claim takes.
    pub batch_size: Option<usize>,
    /// Claimed messages kept waiting for a free handler. Default: the concurrency.
    pub prefetch: Option<usize>,
    /// How far the prefetch grows while deliveries are quicker than a claim round trip
    /// (0: not past `prefetch`). Default 0.
    pub prefetch_max: Option<usize>,
    /// How long a claim may wait for running handlers to finish. Default 500µs.
    pub claim_linger: Option<HumanDuration>,
    /// The most messages of one ordering key a claim takes at once (1: heads only).
    /// Default 16.
    pub key_run: Option<usize>,
    /// How many claims the lane keeps out at once, each on its own store connection.
    /// Default: the store's (1 on the stores shipped here).
    pub claims_in_flight: Option<usize>,
    /// Whether an ack keeps the row as `delivered` (true) or deletes it (false; dead
    /// letters are kept). Default true.
    pub keep_delivered: Option<bool>,
    /// How long a claim holds.
    pub lease: Option<HumanDuration>,
    /// Extend a running delivery's lease when this little is left, or `false`. Default a
    /// third of the lease.
    pub lease_extend_margin: Option<ExtendMargin>,
    /// How long one delivery may run.
    pub delivery_timeout: Option<HumanDuration>,
    /// The delay after the first failed attempt.
    pub retry_base: Option<HumanDuration>,
    /// The longest delay between attempts.
    pub retry_max: Option<HumanDuration>,
    /// Draw each retry delay at random below the backoff. Default true.
    pub jitter: Option<bool>,
    /// The longest a target's Retry-After may hold a message back. Default 5m.
    pub retry_after_max: Option<HumanDuration>,
    /// `skip` or `block`: what a dead-lettered head does to its ordering key.
    pub ordering: Option<OrderingPolicy>,
    /// The longest an idle lane sleeps before looking at the store again.
    pub max_poll_interval: Option<HumanDuration>,
    /// How often backlog gauges are sampled from the store.
    pub stats_interval: Option<HumanDuration>,
    /// The first wait after a store error (doubling per further error).
    pub store_backoff: Option<HumanDuration>,
    /// The longest wait after repeated store errors.
    pub store_backoff_max: Option<HumanDuration>,
    /// Claim at most this fast, e.g. `"200/s"`, `"30/m"`, `"5/10s"`. Default: no limit.
    pub rate_limit: Option<RateSpec>,
    /// The rate limit's burst (the bucket's size). Default: the rate's count.
    pub rate_burst: Option<u32>,
    /// A circuit breaker: `{ consecutive_failures = 5, cool_down = "30s", … }`. Default:
    /// none.
    pub breaker: Option<BreakerSection>,
    /// A target's Retry-After holds the whole lane (capped at `retry_max`). Default false.
    pub retry_after_holds_lane: Option<bool>,
    /// Take what this process enqueues through the relay's store without a claim
    /// (PostgreSQL; embedded relays). Default true.
    pub hand_off: Option<bool>,
    /// Record the lane's histograms into series shared by every lane of its target set
    /// so, labelled `lane="*"`. Default false.
    pub shared_histograms: Option<bool>,
    /// How long finished messages are kept, e.g. `{ delivered = "7d", dead_letter = "30d" }`
    /// (`"forever"` keeps a status; a `block` lane keeps its keyed dead letters anyway).
    /// Absent ages take [`DEFAULT_DELIVERED_RETENTION`](crate::retention::DEFAULT_DELIVERED_RETENTION)
    /// and [`DEFAULT_DEAD_LETTER_RETENTION`](crate::retention::DEFAULT_DEAD_LETTER_RETENTION).
    #[serde(default)]
    pub retention: Option<RetentionSection>,
    /// A `[[lane_patterns]]` entry's limit: the most lanes it runs. Default
    /// [`DEFAULT_MAX_PATTERN_LANES`](crate::config::DEFAULT_MAX_PATTERN_LANES). Refused in
    /// `[[lanes]]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_lanes: Option<usize>,
    /// A `[[lane_patterns]]` entry's lanes are stopped after this long with nothing pending
    /// and nothing in flight, or `false` for never. Default
    /// [`DEFAULT_PATTERN_IDLE_STOP`](crate::config::DEFAULT_PATTERN_IDLE_STOP). Refused in
    /// `[[lanes]]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_stop: Option<super::DurationOrOff>,
    /// What delivers the lane's messages.
    pub sink: SinkConfig,
}

/// A lane's `retention` table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionSection {
    /// How long delivered messages are kept.
    pub delivered: Option<RetentionAge>,
    /// How long dead letters are kept.
    pub dead_letter: Option<RetentionAge>,
}

/// One age of a `retention` table: a duration, or `"forever"` (also `false`: no retention)
/// to keep that status for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetentionAge {
    /// Deleted once older than this.
    Age(Duration),
    /// Never deleted by automatic retention.
    Forever,
}

impl RetentionAge {
    fn to_config(self) -> Option<Duration> {
        match self {
            RetentionAge::Age(age) => Some(age),
            RetentionAge::Forever => None,
        }
    }
}

impl Serialize for RetentionAge {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            RetentionAge::Age(age) => HumanDuration(*age).serialize(serializer),
            RetentionAge::Forever => serializer.serialize_str("forever"),
        }
    }
}

impl<'de> Deserialize<'de> for RetentionAge {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = RetentionAge;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as \"30d\", or \"forever\" (or false)")
            }

            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<RetentionAge, E> {
                if v {
                    Err(E::custom(
                        "write a duration such as \"30d\", or \"forever\" (or false) to keep them",
                    ))
                } else {
                    Ok(RetentionAge::Forever)
                }
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<RetentionAge, E> {
                if v == "forever" {
                    return Ok(RetentionAge::Forever);
                }
                crate::config::duration::parse_duration(v)
                    .map(RetentionAge::Age)
                    .map_err(E::custom)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

impl RetentionSection {
    /// The retention, defaults filled in (not yet validated). The lane's ordering policy is
    /// the lane's ([`LaneConfig::retention`]).
    pub fn to_config(&self) -> RetentionConfig {
        let defaults = RetentionConfig::default();
        RetentionConfig {
            delivered: self
                .delivered
                .map_or(defaults.delivered, RetentionAge::to_config),
            dead_letter: self
                .dead_letter
                .map_or(defaults.dead_letter, RetentionAge::to_config),
            ..defaults
        }
    }
}

impl LaneSection {
    /// A `[[lane_patterns]]` entry as a [`LanePattern`], defaults filled in (not yet
    /// validated): its lanes share their histograms unless `shared_histograms = false`.
    pub fn to_pattern(&self, consumer_id: &str) -> LanePattern {
        let mut pattern = LanePattern::new(self.to_config(consumer_id));
        if let Some(shared) = self.shared_histograms {
            pattern = pattern.shared_histograms(shared);
        }
        if let Some(max_lanes) = self.max_lanes {
            pattern = pattern.max_lanes(max_lanes);
        }
        if let Some(after) = self.idle_stop {
            pattern = pattern.idle_stop(after.0);
        }
        pattern
    }

    /// The lane config, defaults filled in (not yet validated).
    pub fn to_config(&self, consumer_id: &str) -> LaneConfig {
        let mut config = LaneConfig::new(&self.lane, &self.target).consumer_id(consumer_id);
        let set = |value: Option<usize>, slot: &mut usize| {
            if let Some(value) = value {
                *slot = value;
            }
        };
        if let Some(concurrency) = self.concurrency {
            // Also sets the prefetch to match, unless given below.
            config = config.concurrency(concurrency);
        }
        set(self.batch_size, &mut config.batch_size);
        set(self.prefetch, &mut config.prefetch);
        set(self.prefetch_max, &mut config.prefetch_max);
        set(self.key_run, &mut config.key_run);
        if let Some(claims) = self.claims_in_flight {
            config = config.claims_in_flight(claims);
        }
        if let Some(lease) = self.lease {
            config = config.lease(lease.0);
        }
        match self.lease_extend_margin {
            Some(ExtendMargin::Margin(margin)) => config.lease_extend_margin = Some(margin),
            Some(ExtendMargin::Off) => config.lease_extend_margin = None,
            None => {}
        }
        let durations = [
            (self.delivery_timeout, &mut config.delivery_timeout),
            (self.retry_base, &mut config.retry.base),
            (self.retry_max, &mut config.retry.max),
            (self.retry_after_max, &mut config.retry_after_max),
            (self.max_poll_interval, &mut config.max_poll_interval),
            (self.claim_linger, &mut config.claim_linger),
            (self.stats_interval, &mut config.stats_interval),
            (self.store_backoff, &mut config.store_backoff.base),
            (self.store_backoff_max, &mut config.store_backoff.max),
        ];
        for (value, slot) in durations {
            if let Some(value) = value {
                *slot = value.0;
            }
        }
        if let Some(jitter) = self.jitter {
            config.retry = RetryPolicy {
                jitter,
                ..config.retry
            };
        }
        if let Some(ordering) = self.ordering {
            config.ordering = ordering;
        }
        config.rate_limit = self.rate_limit.map(|spec| match self.rate_burst {
            Some(burst) => spec.0.burst(burst),
            None => spec.0,
        });
        config.circuit_breaker = self.breaker.map(|section| section.to_config());
        if let Some(hold) = self.retry_after_holds_lane {
            config.retry_after_holds_lane = hold;
        }
        if let Some(hand_off) = self.hand_off {
            config.hand_off = hand_off;
        }
        if let Some(shared) = self.shared_histograms {
            config.shared_histograms = shared;
        }
        if let Some(keep) = self.keep_delivered {
            config.keep_delivered = keep;
        }
        if let Some(retention) = self.retention {
            config.retention = retention.to_config();
        }
        config
    }
}
