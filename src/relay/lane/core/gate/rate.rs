//! `TokenBucket`: the rate limit as a pure type. Time comes in as a value.
//!
//! Integer arithmetic, so 30 s of refills at 200/s add up to exactly 6000 tokens: the level
//! is kept in units where one token is `per` nanoseconds' worth and every nanosecond adds
//! `count` units.

use std::time::Duration;

use tokio::time::Instant;

use crate::config::RateLimit;

/// Once the bucket is empty, a lane waits for this long's worth of tokens (within its
/// burst) before it claims again, so a rate-limited lane claims in batches, not one
/// statement per token (200/s: 20 claims of 10 a second, not 200 of 1). It adds at most
/// this much to a message's wait, on a lane whose messages wait for the rate anyway.
pub(crate) const REFILL_BATCH_WINDOW: Duration = Duration::from_millis(50);

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
    /// The tokens an emptied bucket waits for: [`REFILL_BATCH_WINDOW`]'s worth, 1..=burst.
    batch: usize,
}

impl TokenBucket {
    pub(crate) fn new(limit: RateLimit) -> Self {
        let per = limit.per.as_nanos().max(1);
        let capacity = u128::from(limit.burst.max(1)) * per;
        let count = u128::from(limit.count.max(1));
        let per_window = REFILL_BATCH_WINDOW.as_nanos() * count / per;
        let batch = usize::try_from(per_window)
            .unwrap_or(usize::MAX)
            .clamp(1, limit.burst.max(1) as usize);
        Self {
            count,
            per,
            capacity,
            level: capacity,
            at: None,
            batch,
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

    /// How many tokens a claim of up to `want` should wait for once the bucket ran low.
    pub(crate) fn batch(&self, want: usize) -> usize {
        want.clamp(1, self.batch)
    }

    /// When `n` tokens will be available, from `now`.
    pub(crate) fn ready_at(&mut self, now: Instant, n: usize) -> Instant {
        self.refill(now);
        let missing = (n as u128)
            .saturating_mul(self.per)
            .saturating_sub(self.level);
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
        assert_eq!(bucket.ready_at(start, 1), start + Duration::from_millis(5));
        assert_eq!(
            bucket.ready_at(start, 10),
            start + Duration::from_millis(50)
        );
        // An emptied bucket waits for 50 ms' worth (10 tokens at 200/s), within the burst.
        assert_eq!(bucket.batch(64), 10);
        assert_eq!(bucket.batch(3), 3);
        let small = TokenBucket::new(RateLimit::new(200, Duration::from_secs(1)).burst(4));
        assert_eq!(small.batch(64), 4);
        let slow = TokenBucket::new(RateLimit::new(1, Duration::from_secs(60)));
        assert_eq!(slow.batch(64), 1);
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
