//! `Buffer`: the claimed messages waiting for a handler, in claim order, with the messages
//! of a key whose delivery runs set aside so that looking for work never reads them again.
//!
//! Why not one queue scanned from the front: a key's run waits behind its running message,
//! so with key runs most of the buffer is waiting, and every delivery's end scanned all of
//! it (a key look-up per message) to find the few that may go. That is the buffer's length
//! per delivery: at concurrency 256 and 1,000 keys, a third of the relay's time (profiled
//! on the in-memory store). Here each message is offered once from `fresh`; if its key is
//! busy it moves to the key's queue in `parked`, and the key's end (reported by the handler
//! pool) makes that queue's first message the next one to go.
//!
//! Order, as the scan gave it: the next message is the earliest in claim order whose key
//! has no delivery running and no earlier message waiting. Every parked message came off the
//! front of `fresh` before the messages still in it, so the freed keys' first messages, in
//! claim order, come before `fresh`.

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::message::OutboxMessage;

/// A buffered message and its place in claim order (the buffer's own counter).
type Entry = (u64, OutboxMessage);

/// The lane's claimed messages that wait for a handler. See the module docs.
#[derive(Debug, Default)]
pub(crate) struct Buffer {
    /// Not offered to a handler yet, in claim order.
    fresh: VecDeque<Entry>,
    /// Per ordering key, the messages offered while a delivery of the key ran or an earlier
    /// one of the key waited here: in claim order, each earlier than the key's in `fresh`.
    parked: HashMap<String, VecDeque<Entry>>,
    /// Keys whose deliveries ended while they had parked messages, by the place of their
    /// first parked message then. An entry may be stale (its messages released since): the
    /// look-up skips it.
    freed: BTreeMap<u64, String>,
    next_place: u64,
    len: usize,
}

impl Buffer {
    /// Messages waiting, parked or not.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether no message waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds a message after every other.
    pub(crate) fn push_back(&mut self, message: OutboxMessage) {
        self.fresh.push_back((self.next_place, message));
        self.next_place += 1;
        self.len += 1;
    }

    /// Puts `message` in the place of its buffered copy (the same message, claimed again
    /// under a fresh token and attempt); nothing if it is not buffered.
    pub(crate) fn renew(&mut self, message: OutboxMessage) {
        let copy = self
            .fresh
            .iter_mut()
            .chain(self.parked.values_mut().flatten())
            .find(|(_, m)| m.outbox_id == message.outbox_id);
        if let Some((_, m)) = copy {
            *m = message;
        }
    }

    /// No delivery of `key` runs any more: its first parked message may go.
    pub(crate) fn key_freed(&mut self, key: String) {
        if let Some((place, _)) = self.parked.get(&key).and_then(|queue| queue.front()) {
            self.freed.insert(*place, key);
        }
    }

    /// Takes the next message a handler may start: the earliest in claim order whose key
    /// (if it has one) has no delivery running (`running`) and no earlier message waiting.
    /// The caller starts it before asking again.
    pub(crate) fn next(&mut self, running: impl Fn(&str) -> bool) -> Option<OutboxMessage> {
        while let Some((_, key)) = self.freed.pop_first() {
            if running(&key) {
                // Started again since (its end frees it again).
                continue;
            }
            let Some(queue) = self.parked.get_mut(&key) else {
                continue;
            };
            let Some((_, message)) = queue.pop_front() else {
                continue;
            };
            if queue.is_empty() {
                self.parked.remove(&key);
            }
            self.len -= 1;
            return Some(message);
        }
        while let Some((place, message)) = self.fresh.pop_front() {
            match message.ordering_key.as_deref() {
                Some(key) if running(key) || self.parked.contains_key(key) => {
                    self.parked
                        .entry(key.to_owned())
                        .or_default()
                        .push_back((place, message));
                }
                _ => {
                    self.len -= 1;
                    return Some(message);
                }
            }
        }
        None
    }

    /// Takes out the messages `which` picks, in claim order.
    pub(crate) fn take_where(
        &mut self,
        which: impl Fn(&OutboxMessage) -> bool,
    ) -> Vec<OutboxMessage> {
        let mut taken: Vec<Entry> = Vec::new();
        self.parked.retain(|_, queue| {
            let (out, kept): (VecDeque<Entry>, VecDeque<Entry>) = std::mem::take(queue)
                .into_iter()
                .partition(|(_, m)| which(m));
            taken.extend(out);
            *queue = kept;
            !queue.is_empty()
        });
        let (out, kept): (VecDeque<Entry>, VecDeque<Entry>) = std::mem::take(&mut self.fresh)
            .into_iter()
            .partition(|(_, m)| which(m));
        taken.extend(out);
        self.fresh = kept;
        self.len -= taken.len();
        taken.sort_unstable_by_key(|(place, _)| *place);
        taken.into_iter().map(|(_, message)| message).collect()
    }

