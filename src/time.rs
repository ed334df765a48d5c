//! Time as the stores keep it: [`UnixMillis`] (milliseconds since the Unix epoch, on the
//! store's clock), the [`Clock`]s a store reads "now" from ([`SystemClock`], and
//! [`ManualClock`] and [`TokioClock`] for tests), conversions to [`SystemTime`], and
//! [`rfc3339`], the serde form of a timestamp in JSON (`2026-11-30T17:20:00.123Z`).

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, as the store's clock tells them.
pub type UnixMillis = i64;

/// The latest instant RFC 3339 can write (9999-12-31T23:59:59.999Z), in milliseconds.
const MAX_RFC3339_MILLIS: UnixMillis = 253_402_300_799_999;

/// `millis` as a [`SystemTime`]; instants before the epoch read as the epoch.
pub fn to_system_time(millis: UnixMillis) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(millis).unwrap_or(0))
}

/// `time` in milliseconds since the epoch (saturating; before the epoch reads 0).
pub fn from_system_time(time: SystemTime) -> UnixMillis {
    time.duration_since(UNIX_EPOCH)
        .map(duration_millis)
        .unwrap_or(0)
}

/// `millis` in RFC 3339, UTC, to the millisecond: `2026-11-30T17:20:00.123Z`. Instants
/// outside what RFC 3339 can write are clamped to its first and last.
pub fn format_rfc3339(millis: UnixMillis) -> String {
    let clamped = millis.clamp(0, MAX_RFC3339_MILLIS);
    humantime::format_rfc3339_millis(to_system_time(clamped)).to_string()
}

/// Reads an RFC 3339 timestamp (any offset is accepted only as `Z`, i.e. UTC).
pub fn parse_rfc3339(text: &str) -> Result<UnixMillis, humantime::TimestampError> {
    humantime::parse_rfc3339_weak(text).map(from_system_time)
}

/// `#[serde(with = "outbox_relay::time::rfc3339")]` for a [`UnixMillis`] field: written as
/// an RFC 3339 string; read from one, or from a number of milliseconds (the older form).
pub mod rfc3339 {
    use std::fmt;

    use serde::{de, Deserializer, Serializer};

    use super::{format_rfc3339, parse_rfc3339, UnixMillis};

    /// Writes `millis` as RFC 3339.
    pub fn serialize<S: Serializer>(millis: &UnixMillis, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&format_rfc3339(*millis))
    }

    /// Reads RFC 3339, or milliseconds since the epoch.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<UnixMillis, D::Error> {
        deserializer.deserialize_any(Timestamp)
    }

    struct Timestamp;

    impl de::Visitor<'_> for Timestamp {
        type Value = UnixMillis;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an RFC 3339 timestamp or milliseconds since the Unix epoch")
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<UnixMillis, E> {
            parse_rfc3339(v).map_err(|e| E::custom(format!("timestamp {v:?}: {e}")))
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<UnixMillis, E> {
            Ok(v)
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<UnixMillis, E> {
            Ok(i64::try_from(v).unwrap_or(i64::MAX))
        }
    }

    /// The same for an `Option<UnixMillis>` field (`null` when absent).
    pub mod option {
        use serde::{Deserialize, Deserializer, Serializer};

        use super::UnixMillis;

        /// Writes `Some` as RFC 3339, `None` as `null`.
        pub fn serialize<S: Serializer>(
            millis: &Option<UnixMillis>,
            serializer: S,
        ) -> Result<S::Ok, S::Error> {
            match millis {
                Some(millis) => super::serialize(millis, serializer),
                None => serializer.serialize_none(),
            }
        }

        /// Reads `null`, RFC 3339, or milliseconds.
        pub fn deserialize<'de, D: Deserializer<'de>>(
            deserializer: D,
        ) -> Result<Option<UnixMillis>, D::Error> {
            #[derive(Deserialize)]
            struct Wrapped(#[serde(with = "super")] UnixMillis);
            Ok(Option::<Wrapped>::deserialize(deserializer)?.map(|Wrapped(millis)| millis))
        }
    }
}

/// The store's source of "now". Every backend takes one, so tests can move time by hand.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Milliseconds since the Unix epoch.
    fn now_millis(&self) -> UnixMillis;
}

/// The machine's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_millis(&self) -> UnixMillis {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0)
    }
}

/// A clock that moves only when told to: for store tests.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<AtomicI64>,
}

impl ManualClock {
    /// A clock reading `start`.
    pub fn new(start: UnixMillis) -> Self {
        Self {
            now: Arc::new(AtomicI64::new(start)),
        }
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        self.now.fetch_add(duration_millis(by), Ordering::SeqCst);
    }

    /// Sets the clock.
    pub fn set(&self, now: UnixMillis) {
        self.now.store(now, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_millis(&self) -> UnixMillis {
        self.now.load(Ordering::SeqCst)
    }
}

/// A clock that follows tokio's clock, so a store moves with `tokio::time::pause()` and
/// `advance()` in relay tests. Outside paused time it tracks the wall clock.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    start: tokio::time::Instant,
    start_millis: UnixMillis,
}

impl TokioClock {
    /// A clock reading the wall clock now, then moving with tokio's clock.
    pub fn new() -> Self {
        Self {
            start: tokio::time::Instant::now(),
            start_millis: SystemClock.now_millis(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    fn now_millis(&self) -> UnixMillis {
        self.start_millis + duration_millis(self.start.elapsed())
    }
}

/// A duration in whole milliseconds, saturating.
pub fn duration_millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// The duration from `now` until `at` (zero when `at` is past).
pub fn millis_until(now: UnixMillis, at: UnixMillis) -> Duration {
    Duration::from_millis(u64::try_from(at.saturating_sub(now)).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_read_and_write_as_rfc3339_to_the_millisecond() {
        let millis = 1_796_059_200_123; // 2026-11-30T17:20:00.123Z
        assert_eq!(format_rfc3339(millis), "2026-11-30T17:20:00.123Z");
        assert_eq!(parse_rfc3339("2026-11-30T17:20:00.123Z").ok(), Some(millis));
        assert_eq!(from_system_time(to_system_time(millis)), millis);
        // Out of RFC 3339's range: clamped, never a panic.
        assert_eq!(format_rfc3339(-5), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_rfc3339(i64::MAX), "9999-12-31T23:59:59.999Z");
    }

    #[test]
    fn the_serde_form_is_rfc3339_and_reads_the_older_milliseconds() {
        #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
        struct Row {
            #[serde(with = "rfc3339")]
            at: UnixMillis,
            #[serde(with = "rfc3339::option")]
            until: Option<UnixMillis>,
        }
        let row = Row {
            at: 1_796_059_200_123,
            until: None,
        };
        let json = serde_json::to_string(&row).expect("serialises");
        assert_eq!(json, r#"{"at":"2026-11-30T17:20:00.123Z","until":null}"#);
        assert_eq!(serde_json::from_str::<Row>(&json).ok(), Some(row));
        let old: Row = serde_json::from_str(r#"{"at":5,"until":7}"#).expect("milliseconds");
        assert_eq!((old.at, old.until), (5, Some(7)));
        let bad = serde_json::from_str::<Row>(r#"{"at":"yesterday","until":null}"#);
        assert!(bad.is_err_and(|e| e.to_string().contains("yesterday")));
    }
}
