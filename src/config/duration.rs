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

/// The units a duration may use, longest name first so `ms` wins over `m`.
const UNITS: [(&str, u64); 5] = [
    ("ms", 1),
    ("d", 86_400_000),
    ("h", 3_600_000),
    ("m", 60_000),
    ("s", 1_000),
];

/// A duration that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {input:?}: {reason} (write e.g. 250ms, 30s, 5m, 1h, 7d or 1h30m)")]
pub struct DurationError {
    input: String,
    reason: &'static str,
}

/// Reads `250ms`, `30s`, `5m`, `1h`, `7d`, or a sum of such parts (`1h30m`).
/// Whole numbers only; every part needs a unit.
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    let fail = |reason| DurationError {
        input: input.to_owned(),
        reason,
    };
    let mut rest = input.trim();
    if rest.is_empty() {
        return Err(fail("it is empty"));
    }
    let mut total_ms: u64 = 0;
    // Each part's unit must be smaller than the one before: `1d1d` or `30m1h` is more
    // likely a typo than a sum anyone meant.
    let mut previous_unit = u64::MAX;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(fail("expected a whole number"));
        }
        let number: u64 = rest[..digits]
            .parse()
            .map_err(|_| fail("it is too large"))?;
        rest = &rest[digits..];
        let (unit, millis) = UNITS
            .iter()
            .find(|(unit, _)| rest.starts_with(unit))
            .ok_or_else(|| {
                fail(if rest.is_empty() {
                    "a unit is missing"
                } else {
                    "unknown unit"
                })
            })?;
        rest = &rest[unit.len()..];
        if *millis >= previous_unit {
            return Err(fail(
                "each unit may appear once, largest first (d, h, m, s, ms)",
            ));
        }
        previous_unit = *millis;
        total_ms = number
            .checked_mul(*millis)
            .and_then(|ms| total_ms.checked_add(ms))
            .ok_or_else(|| fail("it is too large"))?;
    }
    Ok(Duration::from_millis(total_ms))
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
        ] {
            assert_eq!(parse_duration(input), Ok(want), "{input}");
        }
    }

    #[test]
    fn refuses_what_is_not_a_duration() {
        for input in [
            "",
            "30",
            "s",
            "1.5s",
            "10 s",
            "5x",
            "-1s",
            "99999999999999999999s",
            "1d1d",
            "30m1h",
            "1s1s",
            "500ms1s",
        ] {
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