    /// Takes out every message, in claim order.
    pub(crate) fn take_all(&mut self) -> Vec<OutboxMessage> {
        self.freed.clear();
        self.take_where(|_| true)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::collections::HashSet;

    use uuid::Uuid;

    use super::*;
    use crate::message::{OutboxMessageDraft, UnixMillis};

    fn message(n: u64, key: Option<&str>) -> OutboxMessage {
        let draft = OutboxMessageDraft::new("lane", "target", serde_json::json!({ "n": n }))
            .expect("a valid draft");
        let draft = match key {
            Some(key) => draft.with_ordering_key(key),
            None => draft,
        };
        OutboxMessage::pending(draft, Uuid::new_v4(), n as i64, UnixMillis::EPOCH)
    }

    fn n(message: &OutboxMessage) -> u64 {
        u64::try_from(message.seq).expect("a seq from `message`")
    }

    /// Plays the lane: starts what `next` gives while slots are free, and reports ends.
    struct Lane {
        buffer: Buffer,
        running: HashSet<String>,
        /// How many times the buffer asked whether a key runs: what looking for work read.
        looks: Cell<usize>,
    }

    impl Lane {
        fn new(messages: &[(u64, Option<&str>)]) -> Self {
            let mut buffer = Buffer::default();
            for (number, key) in messages {
                buffer.push_back(message(*number, *key));
            }
            Self {
                buffer,
                running: HashSet::new(),
                looks: Cell::new(0),
            }
        }

        fn start(&mut self) -> Option<u64> {
            let (running, looks) = (&self.running, &self.looks);
            let message = self.buffer.next(|key| {
                looks.set(looks.get() + 1);
                running.contains(key)
            })?;
            if let Some(key) = &message.ordering_key {
                self.running.insert(key.clone());
            }
            Some(n(&message))
        }

        fn end(&mut self, key: &str) {
            assert!(self.running.remove(key), "{key} was not running");
            self.buffer.key_freed(key.to_owned());
        }
    }

    #[test]
    fn a_key_goes_one_message_at_a_time_and_others_pass_it() {
        let mut lane = Lane::new(&[(1, Some("a")), (2, Some("a")), (3, Some("b")), (4, None)]);
        assert_eq!(lane.start(), Some(1));
        assert_eq!(lane.start(), Some(3), "2 waits for 1, b's head passes it");
        assert_eq!(lane.start(), Some(4));
        assert_eq!(lane.start(), None);
        assert_eq!(lane.buffer.len(), 1);
        lane.end("a");
        assert_eq!(lane.start(), Some(2));
        assert!(lane.buffer.is_empty());
    }

    #[test]
    fn a_freed_key_goes_before_later_messages_and_freed_keys_go_in_claim_order() {
        let mut lane = Lane::new(&[
            (1, Some("a")),
            (2, Some("b")),
            (3, Some("b")),
            (4, Some("a")),
            (5, Some("c")),
        ]);
        assert_eq!(lane.start(), Some(1));
        assert_eq!(lane.start(), Some(2));
        assert_eq!(lane.start(), Some(5));
        lane.end("a");
        lane.end("b");
        assert_eq!(lane.start(), Some(3), "b's 3 came before a's 4");
        assert_eq!(lane.start(), Some(4));
        lane.buffer.push_back(message(6, Some("c")));
        lane.buffer.push_back(message(7, Some("d")));
        assert_eq!(lane.start(), Some(7), "6 waits for c's 5");
        lane.end("c");
        assert_eq!(lane.start(), Some(6));
    }

    #[test]
    fn a_message_behind_a_parked_one_of_its_key_waits_even_when_the_key_is_idle() {
        let mut lane = Lane::new(&[(1, Some("a")), (2, Some("a"))]);
        assert_eq!(lane.start(), Some(1));
        assert_eq!(lane.start(), None);
        lane.end("a");
        lane.buffer.push_back(message(3, Some("a")));
        assert_eq!(lane.start(), Some(2));
        assert_eq!(lane.start(), None, "3 waits for 2");
        lane.end("a");
        assert_eq!(lane.start(), Some(3));
    }

    #[test]
    fn taking_messages_out_keeps_claim_order_and_forgets_their_freed_keys() {
        let mut lane = Lane::new(&[
            (1, Some("a")),
            (2, Some("a")),
            (3, Some("b")),
            (4, Some("a")),
        ]);
        assert_eq!(lane.start(), Some(1));
        assert_eq!(lane.start(), Some(3));
        lane.buffer.push_back(message(5, None));
        let taken: Vec<u64> = lane
            .buffer
            .take_where(|m| m.ordering_key.as_deref() == Some("a"))
            .iter()
            .map(n)
            .collect();
        assert_eq!(taken, vec![2, 4]);
        lane.end("a");
        assert_eq!(lane.start(), Some(5));
        assert_eq!(lane.start(), None);
        lane.buffer.push_back(message(6, Some("b")));
        lane.buffer.push_back(message(7, Some("b")));
        assert_eq!(lane.start(), None);
        assert_eq!(
            lane.buffer.take_all().iter().map(n).collect::<Vec<_>>(),
            vec![6, 7]
        );
        assert!(lane.buffer.is_empty());
        lane.end("b");
        assert_eq!(lane.start(), None);
    }

    #[test]
    fn each_message_is_looked_at_at_most_twice_however_long_the_wait() {
        // 1,000 messages of 10 keys, one slot per key: the old scan read the whole buffer
        // for every start; here a start reads a freed key's queue front or one fresh message.
        let keys = ["k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9"];
        let messages: Vec<(u64, Option<&str>)> = (0..1000)
            .map(|i| (i, Some(keys[(i % 10) as usize])))
            .collect();
        let mut lane = Lane::new(&messages);
        let mut order = Vec::new();
        while let Some(started) = lane.start() {
            order.push(started);
        }
        while !lane.buffer.is_empty() || !lane.running.is_empty() {
            let ended: Vec<String> = lane.running.iter().cloned().collect();
            for key in ended {
                lane.end(&key);
            }
            while let Some(started) = lane.start() {
                order.push(started);
            }
        }
        assert_eq!(order.len(), 1000);
        // Once from `fresh` and once as a freed key's first; the scan read about 500 a start.
        assert!(lane.looks.get() <= 2000, "{} looks", lane.looks.get());
        for key in 0..10 {
            let of_key: Vec<u64> = order.iter().copied().filter(|i| i % 10 == key).collect();
            assert!(
                of_key.windows(2).all(|w| w[0] < w[1]),
                "key {key}: {of_key:?}"
            );
        }
    }
}
