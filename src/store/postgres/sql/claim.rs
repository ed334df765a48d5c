//! The claim and `next_due`: the statements whose cost must not grow with the lane.
//!
//! Each reads in index order and stops at its limit:
//! - lapsed claims by `lease_idx` (lane, target, lease_expires_at, seq) over claimed rows;
//! - due pending rows by `head_idx` (lane, target, available_at, seq) over pending heads
//!   only, so the rows queued behind a key's head are never read (schema/heads.rs);
//! - lapsed last attempts by `last_attempt_idx`;
//! - each due head's key run (`key_runs`) by `key_pending_idx`, right after the head's seq,
//!   up to the key's next claimed row (`key_claimed_idx`).
//!
//! Per-key order is checked on the rows met, by index probes (`key_free`), never by reading
//! a key's queue. The one-statement claim, which runs on nearly every cycle, asks the same
//! with one probe of each key index a head (`head_runs`). The ordering policy changes those
//! probes, so it is statement text: one statement per policy. As a bind parameter, PostgreSQL's generic plan (after five
//! executions) could not use the key indexes at all.

use super::NOW;
use crate::store::postgres::schema::key_queue::{lowest_live, run_bound, KeyOf};
use crate::store::OrderingPolicy;

/// Whether row `m`'s key lets it be claimed: no earlier row of the key holds it (pending or
/// claimed, or dead-lettered under Block), and no row of the key is claimed under a lease
/// that has not lapsed. Each clause is one descent of `key_pending_idx`, `key_claimed_idx`
/// or `dead_idx` (schema/key_queue.rs) and stops at its first row: the claimed rows are
/// asked once, "earlier, or under a running lease", over the key's few claimed rows.
/// (Asked apart, "an earlier claimed row" names neither the key's columns nor the lease
/// first, and PostgreSQL read it from `lease_idx`, every claimed row of the lane, dead
/// versions of the rows acked since the last vacuum included: 0.17 ms a head.)
///
/// The lease clause ends in `OFFSET 0` to keep it a probe. Its only correlation is equality
/// on (lane, target, key), so PostgreSQL may otherwise turn it into a hashed subplan: once
/// per statement, read every claimed row whose lease has not lapsed, in every lane (the
/// lease index has no better prefix for that), and hash them. Every row a relay acked
/// within the last lease length is still in that index range until vacuum, so a busy lane
/// paid for its own throughput on each claim (keyed claims cost about twice the keyless
/// ones). `OFFSET 0` stops the rewrite of an EXISTS into a hashable ANY.
///
/// `skip_to_dead`: under Skip, rows this very claim dead-letters (CTE `to_dead`) do not
/// hold their key.
fn key_free(t: &str, m: &str, policy: OrderingPolicy, skip_to_dead: bool) -> String {
    let key = format!(
        "e.lane = {m}.lane AND e.target = {m}.target AND e.ordering_key = {m}.ordering_key"
    );
    let not_to_dead = if skip_to_dead && policy == OrderingPolicy::Skip {
        " AND NOT EXISTS (SELECT 1 FROM to_dead d WHERE d.outbox_id = e.outbox_id)"
    } else {
        ""
    };
    let dead = match policy {
        OrderingPolicy::Skip => String::new(),
        OrderingPolicy::Block => format!(
            " AND NOT EXISTS (SELECT 1 FROM {t} e WHERE {key} \
                AND e.status = 'dead_letter' AND e.seq < {m}.seq)"
        ),
    };
    format!(
        "({m}.ordering_key IS NULL OR (
            NOT EXISTS (SELECT 1 FROM {t} e WHERE {key}
                AND e.status = 'pending' AND e.seq < {m}.seq){dead}
            AND NOT EXISTS (SELECT 1 FROM {t} e WHERE {key} AND e.status = 'claimed'
                AND ((e.seq < {m}.seq{not_to_dead}) OR e.lease_expires_at > {NOW}) OFFSET 0)))"
    )
}

