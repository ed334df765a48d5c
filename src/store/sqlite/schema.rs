//! The text of every fixed statement the store runs, and the migrations that make the
//! table and indexes they read (in `schema/migrations.rs`). The table prefix is a validated identifier, so it
//! is spliced into the SQL once, at open; values are always bound.

use std::collections::BTreeSet;
use std::sync::{Arc, LazyLock};

use crate::message::ValidationError;
use crate::store::OrderingPolicy;

/// The longest table prefix accepted.
pub const MAX_TABLE_PREFIX_LEN: usize = 32;

/// The columns every query that reads messages selects, in the order `row::decode` reads.
pub(super) const COLUMNS: &str = "seq, outbox_id, lane, target, payload, headers, \
     ordering_key, dedupe_key, status, attempt_count, max_attempts, available_at, \
     claimed_by, claim_token, lease_expires_at, last_error, created_at, updated_at, \
     delivered_at";

/// Checks a table prefix: empty, or an SQL identifier start of at most
/// [`MAX_TABLE_PREFIX_LEN`] ASCII letters, digits and underscores, not starting with a digit.
pub(super) fn validate_table_prefix(prefix: &str) -> Result<(), ValidationError> {
    const FIELD: &str = "table_prefix";
    if prefix.len() > MAX_TABLE_PREFIX_LEN {
        return Err(ValidationError::new(
            FIELD,
            format!(
                "is {} characters, over the limit of {MAX_TABLE_PREFIX_LEN}",
                prefix.len()
            ),
        ));
    }
    if prefix.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(ValidationError::new(FIELD, "must not start with a digit"));
    }
    // SQLite refuses to create tables named sqlite_* (its own): say so before it does.
    if prefix.to_ascii_lowercase().starts_with("sqlite_") {
        return Err(ValidationError::new(
            FIELD,
            format!("{prefix:?} starts with \"sqlite_\", which SQLite reserves for its own tables"),
        ));
    }
    if let Some(bad) = prefix
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_'))
    {
        return Err(ValidationError::new(
            FIELD,
            format!("contains {bad:?}; use only ASCII letters, digits and '_'"),
        ));
    }
    Ok(())
}

mod migrations;

pub(super) use migrations::{latest_version, next_migration, script, MIGRATIONS_TABLE};

/// The names the migration files create (tables, indexes, triggers, views): `outbox` and
/// `outbox_*`, the only words [`for_table`] renames.
static CREATED: LazyLock<BTreeSet<&'static str>> = LazyLock::new(|| {
    let mut names = BTreeSet::new();
    for text in migrations::texts() {
        let words: Vec<&str> = pieces(text)
            .filter_map(|(word, piece)| word.then_some(piece))
            .collect();
        let mut rest = words.as_slice();
        while let Some((first, tail)) = rest.split_first() {
            rest = tail;
            if !first.eq_ignore_ascii_case("CREATE") {
                continue;
            }
            // CREATE [UNIQUE] TABLE|INDEX|TRIGGER|VIEW [IF NOT EXISTS] name
            let mut after = tail;
            if after
                .first()
                .is_some_and(|w| w.eq_ignore_ascii_case("UNIQUE"))
            {
                after = &after[1..];
            }
            after = after.get(1..).unwrap_or_default();
            if after.first().is_some_and(|w| w.eq_ignore_ascii_case("IF")) {
                after = after.get(3..).unwrap_or_default();
            }
            if let Some(name) = after.first() {
                names.insert(*name);
            }
        }
    }
    names
});

/// The pieces of `sql` in order, each with whether it is a word (a run of ASCII letters,
/// digits and `_`) of the SQL itself: string literals, quoted identifiers and `--`
/// comments are pieces of their own that are not words, whatever they hold.
fn pieces(sql: &str) -> impl Iterator<Item = (bool, &str)> {
    let is_word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let bytes = sql.as_bytes();
    let mut at = 0;
    std::iter::from_fn(move || {
        let start = at;
        let first = *bytes.get(start)?;
        let end = |from: usize, stop: &dyn Fn(u8) -> bool| {
            bytes[from..]
                .iter()
                .position(|b| stop(*b))
                .map_or(bytes.len(), |n| from + n)
        };
        let word = is_word(first);
        at = match first {
            b'\'' | b'"' => (end(start + 1, &|b| b == first) + 1).min(bytes.len()),
            b'-' if bytes.get(start + 1) == Some(&b'-') => end(start, &|b| b == b'\n'),
            _ if word => end(start, &|b| !is_word(b)),
            // Up to the next byte that can start a piece: never inside a UTF-8 character.
            _ => end(start + 1, &|b| {
                is_word(b) || matches!(b, b'\'' | b'"' | b'-')
            }),
        };
        Some((word, &sql[start..at]))
    })
}

