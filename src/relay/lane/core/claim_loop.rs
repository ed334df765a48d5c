//! [`ClaimLoop`]: when the lane claims, asks `next_due`, or sleeps. The rest of the core
//! decides how much it may claim (free room, gates, credits); this type decides whether
//! the store is worth asking at all, and remembers what its last answers said.

use std::time::Duration;

use tokio::time::Instant;

use crate::store::NextDue;

/// The one store call of the claim pipeline in flight, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ClaimCall {
    Idle,
    Claiming { issued_at: Instant, limit: usize },
    AskingDue,
}

/// What the lane knows about claimable work in the store, and which claim-pipeline call
/// (a claim, an `ack_and_claim`, or `next_due`) is out.
///
/// **Invariant.** At most one call is out, and the lane is in at most one of these
/// phases: it wants to claim (`store_has_more`), a call is out, it knows when the next
/// message is due (`known_due`), or it sleeps on that (`idle_timer_set`). Only a claim in
/// flight remembers what came while it was out (`more_since_claim`). So a short claim's
/// "nothing more" is believed only when nothing that may make work claimable came after
/// its snapshot, and a remembered `next_due` is never slept on after such news. Checked
/// after every transition in debug builds ([`ClaimLoop::check_invariant`]).
#[derive(Debug)]
pub(super) struct ClaimLoop {
    call: ClaimCall,
    /// Whether the store may hold claimable work: the last claim filled its limit, or a
    /// wake-up, tick, resume or retry came since. A short claim clears it, unless one of
    /// those came while it was out.
    store_has_more: bool,
    /// Whether something that may make work claimable came while the claim in flight was
    /// out: that claim's snapshot may predate it, so its short answer proves nothing.
    more_since_claim: bool,
    /// Whether an idle sleep from `next_due` is scheduled and still meaningful.
    idle_timer_set: bool,
    /// The last short claim's `next_due` answer, as an instant (`Some(None)`: nothing to
    /// wait for), while nothing since may have made a message claimable sooner.
    known_due: Option<Option<Instant>>,
    /// The generation of the latest poll timer (an idle sleep or the poll ceiling): an
    /// older one that fires is ignored.
    poll_generation: u64,
}

impl Default for ClaimLoop {
    fn default() -> Self {
        Self {
            call: ClaimCall::Idle,
            store_has_more: false,
            more_since_claim: false,
            idle_timer_set: false,
            known_due: None,
            poll_generation: 0,
        }
    }
}

impl ClaimLoop {
    /// No claim-pipeline call is out.
    pub(super) fn is_idle(&self) -> bool {
        self.call == ClaimCall::Idle
    }

    /// A claim (or `ack_and_claim`) is out.
    pub(super) fn is_claiming(&self) -> bool {
        matches!(self.call, ClaimCall::Claiming { .. })
    }

    /// Whether the store may hold claimable work.
    pub(super) fn store_has_more(&self) -> bool {
        self.store_has_more
    }

    /// Whether the lane sleeps on a `next_due` answer.
    pub(super) fn sleeping(&self) -> bool {
        self.idle_timer_set
    }

    /// Whether the lane knows when the next message is due without asking.
    pub(super) fn knows_due(&self) -> bool {
        self.known_due.is_some()
    }

    /// The latest poll timer's generation.
    #[cfg(test)]
    pub(super) fn poll_generation(&self) -> u64 {
        self.poll_generation
    }

    /// The store may hold claimable work now (a wake-up, a tick, a resume, a retry, a
    /// lapse). If a claim is out, its snapshot may have been taken before this, so its
    /// answer, should it come back short, must not clear the flag: the lane claims again.
    /// (Without this, an enqueue that committed while an idle lane's claim ran was left
    /// until the poll ceiling: the claim came back empty, "nothing due".) A remembered
    /// `next_due` and a planned sleep no longer hold.
    pub(super) fn may_have_more(&mut self) {
        self.store_has_more = true;
        self.idle_timer_set = false;
        self.known_due = None;
        #[cfg(not(test))]
        let lost_wake_up = false;
        #[cfg(test)]
        let lost_wake_up = crate::sim::mutation::active(crate::sim::mutation::Mutation::LostWakeUp);
        if self.is_claiming() && !lost_wake_up {
            self.more_since_claim = true;
        }
        self.check_invariant();
    }