/// The CTE `pending`: the heads of CTE or subquery `heads` (`outbox_id`, `due_at`, `seq`,
/// `ordering_key`, in claim order, locked), each followed by its key run, up to `rest` rows
/// in all; columns `outbox_id`, `src` (1), `due_at` and `seq` (the head's), `pos` (0 for the
/// head, then 1, 2.. along its run). `run` is the bind parameter of the longest run
/// ([`crate::store::ClaimRequest::run_len`]).
///
/// A run is the key's next live rows after the head by seq, cut before the first that is
/// not pending and due, and under Block before the first dead letter after the head (one
/// probe of `dead_idx`, which bounds the index range). As the memory store's `run_after`.
/// Pending rows are read from `key_pending_idx`, from the head's seq on, at most `run - 1`
/// of them and only up to the key's first claimed row after the head ([`run_bound`], one
/// probe of `key_claimed_idx`): a claimed row is in the other index, and the run stops there.
///
/// Cost: `LIMIT rest` without ORDER BY is what keeps it lazy. The plan can only be a nested
/// loop over `heads` in their order (the LATERAL refers to the head), whose inner side is an
/// Append, head first, then its run in seq order; no parallel plan runs a statement that
/// writes. So the limit keeps exactly "heads in due order, each with its run, truncated",
/// and stops pulling there: heads past it are neither read (a CTE is evaluated as far as it
/// is read) nor locked, and with `run = 1` the run's `LIMIT 0` never starts its scan. An
/// ORDER BY here would sort, so read and lock every head and run first.
///
/// Locks: the run's rows are locked `FOR UPDATE`, without SKIP LOCKED. A skipped row would
/// leave a hole in the middle of a run (the limit reads on past it), handing out a message
/// before its predecessor. No claimer can hold them: they are behind a live head this claim
/// holds locked, and a row of a key is taken only after its earlier live rows (`key_free`).
/// Another writer (an ack of a row handed out oddly, a relay that nacks a run's head and
/// acks the next) holds one only for its own statement, so at worst this claim waits that
/// long; then PostgreSQL re-reads the row, and if it is no longer pending and due the run
/// ends there.
///
/// Why the rows are read by `key_pending_idx` first and locked by `seq` after: a locked row
/// that changed since the snapshot is checked again against the conditions of the scan that
/// read it. Read straight from the index, whose condition says `status = 'pending'`, a row
/// claimed meanwhile would drop out of the run (a hole, the message after it handed out
/// while it is in flight). Locked by `seq`, which never changes (an identity column no
/// UPDATE may set), it comes back as it is now, claimed, and the window (`ok`) ends the run
/// before it. By `seq` rather than `outbox_id`: `seq_idx` answers `seq = ANY (..)` in seq
/// order, the lock's ORDER BY, so a run is not sorted before it is locked (by `outbox_id`
/// its rows came in uuid order and were: 1.7 % of a keyed cycle's instructions, callgrind).
/// The window still sorts the few locked rows again: PostgreSQL does not take a lock's
/// output to be in any order.
fn key_runs(t: &str, heads: &str, policy: OrderingPolicy, run: &str, rest: &str) -> String {
    let dead_cut = match policy {
        OrderingPolicy::Skip => String::new(),
        OrderingPolicy::Block => format!(
            " AND q.seq < coalesce((
                SELECT x.seq FROM {t} x
                WHERE x.lane = $2 AND x.target = $3 AND x.ordering_key = h.ordering_key
                  AND x.status = 'dead_letter' AND x.seq > h.seq
                ORDER BY x.seq LIMIT 1), {max})",
            max = i64::MAX
        ),
    };
    let bound = run_bound(t, &KeyOf::new("$2", "$3", "h.ordering_key"), "h.seq");
    let run_seqs = format!(
        "ARRAY(
            SELECT q.seq FROM {t} q
            WHERE h.ordering_key IS NOT NULL
              AND q.lane = $2 AND q.target = $3
              AND q.ordering_key = h.ordering_key
              AND q.status = 'pending' AND q.seq > h.seq
              AND q.seq < {bound}{dead_cut}
            ORDER BY q.seq
            LIMIT {run}::int8 - 1)"
    );
    pending_runs(t, heads, "", &run_seqs, rest)
}

