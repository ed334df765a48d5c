//! Automatic retention: delivered and dead-lettered messages are deleted once older than
//! their lane's [`RetentionConfig`], in bounded batches, by a task of its own.
//!
//! Retention never decides for an operator: on a lane under [`OrderingPolicy::Block`] a
//! dead letter with an ordering key holds its key until an operator requeues or discards
//! it, so retention keeps every such dead letter, however old (the key's waiting messages
//! are pending, which no purge touches). Dead letters without a key, and every dead letter
//! of a `Skip` lane, go at their age; `dead_letter: None` keeps them all.
//!
//! Every relay runs it, embedded or the daemon, unless its builder turns it off
//! ([`RelayBuilder::retention`](crate::relay::RelayBuilder::retention)): a pass at start,
//! then every [`DEFAULT_PURGE_INTERVAL`], over the lanes the relay runs then, each by its
//! [`LaneConfig::retention`](crate::LaneConfig::retention). It runs apart from the lanes: a
//! lane's claims and acks never wait on a purge beyond one batch statement (each store
//! purges one batch per statement or transaction). Lanes with the same retention are purged
//! together, up to [`PURGE_LANES_PER_REQUEST`] lanes in one purge request (one statement per
//! status and batch), so an idle relay's pass costs the database a few statements however
//! many lanes it runs; each pass adds what every lane lost to
//! [`outbox_purged_total`](crate::metrics::PURGED_TOTAL). The pass is a
//! [`RetentionTask`].

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use crate::lane::LaneKey;
use crate::message::ValidationError;
use crate::store::{OrderingPolicy, Outbox, PurgeRequest};

/// How long delivered messages are kept by default: a week, time to answer "was it sent?".
pub const DEFAULT_DELIVERED_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);
/// How long dead letters are kept by default: 30 days, time for an operator to act.
pub const DEFAULT_DEAD_LETTER_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);
/// How often a relay's retention purges by default.
pub const DEFAULT_PURGE_INTERVAL: Duration = Duration::from_secs(10 * 60);
/// Rows per purge statement by default: small enough that no statement holds locks long.
pub const DEFAULT_PURGE_BATCH_SIZE: usize = 1000;
/// The most lanes one purge request of retention names: enough that a pass over thousands
/// of lanes is a few statements, few enough that each statement's lane list stays small
/// (and within MySQL's list of 500 per statement).
pub const PURGE_LANES_PER_REQUEST: usize = 500;
/// The shortest retention accepted: shorter would purge rows an operator has not yet had
/// time to look at, and usually means a unit was forgotten (`1` for `1d`).
pub const MIN_RETENTION: Duration = Duration::from_secs(60);

/// How long one lane keeps its finished messages. `None` keeps that status forever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetentionConfig {
    /// Delivered messages older than this (since delivered) are deleted.
    pub delivered: Option<Duration>,
    /// Dead letters older than this (since dead-lettered) are deleted, except those that
    /// hold their key (see `ordering`).
    pub dead_letter: Option<Duration>,
    /// The lane's ordering policy. Under [`OrderingPolicy::Block`] a dead letter with an
    /// ordering key holds its key until an operator acts, and is never deleted by
    /// retention, whatever `dead_letter` says.
    pub ordering: OrderingPolicy,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self {
            delivered: Some(DEFAULT_DELIVERED_RETENTION),
            dead_letter: Some(DEFAULT_DEAD_LETTER_RETENTION),
            ordering: OrderingPolicy::Skip,
        }
    }
}

impl RetentionConfig {
    /// Keeps everything: automatic retention does nothing for the lane.
    pub fn keep_all() -> Self {
        Self {
            delivered: None,
            dead_letter: None,
            ordering: OrderingPolicy::Skip,
        }
    }

    /// Sets how long delivered messages are kept (`None`: forever).
    pub fn delivered(mut self, age: Option<Duration>) -> Self {
        self.delivered = age;
        self
    }

    /// Sets how long dead letters are kept (`None`: forever).
    pub fn dead_letter(mut self, age: Option<Duration>) -> Self {
        self.dead_letter = age;
        self
    }

    /// Sets the lane's ordering policy ([`RetentionConfig::ordering`]).
    pub fn ordering(mut self, ordering: OrderingPolicy) -> Self {
        self.ordering = ordering;
        self
    }

