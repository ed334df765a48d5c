//! The lane actor's store calls: each runs on a task of its own, off the mailbox, and its
//! answer comes back as an actor message. An await inside `handle` would hold up every
//! other message of the actor, so a slow store would delay lease checks, drains and status
//! answers.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};

use ractor::ActorRef;
use tracing::Instrument;

use super::core::{Input, StoreAnswer, StoreRequest};
use super::{spans, LaneMsg, LaneShell};
use crate::store::{ClaimRequest, StoreOp};
use crate::time::{Clock, SystemClock};

/// Runs a store call off the mailbox; its answer comes back as a message. A lane that
/// stopped meanwhile no longer hears it: its claims lapse or were released.
pub(super) fn spawn_call<F>(myself: &ActorRef<LaneMsg>, call: F)
where
    F: Future<Output = LaneMsg> + Send + 'static,
{
    let me = myself.clone();
    tokio::spawn(async move {
        let message = match (CatchUnwind(Box::pin(call))).await {
            Ok(message) => message,
            Err(panic) => LaneMsg::StoreCallPanicked(panic_text(panic.as_ref())),
        };
        let _ = me.send_message(message);
    });
}

/// A future that turns a panic while polling into an error, so a store call's panic on its
/// own task still reaches the lane.
struct CatchUnwind<F>(Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, Box<dyn Any + Send>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let call = self.0.as_mut();
        match std::panic::catch_unwind(AssertUnwindSafe(|| call.poll(cx))) {
            Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}

fn panic_text(panic: &(dyn Any + Send)) -> String {
    let text = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-text panic".to_owned());
    format!("store call panicked: {text}")
}

fn answer(answer: StoreAnswer) -> LaneMsg {
    LaneMsg::Core(Input::Store(answer))
}

impl LaneShell {
    fn claim_request(&self, limit: usize, key_run: usize) -> ClaimRequest {
        ClaimRequest::new(
            &self.config.name,
            &self.config.target,
            limit,
            self.config.lease,
            &self.config.consumer_id,
        )
        .with_ordering(self.config.ordering)
        .with_key_run(key_run)
    }

    /// Runs a store call off the mailbox; its answer comes back as [`Input::Store`].
    pub(super) fn call(&self, myself: &ActorRef<LaneMsg>, call: StoreRequest) {
        let store = self.store.clone();
        // `outbox_store_call_duration_seconds{lane, target, op}` of each store call below.
        let timer = self.metrics.store_call_timer();
        let mode = self.config.ack_mode();
        match call {
            StoreRequest::Claim {
                claim,
                limit,
                key_run,
            } => {
                let request = self.claim_request(limit, key_run);
                let span = spans::claim(&request.lane, &request.target, limit, false);
                spawn_call(myself, async move {
                    let started = std::time::Instant::now();
                    let call = timer.time(StoreOp::Claim, store.claim(&request));
                    let result = call.instrument(span.clone()).await;
                    spans::claimed(&span, started, &result);
                    answer(StoreAnswer::Claimed { claim, result })
                });
            }
            StoreRequest::AckAndClaim {
                claim,
                acks,
                limit,
                key_run,
            } => {
                let request = self.claim_request(limit, key_run);
                let ack_span = spans::ack(&request.lane, &request.target, acks.len(), true);
                let claim_span = spans::claim(&request.lane, &request.target, limit, true);
                spawn_call(myself, async move {
                    let started = std::time::Instant::now();
                    let call = store.ack_and_claim_with(&acks, &request, mode);
                    let call = timer.time(StoreOp::Claim, call);
                    let result = call.instrument(claim_span.clone()).await;
                    spans::acked_and_claimed(&ack_span, &claim_span, started, &result);
                    // This machine's wall clock against the store's `created_at`.
                    let wall_ms = SystemClock.now_millis();
                    answer(StoreAnswer::AckedAndClaimed {
                        claim,
                        result,
                        wall_ms,
                    })
                });
            }
            StoreRequest::Ack(acks) => {
                let span = spans::ack(&self.config.name, &self.config.target, acks.len(), false);
                spawn_call(myself, async move {
                    let started = std::time::Instant::now();
                    let call = timer.time(StoreOp::Ack, store.ack_with(&acks, mode));
                    let result = call.instrument(span.clone()).await;
                    spans::acked(&span, started, &result);
                    let wall_ms = SystemClock.now_millis();
                    answer(StoreAnswer::Acked { result, wall_ms })
                })
            }
            StoreRequest::Nack(nacks) => spawn_call(myself, async move {
                answer(StoreAnswer::Nacked(
                    timer.time(StoreOp::Nack, store.nack(&nacks)).await,
                ))
            }),
            StoreRequest::NextDue => {
                let (lane, target, ordering) = (
                    self.config.name.clone(),
                    self.config.target.clone(),
                    self.config.ordering,
                );
                spawn_call(myself, async move {
                    let call = store.next_due(&lane, &target, ordering);
                    answer(StoreAnswer::NextDue(
                        timer.time(StoreOp::NextDue, call).await,
                    ))
                });
            }
            StoreRequest::Extend {
                batch,
                generation,
                claims,
            } => {
                let lease = self.config.lease;
                spawn_call(myself, async move {
                    let call = store.extend_lease(&claims, lease);
                    let result = timer.time(StoreOp::ExtendLease, call).await;
                    answer(StoreAnswer::Extended {
                        batch,
                        generation,
                        claims,
                        result,
                    })
                });
            }
            StoreRequest::Release(claims) => spawn_call(myself, async move {
                let result = timer.time(StoreOp::Release, store.release(&claims)).await;
                answer(StoreAnswer::Released {
                    sent: claims.len(),
                    result,
                })
            }),
        }
    }
}