/// The CTE `pending` over CTE or subquery `heads` (`outbox_id`, `due_at`, `seq`, in claim
/// order, locked): each head, then the rows whose seqs `run_seqs` gives (an array, in seq
/// order, its expression on `h`, the head), locked by `seq` and cut before the first that
/// is no longer pending and due, up to `rest` rows in all. `guard` (empty, or a condition
/// on `h` ending in `AND`) skips the run's scan. See [`key_runs`] for the laziness of the
/// limit and the locks.
fn pending_runs(t: &str, heads: &str, guard: &str, run_seqs: &str, rest: &str) -> String {
    format!(
        "pending AS (
            SELECT r.outbox_id, 1 AS src, h.due_at, h.seq, r.pos
            FROM {heads} h
            CROSS JOIN LATERAL (
                SELECT h.outbox_id, 0::int8 AS pos
                UNION ALL
                SELECT n.outbox_id, n.pos FROM (
                    SELECT e.outbox_id, row_number() OVER w AS pos,
                           bool_and(e.status = 'pending' AND e.available_at <= {NOW})
                               OVER w AS ok
                    FROM (
                        SELECT e.outbox_id, e.seq, e.status, e.available_at FROM {t} e
                        WHERE {guard}e.seq = ANY ({run_seqs})
                        ORDER BY e.seq
                        FOR UPDATE OF e
                    ) e
                    WINDOW w AS (ORDER BY e.seq)
                ) n
                WHERE n.ok
            ) r
            LIMIT {rest}
         )"
    )
}

/// The CTE `to_claim`: the lapsed claims, then the key runs, with `ord`, the claim's order
/// (`src`, `due_at`, `seq`, `pos`) as one number, which the answer is sorted by.
///
/// Why one number: the answer's rows are the claimed rows whole (payload, headers...) and
/// the order's columns come after them, so a sort on four columns extracted up to four
/// columns from each wide row per comparison, past every variable-length column before
/// them. A keyed claim's rows tie on the first three (a run shares its head's `due_at` and
/// `seq`), so that was every comparison: 140 M of a keyed cycle's 3,014 M instructions
/// (4.6 %, callgrind, 100 cycles of 64), against one cheap sort of these narrow rows here
/// (109 M saved net; a keyless cycle pays 1.5 % more for it).
const TO_CLAIM: &str = "to_claim AS (
            SELECT u.*, row_number() OVER (ORDER BY u.src, u.due_at, u.seq, u.pos) AS ord
            FROM (
                SELECT l.outbox_id, l.src, l.due_at, l.seq, 0::int8 AS pos FROM lapsed l
                UNION ALL
                SELECT * FROM pending
            ) u
         )";

