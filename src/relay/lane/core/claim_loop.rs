//! [`ClaimLoop`]: when the lane claims, asks `next_due`, or sleeps. The rest of the core
//! decides how much it may claim (free room, gates, credits); this type decides whether
//! the store is worth asking at all, how many claims may be out at once, and remembers
//! what their answers said.

use std::time::Duration;

use tokio::time::Instant;

use crate::mutation::Mutation;
use crate::store::NextDue;

/// Names one claim (or `ack_and_claim`) the lane sent, so its answer finds it among the
/// others out: answers of claims on separate connections come back in any order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct ClaimId(pub(crate) u64);

/// A claim that is out: when it went, how many it may take, and whether news of claimable
/// work came since (then its short answer proves nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ClaimOut {
    pub(super) id: ClaimId,
    pub(super) issued_at: Instant,
    pub(super) limit: usize,
    pub(super) more_since: bool,
}

/// What the lane knows about claimable work in the store, and which claim-pipeline calls
/// (claims, `ack_and_claim`s, or one `next_due`) are out.
///
/// **Invariant.** Up to `max_claims` claims may be out at once, or one `next_due` call and
/// no claim. The lane is in at most one of these phases: it wants to claim
/// (`store_has_more`), calls are out, it knows when the next message is due (`known_due`),
/// or it sleeps on that (`idle_timer_set`). Only a claim in flight remembers what came
/// while it was out (`more_since`). So a short claim's "nothing more" is believed only when
/// nothing that may make work claimable came after it was sent, and a remembered
/// `next_due` is never slept on after such news, nor remembered while another claim is out
/// (that claim's answer may say more). Checked after every transition in debug builds
/// ([`ClaimLoop::check_invariant`]).
///
/// Why several claims at once: a lane's rate is one store cycle's rate while one claim is
/// out (the benchmark's profile of a no-op drain on PostgreSQL had a claim out 93–97 % of
/// the time). Two claims on two connections overlap their round trips. Per-key order
/// still holds: the store's key-head claim never hands out a key whose earlier message is
/// claimed, by this claim or by any other.
#[derive(Debug)]
pub(super) struct ClaimLoop {
    /// The claims out, oldest first.
    claims: Vec<ClaimOut>,
    /// The most claims out at once ([`crate::LaneConfig::claims_in_flight`]).
    max_claims: usize,
    /// The id of the next claim sent.
    next_id: u64,
    /// A `next_due` call is out (never with a claim).
    asking_due: bool,
    /// Whether the store may hold claimable work: the last claim filled its limit, or a
    /// wake-up, tick, resume or retry came since. A short claim clears it, unless one of
    /// those came while it was out.
    store_has_more: bool,
    /// Whether the store has shown it may hold more than one claim takes: a claim filled
    /// its limit, or news came (a wake-up, a resume, an ack that frees a key). A poll timer
    /// is no such sign: an idle poll asks with one claim, and a second goes beside it only
    /// once the store has shown more (see [`ClaimLoop::may_claim_beside`]).
    shown_more: bool,
    /// Whether an idle sleep from `next_due` is planned and still meaningful.
    idle_timer_set: bool,
    /// When that sleep's timer fires (`None`: no timer, for a watched lane with nothing
    /// due: the relay's due watcher pokes it).
    idle_until: Option<Instant>,
    /// The last short claim's `next_due` answer, as an instant (`Some(None)`: nothing to
    /// wait for), while nothing since may have made a message claimable sooner.
    known_due: Option<Option<Instant>>,
    /// The generation of the latest poll timer (an idle sleep or the poll ceiling): an
    /// older one that fires is ignored.
    poll_generation: u64,
    /// The deliberate bug the simulation switched on ([`Mutation::LostWakeUp`] is this
    /// type's); always `None` in production.
    mutation: Option<Mutation>,
}

impl Default for ClaimLoop {
    fn default() -> Self {
        Self::new(1)
    }
}

