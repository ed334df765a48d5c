//! `TokenBucket`: the rate limit as a pure type. Time comes in as a value.
//!
//! Integer arithmetic, so 30 s of refills at 200/s add up to exactly 6000 tokens: the level
//! is kept in units where one token is `per` nanoseconds' worth and every nanosecond adds
//! `count` units.

use std::time::Duration;

use tokio::time::Instant;

use crate::config::RateLimit;

/// A token bucket that starts full.
#[derive(Debug)]
pub(crate) struct TokenBucket {
    /// Units added per nanosecond.
    count: u128,
    /// Units per token (the period in nanoseconds).
    per: u128,
    capacity: u128,
    level: u128,
    /// When `level` was last brought up to date; `None` until first asked.
    at: Option<Instant>,
}

impl TokenBucket {
    pub(crate) fn new(limit: RateLimit) -> Self {
        let per = limit.per.as_nanos().max(1);
        let capacity = u128::from(limit.burst.max(1)) * per;
        Self {
            count: u128::from(limit.count.max(1)),
            per,
            capacity,
            level: capacity,
            at: None,
        }
    }

    fn refill(&mut self, now: Instant) {
        let Some(at) = self.at else {
            self.at = Some(now);
            return;
        };
        if now <= at {
            return;
        }
        let elapsed = now.duration_since(at).as_nanos();
        self.level = self
            .level
            .saturating_add(elapsed.saturating_mul(self.count))
            .min(self.capacity);
        self.at = Some(now);
    }

    /// Whole tokens available at `now`.
    pub(crate) fn available(&mut self, now: Instant) -> usize {
        self.refill(now);
        usize::try_from(self.level / self.per).unwrap_or(usize::MAX)
    }

    /// Spends `n` tokens (a claim of up to `n` went out).
    pub(crate) fn take(&mut self, now: Instant, n: usize) {
        self.refill(now);
        let cost = (n as u128).saturating_mul(self.per);
        self.level = self.level.saturating_sub(cost);
    }

    /// Gives back `n` tokens a claim did not use (it came back short, or failed).
    pub(crate) fn give_back(&mut self, n: usize) {
        let units = (n as u128).saturating_mul(self.per);
        self.level = self.level.saturating_add(units).min(self.capacity);
    }

    /// When one token will be available, from `now`.
    pub(crate) fn next_token_at(&mut self, now: Instant) -> Instant {
        self.refill(now);
        let missing = self.per.saturating_sub(self.level);
        let nanos = missing.div_ceil(self.count);
        now + Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_full_refills_at_the_rate_and_never_past_the_burst() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(RateLimit::new(200, Duration::from_secs(1)).burst(10));
        assert_eq!(bucket.available(start), 10);
        bucket.take(start, 10);
        assert_eq!(bucket.available(start), 0);
        assert_eq!(
            bucket.next_token_at(start),
            start + Duration::from_millis(5)
        );
        assert_eq!(bucket.available(start + Duration::from_millis(5)), 1);
        assert_eq!(bucket.available(start + Duration::from_millis(26)), 5);
        assert_eq!(bucket.available(start + Duration::from_secs(60)), 10);
        bucket.take(start + Duration::from_secs(60), 4);
        bucket.give_back(100);
        assert_eq!(bucket.available(start + Duration::from_secs(60)), 10);
    }

    #[test]
    fn thirty_seconds_at_200_per_second_yield_exactly_6000_tokens_after_the_burst() {
        let start = Instant::now();
        // A burst of 2 holds what accrues between two looks (1.7 ms < one token), so no
        // refill is lost to the cap.
        let mut bucket = TokenBucket::new(RateLimit::new(200, Duration::from_secs(1)).burst(2));
        let mut taken = 0;
        let mut now = start;
        while now <= start + Duration::from_secs(30) {
            let n = bucket.available(now);
            bucket.take(now, n);
            taken += n;
            now += Duration::from_micros(1_700); // not a divisor of the token period
        }
        assert!((6000..=6002).contains(&taken), "{taken}");
    }
}
