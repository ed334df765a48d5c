//! `HandlerPool`: the lane's delivery slots, each idle, busy with one message, or retired.
//!
//! Invariant, kept by these methods alone: a slot is busy exactly when a running delivery
//! names it, the idle list holds exactly the idle slots, and `keys` counts the running
//! deliveries of each ordering key (`freed` the keys whose last one ended since the lane
//! last asked, for its buffer). A slot is an index the actor
//! maps to its current handler actor; a handler that dies is replaced in the same slot.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use crate::message::OutboxMessage;

/// A handler slot: an index into the lane's handler actors.
pub(crate) type Slot = usize;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotState {
    Idle,
    Busy(Uuid),
    /// Its handler died while the lane drains: no replacement, no more work.
    Retired,
}

/// A delivery handed to a handler.
#[derive(Debug)]
pub(crate) struct Running {
    pub(crate) message: OutboxMessage,
    pub(crate) slot: Slot,
    pub(crate) started: Instant,
}

impl Running {
    /// How long the delivery has run by `now`.
    pub(crate) fn ran(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.started)
    }
}

/// The lane's handler slots and what runs in them.
#[derive(Debug)]
pub(crate) struct HandlerPool {
    slots: Vec<SlotState>,
    /// Last in, first out: a handler that just finished is warm.
    idle: Vec<Slot>,
    running: HashMap<Uuid, Running>,
    /// Running deliveries per ordering key: a key's next message waits while it has one.
    keys: HashMap<String, usize>,
    /// Keys whose last running delivery ended, not yet taken by [`HandlerPool::freed_keys`].
    freed: Vec<String>,
}

impl HandlerPool {
    /// `size` idle slots.
    pub(crate) fn new(size: usize) -> Self {
        Self {
            slots: vec![SlotState::Idle; size],
            idle: (0..size).rev().collect(),
            running: HashMap::new(),
            keys: HashMap::new(),
            freed: Vec::new(),
        }
    }

    /// Idle slots.
    pub(crate) fn idle(&self) -> usize {
        self.idle.len()
    }

    /// Deliveries running.
    pub(crate) fn running(&self) -> usize {
        self.running.len()
    }

    /// Whether a delivery of ordering key `key` is running.
    pub(crate) fn key_running(&self, key: &str) -> bool {
        self.keys.contains_key(key)
    }

    /// The keys whose last running delivery ended since the last call.
    pub(crate) fn freed_keys(&mut self) -> std::vec::Drain<'_, String> {
        self.freed.drain(..)
    }

    /// Hands `message` to an idle slot; `None` when none is idle.
    pub(crate) fn start(&mut self, message: &OutboxMessage, now: Instant) -> Option<Slot> {
        let slot = self.idle.pop()?;
        self.slots[slot] = SlotState::Busy(message.outbox_id);
        if let Some(key) = &message.ordering_key {
            *self.keys.entry(key.clone()).or_default() += 1;
        }
        self.running.insert(
            message.outbox_id,
            Running {
                message: message.clone(),
                slot,
                started: now,
            },
        );
        Some(slot)
    }

    /// The slot reports `outbox_id` done: frees the slot. `None` for a stale report (the
    /// delivery was abandoned, or the slot has moved on).
    pub(crate) fn finish(&mut self, slot: Slot, outbox_id: Uuid) -> Option<Running> {
        if self.slots.get(slot) != Some(&SlotState::Busy(outbox_id)) {
            return None;
        }
        self.slots[slot] = SlotState::Idle;
        self.idle.push(slot);
        self.take(outbox_id)
    }

    /// Takes a delivery out of `running`, and its key's count with it.
    fn take(&mut self, outbox_id: Uuid) -> Option<Running> {
        let running = self.running.remove(&outbox_id)?;
        if let Some(key) = &running.message.ordering_key {
            if let Some(count) = self.keys.get_mut(key) {
                *count -= 1;
                if *count == 0 {
                    if let Some((key, _)) = self.keys.remove_entry(key) {
                        self.freed.push(key);
                    }
                }
            }
        }
        Some(running)
    }

    /// The slot's handler died: `None` if the slot was already retired, else what it was
    /// delivering, if anything. The slot is idle again (its handler replaced) when `replace`,
    /// retired otherwise.
    pub(crate) fn died(&mut self, slot: Slot, replace: bool) -> Option<Option<Running>> {
        let state = *self.slots.get(slot)?;
        if state == SlotState::Retired {
            return None;
        }
        let running = match state {
            SlotState::Busy(outbox_id) => self.take(outbox_id),
            _ => None,
        };
        self.idle.retain(|idle| *idle != slot);
        if replace {
            self.slots[slot] = SlotState::Idle;
            self.idle.push(slot);
        } else {
            self.slots[slot] = SlotState::Retired;
        }
        Some(running)
    }

    /// Gives up every running delivery (a drain's deadline): the slots are retired, since
    /// their handlers are killed.
    pub(crate) fn abandon(&mut self) -> Vec<Running> {
        for state in &mut self.slots {
            if matches!(state, SlotState::Busy(_)) {
                *state = SlotState::Retired;
            }
        }
        self.freed.extend(self.keys.drain().map(|(key, _)| key));
        self.running.drain().map(|(_, running)| running).collect()
    }
}
