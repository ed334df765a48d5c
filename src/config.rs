//! Relay configuration: one `LaneConfig` per (lane, target), one `SupervisorConfig` for the
//! restart policy. Defaults are named constants; `validate()` fails fast naming the field.
//!
//! [`duration`] reads and writes `30s`-style durations; `file` (feature `file-config`) reads
//! the whole relay from a TOML file.

use std::time::Duration;

use crate::lane::LaneKey;
use crate::message::validate_name;
use crate::message::ValidationError;
use crate::retention::RetentionConfig;
use crate::retry::{RetryPolicy, DEFAULT_BASE_DELAY, DEFAULT_MAX_DELAY, DEFAULT_RETRY_AFTER_MAX};
use crate::store::OrderingPolicy;

pub mod duration;
#[cfg(feature = "file-config")]
#[cfg_attr(docsrs, doc(cfg(feature = "file-config")))]
pub mod file;
mod gates;
mod listener;
mod pattern;

pub use gates::{
    CircuitBreakerConfig, FailureRatio, RateLimit, DEFAULT_BREAKER_CONSECUTIVE_FAILURES,
    DEFAULT_BREAKER_COOL_DOWN, DEFAULT_BREAKER_MAX_COOL_DOWN, DEFAULT_BREAKER_MIN_REQUESTS,
    DEFAULT_BREAKER_WINDOW, MAX_RATE_COUNT,
};
pub use listener::{
    ControlToken, ListenerConfig, DEFAULT_API_STORE_CALLS, DEFAULT_API_STORE_TIMEOUT,
    DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_REQUEST_TIMEOUT, MAX_API_STORE_CALLS, MAX_MAX_CONNECTIONS, MIN_CONTROL_TOKEN_LEN,
};
pub(crate) use pattern::check_overlap;
pub use pattern::{LanePattern, DEFAULT_MAX_PATTERN_LANES, DEFAULT_PATTERN_IDLE_STOP};

/// Deliveries a lane keeps in flight unless configured otherwise.
pub const DEFAULT_CONCURRENCY: usize = 8;
/// The most messages one claim statement takes unless configured otherwise. A claim asks
/// for no more than the lane has room for (free handlers plus the prefetch); this only caps
/// it. At 64 it capped a lane at concurrency 64 to half the room it had.
pub const DEFAULT_BATCH_SIZE: usize = 256;
/// How long a claim holds unless configured otherwise.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
/// How long one delivery may run before it counts as a retryable failure.
pub const DEFAULT_DELIVERY_TIMEOUT: Duration = Duration::from_secs(20);
/// An idle lane looks at the store at least this often, wake-ups or not.
pub const DEFAULT_MAX_POLL_INTERVAL: Duration = Duration::from_secs(5);
/// How often a lane samples the store's stats into the backlog gauges.
pub const DEFAULT_STATS_INTERVAL: Duration = Duration::from_secs(15);
/// The most deliveries a lane may keep in flight: each is a handler actor, and a claim
/// holds that many rows. A typo like `1000000` would otherwise run out of memory.
pub const MAX_CONCURRENCY: usize = 1_000;
/// The most messages one claim statement may take.
pub const MAX_BATCH_SIZE: usize = 1_000;
/// The most messages a lane may claim ahead of its free handlers (for `LaneConfig`'s
/// prefetch).
pub const MAX_PREFETCH: usize = 1_000;
/// The longest consumer id, in bytes: it is stored with every claim and shown to operators.
pub const MAX_CONSUMER_ID_LEN: usize = 128;
/// The first wait after a store error; doubles up to [`DEFAULT_STORE_BACKOFF_MAX`].
pub const DEFAULT_STORE_BACKOFF: Duration = Duration::from_millis(100);
/// The longest wait after repeated store errors.
pub const DEFAULT_STORE_BACKOFF_MAX: Duration = Duration::from_secs(5);
/// Claimed messages a lane keeps waiting for a free handler, per handler, unless
/// configured otherwise: the default prefetch equals the concurrency.
pub const DEFAULT_PREFETCH: usize = DEFAULT_CONCURRENCY;
/// How long a claim waits for running handlers to finish, unless configured otherwise
/// (see [`LaneConfig::claim_linger`]).
pub const DEFAULT_CLAIM_LINGER: Duration = Duration::from_micros(500);
/// The longest claim linger: the wait delays acks too.
pub const MAX_CLAIM_LINGER: Duration = Duration::from_millis(100);
/// The longest key run a claim asks for unless configured otherwise (see
/// [`LaneConfig::key_run`]). Measured side by side at a 100 k backlog, concurrency 64
/// (2026-12-01, `OUTBOX_BENCH_KEY_RUN` in the benchmark): against heads only, 1,000 keys
/// drained 1.28 × as fast on PostgreSQL and 1.16 × on SQLite, a hot key among them 1.20 ×
/// on PostgreSQL and the same on SQLite; but beside a hot key at concurrency 16, SQLite
/// was slower with runs (0.75–0.79 ×). Set 1 for heads only.
pub const DEFAULT_KEY_RUN: usize = 16;
/// The longest key run a lane may be configured with: a run is delivered one message after
/// another, each after the one before it, so its last message waits for all of them.
pub const MAX_KEY_RUN: usize = 256;
/// Claims a lane keeps out at once when neither its config nor its store says otherwise
/// (the store's own default, [`Capabilities::claims_in_flight`](crate::store::Capabilities::claims_in_flight),
/// comes first).
pub const DEFAULT_CLAIMS_IN_FLIGHT: usize = 1;
/// The most claims a lane may keep out at once: each holds a store connection for its
/// round trip, and each takes only its share of the lane's window.
pub const MAX_CLAIMS_IN_FLIGHT: usize = 8;
/// The largest prefetch, in multiples of the concurrency. A buffered message's lease is
/// already running; with at most this many handler turns ahead of it, it starts well within
/// its lease (and lease extension covers buffered claims too). The prefetch that grows past
/// it while deliveries are quick ([`LaneConfig::prefetch_max`]) is bounded by time instead.
pub const MAX_PREFETCH_PER_HANDLER: usize = 4;
/// How far a lane's prefetch may grow while its deliveries finish faster than a claim round
/// trip, unless configured otherwise ([`LaneConfig::prefetch_max`]). Without it (0), a no-op
/// drain on PostgreSQL at concurrency 16 held at most 32 claims (`concurrency + prefetch`)
/// and ran at 0.52–0.64 × the rate of concurrency 64; with 128 it ran at 0.88–1.00 ×, and
/// concurrency 64 itself 1.09–1.17 × as fast as without (benchmark history, "The adaptive
/// prefetch at c=16"). The cost is the crash bound: 16 + 128 = 144 claims at concurrency 16
/// instead of 32. 240 gained a little more (0.95–1.02 ×) for a bound of 256.
pub const DEFAULT_PREFETCH_MAX: usize = 128;
/// The grown prefetch waits at most this share of the lease in the buffer, by the lane's
/// average delivery time: a claim it takes starts long before its lease needs extending.
pub const PREFETCH_LEASE_SHARE: u32 = 8;

