//! The target, as the schedule draws it, and each delivery's start and end told to the
//! checker.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use outbox_relay::testing::simulation::Plan;
use outbox_relay::{DeliveryError, DeliveryHandler, OutboxMessage};
use rand::Rng;
use tokio::sync::Notify;

use super::{trace, Shared, SLOWER};

/// The target, as the schedule draws it: each delivery's outcome and duration, fed to the
/// checker as it starts and ends.
#[derive(Debug)]
pub(super) struct Target {
    pub(super) shared: Arc<Shared>,
    pub(super) plan: Arc<Plan>,
    pub(super) dead: Arc<AtomicBool>,
    pub(super) died: Arc<Notify>,
}

/// Ends a delivery for the checker however its future ends: answered, cut by the handler's
/// timeout, unwound by a panic, or dropped with a dead process.
struct Running {
    shared: Arc<Shared>,
    delivery: u64,
    ok: bool,
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut state = self.shared.state();
        let elapsed = self.shared.elapsed();
        state.checker.set_now(elapsed);
        state.checker.ended(self.delivery, self.ok);
    }
}

enum Answer {
    Ok,
    Fails(DeliveryError),
    Panics,
}

#[async_trait]
impl DeliveryHandler for Target {
    async fn deliver(&self, message: &OutboxMessage) -> Result<(), DeliveryError> {
        if self.dead.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        let target = self.plan.target;
        let timeout = self.plan.config.delivery_timeout;
        let (answer, took, running) = {
            let mut state = self.shared.state();
            let rng = &mut state.rng;
            let mut took = Duration::from_micros(
                rng.random_range(0..=target.slowest.as_micros() as u64) / u64::from(SLOWER),
            );
            let answer = if self.shared.recovered.load(Ordering::SeqCst) {
                Answer::Ok
            } else {
                let draw = rng.random_range(0..100u64);
                let mut cut = 0;
                let mut next = |percent: u64| {
                    cut += percent;
                    draw < cut
                };
                if next(target.retryable) {
                    Answer::Fails(DeliveryError::retryable("target busy"))
                } else if next(target.permanent) {
                    Answer::Fails(DeliveryError::permanent("target refused"))
                } else if next(target.retry_after) {
                    let after = rng.random_range(1..=target.longest_retry_after.as_millis() as u64);
                    Answer::Fails(DeliveryError::retry_after(
                        Duration::from_millis(after) / SLOWER,
                        "target throttled",
                    ))
                } else if next(target.panic) {
                    Answer::Panics
                } else {
                    if next(target.hang) {
                        took = timeout * 2;
                    }
                    Answer::Ok
                }
            };
            let now = self.shared.store_now(&state);
            let elapsed = self.shared.elapsed();
            state.checker.set_now(elapsed);
            if trace() {
                eprintln!(
                    "{elapsed:?} delivery of {} starts at {now} (token {:?}, by {:?})",
                    message.outbox_id, message.claim_token, message.claimed_by
                );
            }
            let delivery = state.checker.started(message, now, false);
            let running = Running {
                shared: self.shared.clone(),
                delivery,
                ok: false,
            };
            (answer, took, running)
        };
        let mut running = running;
        tokio::select! {
            () = tokio::time::sleep(took) => {}
            () = self.died.notified() => {
                // The process died mid-delivery: its delivery ends here, and its future
                // never answers.
                drop(running);
                std::future::pending::<()>().await;
                unreachable!("a dead process's delivery never answers");
            }
        }
        match answer {
            Answer::Ok => {
                running.ok = true;
                Ok(())
            }
            Answer::Fails(error) => Err(error),
            Answer::Panics => panic!("the target handler panicked (injected)"),
        }
    }
}
