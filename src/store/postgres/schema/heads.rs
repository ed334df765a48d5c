//! Migration 2: the key-head marker, the indexes a claim reads in order, and the two
//! server-side functions that keep the marker true under concurrency.
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
//! `dead_idx`; see `key_queue.rs`):
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
//!   the uncommitted row and so promoted nothing.
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

use super::Names;

/// The advisory lock class (`pg_advisory_xact_lock(class, key)`) of one outbox's key-head
/// locks: derived from the table name, so two outboxes in one database never share a lock.
pub(crate) fn head_lock_class(names: &Names) -> i32 {
    let hash = super::fnv1a64(names.messages.as_bytes());
    // The low 32 bits, as PostgreSQL's int4: any fixed mapping does.
    (hash as u32) as i32
}

/// The lock key of one (lane, target, key) in SQL, from three text expressions.
pub(crate) fn head_lock_key(lane: &str, target: &str, key: &str) -> String {
    format!("hashtext({lane} || chr(31) || {target} || chr(31) || {key})")
}

/// The statements that mark the lowest live row of each key in the arrays `lanes`,
/// `targets` and `keys` (PL/pgSQL expressions), after taking each key's lock in sorted
/// order, as `promote_heads` does: the cycle function runs them inline. Two statements, so
/// the UPDATE's snapshot is taken after the locks.
///
/// Unlike `promote_heads`, this marks the key's lowest *pending* row, one probe of
/// `key_pending_idx` instead of two (the lowest of each key index). That keeps the
/// invariant: if the lowest live row is pending, it is that row; if it is claimed, it
/// carries the mark already (a claim marks what it claims, and only the sweep clears a
/// mark, from pending rows). The pending row marked behind a claimed one is a stray mark,
/// which costs a claim that meets it one refused head and which the ack of the claimed
/// row would have written anyway. Measured by callgrind (`examples/benchmark/callgrind.sh`):
/// 1.3 % fewer instructions a keyed cycle.
pub(crate) fn promote_inline(n: &Names, lanes: &str, targets: &str, keys: &str) -> String {
    let class = head_lock_class(n);
    let key_u = head_lock_key("u.lane", "u.target", "u.ordering_key");
    format!(
        "PERFORM pg_advisory_xact_lock({class}, s.k)
    FROM (SELECT DISTINCT {key_u} AS k
          FROM unnest({lanes}, {targets}, {keys}) AS u(lane, target, ordering_key)
          WHERE u.ordering_key IS NOT NULL
          ORDER BY 1) s;
    {update};",
        update = promote_update_with(
            &n.messages,
            lanes,
            targets,
            keys,
            &super::key_queue::lowest_pending(&n.messages, "e", &super::key_queue::KeyOf::of("u")),
        ),
    )
}

/// `promote_heads`' UPDATE over the arrays `p_lanes`, `p_targets`, `p_keys` (migration 4):
/// it marks the lowest live row of each key given, over the key indexes of migration 4
/// (`key_queue.rs`).
pub(super) fn promote_update(n: &Names) -> String {
    let t = &n.messages;
    promote_update_with(
        t,
        "p_lanes",
        "p_targets",
        "p_keys",
        &super::key_queue::lowest_live(t, "e", &super::key_queue::KeyOf::of("u"), ""),
    )
}

/// The UPDATE that marks the row `lowest` finds for each key `u` given.
fn promote_update_with(t: &str, lanes: &str, targets: &str, keys: &str, lowest: &str) -> String {
    format!(
        "UPDATE {t} m SET key_head = true
    FROM (SELECT DISTINCT u.lane, u.target, u.ordering_key
          FROM unnest({lanes}, {targets}, {keys}) AS u(lane, target, ordering_key)
          WHERE u.ordering_key IS NOT NULL) u
    CROSS JOIN LATERAL (
        {lowest}) h
    WHERE m.outbox_id = h.outbox_id AND NOT m.key_head"
    )
}

