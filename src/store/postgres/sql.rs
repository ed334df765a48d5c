//! The SQL of every operation, made once per store for its table name: the statements of
//! `sql/*.sql` (written for the default names and renamed like the migrations), and the
//! ones formatted here.
//!
//! Conventions, so each statement reads the same way:
//! - `$1` is always "now" in Unix milliseconds when a clock was injected, or NULL, and
//!   [`NOW`] turns it into the statement's notion of now. Statements without time skip it.
//! - Durations travel as milliseconds (`int8`) and become intervals here.
//! - Timestamps leave as milliseconds ([`columns`]), because the API speaks `UnixMillis`.
//! - Only the table name is interpolated (built from validated identifiers); every value is
//!   a bind parameter.

use std::sync::Arc;

use super::schema::key_queue::{live_exists, KeyOf};
use super::schema::Names;
use crate::store::OrderingPolicy;

mod claim;
mod cycle;

/// The statement's now: the injected clock's reading, else the database's.
///
/// `statement_timestamp()` rather than `now()`: a caller's long transaction that enqueues
/// late should not date its rows at the transaction's start. And rather than
/// `clock_timestamp()`: it is stable within a statement, so every row of a batch gets the
/// same instant and the planner can use it in index conditions.
pub(super) const NOW: &str =
    "COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())";

/// A `timestamptz` expression as Unix milliseconds.
fn millis(expr: &str) -> String {
    format!("floor(extract(epoch FROM {expr}) * 1000)::int8")
}

/// The columns [`super::row::message`] reads, with their SQL types as selected:
/// timestamps leave as Unix milliseconds (`int8`). One list for the select list
/// ([`columns`]) and for the result type of the cycle function (`sql/cycle.rs`).
pub(crate) const MESSAGE_COLUMNS: [(&str, &str); 19] = [
    ("outbox_id", "uuid"),
    ("seq", "int8"),
    ("lane", "text"),
    ("target", "text"),
    ("payload", "json"),
    ("headers", "jsonb"),
    ("ordering_key", "text"),
    ("dedupe_key", "text"),
    ("status", "text"),
    ("attempt_count", "int8"),
    ("max_attempts", "int8"),
    ("available_at", "int8"),
    ("claimed_by", "text"),
    ("claim_token", "uuid"),
    ("lease_expires_at", "int8"),
    ("last_error", "text"),
    ("created_at", "int8"),
    ("updated_at", "int8"),
    ("delivered_at", "int8"),
];