/// A configuration problem, naming the field: the crate's one "field + reason" error,
/// [`ValidationError`], under the name the config API has always used.
pub type ConfigError = ValidationError;

/// How one lane (a lane name and its target, [`LaneKey`]) is relayed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LaneConfig {
    /// The lane's name: the `lane` its messages are written with (`lane` in the config
    /// file).
    pub name: String,
    /// The target.
    pub target: String,
    /// Written to `claimed_by`; defaults to `<host>-<pid>`.
    pub consumer_id: String,
    /// Deliveries in flight at once (handler actors).
    pub concurrency: usize,
    /// The most messages one claim takes (never more than free handler slots plus the
    /// prefetch room).
    pub batch_size: usize,
    /// Claimed messages kept waiting for a free handler, so handlers do not wait for a
    /// claim round trip. 0 claims only for free handlers. At most
    /// [`MAX_PREFETCH_PER_HANDLER`] × `concurrency`. Drain and shutdown release them.
    pub prefetch: usize,
    /// How far the prefetch grows while deliveries finish faster than a claim round trip:
    /// the lane then claims ahead as many as its handlers finish in two claim round trips
    /// (by the moving averages of both), at least `prefetch` and at most this; when
    /// deliveries slow, it shrinks back to `prefetch`. So a lane of quick handlers is not
    /// bound by its slots, and one of slow handlers holds what it held before.
    ///
    /// **The crash bound.** A lane holds at most [`LaneConfig::most_held`] =
    /// `concurrency + max(prefetch, prefetch_max)` claims (running, buffered, finished and
    /// not yet acked, handed off on their way): what a crashed relay delivers again at most.
    /// 0 keeps the prefetch at `prefetch` (the bound is then `concurrency + prefetch`).
    ///
    /// **Lease safety.** A grown prefetch passes [`MAX_PREFETCH_PER_HANDLER`] × `concurrency`
    /// only in time, never in handler turns: it is claimed only while what it buffers waits,
    /// by the average delivery time, no longer than two claim round trips and no longer
    /// than a [`PREFETCH_LEASE_SHARE`]th of the lease (`prefetch / concurrency × delivery
    /// time`). Handlers that turn slow shrink it with their next deliveries, and what it
    /// buffered before is covered as every buffered claim is: lease extension renews it,
    /// and a message whose lease will not hold for the start margin is handed back unused,
    /// never started past its lapse. Default [`DEFAULT_PREFETCH_MAX`], at most
    /// [`MAX_PREFETCH`].
    pub prefetch_max: usize,
    /// How long a claim (and the acks riding on it) may wait for running handlers to
    /// finish, when they hold room it could take. The lane holds at most `concurrency +
    /// prefetch` claims, a running handler's until it is acked, so a claim sent the moment
    /// a batch is handed out takes only the prefetch; a moment later, quick handlers have
    /// finished, and one round trip acks them and takes the whole window. Only claims under
    /// 64 messages wait (bigger ones already spread their round trip thin). Zero sends
    /// every claim at once. Default [`DEFAULT_CLAIM_LINGER`], at most [`MAX_CLAIM_LINGER`].
    pub claim_linger: Duration,
    /// The most messages of one ordering key a claim takes at once: the key's head and the
    /// messages queued right behind it (a key run, see the store docs). The lane still
    /// delivers them one after another, each once the one before it succeeded, and hands
    /// the rest back when one fails, so per-key order is as with 1; what changes is the
    /// cost, since a key's next message need not wait for its own claim round trip. The
    /// lane asks for shorter runs while deliveries are slow against a claim round trip
    /// (a run then waits in the buffer longer than a claim would take), at most an eighth
    /// of the claim's limit (so a hot key leaves room for the other keys due), and for heads
    /// only until it has timed both. 1 turns runs off. Default [`DEFAULT_KEY_RUN`], at most
    /// [`MAX_KEY_RUN`].
    pub key_run: usize,
    /// How many claims (or claim-and-ack cycles) the lane keeps out at once, each on its own
    /// store connection and each for its share of the window (`concurrency` plus the
    /// prefetch in force, at most `batch_size`, divided by this). With one out, a lane's
    /// rate is one store round trip's; with two, their round trips overlap. Per-key order,
    /// leases, gates, drain and the bound on what a crash redelivers
    /// ([`LaneConfig::most_held`]) hold as with one.
    /// `None` takes the store's default
    /// ([`Capabilities::claims_in_flight`](crate::store::Capabilities::claims_in_flight):
    /// 2 on PostgreSQL, 1 on the other stores shipped here), else
    /// [`DEFAULT_CLAIMS_IN_FLIGHT`]. At most
    /// [`MAX_CLAIMS_IN_FLIGHT`].
    pub claims_in_flight: Option<usize>,
    /// Whether an ack keeps the row, marked `delivered` until retention purges it (the
    /// default), or deletes it (`false`): one write per message less, and no history of
    /// delivered messages (dead letters are kept either way). The delete has the same
    /// fencing as the ack. A deleted message's dedupe key is forgotten, as once retention
    /// purges it. Only on stores that can
    /// ([`Capabilities::delete_on_ack`](crate::store::Capabilities::delete_on_ack));
    /// elsewhere the relay refuses to start the lane.
    pub keep_delivered: bool,
    /// How long a claim holds.
    pub lease: Duration,
    /// Extend a running delivery's lease when this little of it is left; `None` turns
    /// extension off (a slow delivery then lapses and may be redelivered elsewhere).
    pub lease_extend_margin: Option<Duration>,
    /// How long one delivery may run.
    pub delivery_timeout: Duration,
    /// Backoff between attempts.
    pub retry: RetryPolicy,
    /// The longest a target's `Retry-After` may hold a message back: a longer one is held
    /// to this (logged, and counted in `outbox_retry_after_clamped_total`), so one answer
    /// cannot park a message and its ordering key for a year. Default
    /// [`DEFAULT_RETRY_AFTER_MAX`], the same as the default `retry.max`.
    pub retry_after_max: Duration,
    /// What a dead-lettered head does to its key.
    pub ordering: OrderingPolicy,
    /// How often the store is looked at for this lane when nothing tells it of new work
    /// (a lost wake-up, another relay's nack or claim). The relay's due watcher asks for
    /// every lane at once, as often as the shortest `max_poll_interval` among them asks,
    /// and pokes a lane whose next message falls due before its next look; an idle lane
    /// itself only sleeps until its next known due time. A lane holding claims still
    /// claims again at least this often, so a retry that falls due beside long deliveries
    /// is not left waiting for them.
    pub max_poll_interval: Duration,
    /// How often backlog gauges are sampled from the store. A relay samples all its lanes
    /// in one store call, as often as the shortest `stats_interval` among them asks.
    pub stats_interval: Duration,
    /// Backoff after store errors (claims, acks, nacks, `next_due`, lease extension); no
    /// jitter unless turned on.
    pub store_backoff: RetryPolicy,
    /// Claims at most this fast (`None`: no limit). A claim takes only what the budget
    /// allows, so claimed messages never wait for tokens.
    pub rate_limit: Option<RateLimit>,
    /// Stops claiming while the target keeps failing (`None`: no breaker).
    pub circuit_breaker: Option<CircuitBreakerConfig>,
    /// A target's Retry-After (`DeliveryError::RetryAfter`) holds the whole lane's claims
    /// until then (capped at `retry.max`), not only that message's retry.
    pub retry_after_holds_lane: bool,
    /// How long the lane's delivered messages and dead letters are kept before the relay's
    /// automatic retention deletes them ([`RelayBuilder::retention`](crate::relay::RelayBuilder::retention)
    /// sets how often it runs, or turns it off). Its `ordering` is the lane's own
    /// ([`LaneConfig::ordering`]): under `Block`, keyed dead letters are kept. Default
    /// [`RetentionConfig::default`]: delivered 7 days, dead letters 30 days;
    /// [`RetentionConfig::keep_all`] keeps everything.
    pub retention: RetentionConfig,
    /// Take what this process enqueues for the lane through the outbox the relay runs on
    /// (or a clone of it), without a claim: while the lane is idle, an enqueue of a message without an
    /// ordering key or delay writes it claimed by the lane and hands it over after its
    /// commit (no NOTIFY, no claim statement; see [`crate::store::hand_off`]). Only stores
    /// that offer it ([`Outbox::hand_off`](crate::store::Outbox::hand_off):
    /// PostgreSQL; elsewhere the lane claims as without it); not on a lane with a rate
    /// limit, nor while its breaker is not closed. What changes for the caller: such an
    /// enqueue answers the row as written, claimed by the lane (`status` claimed, first
    /// attempt), and if the lane's process dies before the delivery, the message waits for
    /// its lease to lapse, as any claimed one. Default true.
    pub hand_off: bool,
    /// Record this lane's histograms (delivery duration, end-to-end latency, claim batch
    /// size, store call duration, throttled spells) into series shared by every lane of
    /// its target set so, labelled `lane="*"`, instead of its own. Its counters and gauges
    /// stay its own. A lane's own 14 histograms (12 to 21 buckets each) are about 255 of
    /// the 294 lines it adds to a scrape, and most of its metric memory: worth sharing for
    /// many lanes of one shape (one per tenant), whose latencies matter as a whole.
    /// Default false.
    pub shared_histograms: bool,
}

