//! Time as the stores keep it: [`UnixMillis`] (an instant to the millisecond, on the
//! store's clock; RFC 3339 in text and JSON, `2026-11-30T17:20:00.123Z`), and the
//! [`Clock`]s a store reads "now" from ([`SystemClock`], and [`ManualClock`] and
//! [`TokioClock`] for tests).
//!
//! Spans of time (a lease, a delay, the age of the oldest pending message) are
//! [`Duration`]s everywhere in the API; instants are [`UnixMillis`].

use std::fmt;
use std::ops::{Add, Sub};
use std::str::FromStr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

/// An instant as the stores keep it: whole milliseconds since the Unix epoch, on the
/// store's clock (the database's, for PostgreSQL).
///
/// Every timestamp in the public API is one ([`OutboxMessage`](crate::OutboxMessage)'s
/// `available_at`, `created_at`, ...). It converts to and from [`SystemTime`], displays
/// and serialises as RFC 3339 in UTC to the millisecond (`2026-11-30T17:20:00.123Z`), and
/// deserialises from that or from a number of milliseconds (the older JSON form). The
/// stores keep the milliseconds as they are (SQLite `INTEGER`, PostgreSQL `timestamptz`
/// read as milliseconds); the conversion happens where a row is decoded or a value bound.
///
/// Arithmetic with a [`Duration`] saturates instead of overflowing: a lease or a delay
/// of `Duration::MAX` means "never", not a panic.
///
/// ```
/// use std::time::Duration;
/// use outbox_relay::time::UnixMillis;
///
/// let at = UnixMillis::from_millis(1_796_059_200_123);
/// assert_eq!(at.to_string(), "2026-11-30T17:20:00.123Z");
/// assert_eq!("2026-11-30T17:20:00.123Z".parse::<UnixMillis>().ok(), Some(at));
/// let later = at + Duration::from_secs(2);
/// assert_eq!(later.saturating_duration_since(at), Duration::from_secs(2));
/// assert_eq!(at.saturating_duration_since(later), Duration::ZERO);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UnixMillis(i64);

/// The latest instant RFC 3339 can write (9999-12-31T23:59:59.999Z).
const MAX_RFC3339: UnixMillis = UnixMillis(253_402_300_799_999);

impl UnixMillis {
    /// 1970-01-01T00:00:00.000Z.
    pub const EPOCH: Self = Self(0);

    /// The instant `millis` milliseconds after the epoch (before it, when negative).
    pub const fn from_millis(millis: i64) -> Self {
        Self(millis)
    }

    /// Milliseconds since the epoch (negative before it).
    pub const fn as_millis(self) -> i64 {
        self.0
    }

    /// `self + duration`, or the last representable instant.
    pub fn saturating_add(self, duration: Duration) -> Self {
        Self(self.0.saturating_add(duration_millis(duration)))
    }

    /// `self - duration`, or the first representable instant.
    pub fn saturating_sub(self, duration: Duration) -> Self {
        Self(self.0.saturating_sub(duration_millis(duration)))
    }

    /// How long after `earlier` this is; zero when `earlier` is not earlier (as
    /// [`Instant::saturating_duration_since`](std::time::Instant::saturating_duration_since)).
    pub fn saturating_duration_since(self, earlier: Self) -> Duration {
        Duration::from_millis(u64::try_from(self.0.saturating_sub(earlier.0)).unwrap_or(0))
    }
}

impl Add<Duration> for UnixMillis {
    type Output = Self;

    /// Saturating: see [`UnixMillis::saturating_add`].
    fn add(self, duration: Duration) -> Self {
        self.saturating_add(duration)
    }
}

impl Sub<Duration> for UnixMillis {
    type Output = Self;

    /// Saturating: see [`UnixMillis::saturating_sub`].
    fn sub(self, duration: Duration) -> Self {
        self.saturating_sub(duration)
    }
}

impl From<SystemTime> for UnixMillis {
    /// Truncated to the millisecond (toward the past), saturating at `i64`'s range.
    fn from(time: SystemTime) -> Self {
        match time.duration_since(UNIX_EPOCH) {
            Ok(after) => Self(duration_millis(after)),
            // Before the epoch: round away from it, so truncation is always toward the past.
            Err(before) => {
                let before = before.duration();
                let millis = duration_millis(before);
                let partial = before > Duration::from_millis(millis.unsigned_abs());
                Self(millis.saturating_neg().saturating_sub(i64::from(partial)))
            }
        }
    }
}

impl From<UnixMillis> for SystemTime {
    /// Exact; an instant the platform's `SystemTime` cannot hold reads as the epoch.
    fn from(at: UnixMillis) -> Self {
        let offset = Duration::from_millis(at.0.unsigned_abs());
        let time = if at.0 >= 0 {
            UNIX_EPOCH.checked_add(offset)
        } else {
            UNIX_EPOCH.checked_sub(offset)
        };
        time.unwrap_or(UNIX_EPOCH)
    }
}

