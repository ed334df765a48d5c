//! Local hand-off: a relay in the same process takes what that process enqueues, without a
//! NOTIFY round trip or a claim statement.
//!
//! A lane of a relay registers a [`Taker`] for its (lane, target) in the [`HandOff`]
//! registry of the store object it runs on ([`Outbox::hand_off`]). While the lane is
//! idle it grants the taker *credits*: how many messages it may be handed now. An enqueue
//! through the same store object (a backend that supports it: PostgreSQL) takes a credit
//! for an eligible draft (no ordering key, no delay, freshly inserted), writes the row
//! already `claimed` by the lane's consumer id with a fresh token and the lane's lease, and
//! after its commit hands the message to the lane. Every credit taken ends in exactly one
//! of [`Taken::deliver`] or [`Taken::give_back`] (dropping a [`Taken`] gives it back).
//!
//! Why credits and not a question to the lane: the enqueue must decide before its INSERT,
//! without waiting on the lane's actor, and the lane must never hold more than
//! [`LaneConfig::most_held`](crate::LaneConfig::most_held) claims. The lane grants at most its room, and before any claim,
//! drain, pause or breaker opening revokes what is left ([`Taker::revoke`]); the credits
//! already taken are then in transit, and the lane counts them against its room until each
//! arrives or comes back.
//!
//! A handed-off message is held as a claimed one is: a lease, a fencing token, ack or nack,
//! lease extension. If the lane is gone by the time it arrives (stopped, crashed), the row
//! stays claimed until its lease lapses and is then claimed again, by any relay.
//!
//! [`Outbox::hand_off`]: crate::store::Outbox::hand_off

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::message::OutboxMessage;

/// What reaches a lane from its taker.
#[derive(Debug)]
pub enum HandOffEvent {
    /// A message written claimed for the lane, committed.
    Message {
        /// The message, claimed (`claim_token` set).
        message: Box<OutboxMessage>,
        /// When the enqueue sent the statement that started the lease (before it started).
        sent_at: tokio::time::Instant,
    },
    /// Credits taken but not used (the draft was a duplicate, or the write failed).
    Returned(usize),
}

/// How a taker's events reach its lane.
pub type HandOffSink = Arc<dyn Fn(HandOffEvent) + Send + Sync>;

/// One lane's standing offer to take what this process enqueues for its (lane, target).
pub struct Taker {
    id: u64,
    consumer_id: String,
    lease: Duration,
    credits: AtomicUsize,
    sink: HandOffSink,
}

impl fmt::Debug for Taker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Taker")
            .field("id", &self.id)
            .field("consumer_id", &self.consumer_id)
            .field("lease", &self.lease)
            .field("credits", &self.credits.load(Ordering::Relaxed))
            .finish()
    }
}

impl Taker {
    /// Adds `n` credits (the lane's grant).
    pub fn grant(&self, n: usize) {
        self.credits.fetch_add(n, Ordering::AcqRel);
    }

    /// Takes every credit left; answers how many there were. The ones taken before are in
    /// transit: each will arrive or come back.
    pub fn revoke(&self) -> usize {
        self.credits.swap(0, Ordering::AcqRel)
    }

    /// Credits left now.
    pub fn credits(&self) -> usize {
        self.credits.load(Ordering::Acquire)
    }

    fn take(&self) -> bool {
        self.credits
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok()
    }
}

/// The registry of takers of one store object. See the module docs.
#[derive(Debug, Default)]
pub struct HandOff {
    takers: Mutex<HashMap<(String, String), Arc<Taker>>>,
    next_id: AtomicU64,
    /// Whether any taker is registered: a cheap look for the common case of none.
    any: AtomicUsize,
}

impl HandOff {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers the lane of (`lane`, `target`), replacing an earlier one, with no credits.
    /// The taker stays until the [`Registration`] is dropped.
    pub fn register(
        self: &Arc<Self>,
        lane: &str,
        target: &str,
        consumer_id: &str,
        lease: Duration,
        sink: HandOffSink,
    ) -> Registration {
        let taker = Arc::new(Taker {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            consumer_id: consumer_id.to_owned(),
            lease,
            credits: AtomicUsize::new(0),
            sink,
        });
        let key = (lane.to_owned(), target.to_owned());
        let mut takers = self.takers.lock().unwrap_or_else(PoisonError::into_inner);
        takers.insert(key.clone(), taker.clone());
        self.any.store(takers.len(), Ordering::Release);
        Registration {
            registry: self.clone(),
            key,
            taker,
        }
    }

    /// Takes one credit of the taker of (`lane`, `target`), if it has one.
    pub fn take(&self, lane: &str, target: &str) -> Option<Taken> {
        if self.any.load(Ordering::Acquire) == 0 {
            return None;
        }
        let takers = self.takers.lock().unwrap_or_else(PoisonError::into_inner);
        let taker = takers.get(&(lane.to_owned(), target.to_owned()))?;
        taker.take().then(|| Taken {
            taker: Some(taker.clone()),
        })
    }