/// The claim under `policy`: one statement. Run in a transaction with
/// `promote_heads` for the keys in `dead_keys` (schema/heads.rs).
///
/// `$1` now, `$2` lane, `$3` target, `$4` limit, `$5` lease in ms, `$6` consumer,
/// `$7` the longest key run, `$8` the lapsed-lease error text.
///
/// - `to_dead` locks claimed rows whose lease lapsed on their last attempt and that head
///   their key (`key_free`, as the reference store's `lapsed_heads`); the statement
///   dead-letters them and answers their ids in lapse order, as the reference store does. Of a lapsed run on its last attempts, one claim dead-letters the
///   head; under Skip the next claim finds the next one at the head, and so on.
/// - `lapsed` locks lapsed claims with attempts left, in lapse order: they come first,
///   because they became claimable earliest and their keys are blocked behind them.
/// - `due` locks due pending heads in (available_at, seq) order, up to what `lapsed` left
///   of the limit.
/// - `successors` (Skip): the next row of a key whose head `to_dead` dead-letters is not
///   marked a head yet (`promote_heads` runs after this statement), so it is found from
///   `to_dead` by one probe per dead row, and merged into `due`'s order (which reads and
///   locks all of `due`: this claim runs only when the lane has a lapsed last attempt).
/// - `pending` (`key_runs`): each of those heads followed by its key run, up to what
///   `lapsed` left of the limit.
///
/// The UPDATEs find their rows by `outbox_id = ANY (ARRAY(...))`: a join with the CTE let
/// the planner guess a thousand rows and hash-join them against a scan of the whole table.
///
/// Why two claimers never hold two rows of one key: a claimer locks only a key's head,
/// `FOR UPDATE SKIP LOCKED`, and re-checks the row once locked (READ COMMITTED re-evaluates
/// a row changed since the snapshot). A concurrent claimer skips that locked head or sees it
/// claimed; either way in its snapshot the head is still live, so no later row of the key
/// passes `key_free`. And `key_free` refuses a row while any other row of its key is claimed
/// under a live lease: the head rule alone allows that when an earlier row turns live
/// again after a later one was claimed (an enqueue that committed after a later-sequenced
/// one of its key, or a dead letter requeued while its successor is in flight). A lapsed
/// last attempt counts as gone only while this statement holds its lock and dead-letters it.
pub(super) fn claim(t: &str, cols_m: &str, policy: OrderingPolicy) -> String {
    let skip = policy == OrderingPolicy::Skip;
    let dead_free = key_free(t, "m", policy, false);
    let free = key_free(t, "m", policy, true);
    let rest = "greatest($4 - (SELECT count(*) FROM lapsed), 0)";
    let next_live = lowest_live(
        t,
        "n",
        &KeyOf::new("$2", "$3", "d.ordering_key"),
        " AND n.seq > d.seq",
    );
    let (successors, heads) = if skip {
        (
            format!(
                "successors AS MATERIALIZED (
                    SELECT m.outbox_id, m.available_at AS due_at, m.seq, m.ordering_key
                    FROM to_dead d
                    CROSS JOIN LATERAL ({next_live}) n
                    JOIN {t} m ON m.outbox_id = n.outbox_id
                    WHERE m.status = 'pending' AND NOT m.key_head
                      AND m.available_at <= {NOW} AND {free}
                    LIMIT {rest}
                    FOR UPDATE OF m SKIP LOCKED
                 ),"
            ),
            format!(
                "(SELECT * FROM (SELECT * FROM due UNION ALL SELECT * FROM successors) p
                  ORDER BY p.due_at, p.seq LIMIT {rest})"
            ),
        )
    } else {
        (String::new(), "due".to_owned())
    };
    let pending = key_runs(t, &heads, policy, "$7", rest);
    format!(
        "WITH to_dead AS MATERIALIZED (
            SELECT m.outbox_id, m.seq, m.ordering_key, m.lease_expires_at AS lapsed_at
            FROM {t} m
            WHERE m.lane = $2 AND m.target = $3 AND m.status = 'claimed'
              AND m.attempt_count >= m.max_attempts AND m.lease_expires_at <= {NOW}
              AND {dead_free}
            FOR UPDATE OF m SKIP LOCKED
         ),
         lapsed AS MATERIALIZED (
            SELECT m.outbox_id, 0 AS src, m.lease_expires_at AS due_at, m.seq FROM {t} m
            WHERE m.lane = $2 AND m.target = $3 AND m.status = 'claimed'
              AND m.lease_expires_at <= {NOW} AND m.attempt_count < m.max_attempts
              AND {free}
            ORDER BY m.lease_expires_at, m.seq
            LIMIT $4
            FOR UPDATE OF m SKIP LOCKED
         ),
         due AS MATERIALIZED (
            SELECT m.outbox_id, m.available_at AS due_at, m.seq, m.ordering_key FROM {t} m
            WHERE m.lane = $2 AND m.target = $3 AND m.status = 'pending' AND m.key_head
              AND m.available_at <= {NOW} AND {free}
            ORDER BY m.available_at, m.seq
            LIMIT {rest}
            FOR UPDATE OF m SKIP LOCKED
         ),
         {successors}
         {pending},
         {TO_CLAIM},
         dead AS (
            UPDATE {t} m SET status = 'dead_letter', last_error = $8, claimed_by = NULL,
                   claim_token = NULL, lease_expires_at = NULL, updated_at = {NOW}
            WHERE m.outbox_id = ANY (ARRAY(SELECT outbox_id FROM to_dead))
            RETURNING m.outbox_id, m.seq, m.ordering_key
         ),
         claimed AS (
            UPDATE {t} m SET status = 'claimed', attempt_count = m.attempt_count + 1,
                   claimed_by = $6, claim_token = gen_random_uuid(),
                   lease_expires_at = {NOW} + $5::int8 * interval '1 millisecond',
                   updated_at = {NOW}, key_head = true
            WHERE m.outbox_id = ANY (ARRAY(SELECT outbox_id FROM to_claim))
            RETURNING {cols_m}
         )
         SELECT dl.dead_ids, dl.dead_keys, c.*
         FROM (SELECT coalesce(array_agg(d.outbox_id ORDER BY x.lapsed_at, x.seq), '{{}}')
                          AS dead_ids,
                      coalesce(array_agg(DISTINCT d.ordering_key)
                               FILTER (WHERE d.ordering_key IS NOT NULL), '{{}}') AS dead_keys
               FROM dead d JOIN to_dead x ON x.outbox_id = d.outbox_id) dl
         LEFT JOIN (claimed c JOIN to_claim o ON o.outbox_id = c.outbox_id) ON true
         ORDER BY o.ord"
    )
}

