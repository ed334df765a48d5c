//! Durations written the way operators write them: `250ms`, `30s`, `5m`, `1h`, `7d`, or a
//! sum such as `1h30m`. Used by the config file and the command line.
//!
//! ```
//! use std::time::Duration;
//! use outbox_relay::config::duration::{format_duration, parse_duration};
//!
//! assert_eq!(parse_duration("250ms")?, Duration::from_millis(250));
//! assert_eq!(parse_duration("1h30m")?, Duration::from_secs(5400));
//! assert_eq!(format_duration(Duration::from_secs(5400)), "1h30m");
//! assert!(parse_duration("30").is_err()); // a unit is required
//! # Ok::<(), outbox_relay::config::duration::DurationError>(())
//! ```

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// A duration that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {input:?}: {reason} (write e.g. 250ms, 30s, 5m, 1h, 7d or 1h30m)")]
pub struct DurationError {
    input: String,
    reason: String,
}

/// Reads `250ms`, `30s`, `5m`, `1h`, `7d`, or a sum of such parts (`1h30m`, `1h 30m`),
/// with [`humantime::parse_duration`]: every part needs a unit; humantime's longer unit
/// names (`sec`, `min`, `hours`, `days`, …) and fractions (`1.5s`) are read as well.
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    humantime::parse_duration(input.trim()).map_err(|error| DurationError {
        input: input.to_owned(),
        reason: error.to_string(),
    })
}

/// Writes a duration the way [`parse_duration`] reads it (whole milliseconds; `0s` for zero).
pub fn format_duration(duration: Duration) -> String {
    let mut ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    if ms == 0 {
        return "0s".to_owned();
    }
    let mut out = String::new();
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
        ("ms", 1),
    ] {
        if ms >= size {
            out.push_str(&format!("{}{unit}", ms / size));
            ms %= size;
        }
    }
    out
}

/// A [`Duration`] that reads and writes as `30s`, `250ms`, …: the type of every duration
/// field of the config file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct HumanDuration(pub Duration);

impl From<HumanDuration> for Duration {
    fn from(value: HumanDuration) -> Self {
        value.0
    }
}

impl From<Duration> for HumanDuration {
    fn from(value: Duration) -> Self {
        HumanDuration(value)
    }
}

impl FromStr for HumanDuration {
    type Err = DurationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_duration(s).map(HumanDuration)
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_duration(self.0))
    }
}

impl serde::Serialize for HumanDuration {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for HumanDuration {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = HumanDuration;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration string such as \"30s\", \"250ms\", \"5m\" or \"1h\"")
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<HumanDuration, E> {
                v.parse().map_err(E::custom)
            }
        }
        deserializer.deserialize_str(Visitor)
    }
}

/// A [`Duration`] field read and written as [`HumanDuration`]
/// (`#[serde(with = "crate::config::duration::human")]`).
pub(crate) mod human {
    use std::time::Duration;

    use serde::{Deserialize, Serialize};

    use super::HumanDuration;

    pub(crate) fn serialize<S: serde::Serializer>(
        duration: &Duration,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        HumanDuration(*duration).serialize(serializer)
    }

    pub(crate) fn deserialize<'de, D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Duration, D::Error> {
        HumanDuration::deserialize(deserializer).map(Duration::from)
    }
}

/// An optional [`Duration`] field read and written as [`HumanDuration`].
pub(crate) mod human_option {
    use std::time::Duration;

    use serde::{Deserialize, Serialize};

    use super::HumanDuration;

    pub(crate) fn serialize<S: serde::Serializer>(
        duration: &Option<Duration>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        duration.map(HumanDuration).serialize(serializer)
    }

    pub(crate) fn deserialize<'de, D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Duration>, D::Error> {
        Option::<HumanDuration>::deserialize(deserializer).map(|d| d.map(Duration::from))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_unit_and_sums() {
        let ms = Duration::from_millis;
        for (input, want) in [
            ("250ms", ms(250)),
            ("30s", ms(30_000)),
            ("5m", ms(300_000)),
            ("1h", ms(3_600_000)),
            ("7d", ms(7 * 86_400_000)),
            ("1h30m", ms(5_400_000)),
            ("1m500ms", ms(60_500)),
            ("0s", ms(0)),
            (" 2s ", ms(2_000)),
            ("1h 30m", ms(5_400_000)),
            ("2min", ms(120_000)),
            ("1.5s", ms(1_500)),
        ] {
            assert_eq!(parse_duration(input), Ok(want), "{input}");
        }
    }

    #[test]
    fn refuses_what_is_not_a_duration() {
        for input in ["", "30", "s", "5x", "-1s", "99999999999999999999s"] {
            let error = parse_duration(input).unwrap_err().to_string();
            assert!(error.contains(&format!("{input:?}")), "{error}");
        }
    }

    #[test]
    fn formats_round_trip() {
        for ms in [0, 1, 250, 1_000, 60_500, 5_400_000, 7 * 86_400_000 + 1] {
            let duration = Duration::from_millis(ms);
            assert_eq!(parse_duration(&format_duration(duration)), Ok(duration));
        }
        assert_eq!(format_duration(Duration::from_millis(250)), "250ms");
    }
}