impl LaneConfig {
    /// A lane with every default.
    ///
    /// ```
    /// use outbox_relay::LaneConfig;
    /// let lane = LaneConfig::new("orders", "billing").concurrency(16);
    /// assert!(lane.validate().is_ok());
    /// assert!(LaneConfig::new("orders", "billing").concurrency(0).validate().is_err());
    /// ```
    pub fn new(name: impl Into<String>, target: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            target: target.into(),
            consumer_id: default_consumer_id(),
            concurrency: DEFAULT_CONCURRENCY,
            batch_size: DEFAULT_BATCH_SIZE,
            prefetch: DEFAULT_PREFETCH,
            prefetch_max: DEFAULT_PREFETCH_MAX,
            claim_linger: DEFAULT_CLAIM_LINGER,
            key_run: DEFAULT_KEY_RUN,
            claims_in_flight: None,
            keep_delivered: true,
            shared_histograms: false,
            lease: DEFAULT_LEASE,
            lease_extend_margin: Some(DEFAULT_LEASE / 3),
            delivery_timeout: DEFAULT_DELIVERY_TIMEOUT,
            retry: RetryPolicy::new(DEFAULT_BASE_DELAY, DEFAULT_MAX_DELAY),
            retry_after_max: DEFAULT_RETRY_AFTER_MAX,
            ordering: OrderingPolicy::Skip,
            max_poll_interval: DEFAULT_MAX_POLL_INTERVAL,
            stats_interval: DEFAULT_STATS_INTERVAL,
            store_backoff: RetryPolicy::new(DEFAULT_STORE_BACKOFF, DEFAULT_STORE_BACKOFF_MAX)
                .jitter(false),
            rate_limit: None,
            circuit_breaker: None,
            retry_after_holds_lane: false,
            retention: RetentionConfig::default(),
            hand_off: true,
        }
    }

    /// Sets (or with `None` removes) the rate limit.
    ///
    /// ```
    /// use outbox_relay::LaneConfig;
    /// let lane = LaneConfig::new("orders", "billing").rate_limit(Some("200/s".parse()?));
    /// assert!(lane.validate().is_ok());
    /// # Ok::<(), String>(())
    /// ```
    pub fn rate_limit(mut self, limit: Option<RateLimit>) -> Self {
        self.rate_limit = limit;
        self
    }

    /// Sets (or with `None` removes) the circuit breaker.
    pub fn circuit_breaker(mut self, breaker: Option<CircuitBreakerConfig>) -> Self {
        self.circuit_breaker = breaker;
        self
    }

    /// Whether a target's Retry-After holds the whole lane.
    pub fn retry_after_holds_lane(mut self, hold: bool) -> Self {
        self.retry_after_holds_lane = hold;
        self
    }

    /// Whether the lane records its histograms into series shared with the other lanes of
    /// its target set so ([`LaneConfig::shared_histograms`]).
    pub fn shared_histograms(mut self, shared: bool) -> Self {
        self.shared_histograms = shared;
        self
    }

    /// Whether the lane takes what this process enqueues without a claim
    /// ([`LaneConfig::hand_off`]).
    pub fn hand_off(mut self, hand_off: bool) -> Self {
        self.hand_off = hand_off;
        self
    }

    /// Sets how long the lane's finished messages are kept ([`LaneConfig::retention`]).
    pub fn retention(mut self, retention: RetentionConfig) -> Self {
        self.retention = retention;
        self
    }

    /// The lane's retention with the lane's ordering policy: what a pass purges it by.
    pub(crate) fn retention_in_force(&self) -> RetentionConfig {
        self.retention.ordering(self.ordering)
    }

    /// Sets the consumer id written to `claimed_by`.
    pub fn consumer_id(mut self, consumer_id: impl Into<String>) -> Self {
        self.consumer_id = consumer_id.into();
        self
    }

    /// Sets how many deliveries run at once, and the prefetch to match (call
    /// [`LaneConfig::prefetch`] afterwards for another).
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency;
        self.prefetch = concurrency;
        self
    }

    /// Sets how many claimed messages may wait for a free handler.
    pub fn prefetch(mut self, prefetch: usize) -> Self {
        self.prefetch = prefetch;
        self
    }

    /// Sets how far the prefetch grows while deliveries are quick
    /// ([`LaneConfig::prefetch_max`]; 0: not past `prefetch`).
    ///
    /// ```
    /// use outbox_relay::LaneConfig;
    /// let lane = LaneConfig::new("orders", "billing").concurrency(16).prefetch_max(64);
    /// assert_eq!(lane.most_held(), 16 + 64);
    /// assert_eq!(lane.prefetch_max(0).most_held(), 16 + 16);
    /// ```
    pub fn prefetch_max(mut self, prefetch_max: usize) -> Self {
        self.prefetch_max = prefetch_max;
        self
    }

    /// The most claims the lane holds at once, `concurrency + max(prefetch, prefetch_max)`:
    /// the most a crashed relay delivers again for this lane ([`LaneConfig::prefetch_max`]).
    pub fn most_held(&self) -> usize {
        self.concurrency + self.prefetch_ceiling()
    }

    /// The most the prefetch grows to: `max(prefetch, prefetch_max)`.
    pub(crate) fn prefetch_ceiling(&self) -> usize {
        self.prefetch.max(self.prefetch_max)
    }

    /// Sets how long a claim may wait for running handlers ([`LaneConfig::claim_linger`]).
    pub fn claim_linger(mut self, linger: Duration) -> Self {
        self.claim_linger = linger;
        self
    }

    /// Sets the longest key run a claim asks for ([`LaneConfig::key_run`]).
    pub fn key_run(mut self, key_run: usize) -> Self {
        self.key_run = key_run;
        self
    }

    /// Sets how many claims the lane keeps out at once ([`LaneConfig::claims_in_flight`]).
    pub fn claims_in_flight(mut self, claims: usize) -> Self {
        self.claims_in_flight = Some(claims);
        self
    }

    /// Whether an ack keeps the row as `delivered` or deletes it
    /// ([`LaneConfig::keep_delivered`]).
    pub fn keep_delivered(mut self, keep: bool) -> Self {
        self.keep_delivered = keep;
        self
    }

    /// What the lane's acks do with a delivered message's row.
    pub fn ack_mode(&self) -> crate::store::AckMode {
        if self.keep_delivered {
            crate::store::AckMode::KeepDelivered
        } else {
            crate::store::AckMode::Delete
        }
    }

    /// Checks what the lane asks of its store against what the store can do: a lane that
    /// deletes on ack needs [`Capabilities::delete_on_ack`](crate::store::Capabilities).
    pub fn validate_for(&self, store: crate::store::Capabilities) -> Result<(), ConfigError> {
        if !self.keep_delivered && !store.delete_on_ack {
            return Err(ConfigError::new(
                format!("lanes[{}].keep_delivered", self.key()),
                "this store cannot delete a row at its ack: keep delivered rows (true), or \
                 use a store that can (memory, SQLite, PostgreSQL, MySQL)",
            ));
        }
        Ok(())
    }

    /// The claims the lane keeps out at once: as configured, else `store_default` (0 for
    /// none), else [`DEFAULT_CLAIMS_IN_FLIGHT`].
    pub fn claims_in_flight_or(&self, store_default: usize) -> usize {
        match self.claims_in_flight {
            Some(claims) => claims,
            None if store_default > 0 => store_default.min(MAX_CLAIMS_IN_FLIGHT),
            None => DEFAULT_CLAIMS_IN_FLIGHT,
        }
    }

    /// The claims the lane keeps out at once, with no store default.
    pub(crate) fn claims_in_flight_or_default(&self) -> usize {
        self.claims_in_flight_or(0)
    }

    /// Sets the backoff after store errors.
    pub fn store_backoff(mut self, backoff: RetryPolicy) -> Self {
        self.store_backoff = backoff;
        self
    }

    /// Sets the most messages one claim takes.
    pub fn batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size;
        self
    }

    /// Sets the lease, and the extension margin to a third of it if extension is on.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        if self.lease_extend_margin.is_some() {
            self.lease_extend_margin = Some(lease / 3);
        }
        self
    }

    /// Sets (or, with `None`, turns off) the lease extension margin.
    pub fn lease_extend_margin(mut self, margin: Option<Duration>) -> Self {
        self.lease_extend_margin = margin;
        self
    }

    /// Sets the delivery timeout.
    pub fn delivery_timeout(mut self, timeout: Duration) -> Self {
        self.delivery_timeout = timeout;
        self
    }

    /// Sets the retry policy.
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Sets the longest a target's `Retry-After` may hold a message back
    /// ([`LaneConfig::retry_after_max`]).
    pub fn retry_after_max(mut self, ceiling: Duration) -> Self {
        self.retry_after_max = ceiling;
        self
    }

    /// Sets the ordering policy.
    pub fn ordering(mut self, ordering: OrderingPolicy) -> Self {
        self.ordering = ordering;
        self
    }

    /// Sets the longest idle sleep.
    pub fn max_poll_interval(mut self, interval: Duration) -> Self {
        self.max_poll_interval = interval;
        self
    }

    /// Sets how often backlog gauges are sampled.
    pub fn stats_interval(mut self, interval: Duration) -> Self {
        self.stats_interval = interval;
        self
    }

    /// The lane this config relays; displayed `name/target`, as logs and errors name it.
    pub fn key(&self) -> LaneKey {
        LaneKey::new(&self.name, &self.target)
    }

    /// Checks every field; the error names the first at fault.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let field = |name: &str| format!("lanes[{}].{name}", self.key());
        validate_name("lane", &self.name).map_err(|e| ConfigError::new(field("lane"), e.reason))?;
        validate_name("target", &self.target)
            .map_err(|e| ConfigError::new(field("target"), e.reason))?;
        validate_consumer_id(&self.consumer_id)
            .map_err(|reason| ConfigError::new(field("consumer_id"), reason))?;
        let positive = [
            ("concurrency", self.concurrency == 0),
            ("batch_size", self.batch_size == 0),
            ("lease", self.lease.is_zero()),
            ("delivery_timeout", self.delivery_timeout.is_zero()),
            ("retry_after_max", self.retry_after_max.is_zero()),
            ("max_poll_interval", self.max_poll_interval.is_zero()),
            ("stats_interval", self.stats_interval.is_zero()),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, zero)| *zero) {
            return Err(ConfigError::new(field(name), "must be greater than zero"));
        }
        let bounded = [
            ("concurrency", self.concurrency, MAX_CONCURRENCY),
            ("batch_size", self.batch_size, MAX_BATCH_SIZE),
        ];
        if let Some((name, value, max)) = bounded.iter().find(|(_, value, max)| value > max) {
            return Err(ConfigError::new(
                field(name),
                format!("is {value}, over the limit of {max}"),
            ));
        }
        if self.retry.max < self.retry.base {
            return Err(ConfigError::new(
                field("retry.max"),
                format!(
                    "max retry delay {:?} is below the base delay {:?}",
                    self.retry.max, self.retry.base
                ),
            ));
        }
        if self.claim_linger > MAX_CLAIM_LINGER {
            return Err(ConfigError::new(
                field("claim_linger"),
                format!(
                    "{:?} is over the limit of {MAX_CLAIM_LINGER:?}",
                    self.claim_linger
                ),
            ));
        }
        if !(1..=MAX_KEY_RUN).contains(&self.key_run) {
            return Err(ConfigError::new(
                field("key_run"),
                format!("{} is not between 1 and {MAX_KEY_RUN}", self.key_run),
            ));
        }
        if let Some(claims) = self.claims_in_flight {
            if !(1..=MAX_CLAIMS_IN_FLIGHT).contains(&claims) {
                return Err(ConfigError::new(
                    field("claims_in_flight"),
                    format!("{claims} is not between 1 and {MAX_CLAIMS_IN_FLIGHT}"),
                ));
            }
        }
        if self.prefetch > MAX_PREFETCH {
            return Err(ConfigError::new(
                field("prefetch"),
                format!("{} is over the limit of {MAX_PREFETCH}", self.prefetch),
            ));
        }
        if self.prefetch_max > MAX_PREFETCH {
            return Err(ConfigError::new(
                field("prefetch_max"),
                format!("{} is over the limit of {MAX_PREFETCH}", self.prefetch_max),
            ));
        }
        if self.prefetch > self.concurrency.saturating_mul(MAX_PREFETCH_PER_HANDLER) {
            return Err(ConfigError::new(
                field("prefetch"),
                format!(
                    "{} is more than {MAX_PREFETCH_PER_HANDLER} × concurrency ({}): buffered \
                     messages would wait too long into their leases",
                    self.prefetch, self.concurrency
                ),
            ));
        }
        // A zero base would retry a failing store in a hot loop.
        if self.store_backoff.base.is_zero() {
            return Err(ConfigError::new(
                field("store_backoff"),
                "must be greater than zero",
            ));
        }
        if self.store_backoff.max < self.store_backoff.base {
            return Err(ConfigError::new(
                field("store_backoff.max"),
                format!(
                    "max store backoff {:?} is below the base delay {:?}",
                    self.store_backoff.max, self.store_backoff.base
                ),
            ));
        }
        if let Some(margin) = self.lease_extend_margin {
            if margin.is_zero() || margin >= self.lease {
                return Err(ConfigError::new(
                    field("lease_extend_margin"),
                    format!("must be above zero and below the lease ({:?})", self.lease),
                ));
            }
        } else if self.delivery_timeout >= self.lease {
            // Without extension nothing renews a claim: a delivery allowed to run as long
            // as the lease (or longer) outlives it whenever it is slow, and another relay
            // takes the message while this one still delivers it.
            return Err(ConfigError::new(
                field("delivery_timeout"),
                format!(
                    "{:?} is not below the lease ({:?}) while lease extension is off \
                     (lease_extend_margin = false): a slow delivery would outlive its claim; \
                     shorten it, lengthen the lease, or turn extension on",
                    self.delivery_timeout, self.lease
                ),
            ));
        }
        if let Some(problem) = self.rate_limit.and_then(|limit| limit.problem()) {
            return Err(ConfigError::new(field("rate_limit"), problem));
        }
        if let Some((name, problem)) = self.circuit_breaker.and_then(|b| b.problem()) {
            return Err(ConfigError::new(field(name), problem));
        }
        self.retention
            .validate()
            .map_err(|error| ConfigError::new(field(&error.field), error.reason))
    }
}