/// The select list [`super::row::message`] reads, for table alias `a`.
pub(crate) fn columns(a: &str) -> String {
    MESSAGE_COLUMNS
        .iter()
        .map(|(name, _)| {
            if name.ends_with("_at") {
                format!("{} AS {name}", millis(&format!("{a}.{name}")))
            } else {
                format!("{a}.{name}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The [`crate::store::MessageFilter`] fields other than status, for alias `a`, bound at
/// `$n` (lane), `$n+1` (target), `$n+2` (ordering key), `$n+3` (ids, empty for any),
/// `$n+4` and `$n+5` (enqueued at or after, before: Unix milliseconds) and `$n+6` (error
/// text): seven values, bound by `admin.rs`'s `bind_filter`.
fn filter(a: &str, n: usize) -> String {
    format!(
        "(${n}::text IS NULL OR {a}.lane = ${n}) \
         AND (${n1}::text IS NULL OR {a}.target = ${n1}) \
         AND (${n2}::text IS NULL OR {a}.ordering_key = ${n2}) \
         AND (cardinality(${n3}::uuid[]) = 0 OR {a}.outbox_id = ANY(${n3})) \
         AND (${n4}::int8 IS NULL OR {a}.created_at >= {after}) \
         AND (${n5}::int8 IS NULL OR {a}.created_at < {before}) \
         AND (${n6}::text IS NULL OR strpos({a}.last_error, ${n6}) > 0)",
        n1 = n + 1,
        n2 = n + 2,
        n3 = n + 3,
        n4 = n + 4,
        n5 = n + 5,
        n6 = n + 6,
        after = instant(&format!("${}", n + 4)),
        before = instant(&format!("${}", n + 5)),
    )
}

/// The `timestamptz` of the Unix milliseconds at parameter `param` (e.g. `$5`).
pub(super) fn instant(param: &str) -> String {
    format!("(timestamptz 'epoch' + {param}::int8 * interval '1 millisecond')")
}

/// One `pg_notify` per distinct (lane, target) of the rows CTE `rows` returned, on the
/// channel bound at `$ch`. PostgreSQL folds identical notifications of one transaction into
/// one, so a transaction that enqueues many rows wakes each lane once.
fn wake(rows: &str, ch: usize) -> String {
    format!(
        "wake AS (SELECT pg_notify(${ch}, w.lane || E'\\t' || w.target) \
                  FROM (SELECT DISTINCT lane, target FROM {rows}) w)"
    )
}

/// The ack of the claims whose ids and tokens are bound at `ids` and `tokens`: one
/// statement that answers the ordinals of the claims applied, and the keys they leave for
/// `promote_heads`. Also the first step of the cycle function (`sql/cycle.rs`).
pub(crate) fn ack(t: &str, ids: &str, tokens: &str) -> String {
    format!(
        "WITH input AS (
            SELECT * FROM unnest({ids}::uuid[], {tokens}::uuid[])
            WITH ORDINALITY AS i(outbox_id, claim_token, ord)
         )
         UPDATE {t} m SET status = 'delivered', delivered_at = {NOW},
                claimed_by = NULL, claim_token = NULL, lease_expires_at = NULL,
                updated_at = {NOW}
         FROM input i
         WHERE m.outbox_id = i.outbox_id AND m.status = 'claimed'
           AND m.claim_token = i.claim_token
         RETURNING i.ord, m.lane, m.target, m.ordering_key"
    )
}

/// The ack that deletes (`keep_delivered = false`) the claims whose ids and tokens are
/// bound at `ids` and `tokens`, under the same fencing as [`ack`], answering the same
/// columns (the keys it took out of live, for `promote_heads`).
pub(crate) fn ack_delete(t: &str, ids: &str, tokens: &str) -> String {
    format!(
        "WITH input AS (
            SELECT * FROM unnest({ids}::uuid[], {tokens}::uuid[])
            WITH ORDINALITY AS i(outbox_id, claim_token, ord)
         )
         DELETE FROM {t} m
         USING input i
         WHERE m.outbox_id = i.outbox_id AND m.status = 'claimed'
           AND m.claim_token = i.claim_token
         RETURNING i.ord, m.lane, m.target, m.ordering_key"
    )
}

/// A statement of `sql/*.sql`, written for the default names, for `names`
/// ([`super::schema::for_names`]).
fn file(names: &Names, text: &str) -> Arc<str> {
    super::schema::for_names(names, text).into()
}

/// Every statement of one store.
#[derive(Debug)]
pub(crate) struct Statements {
    pub(crate) enqueue: Arc<str>,
    pub(crate) find_dedupe: Arc<str>,
    pub(crate) delete_ids: Arc<str>,
    /// One claim statement per ordering policy (see `claim.rs`).
    pub(crate) claim_skip: Arc<str>,
    pub(crate) claim_block: Arc<str>,
    /// The one-statement claim per ordering policy, without dead-lettering (`claim.rs`).
    pub(crate) claim_fast_skip: Arc<str>,
    pub(crate) claim_fast_block: Arc<str>,
    pub(crate) ack: Arc<str>,
    pub(crate) ack_delete: Arc<str>,
    pub(crate) nack: Arc<str>,
    pub(crate) extend_lease: Arc<str>,
    pub(crate) release: Arc<str>,
    pub(crate) next_due_skip: Arc<str>,
    pub(crate) next_due_block: Arc<str>,
    pub(crate) stats: Arc<str>,
    pub(crate) lanes_stats: Arc<str>,
    /// `SELECT promote_heads($1 lanes, $2 targets, $3 keys)`: see schema/heads.rs.
    pub(crate) promote_heads: Arc<str>,
    pub(crate) get: Arc<str>,
    pub(crate) requeue: Arc<str>,
    pub(crate) discard: Arc<str>,
    pub(crate) purge: Arc<str>,
    pub(crate) purge_count: Arc<str>,
    /// The cycle function (`cycle.rs`): its name, which carries a hash of its text, the
    /// `CREATE FUNCTION` that `migrate` runs when the database lacks it, and its call.
    pub(crate) cycle_name: String,
    pub(crate) cycle_create: String,
    pub(crate) cycle: Arc<str>,
}

impl Statements {
    /// `async_commit`: the one-statement claim commits asynchronously
    /// ([`super::PostgresConfig::synchronous_commit`] false).
    pub(crate) fn new(names: &Names, async_commit: bool) -> Self {
        let t = &names.messages;
        let cols_m = columns("m");
        let promote = super::schema::heads::promote_inline(names, "v_lanes", "v_targets", "v_keys");
        let cycle_body = cycle::body(t, &promote, &cols_m);
        let cycle_name = format!(
            "\"{}\".\"{}_cycle_{:08x}\"",
            names.schema,
            names.prefix,
            super::schema::fnv1a64(cycle_body.as_bytes()) as u32
        );
        Self {
            cycle_create: cycle::create(&cycle_name, &cycle_body),
            cycle: cycle::call(&cycle_name).into(),
            cycle_name,
            // $1 now, $2 channel, $3.. one array per draft field. Rows are inserted in
            // draft order, so `seq` follows it. `key_head`: the first row of a key that has
            // no live row is its head; the deferred `check_head` trigger looks again at
            // commit for the others (schema/heads.rs). A dedupe key already taken inserts nothing
            // (the caller then reads the holder); ON CONFLICT waits for a concurrent
            // inserter of the same key to finish first, so racing enqueues never error.
            // $12 claimed_by, $13 claim_token, $14 lease in ms: NULL for a pending row; set
            // for a draft handed off to a lane of this process (`store::hand_off`), written
            // claimed at its first attempt, as a claim would, and not notified.
            enqueue: format!(
                "WITH draft AS (
                    SELECT * FROM unnest($3::uuid[], $4::text[], $5::text[], $6::text[],
                                         $7::jsonb[], $8::text[], $9::text[], $10::int8[],
                                         $11::int8[], $12::text[], $13::uuid[], $14::int8[])
                    WITH ORDINALITY AS d(outbox_id, lane, target, payload, headers,
                                         ordering_key, dedupe_key, delay_ms, max_attempts,
                                         claimed_by, claim_token, lease_ms, ord)
                 ),
                 ranked AS (
                    SELECT d.*, row_number() OVER (
                        PARTITION BY d.lane, d.target, d.ordering_key ORDER BY d.ord) AS nth
                    FROM draft d
                 ),
                 ins AS (
                    INSERT INTO {t} AS m (outbox_id, lane, target, payload, headers,
                        ordering_key, dedupe_key, status, attempt_count, max_attempts,
                        available_at, created_at, updated_at, key_head,
                        claimed_by, claim_token, lease_expires_at)
                    SELECT d.outbox_id, d.lane, d.target, d.payload::json, d.headers, d.ordering_key,
                           d.dedupe_key,
                           CASE WHEN d.claim_token IS NULL THEN 'pending' ELSE 'claimed' END,
                           CASE WHEN d.claim_token IS NULL THEN 0 ELSE 1 END, d.max_attempts,
                           {NOW} + d.delay_ms * interval '1 millisecond', {NOW}, {NOW},
                           d.ordering_key IS NULL OR (d.nth = 1 AND NOT {live_key}),
                           d.claimed_by, d.claim_token,
                           {NOW} + d.lease_ms * interval '1 millisecond'
                    FROM ranked d ORDER BY d.ord
                    ON CONFLICT (lane, target, dedupe_key) WHERE dedupe_key IS NOT NULL
                    DO NOTHING
                    RETURNING {cols_m}
                 ),
                 {wake}
                 SELECT ins.*, (SELECT count(*) FROM wake) AS woken FROM ins",
                wake = wake("ins WHERE ins.status = 'pending'", 2),
                live_key = live_exists(t, "e", &KeyOf::of("d"), " OFFSET 0"),
            )
            .into(),
            // $1 lanes, $2 targets, $3 dedupe keys.
            find_dedupe: format!(
                "SELECT {cols_m} FROM {t} m
                 JOIN unnest($1::text[], $2::text[], $3::text[]) AS k(lane, target, dedupe_key)
                   ON m.lane = k.lane AND m.target = k.target AND m.dedupe_key = k.dedupe_key"
            )
            .into(),
            delete_ids: file(names, include_str!("sql/delete_ids.sql")),
            claim_skip: claim::claim(t, &cols_m, OrderingPolicy::Skip).into(),
            claim_block: claim::claim(t, &cols_m, OrderingPolicy::Block).into(),
            claim_fast_skip: claim::claim_fast(t, &cols_m, OrderingPolicy::Skip, async_commit)
                .into(),
            claim_fast_block: claim::claim_fast(t, &cols_m, OrderingPolicy::Block, async_commit)
                .into(),
            // $1 now, $2 ids, $3 tokens.
            ack: ack(t, "$2", "$3").into(),
            // $1 ids, $2 tokens.
            ack_delete: ack_delete(t, "$1", "$2").into(),
            nack: file(names, include_str!("sql/nack.sql")),
            extend_lease: file(names, include_str!("sql/extend_lease.sql")),
            // $1 now, $2 ids, $3 tokens, $4 channel.
            release: format!(
                "WITH input AS (
                    SELECT * FROM unnest($2::uuid[], $3::uuid[])
                    WITH ORDINALITY AS i(outbox_id, claim_token, ord)
                 ),
                 upd AS (
                    UPDATE {t} m SET status = 'pending', available_at = {NOW},
                           attempt_count = GREATEST(m.attempt_count - 1, 0),
                           claimed_by = NULL, claim_token = NULL, lease_expires_at = NULL,
                           updated_at = {NOW}
                    FROM input i
                    WHERE m.outbox_id = i.outbox_id AND m.status = 'claimed'
                      AND m.claim_token = i.claim_token
                    RETURNING i.ord, m.lane, m.target
                 ),
                 {wake}
                 SELECT upd.ord, (SELECT count(*) FROM wake) AS woken FROM upd",
                wake = wake("upd", 4),
            )
            .into(),
            next_due_skip: claim::next_due(t, OrderingPolicy::Skip).into(),
            next_due_block: claim::next_due(t, OrderingPolicy::Block).into(),
            promote_heads: format!(
                "SELECT {}($1::text[], $2::text[], $3::text[])",
                names.promote_heads
            )
            .into(),
            // $1 now, $2 lanes, $3 targets (one element each per lane): the stats of each
            // lane, each figure from one partial index (index-only counts, one descent per
            // lane), none from a scan of the table: a relay samples all its lanes with one
            // statement. Blocked keys: a key is blocked when a dead letter has a live row
            // after it and none before it (then its first dead letter comes before its
            // head); four probes per dead letter, two per key index (OFFSET 0 keeps each a
            // probe even before ANALYZE, when the planner once read the whole live index
            // instead: it stops PostgreSQL from making an EXISTS an anti-join or a hashed
            // subplan). The oldest pending age counts only due rows (a message delayed by an
            // hour is not old): read in created_at order, stopping at the first due one.
            // `created_at IS NOT NULL` (always true) names `pending_idx`'s predicate, which
            // no key probe names (migration 4, schema/key_queue.rs).
            lanes_stats: format!(
                "SELECT q.lane, q.target,
                    (SELECT count(*) FROM {t} m WHERE m.lane = q.lane AND m.target = q.target
                       AND m.status = 'pending' AND m.created_at IS NOT NULL) AS pending,
                    (SELECT count(*) FROM {t} m WHERE m.lane = q.lane AND m.target = q.target
                       AND m.status = 'claimed') AS claimed,
                    (SELECT count(*) FROM {t} m WHERE m.lane = q.lane AND m.target = q.target
                       AND m.status = 'delivered') AS delivered,
                    (SELECT count(*) FROM {t} m WHERE m.lane = q.lane AND m.target = q.target
                       AND m.status = 'dead_letter') AS dead_letter,
                    (SELECT {age} FROM {t} m WHERE m.lane = q.lane AND m.target = q.target
                       AND m.status = 'pending' AND m.created_at IS NOT NULL
                       AND m.available_at <= {NOW}
                     ORDER BY m.created_at LIMIT 1) AS oldest_pending_ms,
                    (SELECT count(DISTINCT d.ordering_key) FROM {t} d
                     WHERE d.lane = q.lane AND d.target = q.target AND d.status = 'dead_letter'
                       AND d.ordering_key IS NOT NULL
                       AND {behind} AND NOT {before})
                    AS blocked_keys
                 FROM unnest($2::text[], $3::text[]) AS q(lane, target)",
                age = millis(&format!("({NOW} - m.created_at)")),
                behind = live_exists(t, "l", &KeyOf::of("d"), " AND l.seq > d.seq OFFSET 0"),
                before = live_exists(t, "f", &KeyOf::of("d"), " AND f.seq < d.seq OFFSET 0"),
            )
            .into(),
            // $1 now, $2..$8 filter: any filter, for admin tools (a relay's lanes use
            // `lanes_stats`). A blocked key: a live row with a dead-lettered earlier row of its
            // key that no live row comes before (so before the key's head), all among the rows
            // the filter selects.
            stats: format!(
                "SELECT m.lane, m.target,
                    count(*) FILTER (WHERE m.status = 'pending') AS pending,
                    count(*) FILTER (WHERE m.status = 'claimed') AS claimed,
                    count(*) FILTER (WHERE m.status = 'delivered') AS delivered,
                    count(*) FILTER (WHERE m.status = 'dead_letter') AS dead_letter,
                    {oldest} AS oldest_pending_ms,
                    (SELECT count(DISTINCT l.ordering_key) FROM {t} l
                     WHERE l.lane = m.lane AND l.target = m.target AND {filter_l}
                       AND l.ordering_key IS NOT NULL AND l.status IN ('pending', 'claimed')
                       AND EXISTS (
                         SELECT 1 FROM {t} d
                         WHERE d.lane = l.lane AND d.target = l.target
                           AND d.ordering_key = l.ordering_key AND d.status = 'dead_letter'
                           AND d.seq < l.seq AND {filter_d}
                           AND NOT {before})) AS blocked_keys
                 FROM {t} m WHERE {filter_m}
                 GROUP BY m.lane, m.target",
                oldest = millis(&format!(
                    "({NOW} - min(m.created_at) FILTER (
                        WHERE m.status = 'pending' AND m.available_at <= {NOW}))"
                )),
                filter_l = filter("l", 2),
                filter_d = filter("d", 2),
                before = live_exists(
                    t,
                    "f",
                    &KeyOf::of("d"),
                    &format!(" AND f.seq < d.seq AND {} OFFSET 0", filter("f", 2)),
                ),
                filter_m = filter("m", 2),
            )
            .into(),
            // $1 id.
            get: format!("SELECT {cols_m} FROM {t} m WHERE m.outbox_id = $1").into(),
            // $1 now, $2..$8 filter, $9 channel. A requeued row is marked a head: it may be
            // earlier than its key's head; if not, the mark costs a claim one skipped row.
            requeue: format!(
                "WITH upd AS (
                    UPDATE {t} m SET status = 'pending', attempt_count = 0,
                           available_at = {NOW}, updated_at = {NOW}, key_head = true
                    WHERE m.status = 'dead_letter' AND {filter}
                    RETURNING m.lane, m.target
                 ),
                 {wake}
                 SELECT upd.lane, upd.target, count(*) AS requeued,
                        (SELECT count(*) FROM wake) AS woken
                 FROM upd GROUP BY upd.lane, upd.target",
                filter = filter("m", 2),
                wake = wake("upd", 9),
            )
            .into(),
            // $1..$7 filter.
            discard: format!(
                "DELETE FROM {t} m WHERE m.status = 'dead_letter' AND {filter}",
                filter = filter("m", 1),
            )
            .into(),
            purge: file(names, include_str!("sql/purge.sql")),
            purge_count: file(names, include_str!("sql/purge_count.sql")),
        }
    }
}

#[cfg(test)]
mod tests;