/// The claim's common case: `lapsed` and `due` as in [`claim`], without dead-lettering, as
/// one statement that commits on its own, so a claim is one round trip. `$1` now, `$2` lane,
/// `$3` target, `$4` limit, `$5` lease in ms, `$6` consumer, `$7` the longest key run.
///
/// A claim that dead-letters a lapsed last attempt must call `promote_heads` after it, in
/// its transaction (schema/heads.rs), so this one does not run when the lane has such a
/// row (`lapsed_last`, one descent of `last_attempt_idx`): it claims nothing and says so in
/// its first column, and the store runs [`claim`] in a transaction instead, which claims
/// exactly what it always did.
///
/// `async_commit`: the statement sets `synchronous_commit = off` for its own implicit
/// transaction (`set_config(.., true)`, read at the commit that follows the statement),
/// as `BEGIN; SET LOCAL ..` does for the relay's other transactions.
pub(super) fn claim_fast(
    t: &str,
    cols_m: &str,
    policy: OrderingPolicy,
    async_commit: bool,
) -> String {
    let commit = if async_commit {
        "set_config('synchronous_commit', 'off', true) AS async_commit, "
    } else {
        ""
    };
    format!(
        "WITH lapsed_last AS MATERIALIZED (SELECT {lapsed_last} AS yes),
         {ctes}
         SELECT (SELECT yes FROM lapsed_last) AS lapsed_last, {commit}c.*
         FROM (SELECT 1) one
         LEFT JOIN (claimed c JOIN to_claim o ON o.outbox_id = c.outbox_id) ON true
         ORDER BY o.ord",
        lapsed_last = lapsed_last(t),
        ctes = fast_ctes(
            t,
            cols_m,
            policy,
            " AND NOT (SELECT yes FROM lapsed_last)",
            "$7"
        ),
    )
}

/// Whether the lane `$2`/`$3` has a claim on its last attempt whose lease lapsed (one
/// descent of `last_attempt_idx`): such a row only the full [`claim`] dead-letters.
pub(super) fn lapsed_last(t: &str) -> String {
    format!(
        "EXISTS (
            SELECT 1 FROM {t} l
            WHERE l.lane = $2 AND l.target = $3 AND l.status = 'claimed'
              AND l.attempt_count >= l.max_attempts AND l.lease_expires_at <= {NOW})"
    )
}

