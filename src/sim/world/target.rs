//! The target: each delivery's duration and outcome, drawn from the seed (ok, retryable,
//! permanent, Retry-After, panic, hang past the delivery timeout) until the faults stop;
//! then every delivery succeeds.

use std::time::Duration;

use super::{Ending, Event, World};
use crate::delivery::DeliveryError;
use crate::message::OutboxMessage;
use crate::relay::handler::DeliveryFailure;
use crate::relay::lane::core::Slot;

impl World<'_> {
    pub(super) fn deliver(&mut self, relay: usize, slot: Slot, message: OutboxMessage) {
        let token = message.claim_token.unwrap_or_default();
        let lapse_known = self.relays[relay]
            .lapsed
            .contains(&(message.outbox_id, token));
        let now = self.store_now();
        let delivery = self.check.started(&message, now, lapse_known);
        if self.trace {
            eprintln!(
                "{:?} relay {relay} slot {slot} delivers {} #{} token {token}",
                self.now, message.outbox_id, message.attempt_count
            );
        }
        let target = self.plan.target;
        let timeout = self.plan.config.delivery_timeout;
        let mut took = Duration::from_micros(self.rng.below(target.slowest.as_micros() as u64 + 1));
        let failure =
            |error: DeliveryError| Ending::Result(Err(DeliveryFailure::from_error(&error)));
        let ending = if let Some(stated) = &self.plan.stated {
            took = stated.latency;
            let now = self.now;
            let chance = |rng: &mut super::Rng, rate: f64| {
                ((rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < rate
            };
            if self.target_recovered {
                Ending::Result(Ok(()))
            } else if stated
                .outages
                .iter()
                .any(|(start, length)| now >= *start && now < *start + *length)
            {
                failure(DeliveryError::retryable(std::io::Error::other(
                    "target down",
                )))
            } else if chance(&mut self.rng, stated.failure_rate) {
                failure(DeliveryError::retryable(std::io::Error::other(
                    "target busy",
                )))
            } else if chance(&mut self.rng, stated.retry_after_rate) {
                failure(DeliveryError::retry_after(
                    stated.retry_after,
                    std::io::Error::other("target throttled"),
                ))
            } else {
                Ending::Result(Ok(()))
            }
        } else if self.target_recovered {
            Ending::Result(Ok(()))
        } else {
            let draw = self.rng.below(100);
            let mut cut = 0;
            let mut next = |percent: u64| {
                cut += percent;
                draw < cut
            };
            if next(target.retryable) {
                failure(DeliveryError::retryable(std::io::Error::other(
                    "target busy",
                )))
            } else if next(target.permanent) {
                failure(DeliveryError::permanent(std::io::Error::other(
                    "target refused",
                )))
            } else if next(target.retry_after) {
                let after = Duration::from_millis(
                    self.rng
                        .between(1, target.longest_retry_after.as_millis() as u64),
                );
                failure(DeliveryError::retry_after(
                    after,
                    std::io::Error::other("target throttled"),
                ))
            } else if next(target.panic) {
                Ending::Panic
            } else if next(target.hang) {
                took = timeout;
                Ending::Result(Err(DeliveryFailure::timeout(timeout)))
            } else {
                Ending::Result(Ok(()))
            }
        };
        let r = &mut self.relays[relay];
        let handler = r.handlers[slot];
        r.running.insert(slot, (delivery, handler));
        let epoch = r.epoch;
        let outbox_id = message.outbox_id;
        self.after(
            took,
            Event::Done {
                relay,
                epoch,
                slot,
                handler,
                delivery,
                outbox_id,
                ending,
                took,
            },
        );
    }
}