/// A consumer id is shown to operators and stored with every claim: printable, on one
/// line, at most [`MAX_CONSUMER_ID_LEN`] bytes.
pub(crate) fn validate_consumer_id(id: &str) -> Result<(), String> {
    if id.trim().is_empty() {
        return Err("is required".to_owned());
    }
    if id.len() > MAX_CONSUMER_ID_LEN {
        return Err(format!(
            "is {} bytes, over the limit of {MAX_CONSUMER_ID_LEN}",
            id.len()
        ));
    }
    if let Some(bad) = id.chars().find(|c| c.is_control()) {
        return Err(format!("contains the control character {bad:?}"));
    }
    Ok(())
}

/// `<host>-<pid>`: who holds a claim, readable by an operator. The host is the machine's
/// (the container's) host name; `relay` if it has none that reads as UTF-8.
pub fn default_consumer_id() -> String {
    let host = gethostname::gethostname()
        .into_string()
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "relay".to_owned());
    format!("{host}-{}", std::process::id())
}

/// The first wait before restarting a crashed lane.
pub const DEFAULT_RESTART_BACKOFF: Duration = Duration::from_millis(100);
/// The longest wait before restarting a crashed lane.
pub const DEFAULT_RESTART_BACKOFF_MAX: Duration = Duration::from_secs(30);
/// A lane that crashes this many times within [`DEFAULT_RESTART_WINDOW`] is marked failed.
pub const DEFAULT_MAX_RESTARTS: u32 = 5;
/// The window the restart intensity is counted in.
pub const DEFAULT_RESTART_WINDOW: Duration = Duration::from_secs(60);
/// How long a lane may stay failed before the relay reports itself not alive, unless
/// configured otherwise ([`SupervisorConfig::fail_liveness_after`]): time for an alert to
/// reach someone, short enough that a restart comes before the backlog is hours old.
pub const DEFAULT_FAIL_LIVENESS_AFTER: Duration = Duration::from_secs(5 * 60);