/// Migration 2's text for the lowest live row of key `u`, when one index held both
/// statuses. A shipped migration's text never changes (`schema.rs` pins it).
const LOWEST_LIVE_V2: &str = "SELECT e.outbox_id FROM {t} e
        WHERE e.lane = u.lane AND e.target = u.target AND e.ordering_key = u.ordering_key
          AND e.status IN ('pending', 'claimed')
        ORDER BY e.seq LIMIT 1";

pub(super) fn migration(n: &Names) -> String {
    let (t, p, s) = (&n.messages, &n.prefix, &n.schema);
    let update = promote_update_with(
        t,
        "p_lanes",
        "p_targets",
        "p_keys",
        &LOWEST_LIVE_V2.replace("{t}", t),
    );
    let promote_fn = promote_heads_function(n, &update);
    let check_fn = check_head_function(n, &EARLIER_LIVE_V2.replace("{t}", t));
    format!(
        r#"
ALTER TABLE {t} ADD COLUMN IF NOT EXISTS key_head boolean NOT NULL DEFAULT true;
-- Backfill: a pending row with an earlier live row of its key is not a head.
UPDATE {t} m SET key_head = false
WHERE m.ordering_key IS NOT NULL AND m.status = 'pending'
  AND EXISTS (SELECT 1 FROM {t} e
              WHERE e.lane = m.lane AND e.target = m.target
                AND e.ordering_key = m.ordering_key
                AND e.status IN ('pending', 'claimed') AND e.seq < m.seq);

-- The claim's pending scan: heads only, in due order.
CREATE INDEX IF NOT EXISTS "{p}_head_idx" ON {t} (lane, target, available_at, seq)
    WHERE status = 'pending' AND key_head;
-- Lapsed claims in lapse order (the claim), the next lease to lapse (next_due).
CREATE INDEX IF NOT EXISTS "{p}_lease_idx" ON {t} (lane, target, lease_expires_at, seq)
    WHERE status = 'claimed';
-- Claims on their last attempt: the ones a lapse dead-letters.
CREATE INDEX IF NOT EXISTS "{p}_last_attempt_idx" ON {t} (lane, target, lease_expires_at)
    WHERE status = 'claimed' AND attempt_count >= max_attempts;
-- Is a row of this key in flight?
CREATE INDEX IF NOT EXISTS "{p}_key_claimed_idx" ON {t} (lane, target, ordering_key)
    WHERE status = 'claimed' AND ordering_key IS NOT NULL;
-- Stats: the pending count (index only) and the oldest due pending row.
CREATE INDEX IF NOT EXISTS "{p}_pending_idx" ON {t} (lane, target, created_at)
    WHERE status = 'pending';
-- Stats: the delivered count (index only).
CREATE INDEX IF NOT EXISTS "{p}_delivered_idx" ON {t} (lane, target)
    WHERE status = 'delivered';
-- Every dead letter, keyed or not: under Block, does an earlier dead row hold this key?
-- And the dead-letter count (index only). Replaces key_dead_idx (keyed rows only).
CREATE INDEX IF NOT EXISTS "{p}_dead_idx" ON {t} (lane, target, ordering_key, seq)
    WHERE status = 'dead_letter';
DROP INDEX IF EXISTS "{s}"."{p}_key_dead_idx";
-- Purge's index, rebuilt so that no probe for dead letters can pick it: its predicate
-- names updated_at, which only purge's condition implies. (On a table whose statistics
-- said "no dead rows", the planner once probed a key's dead letters through the old one,
-- reading every finished row.)
CREATE INDEX IF NOT EXISTS "{p}_purge_idx" ON {t} (updated_at)
    WHERE status IN ('delivered', 'dead_letter') AND updated_at IS NOT NULL;
DROP INDEX IF EXISTS "{s}"."{p}_finished_idx";
-- Replaced by head_idx and lease_idx: no claim orders by it any more.
DROP INDEX IF EXISTS "{s}"."{p}_claimable_idx";

{promote_fn}

{check_fn}
DROP TRIGGER IF EXISTS "{p}_check_head" ON {t};
{trigger}
"#,
        trigger = check_head_trigger(n),
    )
}