impl fmt::Display for UnixMillis {
    /// RFC 3339, UTC, to the millisecond: `2026-11-30T17:20:00.123Z`. Instants outside what
    /// RFC 3339 can write are clamped to its first and last.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let clamped = (*self).clamp(Self::EPOCH, MAX_RFC3339);
        fmt::Display::fmt(
            &humantime::format_rfc3339_millis(SystemTime::from(clamped)),
            f,
        )
    }
}

impl FromStr for UnixMillis {
    type Err = humantime::TimestampError;

    /// Reads RFC 3339 in UTC (`Z` or `+00:00`), to any precision; other offsets are
    /// refused rather than misread (humantime's "weak" parser would ignore them).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        humantime::parse_rfc3339(text).map(Self::from)
    }
}

impl Serialize for UnixMillis {
    /// As its [`Display`](fmt::Display): an RFC 3339 string.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for UnixMillis {
    /// From an RFC 3339 string, or from a number of milliseconds (the older form).
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(TimestampVisitor)
    }
}

struct TimestampVisitor;

impl de::Visitor<'_> for TimestampVisitor {
    type Value = UnixMillis;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an RFC 3339 timestamp or milliseconds since the Unix epoch")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<UnixMillis, E> {
        v.parse()
            .map_err(|e| E::custom(format!("timestamp {v:?}: {e}")))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<UnixMillis, E> {
        Ok(UnixMillis(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<UnixMillis, E> {
        Ok(UnixMillis(i64::try_from(v).unwrap_or(i64::MAX)))
    }
}

/// The stores bind and decode a [`UnixMillis`] as the `i64` they keep (SQLite `INTEGER`;
/// PostgreSQL `int8`, which the statements turn into `timestamptz` and back).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod sql {
    use sqlx::decode::Decode;
    use sqlx::encode::{Encode, IsNull};
    use sqlx::error::BoxDynError;
    use sqlx::{Database, Type};

    use super::UnixMillis;

    impl<DB: Database> Type<DB> for UnixMillis
    where
        i64: Type<DB>,
    {
        fn type_info() -> DB::TypeInfo {
            <i64 as Type<DB>>::type_info()
        }

        fn compatible(ty: &DB::TypeInfo) -> bool {
            <i64 as Type<DB>>::compatible(ty)
        }
    }

    impl<'q, DB: Database> Encode<'q, DB> for UnixMillis
    where
        i64: Encode<'q, DB>,
    {
        fn encode_by_ref(
            &self,
            buf: &mut <DB as Database>::ArgumentBuffer,
        ) -> Result<IsNull, BoxDynError> {
            self.0.encode_by_ref(buf)
        }
    }

    impl<'r, DB: Database> Decode<'r, DB> for UnixMillis
    where
        i64: Decode<'r, DB>,
    {
        fn decode(value: <DB as Database>::ValueRef<'r>) -> Result<Self, BoxDynError> {
            i64::decode(value).map(UnixMillis)
        }
    }
}

/// The store's source of "now". Every backend takes one, so tests can move time by hand.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Now, to the millisecond.
    fn now_millis(&self) -> UnixMillis;
}

/// The machine's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_millis(&self) -> UnixMillis {
        UnixMillis::from(SystemTime::now())
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
            now: Arc::new(AtomicI64::new(start.as_millis())),
        }
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        self.now.fetch_add(duration_millis(by), Ordering::SeqCst);
    }

    /// Sets the clock.
    pub fn set(&self, now: UnixMillis) {
        self.now.store(now.as_millis(), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_millis(&self) -> UnixMillis {
        UnixMillis(self.now.load(Ordering::SeqCst))
    }
}

/// A clock that follows tokio's clock, so a store moves with `tokio::time::pause()` and
/// `advance()` in relay tests. Outside paused time it tracks the wall clock.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    start: tokio::time::Instant,
    started_at: UnixMillis,
}