/// How the supervisor restarts crashed lanes.
///
/// ```
/// use std::time::Duration;
/// use outbox_relay::config::SupervisorConfig;
///
/// let supervisor = SupervisorConfig::default()
///     .max_restarts(3)
///     .restart_window(Duration::from_secs(30));
/// assert!(supervisor.validate().is_ok());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SupervisorConfig {
    /// Backoff before a restart: doubles with each restart in the window, capped.
    pub restart_backoff: RetryPolicy,
    /// Restarts allowed within `restart_window`; one more marks the lane failed.
    pub max_restarts: u32,
    /// The window restarts are counted in.
    pub restart_window: Duration,
    /// How long a lane may stay [failed](crate::relay::LaneState::Failed) before
    /// [`RelayHandle::liveness`](crate::RelayHandle::liveness) (and `/healthz`, and the
    /// daemon, which then exits) says the process should be restarted: a failed lane stays
    /// down until its process restarts. `None`: never. Default
    /// [`DEFAULT_FAIL_LIVENESS_AFTER`].
    pub fail_liveness_after: Option<Duration>,
}

impl Default for SupervisorConfig {
    fn default() -> Self {
        Self {
            restart_backoff: RetryPolicy::new(DEFAULT_RESTART_BACKOFF, DEFAULT_RESTART_BACKOFF_MAX)
                .jitter(false),
            max_restarts: DEFAULT_MAX_RESTARTS,
            restart_window: DEFAULT_RESTART_WINDOW,
            fail_liveness_after: Some(DEFAULT_FAIL_LIVENESS_AFTER),
        }
    }
}

