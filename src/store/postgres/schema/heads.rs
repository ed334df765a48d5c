//! The key-head marker, the indexes a claim reads in order, and the two server-side
//! functions that keep the marker true under concurrency: migration 2 makes them
//! (`migrations/postgres/V2__key_heads.sql`), migration 4 makes the functions again over
//! its key indexes (`V4__key_indexes_by_status.sql`).
//!
//! # Why a marker
//!
//! A claim must not read the rows it does not return. Rows without an ordering key are all
//! claimable when due, but of a key only its head (the live row with the lowest `seq`) is.
//! If every pending row of a hot key sat in the index a claim scans, a claim made once only
//! that key is left would step over all of them (100,000 rows to find one). So each row
//! carries `key_head`: true for rows without a key and for the head of their key, false for
//! the rows queued behind it, and the claim scans `head_idx`, which holds only due-ordered
//! pending rows with the marker set. Per-key order is then checked on the few rows the scan
//! meets, with O(log n) probes into the key indexes (`key_pending_idx`, `key_claimed_idx`,
//! `dead_idx`; see below):
//! the marker only decides what is read, never what is handed out. A stray `true` costs one
//! skipped row; a missing `true` on a key's head would leave the key stuck forever, so that
//! is the invariant every writer keeps:
//!
//! > **The live row of each key with the lowest `seq` has `key_head` set**, as seen by any
//! > transaction that starts after the writers committed.
//!
//! The marker is set by writers, and cleared only by the stray sweep (`sweep.rs`), under
//! the key's lock, from a pending row that has an earlier live row (a row that leaves
//! pending leaves `head_idx` by its status), so a claimed row, and every row a claim may
//! lock, carries it.
//!
//! # Who keeps the invariant
//!
//! - **enqueue** marks a row whose key has no live row (and only the first such row of a
//!   batch). A row written behind a live row stays unmarked, and is checked again by the
//!   deferred trigger `check_head` when its transaction commits: the caller's transaction
//!   may be long, and the head it saw may be acked meanwhile, by an ack that could not see
//!   the uncommitted row and so promoted nothing. Not so a row written behind an earlier
//!   row of its key that the same INSERT writes for certain (one without a dedupe key,
//!   which cannot be a duplicate left out): it carries `key_in_batch` (migration 10), which
//!   the trigger's `WHEN` skips. That earlier row is still live at commit (no other
//!   transaction can see it before; one of this transaction that takes it out of live
//!   promotes, and sees this row), so the check could only find it. A keyed batch of 5,000
//!   rows over 1,000 keys runs the check for its 1,000 first rows instead of all 5,000.
//! - **ack, a nack that dead-letters, a claim that dead-letters a lapsed last attempt**
//!   take a row out of live. In the same transaction, after that UPDATE, they call
//!   `promote_heads` with the keys they touched, which marks the lowest live row of each.
//! - **claim** marks what it claims (a successor claimed behind a lapsed last attempt in the
//!   same statement was not marked yet); **nack with a retry** and **release** keep the row
//!   live and marked; **requeue** marks what it brings back (an earlier row may become the
//!   head again; a later one is a stray mark, harmless).
//!
//! # The race, and the lock that closes it
//!
//! Sequence numbers are taken at insert, not at commit, and an enqueue sees only what has
//! committed. The dangerous interleaving: T enqueues r behind the head h of key k (r
//! unmarked); h is acked and A promotes k before T commits (A cannot see r: k has no live
//! row left); T commits; k now has a live row and no head. Both sides therefore take a
//! transaction-scoped advisory lock on k (`head_lock_class`, `hashtext(lane, target, key)`)
//! and only then look, in a statement of their own, so with a snapshot taken after the lock:
//! `promote_heads` exclusively, `check_head` (at T's commit) shared. Whichever comes second
//! sees what the first committed: either A waited for T's commit and sees r, or T's check
//! waited for A's commit and sees that h is gone. Enqueuers share the lock, so they never
//! wait for each other; the wait of an ack is the instant of a commit, not the caller's
//! transaction (the trigger is deferred to commit).
//!
//! Deadlocks: `promote_heads` locks keys in sorted order. An enqueuing transaction's trigger
//! locks in row order, so with two keys it could wait for one promoter while holding a key
//! another promoter waits for. It therefore waits only for its first key; for a further key
//! it cannot take at once it marks its row (a stray mark) instead of waiting. Under
//! REPEATABLE READ or SERIALIZABLE the check cannot see newer commits, so it marks its row.
//!
//! # Why two key indexes
//!
//! Until migration 4 (`V4__key_indexes_by_status.sql`) one index, `key_live_idx` (lane,
//! target, ordering_key, seq), held every pending and claimed row with a key, and
//! `key_claimed_idx` (lane, target, ordering_key) the claimed ones again. PostgreSQL cannot
//! update a row in place when a column that an index names or filters on changes (no HOT
//! update), so a claim, which changes `status`, writes a new version of the row and an
//! entry for it into every index whose predicate the new version meets: a keyless row 3
//! entries (`outbox_id`, `seq`, `lease_idx`), a keyed row 5, both key indexes included.
//! Index inserts are a third of the server's time in a drain, keyed or not (`perf`), so
//! this was a good part of a keyed claim's extra cost. Measured server-side
//! (`examples/claim_plans.rs`' cycle loop, 100 k pending rows over 1,000 keys, the build
//! before against this one, alternating), a keyed message went from 0.65 to 0.66–0.68 of a
//! keyless one's rate: a small part of the gap, which is the rest of the keyed row's writes
//! (`examples/benchmark/HISTORY.md`, "One key index per status", has the numbers).
//!
//! So `key_pending_idx` holds pending rows and `key_claimed_idx` (now with `seq`) claimed
//! ones, and a claimed keyed row gets one key index entry, not two. "The key has a live
//! row" becomes two probes, one into each, each naming one status so that one partial
//! index serves it; "the key's lowest live row" the lower of the first row of each. A key
//! run reads pending rows only and stops before the key's first claimed row after its head
//! (`sql/claim_*.sql`). A probe that must stay a probe ends in `OFFSET 0`, which keeps
//! PostgreSQL from turning an EXISTS into a hashed subplan over every claimed row.

/// The advisory lock class (`pg_advisory_xact_lock(class, key)`) of one outbox's key-head
/// locks, for its messages table `messages`: derived from the table name, so two outboxes
/// in one database never share a lock.
pub(crate) fn head_lock_class(messages: &str) -> i32 {
    let hash = super::fnv1a64(messages.as_bytes());
    // The low 32 bits, as PostgreSQL's int4: any fixed mapping does.
    (hash as u32) as i32
}
