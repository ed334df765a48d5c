//! The target: each delivery's duration and outcome, drawn from the seed (ok, retryable,
//! permanent, Retry-After, panic, hang past the delivery timeout) until the faults stop;
//! then every delivery succeeds. The handler's timeout rule ([`within_timeout`]) ends it.

use std::time::Duration;

use super::{Ending, Event, World};
use crate::delivery::within_timeout;
use crate::delivery::DeliveryError;
use crate::message::OutboxMessage;
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
        let fails = |error: DeliveryError| Some(Err(error));
        // What the handler answers (`None`: it panics), and after `took`.
        let answer = if let Some(stated) = &self.plan.stated {
            took = stated.latency;
            let now = self.now;
            let chance = |rng: &mut super::Rng, rate: f64| {
                ((rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < rate
            };
            if self.target_recovered {
                Some(Ok(()))
            } else if stated
                .outages
                .iter()
                .any(|(start, length)| now >= *start && now < *start + *length)
            {
                fails(DeliveryError::retryable(std::io::Error::other(
                    "target down",
                )))
            } else if chance(&mut self.rng, stated.failure_rate) {
                fails(DeliveryError::retryable(std::io::Error::other(
                    "target busy",
                )))
            } else if chance(&mut self.rng, stated.retry_after_rate) {
                fails(DeliveryError::retry_after(
                    stated.retry_after,
                    std::io::Error::other("target throttled"),
                ))
            } else {
                Some(Ok(()))
            }
        } else if self.target_recovered {
            Some(Ok(()))
        } else {
            let draw = self.rng.below(100);
            let mut cut = 0;
            let mut next = |percent: u64| {
                cut += percent;
                draw < cut
            };
            if next(target.retryable) {
                fails(DeliveryError::retryable(std::io::Error::other(
                    "target busy",
                )))
            } else if next(target.permanent) {
                fails(DeliveryError::permanent(std::io::Error::other(
                    "target refused",
                )))
            } else if next(target.retry_after) {
                let after = Duration::from_millis(
                    self.rng
                        .between(1, target.longest_retry_after.as_millis() as u64),
                );
                fails(DeliveryError::retry_after(
                    after,
                    std::io::Error::other("target throttled"),
                ))
            } else if next(target.panic) {
                None
            } else {
                // A hang: it would succeed, long after the handler gave up on it.
                if next(target.hang) {
                    took = timeout * 2;
                }
                Some(Ok(()))
            }
        };
        // The handler actor's deadline (`tokio::time::timeout`, which polls the delivery
        // first) in virtual time: an answer after `timeout` is never heard, and the
        // handler's own rule ends the delivery.
        let ending = match answer {
            Some(answer) => {
                let heard = (took <= timeout).then_some(answer);
                took = took.min(timeout);
                Ending::Result(within_timeout(timeout, heard))
            }
            None => Ending::Panic,
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