    /// Fails on an age under [`MIN_RETENTION`], naming the field.
    pub fn validate(&self) -> Result<(), ValidationError> {
        for (field, age) in [
            ("retention.delivered", self.delivered),
            ("retention.dead_letter", self.dead_letter),
        ] {
            if age.is_some_and(|age| age < MIN_RETENTION) {
                return Err(ValidationError::new(
                    field,
                    format!("must be at least {MIN_RETENTION:?} (or \"forever\")"),
                ));
            }
        }
        Ok(())
    }

    /// What purges two lanes alike: their ages, and whether keyed dead letters stay (only
    /// when dead letters go at all). `None` when the lane keeps everything.
    fn purge_key(&self) -> Option<(Option<Duration>, Option<Duration>, bool)> {
        if self.delivered.is_none() && self.dead_letter.is_none() {
            return None;
        }
        let keep_keyed = self.dead_letter.is_some() && self.ordering == OrderingPolicy::Block;
        Some((self.delivered, self.dead_letter, keep_keyed))
    }

    /// The purge request for `lanes` (at least one), all with these ages.
    fn request(&self, lanes: &[LaneKey], batch_size: usize) -> PurgeRequest {
        debug_assert!(!lanes.is_empty(), "no lanes would purge every lane");
        PurgeRequest {
            delivered_older_than: self.delivered,
            dead_letter_older_than: self.dead_letter,
            lanes: lanes
                .iter()
                .map(|lane| (lane.name.clone(), lane.target.clone()))
                .collect(),
            batch_size,
            dry_run: false,
            keep_keyed_dead_letters: self.ordering == OrderingPolicy::Block,
        }
    }
}

/// One pass of retention over a set of lanes, each by its own [`RetentionConfig`].
pub struct RetentionTask {
    store: Outbox,
    lanes: Vec<(LaneKey, RetentionConfig)>,
    /// Rows per purge statement.
    pub batch_size: usize,
    /// Lanes per purge request ([`PURGE_LANES_PER_REQUEST`]).
    pub lanes_per_request: usize,
}

impl fmt::Debug for RetentionTask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetentionTask")
            .field("lanes", &self.lanes)
            .field("batch_size", &self.batch_size)
            .field("lanes_per_request", &self.lanes_per_request)
            .finish()
    }
}

impl RetentionTask {
    /// Purges `lanes` of `store` in batches of [`DEFAULT_PURGE_BATCH_SIZE`], up to
    /// [`PURGE_LANES_PER_REQUEST`] lanes at a time.
    pub fn new(store: Outbox, lanes: Vec<(LaneKey, RetentionConfig)>) -> Self {
        Self {
            store,
            lanes,
            batch_size: DEFAULT_PURGE_BATCH_SIZE,
            lanes_per_request: PURGE_LANES_PER_REQUEST,
        }
    }

    /// The lanes that purge anything, grouped by what purges them alike, in the order each
    /// group's first lane comes.
    fn groups(&self) -> Vec<(RetentionConfig, Vec<LaneKey>)> {
        let mut groups: Vec<(RetentionConfig, Vec<LaneKey>)> = Vec::new();
        for (lane, retention) in &self.lanes {
            let Some(key) = retention.purge_key() else {
                continue;
            };
            match groups
                .iter_mut()
                .find(|(alike, _)| alike.purge_key() == Some(key))
            {
                Some((_, lanes)) => lanes.push(lane.clone()),
                None => groups.push((*retention, vec![lane.clone()])),
            }
        }
        groups
    }