/// `CREATE CONSTRAINT TRIGGER check_head`, deferred to commit, on rows enqueued behind a
/// live row of their key (migration 2 makes it; migration 5 makes it again).
pub(super) fn check_head_trigger(n: &Names) -> String {
    let (t, p, s) = (&n.messages, &n.prefix, &n.schema);
    format!(
        r#"CREATE CONSTRAINT TRIGGER "{p}_check_head" AFTER INSERT ON {t}
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NEW.ordering_key IS NOT NULL AND NOT NEW.key_head)
    EXECUTE FUNCTION "{s}"."{p}_check_head"();"#
    )
}

/// `CREATE FUNCTION promote_heads`: marks the lowest live row of each key given, by
/// `update`, after taking each key's lock in sorted order.
pub(super) fn promote_heads_function(n: &Names, update: &str) -> String {
    let class = head_lock_class(n);
    let promote = &n.promote_heads;
    let key_u = head_lock_key("u.lane", "u.target", "u.ordering_key");
    format!(
        r#"-- Marks the lowest live row of each key given, after taking each key's lock: see
-- schema/heads.rs. Called in the transaction that took rows of those keys out of live,
-- after it did.
CREATE OR REPLACE FUNCTION {promote}(p_lanes text[], p_targets text[], p_keys text[])
RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
    v_key int4;
BEGIN
    FOR v_key IN
        SELECT DISTINCT {key_u}
        FROM unnest(p_lanes, p_targets, p_keys) AS u(lane, target, ordering_key)
        WHERE u.ordering_key IS NOT NULL
        ORDER BY 1
    LOOP
        PERFORM pg_advisory_xact_lock({class}, v_key);
    END LOOP;
    -- A statement of its own: its snapshot is taken after the locks.
    {update};
END
$fn$;"#
    )
}

/// Migration 2's text for "an earlier live row of NEW's key exists", when one index held
/// both statuses.
const EARLIER_LIVE_V2: &str = "EXISTS (
          SELECT 1 FROM {t} e
          WHERE e.lane = NEW.lane AND e.target = NEW.target
            AND e.ordering_key = NEW.ordering_key
            AND e.status IN ('pending', 'claimed') AND e.seq < NEW.seq)";

/// `CREATE FUNCTION check_head` (the deferred trigger's function): marks an enqueued row
/// that `earlier_live` (a condition on `NEW`) finds no earlier live row of its key for.
pub(super) fn check_head_function(n: &Names, earlier_live: &str) -> String {
    let (t, p, s) = (&n.messages, &n.prefix, &n.schema);
    let class = head_lock_class(n);
    let check = format!("\"{s}\".\"{p}_check_head\"");
    let key_new = head_lock_key("NEW.lane", "NEW.target", "NEW.ordering_key");
    format!(
        r#"-- At the commit of a transaction that enqueued a row behind a live row of its key: is it
-- the head now? See schema/heads.rs.
CREATE OR REPLACE FUNCTION {check}() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        -- This snapshot cannot see a promotion that committed after it: mark (harmless).
        UPDATE {t} SET key_head = true WHERE outbox_id = NEW.outbox_id;
        RETURN NULL;
    END IF;
    IF NOT pg_try_advisory_xact_lock_shared({class}, {key_new}) THEN
        IF current_setting('outbox_relay.head_lock_held', true) = 'yes' THEN
            -- Waiting while holding another key's lock could deadlock with a promoter.
            UPDATE {t} SET key_head = true WHERE outbox_id = NEW.outbox_id;
            RETURN NULL;
        END IF;
        PERFORM pg_advisory_xact_lock_shared({class}, {key_new});
    END IF;
    PERFORM set_config('outbox_relay.head_lock_held', 'yes', true);
    UPDATE {t} m SET key_head = true
    WHERE m.outbox_id = NEW.outbox_id AND NOT m.key_head
      AND NOT {earlier_live};
    RETURN NULL;
END
$fn$;"#
    )
}