/// `sql`, written for the default table `outbox`, for the table `table` (the table prefix,
/// then `outbox`): each word that names an object the migration files create (`outbox`,
/// `outbox_counts`, `outbox_key_live`, …) has its leading `outbox` replaced by `table`.
/// Nothing else changes: not a column such as `outbox_id`, not a string literal, not a
/// comment, not a quoted identifier (so the files name their objects unquoted). The one
/// substitution for the SQL the store reads from files.
pub(super) fn for_table(sql: &str, table: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 16 * (table.len() + 1));
    for (word, piece) in pieces(sql) {
        match piece.strip_prefix("outbox") {
            Some(rest) if word && CREATED.contains(piece) => {
                out.push_str(table);
                out.push_str(rest);
            }
            _ => out.push_str(piece),
        }
    }
    out
}

/// The term that lets a probe use the partial index `{t}_key_live`: SQLite proves a partial
/// index usable only from a WHERE term that repeats the index's own, so a probe for
/// `status = 'pending'` carries it too (the equality still bounds the search).
pub(super) const LIVE: &str = "status IN ('pending', 'claimed')";

/// "Does the per-key rule hold back head `c`?", with `?1` the clock's now. A head is held by
/// another row of its key claimed under a lease that has not lapsed (a requeued dead head
/// must not run beside its successor) and, under `Block` only (`{block}`), by an earlier
/// dead letter. Each is an index probe, on `{t}_key_live` and `{t}_dead_keys`; whether `c`
/// heads its key at all is its `key_head` mark.
const KEY_HELD: &str = "(c.ordering_key IS NOT NULL AND (
        EXISTS (SELECT 1 FROM {t} e INDEXED BY {t}_key_live
            WHERE e.lane = c.lane AND e.target = c.target
            AND e.ordering_key = c.ordering_key AND e.status = 'claimed' AND e.{live}
            AND e.seq <> c.seq AND e.lease_expires_at > ?1){block}))";

/// The `Block` addition to [`KEY_HELD`].
const HELD_BY_DEAD: &str = "
        OR EXISTS (SELECT 1 FROM {t} e INDEXED BY {t}_dead_keys
            WHERE e.lane = c.lane AND e.target = c.target
            AND e.ordering_key = c.ordering_key AND e.status = 'dead_letter'
            AND e.seq < c.seq)";

/// The last seq of the key run behind head `c` (`?5` the run's length, at least 2; `?1`
/// now): the key's next pending rows by seq, at most `?5 - 1` of them, cut before the first
/// that is not due, before the key's next claimed row and, under `Block` only
/// (`{run_block}`), before its next dead letter. `c.seq` itself when nothing follows. Each
/// term is an index range on `{t}_key_live` (`{t}_dead_keys` for dead letters) that stops within the run's length (or one
/// probe), so a hot key's backlog behind the run is never read.
const RUN_END: &str = "MIN(
        COALESCE((SELECT COALESCE(MIN(CASE WHEN w.available_at > ?1 THEN w.seq END) - 1,
                MAX(w.seq))
            FROM (SELECT e.seq, e.available_at FROM {t} e INDEXED BY {t}_key_live
                WHERE e.lane = c.lane AND e.target = c.target
                AND e.ordering_key = c.ordering_key AND e.status = 'pending' AND e.{live}
                AND e.seq > c.seq ORDER BY e.seq LIMIT ?5 - 1) AS w), c.seq),
        COALESCE((SELECT e.seq FROM {t} e INDEXED BY {t}_key_live
            WHERE e.lane = c.lane AND e.target = c.target
            AND e.ordering_key = c.ordering_key AND e.status = 'claimed' AND e.{live}
            AND e.seq > c.seq ORDER BY e.seq LIMIT 1) - 1, 9223372036854775807){run_block})";

