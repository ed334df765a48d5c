//! Switches one deliberate bug ([`Mutation`]) on for one thread at a time: a lane the
//! simulation starts takes it as a value (`LaneCore::mutated_by`); the memory store's two
//! hooks ask [`active`].

use std::cell::Cell;

pub(crate) use crate::mutation::Mutation;

thread_local! {
    static ACTIVE: Cell<Option<Mutation>> = const { Cell::new(None) };
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
}