    /// One pass over every lane that purges anything (a lane that keeps all is not asked):
    /// how many rows each lost, or `None` when its purge failed. A failed request is logged
    /// and its lanes skipped until the next pass; the other requests still run.
    pub async fn purge_once(&self) -> Vec<(LaneKey, Option<u64>)> {
        let mut purged = Vec::with_capacity(self.lanes.len());
        for (retention, lanes) in self.groups() {
            for chunk in lanes.chunks(self.lanes_per_request.max(1)) {
                let request = retention.request(chunk, self.batch_size);
                match self.store.purge(&request).await {
                    Ok(counts) => {
                        let counts: HashMap<(&str, &str), u64> = counts
                            .iter()
                            .map(|c| ((c.lane.as_str(), c.target.as_str()), c.count))
                            .collect();
                        for lane in chunk {
                            let count = counts
                                .get(&(lane.name.as_str(), lane.target.as_str()))
                                .copied()
                                .unwrap_or(0);
                            crate::metrics::record_purged(&lane.name, &lane.target, count);
                            if count > 0 {
                                tracing::info!(lane = %lane, purged = count, "retention purged finished messages");
                            }
                            purged.push((lane.clone(), Some(count)));
                        }
                    }
                    Err(error) => {
                        tracing::warn!(
                            lanes = chunk.len(),
                            first = %chunk[0],
                            %error,
                            "retention could not purge these lanes; will retry next pass"
                        );
                        purged.extend(chunk.iter().map(|lane| (lane.clone(), None)));
                    }
                }
            }
        }
        purged
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{ClaimRequest, MessageFilter, PageRequest};
    use crate::time::ManualClock;
    use crate::time::UnixMillis;
    use crate::{InMemoryOutboxStore, OutboxMessageDraft, OutboxStatus};
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    use serde_json::json;
    use std::sync::Arc;

    const DAY: Duration = Duration::from_secs(24 * 3600);

    /// One delivered message in each of `lanes`, at the clock's time.
    async fn deliver_one_in(store: &Outbox, lanes: &[&str]) {
        for lane in lanes {
            store
                .enqueue(OutboxMessageDraft::new(*lane, "audit", json!({})).unwrap())
                .await
                .unwrap();
            let batch = store
                .claim(&ClaimRequest::new(*lane, "audit", 1, DAY, "test"))
                .await
                .unwrap();
            let claim = batch.messages[0].claim().unwrap();
            store.ack(&[claim]).await.unwrap();
        }
    }

    async fn count(store: &Outbox, lane: &str) -> usize {
        store
            .list(
                &MessageFilter::lane(lane, "audit").with_status(OutboxStatus::Delivered),
                PageRequest {
                    after: None,
                    limit: 100,
                },
            )
            .await
            .unwrap()
            .messages
            .len()
    }

    #[tokio::test]
    async fn each_lane_is_purged_by_its_own_retention_and_counted() {
        let clock = Arc::new(ManualClock::new(UnixMillis::from_millis(1_000_000)));
        let store = Outbox::new(InMemoryOutboxStore::with_clock(clock.clone()));
        deliver_one_in(&store, &["orders", "billing", "forever"]).await;
        let lanes = vec![
            (LaneKey::new("orders", "audit"), RetentionConfig::default()),
            (
                LaneKey::new("billing", "audit"),
                RetentionConfig {
                    delivered: Some(DAY),
                    dead_letter: None,
                    ordering: OrderingPolicy::Skip,
                },
            ),
            (
                LaneKey::new("forever", "audit"),
                RetentionConfig::keep_all(),
            ),
        ];
        let task = RetentionTask::new(store.clone(), lanes);

        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        clock.advance(2 * DAY);
        // A current-thread runtime: the pass runs on this thread, where the recorder is.
        let passes = {
            let _local = metrics::set_default_local_recorder(&recorder);
            task.purge_once().await
        };
        let counts: Vec<(String, u64)> = passes
            .into_iter()
            .map(|(lane, count)| (lane.to_string(), count.unwrap()))
            .collect();
        assert_eq!(
            counts,
            [
                ("orders/audit".to_owned(), 0),
                ("billing/audit".to_owned(), 1)
            ],
            "the 7-day default keeps a 2-day-old row; the lane that keeps all is not asked"
        );
        assert_eq!(
            (
                count(&store, "orders").await,
                count(&store, "billing").await,
                count(&store, "forever").await
            ),
            (1, 0, 1)
        );
        let purged: Vec<_> = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .filter(|(key, ..)| key.key().name() == crate::metrics::PURGED_TOTAL)
            .map(|(key, _, _, value)| {
                let lane = key
                    .key()
                    .labels()
                    .find(|l| l.key() == "lane")
                    .map(|l| l.value().to_owned());
                (lane, value)
            })
            .collect();
        assert!(
            purged.contains(&(Some("billing".to_owned()), DebugValue::Counter(1))),
            "{purged:?}"
        );

        clock.advance(6 * DAY);
        let again = task.purge_once().await;
        assert_eq!(again[0].1, Some(1), "8 days: past the 7-day default");
        assert_eq!(count(&store, "forever").await, 1);
    }

    /// Deliveries of `relay`'s lanes seen on `events`, until `n`.
    async fn delivered(events: &mut tokio::sync::broadcast::Receiver<crate::RelayEvent>, n: usize) {
        let mut seen = 0;
        while seen < n {
            let event = tokio::time::timeout(Duration::from_secs(60), events.recv())
                .await
                .expect("a delivery within a minute")
                .expect("the relay runs");
            if matches!(event, crate::RelayEvent::Delivered { .. }) {
                seen += 1;
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_embedded_relay_purges_by_its_lanes_retention_until_it_stops() {
        let store = Outbox::new(InMemoryOutboxStore::with_clock(Arc::new(
            crate::time::TokioClock::new(),
        )));
        let half_an_hour = Duration::from_secs(30 * 60);
        let sink = || crate::sinks::LogSink::new(std::io::sink());
        let builder = crate::OutboxRelay::builder(&store)
            .lane(
                crate::LaneConfig::new("orders", "audit")
                    .retention(RetentionConfig::default().delivered(Some(half_an_hour))),
                sink(),
            )
            // The default: a week.
            .lane(crate::LaneConfig::new("billing", "audit"), sink());
        let mut events = builder.subscribe();
        let relay = builder.start().await.expect("the relay starts");
        for lane in ["orders", "billing"] {
            store
                .enqueue(OutboxMessageDraft::new(lane, "audit", json!({})).unwrap())
                .await
                .unwrap();
        }
        delivered(&mut events, 2).await;

        // An hour of virtual time: passes at start and every 10 minutes.
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert_eq!(
            (
                count(&store, "orders").await,
                count(&store, "billing").await
            ),
            (0, 1),
            "half an hour's retention purged, a week's kept"
        );

        relay.shutdown(Duration::from_secs(10)).await.unwrap();
        deliver_one_in(&store, &["orders"]).await;
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert_eq!(
            count(&store, "orders").await,
            1,
            "retention stopped with the relay"
        );
    }

    /// Counts the purge calls through an outbox.
    #[derive(Debug, Default)]
    struct Purges(std::sync::atomic::AtomicUsize);

    impl crate::store::StoreHook for Purges {
        fn finished(&self, call: &crate::store::StoreCall<'_>) {
            if call.op == crate::store::StoreOp::Purge {
                self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    #[tokio::test]
    async fn lanes_purged_alike_share_one_purge_call_per_chunk() {
        let clock = Arc::new(ManualClock::new(UnixMillis::from_millis(1_000_000)));
        let store = Outbox::new(InMemoryOutboxStore::with_clock(clock.clone()));
        let names: Vec<String> = (0..8).map(|n| format!("tenant-{n}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        deliver_one_in(&store, &refs).await;
        let purges = Arc::new(Purges::default());
        let day = RetentionConfig::default().delivered(Some(DAY));
        // Seven lanes alike, one under Block (purged apart: it keeps keyed dead letters),
        // one that keeps everything (never asked).
        let mut lanes: Vec<_> = names[..7]
            .iter()
            .map(|name| (LaneKey::new(name.as_str(), "audit"), day))
            .collect();
        lanes.insert(
            3,
            (
                LaneKey::new(names[7].as_str(), "audit"),
                day.ordering(OrderingPolicy::Block),
            ),
        );
        lanes.push((LaneKey::new("kept", "audit"), RetentionConfig::keep_all()));
        let mut task = RetentionTask::new(store.clone().with_hook(purges.clone()), lanes);
        task.lanes_per_request = 3;
        clock.advance(2 * DAY);

        let pass = task.purge_once().await;
        assert_eq!(
            purges.0.load(std::sync::atomic::Ordering::Relaxed),
            4,
            "seven lanes alike in chunks of three, and the Block lane"
        );
        let mut counted: Vec<(String, Option<u64>)> = pass
            .into_iter()
            .map(|(lane, count)| (lane.name, count))
            .collect();
        counted.sort();
        let mut expected: Vec<(String, Option<u64>)> =
            names.iter().map(|name| (name.clone(), Some(1))).collect();
        expected.sort();
        assert_eq!(counted, expected, "each lane its own count");
        for name in &names {
            assert_eq!(count(&store, name).await, 0, "{name}");
        }
    }

    #[test]
    fn a_retention_under_a_minute_is_refused_naming_the_field() {
        assert_eq!(RetentionConfig::default().validate(), Ok(()));
        assert_eq!(RetentionConfig::keep_all().validate(), Ok(()));
        let error = RetentionConfig {
            delivered: Some(DAY),
            dead_letter: Some(Duration::from_secs(1)),
            ordering: OrderingPolicy::Skip,
        }
        .validate()
        .unwrap_err();
        assert_eq!(error.field, "retention.dead_letter");
    }
}
