//! Switches one deliberate bug ([`Mutation`]) on for one thread at a time: a lane the
//! simulation starts takes it as a value (`LaneCore::mutated_by`); the memory store's
//! hooks ask [`active`] and [`once`].

use std::cell::Cell;

pub(crate) use crate::mutation::Mutation;

thread_local! {
    static ACTIVE: Cell<Option<Mutation>> = const { Cell::new(None) };
    /// Whether a once-a-run mutation fired since it was switched on.
    static FIRED: Cell<bool> = const { Cell::new(false) };
}

/// The mutation switched on in this thread.
pub(crate) fn current() -> Option<Mutation> {
    ACTIVE.with(Cell::get)
}

/// Whether `mutation` is switched on in this thread.
pub(crate) fn active(mutation: Mutation) -> bool {
    current() == Some(mutation)
}

/// Switches one mutation on in this thread (or, with `None`, all off).
pub(crate) fn set(mutation: Option<Mutation>) {
    ACTIVE.with(|active| active.set(mutation));
    FIRED.with(|fired| fired.set(false));
}

/// Whether `mutation` is on and has not fired since the run began; it fires now.
pub(crate) fn once(mutation: Mutation) -> bool {
    active(mutation) && !FIRED.with(|fired| fired.replace(true))
}

/// A run begins: a once-a-run mutation may fire again.
pub(crate) fn run_begins() {
    FIRED.with(|fired| fired.set(false));
}