    /// The credits the taker of (`lane`, `target`) has now (0 when none is registered):
    /// for tests and diagnostics.
    pub fn credits(&self, lane: &str, target: &str) -> usize {
        let takers = self.takers.lock().unwrap_or_else(PoisonError::into_inner);
        takers
            .get(&(lane.to_owned(), target.to_owned()))
            .map_or(0, |taker| taker.credits())
    }

    fn unregister(&self, key: &(String, String), id: u64) {
        let mut takers = self.takers.lock().unwrap_or_else(PoisonError::into_inner);
        if takers.get(key).is_some_and(|t| t.id == id) {
            takers.remove(key);
        }
        self.any.store(takers.len(), Ordering::Release);
    }
}

/// A lane's place in the registry; dropping it takes the taker out (its credits with it).
#[derive(Debug)]
pub struct Registration {
    registry: Arc<HandOff>,
    key: (String, String),
    taker: Arc<Taker>,
}

impl Registration {
    /// The taker, to grant and revoke credits.
    pub fn taker(&self) -> &Arc<Taker> {
        &self.taker
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.taker.revoke();
        self.registry.unregister(&self.key, self.taker.id);
    }
}

/// One credit taken by an enqueue: it ends in [`Taken::deliver`] or [`Taken::give_back`]
/// (dropping it gives it back).
#[derive(Debug)]
pub struct Taken {
    taker: Option<Arc<Taker>>,
}

impl Taken {
    /// Written to `claimed_by`.
    pub fn consumer_id(&self) -> &str {
        self.taker.as_ref().map_or("", |t| t.consumer_id.as_str())
    }

    /// The lease to write.
    pub fn lease(&self) -> Duration {
        self.taker.as_ref().map_or(Duration::ZERO, |t| t.lease)
    }

    /// Hands the committed, claimed message to the lane.
    pub fn deliver(mut self, message: OutboxMessage, sent_at: tokio::time::Instant) {
        if let Some(taker) = self.taker.take() {
            (taker.sink)(HandOffEvent::Message {
                message: Box::new(message),
                sent_at,
            });
        }
    }

    /// The credit was not used: tell the lane.
    pub fn give_back(mut self) {
        if let Some(taker) = self.taker.take() {
            (taker.sink)(HandOffEvent::Returned(1));
        }
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        if let Some(taker) = self.taker.take() {
            (taker.sink)(HandOffEvent::Returned(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex as StdMutex;

    use super::*;

    fn sink() -> (HandOffSink, Arc<StdMutex<Vec<usize>>>) {
        let returned = Arc::new(StdMutex::new(Vec::new()));
        let seen = returned.clone();
        let sink: HandOffSink = Arc::new(move |event| {
            if let HandOffEvent::Returned(n) = event {
                seen.lock().unwrap().push(n);
            }
        });
        (sink, returned)
    }

    #[test]
    fn credits_are_taken_one_at_a_time_and_never_below_zero() {
        let registry = Arc::new(HandOff::new());
        let (sink, returned) = sink();
        let registration =
            registry.register("orders", "billing", "me", Duration::from_secs(30), sink);
        assert!(
            registry.take("orders", "billing").is_none(),
            "no credits yet"
        );
        registration.taker().grant(2);
        let a = registry.take("orders", "billing").expect("a credit");
        let _b = registry.take("orders", "billing").expect("a second credit");
        assert!(registry.take("orders", "billing").is_none());
        assert!(registry.take("orders", "other").is_none());
        a.give_back();
        assert_eq!(*returned.lock().unwrap(), vec![1]);
        assert_eq!(registration.taker().revoke(), 0);
    }

    #[test]
    fn revoke_answers_what_was_left_and_a_dropped_registration_takes_nothing_more() {
        let registry = Arc::new(HandOff::new());
        let (sink, _) = sink();
        let registration =
            registry.register("orders", "billing", "me", Duration::from_secs(30), sink);
        registration.taker().grant(3);
        let taken = registry.take("orders", "billing");
        assert_eq!(registration.taker().revoke(), 2);
        assert!(registry.take("orders", "billing").is_none());
        drop(taken);
        registration.taker().grant(1);
        drop(registration);
        assert!(registry.take("orders", "billing").is_none(), "unregistered");
    }

    #[test]
    fn an_old_registration_dropped_late_leaves_the_new_one() {
        let registry = Arc::new(HandOff::new());
        let (sink, _) = sink();
        let old = registry.register(
            "orders",
            "billing",
            "a",
            Duration::from_secs(1),
            sink.clone(),
        );
        let new = registry.register("orders", "billing", "b", Duration::from_secs(1), sink);
        drop(old);
        new.taker().grant(1);
        let taken = registry.take("orders", "billing").expect("the new taker");
        assert_eq!(taken.consumer_id(), "b");
        taken.give_back();
    }
}