impl SupervisorConfig {
    /// Sets the backoff before a restart ([`SupervisorConfig::restart_backoff`]).
    pub fn restart_backoff(mut self, backoff: RetryPolicy) -> Self {
        self.restart_backoff = backoff;
        self
    }

    /// Sets the restarts allowed within the window ([`SupervisorConfig::max_restarts`]).
    pub fn max_restarts(mut self, max_restarts: u32) -> Self {
        self.max_restarts = max_restarts;
        self
    }

    /// Sets the window restarts are counted in ([`SupervisorConfig::restart_window`]).
    pub fn restart_window(mut self, window: Duration) -> Self {
        self.restart_window = window;
        self
    }

    /// Sets how long a lane may stay failed before the process is reported not alive
    /// ([`SupervisorConfig::fail_liveness_after`]; `None`: never).
    pub fn fail_liveness_after(mut self, after: Option<Duration>) -> Self {
        self.fail_liveness_after = after;
        self
    }

    /// Checks every field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.restart_window.is_zero() {
            return Err(ConfigError::new(
                "supervisor.restart_window",
                "must be greater than zero",
            ));
        }
        if self.restart_backoff.max < self.restart_backoff.base {
            return Err(ConfigError::new(
                "supervisor.restart_backoff.max",
                "is below the base delay",
            ));
        }
        Ok(())
    }
}