/// The CTEs of the one-statement claim, ending in `claimed` (the claimed rows, `cols_m`)
/// and `to_claim` (their order: `src`, `due_at`, `seq`, `pos`). `gate` is appended to the
/// conditions of both scans (empty, or a condition that stops the claim); `run` is the bind
/// parameter of the longest key run.
pub(super) fn fast_ctes(
    t: &str,
    cols_m: &str,
    policy: OrderingPolicy,
    gate: &str,
    run: &str,
) -> String {
    let free = key_free(t, "m", policy, false);
    let rest = "greatest($4 - (SELECT count(*) FROM lapsed), 0)";
    let (due, pending) = head_runs(t, policy, gate, run, rest);
    format!(
        "lapsed AS MATERIALIZED (
            SELECT m.outbox_id, 0 AS src, m.lease_expires_at AS due_at, m.seq FROM {t} m
            WHERE m.lane = $2 AND m.target = $3 AND m.status = 'claimed'
              AND m.lease_expires_at <= {NOW} AND m.attempt_count < m.max_attempts
              {gate} AND {free}
            ORDER BY m.lease_expires_at, m.seq
            LIMIT $4
            FOR UPDATE OF m SKIP LOCKED
         ),
         {due},
         {pending},
         {TO_CLAIM},
         claimed AS (
            UPDATE {t} m SET status = 'claimed', attempt_count = m.attempt_count + 1,
                   claimed_by = $6, claim_token = gen_random_uuid(),
                   lease_expires_at = {NOW} + $5::int8 * interval '1 millisecond',
                   updated_at = {NOW}, key_head = true
            WHERE m.outbox_id = ANY (ARRAY(SELECT outbox_id FROM to_claim))
            RETURNING {cols_m}
         )"
    )
}

/// The CTEs `due` and `pending` of the one-statement claim (`gate` and `run` as in
/// [`fast_ctes`]): the due heads in (available_at, seq) order, each with its key run, up to
/// `rest` rows.
///
/// Per keyed head, the key's checks and its run take one probe of each key index (and under
/// Block one of `dead_idx`), in one LATERAL subquery:
/// - `busy`, `first`: the key's claimed rows (`key_claimed_idx`). The head is refused if one
///   is earlier or under a running lease ([`key_free`]'s claimed clause); otherwise they are
///   all later, and the first bounds the run ([`run_bound`]).
/// - `dead` (Block): the key's first dead letter (`dead_idx`). Earlier than the head, it
///   holds the key; later, it bounds the run (as `key_runs`' cut).
/// - `seqs`: the key's first `run` pending rows by seq below those bounds
///   (`key_pending_idx`). The head may be claimed only if it is the first of them: no earlier
///   row of the key is pending ([`key_free`]'s pending clause). The rest is its run.
///
/// [`claim`] asks the same with four probes a head (`key_free`'s two in `due`, then
/// `run_bound` and the run's scan in `key_runs`): two more key-index descents a head, each
/// comparing three text columns. Measured by callgrind (`examples/benchmark/callgrind.sh`,
/// 100 cycles of 64 rows in runs of 8, 100 k rows over 1,000 keys): 2.0 % fewer
/// instructions a keyed cycle, 1.0 % fewer a keyless one.
///
/// The subquery runs only for keyed rows (`WHERE m.ordering_key IS NOT NULL`, a one-time
/// filter; a keyless row gets NULLs from the LEFT JOIN). `OFFSET 0` keeps it a subquery:
/// pulled up into `due`, its `ARRAY(..)` was planned twice, once for the filter and once
/// for the output, and ran twice a head. The run is locked in `pending` as [`key_runs`]
/// locks it, by `seq` and after its head, so the locks and their order are the same.
fn head_runs(
    t: &str,
    policy: OrderingPolicy,
    gate: &str,
    run: &str,
    rest: &str,
) -> (String, String) {
    let head_key = KeyOf::of("m");
    let key = head_key.matches("e");
    let max = i64::MAX;
    let (dead, dead_from, dead_free, dead_cut) = match policy {
        OrderingPolicy::Skip => (String::new(), String::new(), "", String::new()),
        OrderingPolicy::Block => (
            ", d.first AS dead".to_owned(),
            format!(
                " CROSS JOIN (
                    SELECT (SELECT e.seq FROM {t} e
                            WHERE {key} AND e.status = 'dead_letter'
                            ORDER BY e.seq LIMIT 1) AS first) d"
            ),
            " AND (k.dead IS NULL OR k.dead > m.seq)",
            format!(" AND q.seq < coalesce(d.first, {max})"),
        ),
    };
    let due = format!(
        "due AS MATERIALIZED (
            SELECT m.outbox_id, m.available_at AS due_at, m.seq, m.ordering_key, k.seqs
            FROM {t} m
            LEFT JOIN LATERAL (
                SELECT c.busy{dead}, ARRAY(
                    SELECT q.seq FROM {t} q
                    WHERE {run_key} AND q.status = 'pending'
                      AND q.seq < coalesce(c.first, {max}){dead_cut}
                    ORDER BY q.seq
                    LIMIT {run}::int8) AS seqs
                FROM (
                    SELECT bool_or(e.seq < m.seq OR e.lease_expires_at > {NOW}) AS busy,
                           min(e.seq) AS first
                    FROM {t} e
                    WHERE {key} AND e.status = 'claimed') c{dead_from}
                WHERE m.ordering_key IS NOT NULL
                OFFSET 0) k ON true
            WHERE m.lane = $2 AND m.target = $3 AND m.status = 'pending' AND m.key_head
              AND m.available_at <= {NOW} {gate}
              AND CASE WHEN m.ordering_key IS NULL THEN true
                       ELSE NOT k.busy IS TRUE AND k.seqs[1] = m.seq{dead_free} END
            ORDER BY m.available_at, m.seq
            LIMIT {rest}
            FOR UPDATE OF m SKIP LOCKED
         )",
        run_key = head_key.matches("q"),
    );
    let pending = pending_runs(t, "due", "cardinality(h.seqs) > 1 AND ", "h.seqs[2:]", rest);
    (due, pending)
}