    /// Something may have become claimable sooner than the last `next_due` answer said: an
    /// idle lane asks again instead of sleeping on it.
    pub(super) fn forget_due(&mut self) {
        self.idle_timer_set = false;
        self.known_due = None;
        self.check_invariant();
    }

    /// A claim of up to `limit` goes out now.
    pub(super) fn claim_sent(&mut self, now: Instant, limit: usize) {
        debug_assert!(self.is_idle(), "a claim sent while {:?} is out", self.call);
        self.call = ClaimCall::Claiming {
            issued_at: now,
            limit,
        };
        self.more_since_claim = false;
        self.idle_timer_set = false;
        self.known_due = None;
        self.check_invariant();
    }

    /// The claim's answer came back (or failed): the call it answers, and whether news of
    /// claimable work came while it was out.
    pub(super) fn claim_answered(&mut self) -> (ClaimCall, bool) {
        let call = std::mem::replace(&mut self.call, ClaimCall::Idle);
        let more_since = std::mem::take(&mut self.more_since_claim);
        self.check_invariant();
        (call, more_since)
    }

    /// A claim came back short with nothing since it was sent: the store has no more
    /// claimable work, and its answer may say when the next message is due.
    pub(super) fn came_back_short(&mut self, now: Instant, next_due: &NextDue) {
        self.store_has_more = false;
        self.known_due = match next_due {
            NextDue::Known(due) => Some(due.map(|wait| now + wait)),
            NextDue::Unknown => None,
        };
        self.check_invariant();
    }

    /// What the last short claim said about the next due message (`Some(None)`: nothing to
    /// wait for), forgotten as it is taken; `None`: the lane must ask.
    pub(super) fn take_known_due(&mut self) -> Option<Option<Instant>> {
        let due = self.known_due.take();
        self.check_invariant();
        due
    }

    /// A `next_due` call goes out.
    pub(super) fn asking_due(&mut self) {
        debug_assert!(
            self.is_idle(),
            "next_due asked while {:?} is out",
            self.call
        );
        self.call = ClaimCall::AskingDue;
        self.check_invariant();
    }

    /// The `next_due` call's answer came back (or failed).
    pub(super) fn due_answered(&mut self) {
        self.call = ClaimCall::Idle;
        self.check_invariant();
    }

    /// The lane sleeps on the next due time: the generation of its timer.
    pub(super) fn sleep(&mut self) -> u64 {
        self.poll_generation += 1;
        self.idle_timer_set = true;
        self.check_invariant();
        self.poll_generation
    }

    /// A poll-ceiling timer goes out (a short claim while the lane holds claims): its
    /// generation. The lane does not sleep on it, so it stays free to claim before then.
    pub(super) fn poll_ceiling(&mut self) -> u64 {
        self.poll_generation += 1;
        self.check_invariant();
        self.poll_generation
    }

    /// A poll timer fired: whether it was the latest one (then the store may have work).
    pub(super) fn poll_fired(&mut self, generation: u64) -> bool {
        if generation != self.poll_generation {
            return false;
        }
        self.may_have_more();
        true
    }

    /// The invariant in the type's docs; a no-op in release builds.
    fn check_invariant(&self) {
        debug_assert!(
            !self.more_since_claim || self.is_claiming(),
            "news since a claim remembered with no claim out: {self:?}"
        );
        debug_assert!(
            !self.store_has_more || (!self.idle_timer_set && self.known_due.is_none()),
            "a lane that wants to claim sleeps or remembers a next_due: {self:?}"
        );
        debug_assert!(
            !self.idle_timer_set || (self.is_idle() && self.known_due.is_none()),
            "a sleeping lane has a call out or a next_due unslept: {self:?}"
        );
        debug_assert!(
            self.known_due.is_none() || self.is_idle(),
            "a next_due remembered while a call is out: {self:?}"
        );
    }
}