/// The `Block` addition to [`RUN_END`]: a dead letter behind the head ends the run.
const RUN_STOPS_AT_DEAD: &str = ",
        COALESCE((SELECT e.seq FROM {t} e INDEXED BY {t}_dead_keys
            WHERE e.lane = c.lane AND e.target = c.target
            AND e.ordering_key = c.ordering_key AND e.status = 'dead_letter'
            AND e.seq > c.seq ORDER BY e.seq LIMIT 1) - 1, 9223372036854775807)";

/// The (outbox_id, claim_token) pairs of a batch statement, from `json_each(?1)` over
/// `[[outbox_id, claim_token], ...]`.
const GIVEN_CLAIMS: &str = "(SELECT json_extract(value, '$[0]') AS id,
            json_extract(value, '$[1]') AS token
        FROM json_each(?1)) AS given";

/// The ack, for the rows named in ?1 (`[[outbox_id, claim_token], ...]`) still claimed
/// under their token, and `{only}` (empty, or a further condition); ?2 now.
const ACK: &str = "UPDATE {t} SET status = 'delivered', delivered_at = ?2,
        claimed_by = NULL, claim_token = NULL, lease_expires_at = NULL,
        updated_at = ?2
    FROM {given_claims}
    WHERE {t}.outbox_id = given.id AND +{t}.status = 'claimed'
        AND {t}.claim_token = given.token {only}
    RETURNING outbox_id";

/// The ack that deletes (`keep_delivered = false`), for the rows named in ?1 as for
/// [`ACK`] still claimed under their token, and `{only}`. SQLite's DELETE takes no FROM:
/// the (id, token) pairs are a row-value IN, which probes the id's unique index per pair.
/// The triggers `head_on_delete` and `count_delete` keep the key heads and counts.
const ACK_DELETE: &str = "DELETE FROM {t}
    WHERE (outbox_id, claim_token) IN (SELECT json_extract(value, '$[0]'),
            json_extract(value, '$[1]') FROM json_each(?1))
        AND +status = 'claimed' {only}
    RETURNING outbox_id";

/// The statements whose plan depends on the ordering policy: one text per policy, never a
/// bind parameter, so each gets the plan made for it. Binds: now, lane, target, limit.
#[derive(Debug)]
pub(super) struct PolicyStatements {
    /// Lapsed claims on their last attempt that head their key, earliest lapse first.
    pub(super) claim_doomed: Arc<str>,
    /// Lapsed claims with attempts left that head their key, earliest lapse first.
    pub(super) claim_lapsed: Arc<str>,
    /// Due pending key heads, in (available_at, seq) order.
    pub(super) claim_ready: Arc<str>,
    /// Due pending key heads as `claim_ready` picks them, each followed by its key run
    /// (see [`RUN_END`]) in seq order; the limit counts every row. One more bind: ?5 the
    /// run's length, at least 2 (a run of 1 is `claim_ready`).
    pub(super) claim_runs: Arc<str>,
    /// The earliest of: the next lapse, a lapsed head, the first pending head.
    pub(super) next_due: Arc<str>,
}

/// The fixed statements, with the table name filled in once at open.
#[derive(Debug)]
pub(super) struct Statements {
    pub(super) table: String,
    pub(super) migrations_table: String,
    /// `{table}_counts`: rows per (lane, target, status), kept by triggers.
    pub(super) counts_table: String,
    /// Messages by dedupe slot. Binds: lane, target, dedupe_key.
    pub(super) find_dedupe: Arc<str>,
    pub(super) insert: Arc<str>,
    pub(super) skip: PolicyStatements,
    pub(super) block: PolicyStatements,
    pub(super) dead_letter_lapsed: Arc<str>,
    pub(super) mark_claimed: Arc<str>,
    /// Dead-letters claimed rows that cannot be read (`store/unreadable.rs`), fenced on
    /// their claim tokens.
    pub(super) dead_letter_unreadable: Arc<str>,
    /// `ack` for the rows an ack takes first: rows without a key, and keyed rows without
    /// the head mark (queued behind their key's head). See `write/fenced.rs`, `ack`.
    pub(super) ack_first: Arc<str>,
    pub(super) ack: Arc<str>,
    /// [`ACK_DELETE`], as `ack_first` and `ack` split it.
    pub(super) ack_delete_first: Arc<str>,
    pub(super) ack_delete: Arc<str>,
    pub(super) nack: Arc<str>,
    pub(super) extend: Arc<str>,
    pub(super) release: Arc<str>,
    /// When the oldest due pending row of a lane was enqueued. Binds: now, lane, target.
    pub(super) oldest_due: Arc<str>,
    pub(super) get: Arc<str>,
    pub(super) purge_batch: Arc<str>,
    pub(super) purge_count: Arc<str>,
}

