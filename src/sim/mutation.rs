//! Deliberate bugs, compiled into test builds only, each switched on for one thread at a
//! time: the simulation must catch every one (`tests::every_mutation_is_caught`).
//! Each hook is one `#[cfg(test)]` line where the real code decides.

use std::cell::Cell;

/// A deliberate bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mutation {
    /// The memory store acks a claimed row whatever the token (no fencing).
    AckSkipsToken,
    /// The lane starts a buffered claim although its lease may have lapsed.
    LapsedClaimStarts,
    /// The lane starts a key's next buffered message while the one before it still runs.
    KeyNextBeforeOutcome,
    /// The memory store takes due pending rows before lapsed claims.
    LapsedClaimsBehindPending,
    /// A wake-up that comes while a claim is out is forgotten when the claim comes back
    /// short.
    LostWakeUp,
    /// A claim's limit leaves out what the lane's other claims out may bring (so several
    /// claims out together pass `concurrency + prefetch`).
    ClaimRoomIgnoresClaimsOut,
    /// A claim's limit leaves out the hand-off credits taken and still on their way (so a
    /// lane that takes hand-offs holds more than `concurrency + prefetch`).
    ClaimRoomIgnoresCredits,
}

impl Mutation {
    /// Every mutation.
    pub(crate) const ALL: [Mutation; 7] = [
        Mutation::AckSkipsToken,
        Mutation::LapsedClaimStarts,
        Mutation::KeyNextBeforeOutcome,
        Mutation::LapsedClaimsBehindPending,
        Mutation::LostWakeUp,
        Mutation::ClaimRoomIgnoresClaimsOut,
        Mutation::ClaimRoomIgnoresCredits,
    ];
}

thread_local! {
    static ACTIVE: Cell<Option<Mutation>> = const { Cell::new(None) };
}

/// Whether `mutation` is switched on in this thread.
pub(crate) fn active(mutation: Mutation) -> bool {
    ACTIVE.with(|active| active.get() == Some(mutation))
}

/// Switches one mutation on in this thread (or, with `None`, all off).
pub(crate) fn set(mutation: Option<Mutation>) {
    ACTIVE.with(|active| active.set(mutation));
}