/// How long an idle lane sleeps: until `due` (`None`: nothing to wait for), within
/// `[min, ceiling]`.
pub(super) fn idle_sleep(due: Option<Duration>, min: Duration, ceiling: Duration) -> Duration {
    due.unwrap_or(ceiling).clamp(min, ceiling)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::now() + Duration::from_millis(ms)
    }

    #[test]
    fn a_short_claim_with_nothing_since_ends_the_wish_to_claim_and_remembers_next_due() {
        let mut cl = ClaimLoop::default();
        cl.may_have_more();
        assert!(cl.store_has_more());
        let now = at(0);
        cl.claim_sent(now, 8);
        assert!(cl.is_claiming());
        let (call, more_since) = cl.claim_answered();
        assert_eq!(
            call,
            ClaimCall::Claiming {
                issued_at: now,
                limit: 8
            }
        );
        assert!(!more_since);
        cl.came_back_short(now, &NextDue::Known(Some(Duration::from_secs(3))));
        assert!(!cl.store_has_more());
        assert_eq!(
            cl.take_known_due(),
            Some(Some(now + Duration::from_secs(3)))
        );
        assert!(!cl.knows_due(), "taken once");
    }

    #[test]
    fn news_while_a_claim_is_out_survives_its_short_answer() {
        let mut cl = ClaimLoop::default();
        cl.may_have_more();
        cl.claim_sent(at(0), 8);
        cl.may_have_more();
        let (_, more_since) = cl.claim_answered();
        assert!(more_since, "the wake-up came after the claim's snapshot");
        assert!(cl.store_has_more());
        // A wake-up with no claim out is remembered only as "may have more".
        cl.may_have_more();
        let (call, more_since) = cl.claim_answered();
        assert_eq!(call, ClaimCall::Idle);
        assert!(!more_since);
    }

    #[test]
    fn news_forgets_a_remembered_next_due_and_a_planned_sleep() {
        let mut cl = ClaimLoop::default();
        cl.claim_sent(at(0), 4);
        cl.claim_answered();
        cl.came_back_short(at(0), &NextDue::Known(None));
        assert!(cl.knows_due());
        cl.may_have_more();
        assert!(!cl.knows_due());
        assert!(cl.store_has_more());

        cl.claim_sent(at(1), 4);
        cl.claim_answered();
        cl.came_back_short(at(1), &NextDue::Unknown);
        assert!(!cl.knows_due(), "an unknown next_due must be asked");
        cl.asking_due();
        assert!(!cl.is_idle());
        cl.due_answered();
        let generation = cl.sleep();
        assert!(cl.sleeping());
        cl.forget_due();
        assert!(!cl.sleeping());
        assert!(
            !cl.store_has_more(),
            "a lapse forgets the answer, it is no wake-up"
        );
        assert!(cl.poll_fired(generation), "the timer still wakes the lane");
        assert!(cl.store_has_more());
    }

    #[test]
    fn only_the_latest_poll_timer_counts() {
        let mut cl = ClaimLoop::default();
        let first = cl.sleep();
        let second = cl.poll_ceiling();
        assert!(!cl.poll_fired(first));
        assert!(!cl.store_has_more());
        assert!(cl.poll_fired(second));
        assert!(cl.store_has_more());
        assert!(!cl.sleeping(), "woken, the lane claims instead of sleeping");
    }

    #[test]
    #[should_panic(expected = "a claim sent while")]
    #[cfg(debug_assertions)]
    fn a_second_call_while_one_is_out_is_caught_in_debug_builds() {
        let mut cl = ClaimLoop::default();
        cl.asking_due();
        cl.claim_sent(at(0), 1);
    }

    #[test]
    fn idle_sleep_stays_within_its_bounds() {
        let min = Duration::from_millis(1);
        let ceiling = Duration::from_secs(30);
        assert_eq!(idle_sleep(None, min, ceiling), ceiling);
        assert_eq!(idle_sleep(Some(Duration::ZERO), min, ceiling), min);
        assert_eq!(
            idle_sleep(Some(Duration::from_secs(90)), min, ceiling),
            ceiling
        );
        assert_eq!(
            idle_sleep(Some(Duration::from_secs(2)), min, ceiling),
            Duration::from_secs(2)
        );
    }
}