impl ClaimLoop {
    /// A claim loop that keeps up to `max_claims` (at least 1) claims out at once.
    pub(super) fn new(max_claims: usize) -> Self {
        Self {
            claims: Vec::new(),
            max_claims: max_claims.max(1),
            next_id: 0,
            asking_due: false,
            store_has_more: false,
            shown_more: false,
            idle_timer_set: false,
            idle_until: None,
            known_due: None,
            poll_generation: 0,
            mutation: None,
        }
    }

    /// Switches a deliberate bug on ([`LaneCore::mutated_by`](super::LaneCore::mutated_by)).
    #[cfg(test)]
    pub(super) fn mutate(&mut self, mutation: Option<Mutation>) {
        self.mutation = mutation;
    }

    /// No claim-pipeline call is out.
    pub(super) fn is_idle(&self) -> bool {
        self.claims.is_empty() && !self.asking_due
    }

    /// A claim (or `ack_and_claim`) is out.
    pub(super) fn is_claiming(&self) -> bool {
        !self.claims.is_empty()
    }

    /// The most claims out at once.
    pub(super) fn max_claims(&self) -> usize {
        self.max_claims
    }

    /// The claims out and what each may take: room the lane has promised them.
    pub(super) fn out_limits(&self) -> impl Iterator<Item = (ClaimId, usize)> + '_ {
        self.claims.iter().map(|c| (c.id, c.limit))
    }

    /// Whether another claim may go out now: no `next_due` call is out and fewer than
    /// `max_claims` claims are.
    pub(super) fn may_claim(&self) -> bool {
        !self.asking_due && self.claims.len() < self.max_claims
    }

    /// The oldest claim out, if any (tests answer it without tracking ids).
    #[cfg(test)]
    pub(super) fn oldest(&self) -> Option<ClaimId> {
        self.claims.first().map(|c| c.id)
    }

    /// Whether the store may hold claimable work.
    pub(super) fn store_has_more(&self) -> bool {
        self.store_has_more
    }

    /// Whether a claim may go out beside those out: the store may have more, and has shown
    /// it (not only a poll timer's guess). An idle lane with two claims in flight would
    /// otherwise send two claims at every poll, one of them always empty: with many idle
    /// lanes, most of the store's work. A draining lane's claims come back full, so it keeps
    /// its claims overlapping.
    pub(super) fn may_claim_beside(&self) -> bool {
        self.store_has_more && self.shown_more
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
    /// lapse). Each claim out may have taken its snapshot before this, so its answer,
    /// should it come back short, must not clear the flag: the lane claims again.
    /// (Without this, an enqueue that committed while an idle lane's claim ran was left
    /// until the poll ceiling: the claim came back empty, "nothing due".) A remembered
    /// `next_due` and a planned sleep no longer hold.
    pub(super) fn may_have_more(&mut self) {
        self.store_has_more = true;
        self.shown_more = true;
        self.idle_timer_set = false;
        self.known_due = None;
        if self.mutation != Some(Mutation::LostWakeUp) {
            for claim in &mut self.claims {
                claim.more_since = true;
            }
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

    /// A claim of up to `limit` goes out now: its id, for its answer.
    pub(super) fn claim_sent(&mut self, now: Instant, limit: usize) -> ClaimId {
        debug_assert!(
            self.may_claim(),
            "a claim sent while {} claims (of {}) and next_due {} are out",
            self.claims.len(),
            self.max_claims,
            self.asking_due
        );
        self.next_id += 1;
        let id = ClaimId(self.next_id);
        self.claims.push(ClaimOut {
            id,
            issued_at: now,
            limit,
            more_since: false,
        });
        self.idle_timer_set = false;
        self.known_due = None;
        self.check_invariant();
        id
    }

    /// The answer of claim `id` came back (or failed): the claim it answers (`None`: no
    /// such claim is out, so the answer is not this lane's to use).
    pub(super) fn claim_answered(&mut self, id: ClaimId) -> Option<ClaimOut> {
        let at = self.claims.iter().position(|c| c.id == id)?;
        let claim = self.claims.remove(at);
        self.check_invariant();
        Some(claim)
    }

    /// A claim came back short with nothing since it was sent: the store has no more
    /// claimable work, and its answer may say when the next message is due. That answer
    /// is remembered only when no other claim is out: another claim's answer may still
    /// bring work (and its own `next_due`).
    pub(super) fn came_back_short(&mut self, now: Instant, next_due: &NextDue) {
        self.store_has_more = false;
        self.shown_more = false;
        self.known_due = match next_due {
            NextDue::Known(due) if self.claims.is_empty() => Some(due.map(|wait| now + wait)),
            _ => None,
        };
        self.check_invariant();
    }

    /// A claim filled its limit: the store may hold more, whatever a claim answered short
    /// before it said (their snapshots' order is unknown).
    pub(super) fn came_back_full(&mut self) {
        self.store_has_more = true;
        self.shown_more = true;
        self.idle_timer_set = false;
        self.known_due = None;
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
            "next_due asked while {} claims are out (next_due {})",
            self.claims.len(),
            self.asking_due
        );
        self.asking_due = true;
        self.check_invariant();
    }

    /// The `next_due` call's answer came back (or failed).
    pub(super) fn due_answered(&mut self) {
        self.asking_due = false;
        self.check_invariant();
    }

    /// The lane sleeps on the next due time, with a timer at `until` (`None`: none): the
    /// generation of its timer.
    pub(super) fn sleep(&mut self, until: Option<Instant>) -> u64 {
        self.poll_generation += 1;
        self.idle_timer_set = true;
        self.idle_until = until;
        self.check_invariant();
        self.poll_generation
    }

    /// The relay's due watcher says a message may be claimable at `at`, later than now:
    /// the generation of a poll timer to set for `at` when the lane sleeps past it (or
    /// with no timer). `None` when its sleep ends by then or it does not sleep.
    pub(super) fn due_at(&mut self, at: Instant) -> Option<u64> {
        if !self.idle_timer_set || self.idle_until.is_some_and(|until| until <= at) {
            return None;
        }
        self.poll_generation += 1;
        self.idle_until = Some(at);
        self.check_invariant();
        Some(self.poll_generation)
    }

    /// A poll-ceiling timer goes out (a short claim while the lane holds claims): its
    /// generation. The lane does not sleep on it, so it stays free to claim before then.
    pub(super) fn poll_ceiling(&mut self) -> u64 {
        self.poll_generation += 1;
        self.check_invariant();
        self.poll_generation
    }

    /// A poll timer fired: whether it was the latest one (then the store may have work,
    /// which one claim finds out).
    pub(super) fn poll_fired(&mut self, generation: u64) -> bool {
        if generation != self.poll_generation {
            return false;
        }
        self.due_now();
        true
    }

    /// A message may be claimable now (a poll timer fired, or the relay's due watcher
    /// says so): one claim finds out. Unlike a wake-up it shows nothing more, so no second
    /// claim goes beside it.
    pub(super) fn due_now(&mut self) {
        let shown = self.shown_more && self.store_has_more;
        self.may_have_more();
        self.shown_more = shown;
    }

    /// The invariant in the type's docs; a no-op in release builds.
    fn check_invariant(&self) {
        debug_assert!(
            self.claims.len() <= self.max_claims,
            "{} claims out, over the lane's {}: {self:?}",
            self.claims.len(),
            self.max_claims
        );
        debug_assert!(
            !(self.asking_due && self.is_claiming()),
            "next_due asked while a claim is out: {self:?}"
        );
        debug_assert!(
            !self.shown_more || self.store_has_more,
            "the store showed more to a lane that does not want to claim: {self:?}"
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
        let id = cl.claim_sent(now, 8);
        assert!(cl.is_claiming());
        let claim = cl.claim_answered(id).expect("the claim is out");
        assert_eq!((claim.issued_at, claim.limit), (now, 8));
        assert!(!claim.more_since);
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
        let id = cl.claim_sent(at(0), 8);
        cl.may_have_more();
        let claim = cl.claim_answered(id).expect("the claim is out");
        assert!(
            claim.more_since,
            "the wake-up came after the claim's snapshot"
        );
        assert!(cl.store_has_more());
        // A wake-up with no claim out is remembered only as "may have more"; an answer
        // for no claim out is nobody's.
        cl.may_have_more();
        assert_eq!(cl.claim_answered(id), None);
    }

    #[test]
    fn news_forgets_a_remembered_next_due_and_a_planned_sleep() {
        let mut cl = ClaimLoop::default();
        let id = cl.claim_sent(at(0), 4);
        cl.claim_answered(id);
        cl.came_back_short(at(0), &NextDue::Known(None));
        assert!(cl.knows_due());
        cl.may_have_more();
        assert!(!cl.knows_due());
        assert!(cl.store_has_more());

        let id = cl.claim_sent(at(1), 4);
        cl.claim_answered(id);
        cl.came_back_short(at(1), &NextDue::Unknown);
        assert!(!cl.knows_due(), "an unknown next_due must be asked");
        cl.asking_due();
        assert!(!cl.is_idle());
        cl.due_answered();
        let generation = cl.sleep(Some(at(5)));
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
        let first = cl.sleep(Some(at(5)));
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
    #[should_panic(expected = "a claim sent while 2 claims (of 2)")]
    #[cfg(debug_assertions)]
    fn a_claim_past_the_lanes_claims_in_flight_is_caught_in_debug_builds() {
        let mut cl = ClaimLoop::new(2);
        cl.claim_sent(at(0), 1);
        cl.claim_sent(at(0), 1);
        cl.claim_sent(at(0), 1);
    }

    #[test]
    fn two_claims_out_are_answered_in_either_order_by_id() {
        for reversed in [false, true] {
            let mut cl = ClaimLoop::new(2);
            cl.may_have_more();
            let first = cl.claim_sent(at(0), 8);
            assert!(cl.may_claim(), "room for a second claim");
            let second = cl.claim_sent(at(1), 4);
            assert!(!cl.may_claim(), "two of two out");
            assert_eq!(cl.out_limits().map(|(_, limit)| limit).sum::<usize>(), 12);
            let order = if reversed {
                [second, first]
            } else {
                [first, second]
            };
            let a = cl.claim_answered(order[0]).expect("out");
            assert_eq!(a.id, order[0]);
            assert!(cl.may_claim() && cl.is_claiming());
            let b = cl.claim_answered(order[1]).expect("out");
            assert_eq!(b.id, order[1]);
            assert_eq!(
                (
                    a.limit + b.limit,
                    cl.out_limits().map(|(_, limit)| limit).sum::<usize>()
                ),
                (12, 0),
                "each answer carries its own claim's limit"
            );
            assert!(cl.is_idle());
        }
    }

    #[test]
    fn a_wake_up_between_two_answers_survives_only_the_later_ones_short_answer() {
        let mut cl = ClaimLoop::new(2);
        cl.may_have_more();
        let first = cl.claim_sent(at(0), 8);
        let second = cl.claim_sent(at(0), 8);
        let a = cl.claim_answered(first).expect("out");
        assert!(!a.more_since);
        cl.may_have_more();
        let b = cl.claim_answered(second).expect("out");
        assert!(
            b.more_since,
            "the wake-up came while the second claim was out: its short answer proves nothing"
        );
    }

    #[test]
    fn a_short_answer_with_another_claim_out_remembers_no_next_due() {
        let mut cl = ClaimLoop::new(2);
        cl.may_have_more();
        let first = cl.claim_sent(at(0), 8);
        let second = cl.claim_sent(at(0), 8);
        cl.claim_answered(first);
        cl.came_back_short(at(0), &NextDue::Known(Some(Duration::from_secs(3))));
        assert!(!cl.store_has_more());
        assert!(
            !cl.knows_due(),
            "the other claim's answer may still bring work and its own next_due"
        );
        // The other claim fills its limit: the store may hold more after all.
        cl.claim_answered(second);
        cl.came_back_full();
        assert!(cl.store_has_more());
    }

    #[test]
    #[should_panic(expected = "next_due asked while 1 claims are out")]
    #[cfg(debug_assertions)]
    fn next_due_is_never_asked_with_a_claim_out() {
        let mut cl = ClaimLoop::new(2);
        cl.claim_sent(at(0), 1);
        cl.asking_due();
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