impl TokioClock {
    /// A clock reading the wall clock now, then moving with tokio's clock.
    pub fn new() -> Self {
        Self {
            start: tokio::time::Instant::now(),
            started_at: SystemClock.now_millis(),
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
        self.started_at + self.start.elapsed()
    }
}

/// `#[serde(serialize_with = ...)]` for a [`Duration`] in a JSON field named `…_ms`:
/// whole milliseconds, saturating.
pub(crate) fn serialize_duration_millis<S: Serializer>(
    duration: &Duration,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_u64(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
}

/// Serializes an optional [`Duration`] as whole milliseconds, or `null`.
pub(crate) fn serialize_optional_duration_millis<S: Serializer>(
    duration: &Option<Duration>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match duration {
        Some(duration) => serialize_duration_millis(duration, serializer),
        None => serializer.serialize_none(),
    }
}

/// A duration in whole milliseconds, saturating.
pub fn duration_millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_read_and_write_as_rfc3339_to_the_millisecond() {
        let at = UnixMillis::from_millis(1_796_059_200_123);
        assert_eq!(at.to_string(), "2026-11-30T17:20:00.123Z");
        assert_eq!(
            "2026-11-30T17:20:00.123Z".parse::<UnixMillis>().ok(),
            Some(at)
        );
        assert!("2026-11-30T17:20:00.123+01:00"
            .parse::<UnixMillis>()
            .is_err());
        assert!("yesterday".parse::<UnixMillis>().is_err());
        // Out of RFC 3339's range: clamped, never a panic.
        assert_eq!(
            UnixMillis::from_millis(-5).to_string(),
            "1970-01-01T00:00:00.000Z"
        );
        assert_eq!(
            UnixMillis::from_millis(i64::MAX).to_string(),
            "9999-12-31T23:59:59.999Z"
        );
    }

    #[test]
    fn system_time_converts_both_ways_truncating_toward_the_past() {
        for millis in [0, 1, 1_796_059_200_123, -1, -1_500] {
            let at = UnixMillis::from_millis(millis);
            assert_eq!(UnixMillis::from(SystemTime::from(at)), at, "{millis}");
        }
        let after = UNIX_EPOCH + Duration::from_micros(1_500);
        assert_eq!(UnixMillis::from(after).as_millis(), 1);
        let before = UNIX_EPOCH - Duration::from_micros(1_500);
        assert_eq!(UnixMillis::from(before).as_millis(), -2);
    }

    #[test]
    fn arithmetic_with_durations_saturates() {
        let at = UnixMillis::from_millis(1_000);
        assert_eq!(
            at + Duration::from_millis(500),
            UnixMillis::from_millis(1_500)
        );
        assert_eq!(
            at - Duration::from_millis(1_500),
            UnixMillis::from_millis(-500)
        );
        assert_eq!((at + Duration::MAX).as_millis(), i64::MAX);
        let first = UnixMillis::from_millis(i64::MIN + 5);
        assert_eq!((first - Duration::from_millis(10)).as_millis(), i64::MIN);
        assert_eq!(
            UnixMillis::from_millis(i64::MAX)
                .saturating_duration_since(UnixMillis::from_millis(i64::MIN)),
            Duration::from_millis(i64::MAX.unsigned_abs())
        );
        assert!(at < at + Duration::from_millis(1));
    }

    #[test]
    fn a_messages_timestamps_are_rfc3339_in_json_and_read_back_from_milliseconds() {
        let draft =
            crate::OutboxMessageDraft::from_json("orders", "billing", "{}").expect("a valid draft");
        let now = UnixMillis::from_millis(1_796_059_200_123);
        let message = crate::OutboxMessage::pending(draft, uuid::Uuid::nil(), 1, now);
        let mut json = serde_json::to_value(&message).expect("serialises");
        assert_eq!(json["created_at"], "2026-11-30T17:20:00.123Z", "{json}");
        assert_eq!(json["available_at"], json["created_at"], "{json}");
        assert!(json["delivered_at"].is_null(), "{json}");
        assert_eq!(
            serde_json::from_value(json.clone()).ok(),
            Some(message.clone())
        );
        // What older versions wrote: numbers of milliseconds, and no null fields.
        for field in ["available_at", "created_at", "updated_at"] {
            json[field] = serde_json::json!(now.as_millis());
        }
        let fields = json.as_object_mut().expect("an object");
        fields.remove("lease_expires_at");
        fields.remove("delivered_at");
        assert_eq!(serde_json::from_value(json).ok(), Some(message));
    }

    #[test]
    fn a_duration_in_a_field_named_ms_is_whole_milliseconds_in_json() {
        let gates = crate::relay::GateStatus {
            throttled: Duration::from_micros(1_234_567),
            ..Default::default()
        };
        let json = serde_json::to_value(&gates).expect("serialises");
        assert_eq!(json["throttled_ms"], 1_234, "{json}");
    }

    #[test]
    fn the_serde_form_is_rfc3339_and_reads_the_older_milliseconds() {
        #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
        struct Row {
            at: UnixMillis,
            until: Option<UnixMillis>,
        }
        let row = Row {
            at: UnixMillis::from_millis(1_796_059_200_123),
            until: None,
        };
        let json = serde_json::to_string(&row).expect("serialises");
        assert_eq!(json, r#"{"at":"2026-11-30T17:20:00.123Z","until":null}"#);
        assert_eq!(serde_json::from_str::<Row>(&json).ok(), Some(row));
        let old: Row = serde_json::from_str(r#"{"at":5,"until":7}"#).expect("milliseconds");
        assert_eq!(
            (old.at, old.until),
            (UnixMillis::from_millis(5), Some(UnixMillis::from_millis(7)))
        );
        let bad = serde_json::from_str::<Row>(r#"{"at":"yesterday","until":null}"#);
        assert!(bad.is_err_and(|e| e.to_string().contains("yesterday")));
    }
}
