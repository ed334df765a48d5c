//! `RetryPolicy`: how long to wait before the next attempt. Policy apart from mechanism:
//! the lane relay only asks it for a delay.

use std::time::Duration;

/// The first retry's delay unless configured otherwise.
pub const DEFAULT_BASE_DELAY: Duration = Duration::from_secs(1);
/// The longest retry delay unless configured otherwise.
pub const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(300);
/// The longest a target's `Retry-After` may hold a message back unless configured
/// otherwise (a lane's `retry_after_max`): the same five minutes as the longest backoff.
/// A gateway answering `Retry-After: 31536000` would otherwise park the message, and every
/// later message of its ordering key, for a year, never dead-lettered and never old by the
/// oldest-pending-age gauge (it is not due).
pub const DEFAULT_RETRY_AFTER_MAX: Duration = DEFAULT_MAX_DELAY;

/// Exponential backoff from a base delay, capped, with optional full jitter.
///
/// The delay before the next attempt, after `attempt_count` attempts so far, is
/// `base × 2^(attempt_count − 1)`, capped at `max`, saturating instead of overflowing.
/// With jitter on, the delay is drawn uniformly from `[0, that]` ("full jitter"), which
/// spreads out the retries of many messages that failed together. A `Retry-After` from the
/// target is a floor: the delay is never shorter than what the target asked for (a lane
/// first holds it to its `retry_after_max`, [`DEFAULT_RETRY_AFTER_MAX`] by default).
///
/// ```
/// use std::time::Duration;
/// use outbox_relay::RetryPolicy;
///
/// let policy = RetryPolicy::new(Duration::from_millis(5), Duration::from_millis(20)).jitter(false);
/// assert_eq!(policy.delay(1, None), Duration::from_millis(5));
/// assert_eq!(policy.delay(2, None), Duration::from_millis(10));
/// assert_eq!(policy.delay(4, None), Duration::from_millis(20)); // capped
/// assert_eq!(policy.delay(1, Some(Duration::from_secs(3))), Duration::from_secs(3)); // floor
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// The delay after the first failed attempt.
    pub base: Duration,
    /// No delay is longer than this (except a target's own `Retry-After`).
    pub max: Duration,
    /// Draw each delay uniformly from zero to the backoff (off for deterministic tests).
    pub jitter: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            base: DEFAULT_BASE_DELAY,
            max: DEFAULT_MAX_DELAY,
            jitter: true,
        }
    }
}

impl RetryPolicy {
    /// A policy from `base` to `max`, with full jitter as [`RetryPolicy::default`] has it
    /// (turn it off with [`RetryPolicy::jitter`]).
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max,
            ..Self::default()
        }
    }

    /// Turns full jitter on or off.
    pub fn jitter(mut self, jitter: bool) -> Self {
        self.jitter = jitter;
        self
    }

    /// The backoff before the attempt after `attempt_count` attempts, without jitter.
    pub fn backoff(&self, attempt_count: u32) -> Duration {
        let exponent = attempt_count.saturating_sub(1).min(31);
        let multiplier = 1u32 << exponent;
        self.base
            .checked_mul(multiplier)
            .unwrap_or(Duration::MAX)
            .min(self.max)
    }

    /// The delay to wait before the next attempt: the backoff (jittered if on), never less
    /// than `retry_after` when the target asked for one.
    pub fn delay(&self, attempt_count: u32, retry_after: Option<Duration>) -> Duration {
        let backoff = self.backoff(attempt_count);
        let delay = if self.jitter && !backoff.is_zero() {
            let nanos = u64::try_from(backoff.as_nanos()).unwrap_or(u64::MAX);
            Duration::from_nanos(rand::random_range(0..=nanos))
        } else {
            backoff
        };
        retry_after.map_or(delay, |floor| delay.max(floor))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seed relay's formula, kept verbatim as the oracle.
    fn seed_retry_at_ms(
        now: u64,
        attempt_count: u32,
        base_delay_ms: u64,
        max_delay_ms: u64,
    ) -> u64 {
        let exponent = attempt_count.saturating_sub(1).min(31);
        let multiplier = 1u64.checked_shl(exponent).unwrap_or(u64::MAX);
        let delay = base_delay_ms.saturating_mul(multiplier).min(max_delay_ms);
        now.saturating_add(delay)
    }

    #[test]
    fn matches_the_seed_relay_without_jitter() {
        let cases = [
            (1, 5, 20),
            (2, 5, 20),
            (4, 5, 20),
            (0, 5, 20),
            (40, 5, u64::MAX / 4),
            (u32::MAX, u64::MAX / 2, u64::MAX),
            (3, 0, 0),
        ];
        for (attempts, base, max) in cases {
            let policy = RetryPolicy::new(Duration::from_millis(base), Duration::from_millis(max))
                .jitter(false);
            let ours = policy.delay(attempts, None);
            let seed = seed_retry_at_ms(0, attempts, base, max);
            assert_eq!(
                u64::try_from(ours.as_millis()).unwrap_or(u64::MAX),
                seed,
                "attempts {attempts}, base {base}, max {max}"
            );
        }
    }

    #[test]
    fn new_agrees_with_default_on_jitter() {
        let default = RetryPolicy::default();
        assert_eq!(RetryPolicy::new(default.base, default.max), default);
        assert!(RetryPolicy::new(Duration::from_millis(5), Duration::from_millis(20)).jitter);
        assert!(
            !RetryPolicy::new(Duration::from_millis(5), Duration::from_millis(20))
                .jitter(false)
                .jitter
        );
    }

    #[test]
    fn jitter_stays_within_the_backoff() {
        let policy = RetryPolicy::new(Duration::from_millis(100), Duration::from_secs(1));
        for attempts in 1..10 {
            let delay = policy.delay(attempts, None);
            assert!(delay <= policy.backoff(attempts));
        }
        let floor = Duration::from_secs(5);
        assert!(policy.delay(1, Some(floor)) >= floor);
    }
}