impl Statements {
    pub(super) fn new(prefix: &str) -> Self {
        let table = format!("{prefix}outbox");
        let t = |sql: &str| -> Arc<str> {
            sql.replace("{given_claims}", GIVEN_CLAIMS)
                .replace("{cols}", COLUMNS)
                .replace("{live}", LIVE)
                .replace("{t}", &table)
                .into()
        };
        let policy = |block: &str, run_block: &str| {
            let held = KEY_HELD.replace("{block}", block);
            let run_end = RUN_END.replace("{run_block}", run_block);
            let p = |sql: &str| {
                t(&sql
                    .replace("{key_held}", &held)
                    .replace("{run_end}", &run_end))
            };
            PolicyStatements {
                claim_doomed: p("SELECT c.seq, c.outbox_id FROM {t} c
                    WHERE c.lane = ?2 AND c.target = ?3 AND c.status = 'claimed'
                        AND c.lease_expires_at <= ?1 AND c.key_head = 1
                        AND c.attempt_count >= c.max_attempts AND NOT {key_held}
                    ORDER BY c.lease_expires_at, c.seq"),
                claim_lapsed: p("SELECT c.seq FROM {t} c
                    WHERE c.lane = ?2 AND c.target = ?3 AND c.status = 'claimed'
                        AND c.lease_expires_at <= ?1 AND c.key_head = 1
                        AND c.attempt_count < c.max_attempts AND NOT {key_held}
                    ORDER BY c.lease_expires_at, c.seq
                    LIMIT ?4"),
                claim_ready: p("SELECT c.seq FROM {t} c
                    WHERE c.lane = ?2 AND c.target = ?3 AND c.status = 'pending'
                        AND c.key_head = 1 AND c.available_at <= ?1 AND NOT {key_held}
                    ORDER BY c.available_at, c.seq
                    LIMIT ?4"),
                // The heads of `claim_ready`, each joined to itself and its run: a row
                // without a key joins nothing and stands alone (`r.seq` NULL); a keyed head
                // is the first row of its own run range. The order is the heads' index
                // order, then each run's key-index order, so no sort: the statement stops
                // reading heads once the limit is reached, runs included.
                claim_runs: p("SELECT COALESCE(r.seq, c.seq) FROM {t} c
                    LEFT JOIN {t} r INDEXED BY {t}_key_live
                        ON r.lane = c.lane AND r.target = c.target
                        AND r.ordering_key = c.ordering_key AND r.status = 'pending'
                        AND r.{live}
                        AND r.seq >= c.seq AND r.seq <= {run_end}
                    WHERE c.lane = ?2 AND c.target = ?3 AND c.status = 'pending'
                        AND c.key_head = 1 AND c.available_at <= ?1 AND NOT {key_held}
                    ORDER BY c.available_at, c.seq, r.seq
                    LIMIT ?4"),
                // A running lease always counts (its lapse frees the row or its key); a row
                // its key holds back does not (its key's head is counted instead). Each
                // branch reads its index in order and stops at the first row that counts.
                next_due: p("SELECT MIN(due) FROM (
                    SELECT (SELECT c.lease_expires_at FROM {t} c
                        WHERE c.lane = ?2 AND c.target = ?3 AND c.status = 'claimed'
                            AND c.lease_expires_at > ?1
                        ORDER BY c.lease_expires_at LIMIT 1) AS due
                    UNION ALL
                    SELECT (SELECT c.lease_expires_at FROM {t} c
                        WHERE c.lane = ?2 AND c.target = ?3 AND c.status = 'claimed'
                            AND c.lease_expires_at <= ?1 AND c.key_head = 1
                            AND NOT {key_held}
                        ORDER BY c.lease_expires_at, c.seq LIMIT 1)
                    UNION ALL
                    SELECT (SELECT c.available_at FROM {t} c
                        WHERE c.lane = ?2 AND c.target = ?3 AND c.status = 'pending'
                            AND c.key_head = 1 AND NOT {key_held}
                        ORDER BY c.available_at, c.seq LIMIT 1))"),
            }
        };
        Self {
            migrations_table: format!("{prefix}outbox_migrations"),
            counts_table: format!("{table}_counts"),
            find_dedupe: t("SELECT {cols} FROM {t}
                WHERE lane = ?1 AND target = ?2 AND dedupe_key = ?3"),
            insert: t("INSERT INTO {t} (outbox_id, lane, target, payload, headers,
                    ordering_key, dedupe_key, status, attempt_count, max_attempts,
                    available_at, created_at, updated_at)
                VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'pending', 0, ?8, ?9, ?10, ?10)
                RETURNING seq"),
            skip: policy("", ""),
            block: policy(HELD_BY_DEAD, RUN_STOPS_AT_DEAD),
            // The batch statements below read their rows from `json_each(?1)`, a JSON
            // array built by `write.rs`: one statement per call, whatever its size. Each
            // drives its loop from the array and finds the row by a key (the rowid or the
            // `outbox_id` index), so its cost is the rows it names. The unary `+` on
            // `status = 'claimed'` keeps the planner off the partial index `_leases`: with
            // statistics that show few claimed rows it would otherwise read every claim of
            // every lane and probe the array for each.
            //
            // ?1 `[seq, ...]`, ?2 error, ?3 now.
            dead_letter_lapsed: t("UPDATE {t} SET status = 'dead_letter', last_error = ?2,
                    claimed_by = NULL, claim_token = NULL, lease_expires_at = NULL,
                    updated_at = ?3
                WHERE seq IN (SELECT value FROM json_each(?1))"),
            // ?1 `[[seq, claim_token], ...]`, ?2 consumer, ?3 lease end, ?4 now.
            mark_claimed: t("UPDATE {t} SET status = 'claimed',
                    attempt_count = attempt_count + 1, claimed_by = ?2,
                    claim_token = given.token, lease_expires_at = ?3, updated_at = ?4
                FROM (SELECT json_extract(value, '$[0]') AS pick,
                        json_extract(value, '$[1]') AS token
                    FROM json_each(?1)) AS given
                WHERE {t}.seq = given.pick
                RETURNING {cols}"),
            // ?1 `[[seq, claim_token, error], ...]`, ?2 now. By seq, not id: the id of an
            // unreadable row may be what cannot be read.
            dead_letter_unreadable: t("UPDATE {t} SET status = 'dead_letter',
                    last_error = given.error, claimed_by = NULL, claim_token = NULL,
                    lease_expires_at = NULL, updated_at = ?2
                FROM (SELECT json_extract(value, '$[0]') AS pick,
                        json_extract(value, '$[1]') AS token,
                        json_extract(value, '$[2]') AS error
                    FROM json_each(?1)) AS given
                WHERE {t}.seq = given.pick AND +{t}.status = 'claimed'
                    AND {t}.claim_token = given.token
                RETURNING seq"),
            // ?1 `[[outbox_id, claim_token], ...]`, ?2 now.
            ack_first: t(&ACK.replace(
                "{only}",
                "AND ({t}.ordering_key IS NULL OR {t}.key_head IS NULL)",
            )),
            ack: t(&ACK.replace("{only}", "")),
            ack_delete_first: t(
                &ACK_DELETE.replace("{only}", "AND (ordering_key IS NULL OR key_head IS NULL)")
            ),
            ack_delete: t(&ACK_DELETE.replace("{only}", "")),
            // ?1 `[[outbox_id, claim_token, error, retry, due], ...]`, where retry is 1 for
            // a retry and 0 for permanent, and due is when a retry is due; ?2 now.
            nack: t("UPDATE {t} SET last_error = given.error,
                    claimed_by = NULL, claim_token = NULL, lease_expires_at = NULL,
                    updated_at = ?2,
                    available_at = CASE WHEN given.retry AND attempt_count < max_attempts
                        THEN given.due ELSE available_at END,
                    status = CASE WHEN given.retry AND attempt_count < max_attempts
                        THEN 'pending' ELSE 'dead_letter' END
                FROM (SELECT json_extract(value, '$[0]') AS id,
                        json_extract(value, '$[1]') AS token,
                        json_extract(value, '$[2]') AS error,
                        json_extract(value, '$[3]') AS retry,
                        json_extract(value, '$[4]') AS due
                    FROM json_each(?1)) AS given
                WHERE {t}.outbox_id = given.id AND +{t}.status = 'claimed'
                    AND {t}.claim_token = given.token
                RETURNING outbox_id, status"),
            // ?1 claims as for ack, ?2 lease end, ?3 now.
            extend: t("UPDATE {t} SET lease_expires_at = ?2, updated_at = ?3
                FROM {given_claims}
                WHERE {t}.outbox_id = given.id AND +{t}.status = 'claimed'
                    AND {t}.claim_token = given.token
                RETURNING outbox_id"),
            // ?1 claims as for ack, ?2 now.
            release: t("UPDATE {t} SET status = 'pending', available_at = ?2,
                    attempt_count = MAX(attempt_count - 1, 0),
                    claimed_by = NULL, claim_token = NULL, lease_expires_at = NULL,
                    updated_at = ?2
                FROM {given_claims}
                WHERE {t}.outbox_id = given.id AND +{t}.status = 'claimed'
                    AND {t}.claim_token = given.token
                RETURNING outbox_id, lane, target"),
            // Enqueue order stands for enqueue time (the clock only moves forward), so the
            // first due row in seq order is the oldest; the rows before it are delayed ones.
            oldest_due: t("SELECT created_at FROM {t}
                WHERE lane = ?2 AND target = ?3 AND status = 'pending' AND available_at <= ?1
                ORDER BY seq LIMIT 1"),
            get: t("SELECT {cols} FROM {t} WHERE outbox_id = ?1"),
            // ?3 status, ?4/?5 lane and target or NULL for every lane, ?6 whether rows
            // with an ordering key are kept (dead letters of a `Block` lane). The literal IN
            // repeats what ?3 can be, so the planner may use the partial index
            // `_finished` (it cannot prove a bound status matches the index's WHERE).
            purge_batch: t("DELETE FROM {t} WHERE seq IN (
                SELECT seq FROM {t}
                WHERE status IN ('delivered', 'dead_letter') AND status = ?3
                  AND updated_at < ?1
                  AND (?4 IS NULL OR (lane = ?4 AND target = ?5))
                  AND (?6 = 0 OR ordering_key IS NULL)
                LIMIT ?2)"),
            // What purge_batch would delete, all batches together (a dry run).
            purge_count: t("SELECT count(*) FROM {t}
                WHERE status IN ('delivered', 'dead_letter') AND status = ?2
                  AND updated_at < ?1
                  AND (?3 IS NULL OR (lane = ?3 AND target = ?4))
                  AND (?5 = 0 OR ordering_key IS NULL)"),
            table,
        }
    }

    /// The statements for one ordering policy.
    pub(super) fn policy(&self, ordering: OrderingPolicy) -> &PolicyStatements {
        match ordering {
            OrderingPolicy::Skip => &self.skip,
            OrderingPolicy::Block => &self.block,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_prefix_rules() {
        for ok in ["", "app_", "A1_", "_x"] {
            assert!(validate_table_prefix(ok).is_ok(), "{ok:?}");
        }
        for bad in [
            "1app",
            "app-",
            "a b",
            "x\"; DROP TABLE t; --",
            &"x".repeat(33),
        ] {
            let err = validate_table_prefix(bad).unwrap_err();
            assert_eq!(err.field, "table_prefix", "{bad:?}");
        }
    }

    #[test]
    fn statements_name_the_prefixed_table() {
        let sql = Statements::new("app_");
        assert_eq!(sql.table, "app_outbox");
        for statement in [&sql.skip.claim_ready, &sql.block.next_due] {
            assert!(statement.contains("FROM app_outbox c"), "{statement}");
            assert!(!statement.contains('{'), "{statement}");
        }
        assert!(sql.block.claim_ready.contains("'dead_letter'"));
        assert!(!sql.skip.claim_ready.contains("'dead_letter'"));
    }

    /// Only the names the migrations create are renamed: a column that merely starts
    /// with the default name (`outbox_id`), a word that contains it, a string and a comment
    /// keep it.
    #[test]
    fn for_table_renames_only_the_created_names() {
        let sql = "-- outbox_counts of outbox\nSELECT outbox_id, 'outbox', \"outbox\", xoutbox, \
                   outbox_idx, outbox_counts.n FROM outbox JOIN outbox_counts \
                   INDEXED BY outbox_key_live WHERE outbox.seq > 0 -- outbox\n\
                   AND x = 'it''s outbox' -- é\nAND y = 'é outbox'";
        assert_eq!(
            for_table(sql, "app_outbox"),
            "-- outbox_counts of outbox\nSELECT outbox_id, 'outbox', \"outbox\", xoutbox, \
             outbox_idx, app_outbox_counts.n FROM app_outbox JOIN app_outbox_counts \
             INDEXED BY app_outbox_key_live WHERE app_outbox.seq > 0 -- outbox\n\
             AND x = 'it''s outbox' -- é\nAND y = 'é outbox'"
        );
        assert_eq!(for_table(sql, "outbox"), sql);
        for name in [
            "outbox",
            "outbox_migrations",
            "outbox_counts",
            "outbox_enqueue_insert",
        ] {
            assert!(CREATED.contains(name), "{name}: {CREATED:?}");
        }
        assert!(
            CREATED.iter().all(|name| name.starts_with("outbox")),
            "{CREATED:?}"
        );
        assert!(!CREATED.contains("outbox_id"));
    }

    /// No name the migrations create is also a column's, so no column is ever renamed.
    #[tokio::test]
    async fn no_created_name_is_a_column() {
        use sqlx::{AssertSqlSafe, Connection};
        let mut conn = sqlx::SqliteConnection::connect("sqlite::memory:")
            .await
            .unwrap();
        sqlx::raw_sql(AssertSqlSafe(script("outbox", 0, latest_version())))
            .execute(&mut conn)
            .await
            .unwrap();
        let columns: Vec<String> = sqlx::query_scalar(
            "SELECT p.name FROM sqlite_master m, pragma_table_info(m.name) p
             WHERE m.type IN ('table', 'view')",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap();
        assert!(columns.iter().any(|c| c == "outbox_id"), "{columns:?}");
        for column in &columns {
            assert!(
                !CREATED.contains(column.as_str()),
                "{column} is also a created name"
            );
        }
        let objects: Vec<String> =
            sqlx::query_scalar("SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")
                .fetch_all(&mut conn)
                .await
                .unwrap();
        for object in &objects {
            assert!(CREATED.contains(object.as_str()), "{object}: {CREATED:?}");
        }
    }

    /// Every migration made for a prefixed table names that table's objects only.
    #[test]
    fn the_migrations_for_a_prefix_name_only_its_objects() {
        let script = script("app_outbox", 0, latest_version());
        for (word, piece) in pieces(&script) {
            if word && CREATED.contains(piece) {
                panic!("{piece} left unrenamed");
            }
        }
        assert!(script.contains("CREATE TABLE IF NOT EXISTS app_outbox_migrations"));
        assert!(script.contains("outbox_id TEXT NOT NULL UNIQUE"));
    }

    #[test]
    fn sqlite_reserved_prefixes_are_refused() {
        for bad in ["sqlite_", "SQLite_x", "sqlite_app_"] {
            let err = validate_table_prefix(bad).unwrap_err();
            assert_eq!(err.field, "table_prefix", "{bad:?}");
            assert!(err.reason.contains("reserves"), "{bad:?}: {err}");
        }
        assert!(validate_table_prefix("sqlite").is_ok());
    }
}