/// Checks an OTLP/HTTP endpoint: an `http` or `https` URL with a host (https trusts the
/// system's roots and the config's `otlp_ca_file`). Used by the config file's
/// `otlp_endpoint`.
#[cfg(feature = "file-config")]
pub(crate) fn validate_otlp_endpoint(endpoint: &str) -> Result<(), String> {
    let url = url::Url::parse(endpoint)
        .map_err(|error| format!("is not a URL ({error}): {endpoint:?}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(format!(
            "must be an http:// or https:// URL with a host, like http://127.0.0.1:4318, not {endpoint:?}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(lane: LaneConfig) -> ConfigError {
        lane.validate().expect_err("the config is refused")
    }

    #[test]
    fn concurrency_and_batch_size_have_upper_bounds() {
        let lane = || LaneConfig::new("orders", "billing");
        assert!(lane().concurrency(MAX_CONCURRENCY).validate().is_ok());
        assert!(lane().batch_size(MAX_BATCH_SIZE).validate().is_ok());
        let error = refused(lane().concurrency(1_000_000));
        assert_eq!(error.field, "lanes[orders/billing].concurrency");
        assert!(
            error.reason.contains("1000000") && error.reason.contains("limit of 1000"),
            "{error}"
        );
        let error = refused(lane().batch_size(MAX_BATCH_SIZE + 1));
        assert_eq!(error.field, "lanes[orders/billing].batch_size");
        let error = refused(
            lane()
                .concurrency(MAX_CONCURRENCY)
                .prefetch(MAX_PREFETCH + 1),
        );
        assert_eq!(error.field, "lanes[orders/billing].prefetch");
        assert!(error.reason.contains("limit of 1000"), "{error}");
        let error = refused(lane().prefetch_max(MAX_PREFETCH + 1));
        assert_eq!(error.field, "lanes[orders/billing].prefetch_max");
        assert!(error.reason.contains("limit of 1000"), "{error}");
    }

    #[test]
    fn without_lease_extension_the_delivery_timeout_must_stay_below_the_lease() {
        let lane = || {
            LaneConfig::new("orders", "billing")
                .lease(Duration::from_secs(10))
                .lease_extend_margin(None)
        };
        for timeout in [10, 11, 3600] {
            let error = refused(lane().delivery_timeout(Duration::from_secs(timeout)));
            assert_eq!(error.field, "lanes[orders/billing].delivery_timeout");
            assert!(
                error.reason.contains("lease") && error.reason.contains("extension is off"),
                "{error}"
            );
        }
        assert!(lane()
            .delivery_timeout(Duration::from_millis(9_999))
            .validate()
            .is_ok());
        // With extension on, a long delivery renews its lease as it runs.
        assert!(LaneConfig::new("orders", "billing")
            .lease(Duration::from_secs(10))
            .delivery_timeout(Duration::from_secs(3600))
            .validate()
            .is_ok());
    }

    #[test]
    fn the_retry_after_ceiling_defaults_to_the_longest_backoff_and_must_be_positive() {
        let lane = LaneConfig::new("orders", "billing");
        assert_eq!(lane.retry_after_max, lane.retry.max);
        let error = refused(lane.retry_after_max(Duration::ZERO));
        assert_eq!(error.field, "lanes[orders/billing].retry_after_max");
    }

    #[test]
    fn consumer_ids_are_bounded_and_on_one_line() {
        let lane = || LaneConfig::new("orders", "billing");
        assert!(lane().consumer_id("relay-7.prod:1234").validate().is_ok());
        for (id, reason) in [
            ("x".repeat(MAX_CONSUMER_ID_LEN + 1), "over the limit"),
            ("relay\nforged log line".to_owned(), "control character"),
            ("   ".to_owned(), "is required"),
        ] {
            let error = refused(lane().consumer_id(id.clone()));
            assert_eq!(error.field, "lanes[orders/billing].consumer_id", "{id:?}");
            assert!(error.reason.contains(reason), "{id:?}: {error}");
        }
    }
}