/// `next_due` under `policy`: $1 now, $2 lane, $3 target.
/// Milliseconds to wait, rounded up so a relay that sleeps that long finds the message
/// due; negative when overdue (the caller clamps: GREATEST would turn "nothing to wait
/// for", NULL, into 0). A running lease always counts (its lapse frees the row or its
/// key); a row its key holds back does not, as in the claim, so an idle relay never spins
/// on rows it may not take. Each branch reads one index in order and stops at its first
/// row: the next lease by `lease_idx`, the next pending head by `head_idx` (rows behind a
/// head are not in it), a lapsed claim by `lease_idx`.
pub(super) fn next_due(t: &str, policy: OrderingPolicy) -> String {
    let free = key_free(t, "m", policy, false);
    format!(
        "SELECT ceil(extract(epoch FROM (min(due) - {NOW})) * 1000)::int8
         FROM (
            (SELECT m.lease_expires_at AS due FROM {t} m
             WHERE m.lane = $2 AND m.target = $3 AND m.status = 'claimed'
               AND m.lease_expires_at > {NOW}
             ORDER BY m.lease_expires_at LIMIT 1)
            UNION ALL
            (SELECT m.available_at FROM {t} m
             WHERE m.lane = $2 AND m.target = $3 AND m.status = 'pending' AND m.key_head
               AND {free}
             ORDER BY m.available_at, m.seq LIMIT 1)
            UNION ALL
            (SELECT m.lease_expires_at FROM {t} m
             WHERE m.lane = $2 AND m.target = $3 AND m.status = 'claimed'
               AND m.lease_expires_at <= {NOW} AND {free}
             ORDER BY m.lease_expires_at, m.seq LIMIT 1)
         ) d"
    )
}

/// [`next_due`] of many lanes in one statement: $1 now; $2 lanes, $3 targets and $4 their
/// places in the asked list, of the lanes under `Skip`; $5, $6, $7 of those under `Block`
/// (the policy is statement text, so each has its own branch). Rows `(i, wait_ms)`: each
/// lane's answer is `next_due`'s statement over that lane, so it costs what one lane's does
/// (each branch one index descent per lane), and an idle relay asks for all its lanes with
/// one statement per pass instead of every lane polling.
pub(super) fn lanes_next_due(t: &str) -> String {
    let per_lane = |policy, first: u8| {
        let due = next_due(t, policy)
            .replace("$2", "q.lane")
            .replace("$3", "q.target");
        format!(
            "SELECT q.i, ({due}) AS wait_ms
             FROM unnest(${first}::text[], ${}::text[], ${}::int4[]) AS q(lane, target, i)",
            first + 1,
            first + 2
        )
    };
    format!(
        "{}\nUNION ALL\n{}",
        per_lane(OrderingPolicy::Skip, 2),
        per_lane(OrderingPolicy::Block, 5)
    )
}

#[cfg(test)]
mod tests;
