//! The claim and `next_due`: both read the two claim indexes in order and stop at what
//! they need, so they cost what they return (see "Claim order and cost" in
//! [`crate::store`]).
//!
//! A claim is one `READ COMMITTED` transaction:
//! 1. the lapsed claims of the lane (`lapse_at <= now`, by lapse then sequence,
//!    `FOR UPDATE SKIP LOCKED`): the ones that used their last attempt are dead-lettered,
//!    which may move their key's head;
//! 2. the lapsed claims it may hand out, up to the limit;
//! 3. the due heads (`ready_at <= now`, by due time then sequence, `SKIP LOCKED`), a page at
//!    a time, each with its key run, until the limit is reached;
//! 4. one `UPDATE` by primary key of every row taken.
//!
//! A keyed candidate passes its key's gate ([`Gates`]): it heads its key, no other message
//! of the key runs under a lease, and under `Block` no earlier dead letter holds the key.
//! The gate reads one index dive per key and page, never a key's queue.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Duration;

use sqlx::mysql::{MySqlConnection, MySqlRow};
use sqlx::{AssertSqlSafe, Row};
use uuid::Uuid;

use crate::store::unreadable::{self, ClaimedRow};
use crate::store::{
    ClaimBatch, ClaimRequest, NextDue, OrderingPolicy, StoreError, StoreOp, LEASE_LAPSED_ERROR,
};
use crate::time::UnixMillis;

use super::heads::{self, Key};
use super::in_list::InList;
use super::row::{claimed, db_error, marks, opt_text, ClaimUpdate, COLUMNS};
use super::schema::Names;
use super::MysqlOutboxStore;

/// Rows a claim or `next_due` reads per statement when it must look past rows it skips.
const PAGE: usize = 64;

impl MysqlOutboxStore {
    /// Every request's claim, one after another, in one transaction.
    pub(super) async fn claim_once(
        &self,
        requests: &[ClaimRequest],
    ) -> Result<Vec<ClaimBatch>, StoreError> {
        const OP: StoreOp = StoreOp::Claim;
        let mut tx = self.begin(OP).await?;
        let batches = claim_each(&mut tx, &self.names, requests, self.now()).await?;
        tx.commit().await.map_err(|e| db_error(OP, e))?;
        Ok(batches)
    }
}

/// Claims for each request in turn ([`claim`]), in the caller's transaction: one batch per
/// request, in order.
pub(super) async fn claim_each(
    conn: &mut MySqlConnection,
    names: &Names,
    requests: &[ClaimRequest],
    now: UnixMillis,
) -> Result<Vec<ClaimBatch>, StoreError> {
    let mut batches = Vec::with_capacity(requests.len());
    for request in requests {
        batches.push(claim(conn, names, request, now).await?);
    }
    Ok(batches)
}

/// A row read by the claim: its place in the lane and its key.
struct Candidate {
    row: MySqlRow,
    seq: i64,
    key: Option<String>,
    key_head: bool,
    exhausted: bool,
    /// Its `ready_at` or `lapse_at`: where the next page starts.
    at: i64,
}

fn candidate(row: MySqlRow, at_column: &'static str, op: StoreOp) -> Result<Candidate, StoreError> {
    let get = |e| db_error(op, e);
    let seq: i64 = row.try_get("seq").map_err(get)?;
    let key = opt_text(&row, "ordering_key").map_err(|bad| StoreError::Corrupt {
        id: seq.to_string(),
        reason: format!("{bad:?}"),
    })?;
    let key_head: i8 = row.try_get("key_head").map_err(get)?;
    let attempts: u32 = row.try_get("attempt_count").map_err(get)?;
    let max: u32 = row.try_get("max_attempts").map_err(get)?;
    let at: i64 = row.try_get(at_column).map_err(get)?;
    Ok(Candidate {
        row,
        seq,
        key,
        key_head: key_head == 1,
        exhausted: attempts >= max,
        at,
    })
}

/// Which index a scan reads.
#[derive(Debug, Clone, Copy)]
pub(super) enum Scan {
    /// Lapsed claims: `lapse_at <= now`.
    Lapsed,
    /// Due heads: `ready_at <= now`.
    Ready,
    /// Every head, due or not (`next_due`).
    AllReady,
}

/// The statement of one page of a scan after `(at, seq)`, locked with `SKIP LOCKED` when
/// `lock`; binds lane and target. Answers the statement and the column it orders by.
pub(super) fn scan_sql(
    names: &Names,
    scan: Scan,
    now: UnixMillis,
    after: Option<(i64, i64)>,
    limit: usize,
    lock: bool,
) -> (String, &'static str) {
    let (column, bound) = match scan {
        Scan::Lapsed => ("lapse_at", format!("lapse_at <= {}", now.as_millis())),
        Scan::Ready => ("ready_at", format!("ready_at <= {}", now.as_millis())),
        Scan::AllReady => ("ready_at", "ready_at IS NOT NULL".to_owned()),
    };
    let after = match after {
        Some((at, seq)) => {
            format!(" AND ({column} > {at} OR ({column} = {at} AND seq > {seq}))")
        }
        None => String::new(),
    };
    let locking = if lock { " FOR UPDATE SKIP LOCKED" } else { "" };
    let sql = format!(
        "SELECT {COLUMNS}, key_head, {column} FROM {} FORCE INDEX ({index}) \
         WHERE lane = ? AND target = ? AND {bound}{after} \
         ORDER BY {column}, seq LIMIT {limit}{locking}",
        names.messages,
        index = if column == "lapse_at" {
            "lapse"
        } else {
            "ready"
        },
    );
    (sql, column)
}

/// One page of a scan after `(at, seq)`, locked with `SKIP LOCKED` when `lock`, with the
/// per-key rule (under `ordering`) of the keys its heads name.
#[allow(clippy::too_many_arguments)]
async fn scan(
    conn: &mut MySqlConnection,
    names: &Names,
    (lane, target): (&str, &str),
    which: Scan,
    ordering: OrderingPolicy,
    now: UnixMillis,
    after: Option<(i64, i64)>,
    limit: usize,
    lock: bool,
    op: StoreOp,
) -> Result<(Vec<Candidate>, Gates), StoreError> {
    let (sql, column) = scan_sql(names, which, now, after, limit, lock);
    let rows = sqlx::query(AssertSqlSafe(sql))
        .bind(lane)
        .bind(target)
        .fetch_all(&mut *conn)
        .await
        .map_err(|e| db_error(op, e))?;
    let page = rows
        .into_iter()
        .map(|row| candidate(row, column, op))
        .collect::<Result<Vec<_>, _>>()?;
    let keys = keys_of(&page);
    let gates = Gates::read(conn, names, (lane, target), &keys, ordering, now, op).await?;
    Ok((page, gates))
}

/// The gate's statement for keys under a running lease, of (lane, target) at `now`.
pub(super) fn running_keys<'a>(
    names: &'a Names,
    (lane, target): (&'a str, &'a str),
    now: UnixMillis,
) -> InList<'a> {
    InList::new(&names.sql.running_keys)
        .bind(lane)
        .bind(target)
        .bind_after(now.as_millis())
}

/// The gate's statement for each key's first dead letter, of (lane, target).
pub(super) fn first_dead<'a>(names: &'a Names, (lane, target): (&'a str, &'a str)) -> InList<'a> {
    InList::new(&names.sql.first_dead).bind(lane).bind(target)
}

/// Where each of `n` key runs must stop; binds lane, target, key and head seq per key.
pub(super) fn stops_sql(names: &Names, n: usize, ordering: OrderingPolicy) -> String {
    let m = &names.messages;
    let stop_statuses = match ordering {
        OrderingPolicy::Block => "status IN ('claimed', 'dead_letter')",
        OrderingPolicy::Skip => "status = 'claimed'",
    };
    (0..n)
        .map(|i| {
            format!(
                "SELECT {i} AS i, MIN(seq) AS stop FROM {m} FORCE INDEX (by_key) WHERE lane = ? \
                 AND target = ? AND ordering_key = ? AND {stop_statuses} AND seq > ?"
            )
        })
        .collect::<Vec<_>>()
        .join(" UNION ALL ")
}

/// The pending messages of `n` key runs; binds lane, target, key, head seq and stop per key.
pub(super) fn run_sql(names: &Names, n: usize, run: usize) -> String {
    let m = &names.messages;
    (0..n)
        .map(|i| {
            format!(
                "(SELECT {i} AS i, {COLUMNS}, key_head FROM {m} FORCE INDEX (by_key) \
                 WHERE lane = ? AND target = ? AND ordering_key = ? AND status = 'pending' \
                 AND seq > ? AND seq < ? ORDER BY seq LIMIT {run})"
            )
        })
        .collect::<Vec<_>>()
        .join(" UNION ALL ")
}

/// `next_due`'s nearest running lease; binds lane, target and now.
pub(super) fn next_lapse_sql(names: &Names) -> String {
    format!(
        "SELECT MIN(lapse_at) FROM {} FORCE INDEX (lapse) WHERE lane = ? AND target = ? AND lapse_at > ?",
        names.messages
    )
}

/// The per-key rule for the keys of one page of candidates (see the module docs).
struct Gates {
    /// Keys with a message under a lease that has not lapsed.
    running: HashSet<String>,
    /// Under `Block`: each key's first dead letter.
    first_dead: HashMap<String, i64>,
}

impl Gates {
    async fn read(
        conn: &mut MySqlConnection,
        names: &Names,
        (lane, target): (&str, &str),
        keys: &BTreeSet<&str>,
        ordering: OrderingPolicy,
        now: UnixMillis,
        op: StoreOp,
    ) -> Result<Self, StoreError> {
        let mut gates = Gates {
            running: HashSet::new(),
            first_dead: HashMap::new(),
        };
        if keys.is_empty() {
            return Ok(gates);
        }
        let keys: Vec<&str> = keys.iter().copied().collect();
        for row in running_keys(names, (lane, target), now)
            .fetch(conn, &keys, op)
            .await?
        {
            if let Ok(Some(key)) = opt_text(&row, "ordering_key") {
                gates.running.insert(key);
            }
        }
        if ordering == OrderingPolicy::Block {
            for row in first_dead(names, (lane, target))
                .fetch(conn, &keys, op)
                .await?
            {
                let first: i64 = row.try_get("first").map_err(|e| db_error(op, e))?;
                if let Ok(Some(key)) = opt_text(&row, "ordering_key") {
                    gates.first_dead.insert(key, first);
                }
            }
        }
        Ok(gates)
    }

    /// Whether `c` may be handed out.
    fn allow(&self, c: &Candidate) -> bool {
        let Some(key) = &c.key else {
            return true;
        };
        c.key_head
            && !self.running.contains(key)
            && self.first_dead.get(key).is_none_or(|dead| *dead > c.seq)
    }
}

fn keys_of(page: &[Candidate]) -> BTreeSet<&str> {
    page.iter()
        .filter(|c| c.key_head)
        .filter_map(|c| c.key.as_deref())
        .collect()
}

/// The lapsed claims of the lane, every one (they are at most what crashed relays held),
/// locked; each with whether the per-key rule lets it go.
async fn lapsed(
    conn: &mut MySqlConnection,
    names: &Names,
    request: &ClaimRequest,
    now: UnixMillis,
    op: StoreOp,
) -> Result<Vec<(Candidate, bool)>, StoreError> {
    let mut all = Vec::new();
    let mut after = None;
    loop {
        let lane = (request.lane.as_str(), request.target.as_str());
        let (page, gates) = scan(
            conn,
            names,
            lane,
            Scan::Lapsed,
            request.ordering,
            now,
            after,
            PAGE,
            true,
            op,
        )
        .await?;
        let full = page.len() == PAGE;
        after = page.last().map(|c| (c.at, c.seq));
        all.extend(page.into_iter().map(|c| {
            let allowed = gates.allow(&c);
            (c, allowed)
        }));
        if !full {
            return Ok(all);
        }
    }
}

/// Claims for `request` on `conn` (inside the caller's transaction).
async fn claim(
    conn: &mut MySqlConnection,
    names: &Names,
    request: &ClaimRequest,
    now: UnixMillis,
) -> Result<ClaimBatch, StoreError> {
    const OP: StoreOp = StoreOp::Claim;
    let mut batch = ClaimBatch::default();

    // 1. Lapsed claims that used their last attempt end in the dead letter, whatever the
    // limit. Under Skip that frees the key for its next message, which may go out below.
    let mut lapsed_rows = lapsed(conn, names, request, now, OP).await?;
    let doomed: Vec<&Candidate> = lapsed_rows
        .iter()
        .filter(|(c, allowed)| *allowed && c.exhausted)
        .map(|(c, _)| c)
        .collect();
    if !doomed.is_empty() {
        let seqs: Vec<i64> = doomed.iter().map(|c| c.seq).collect();
        for c in &doomed {
            batch
                .dead_lettered
                .push(c.row.try_get("outbox_id").map_err(|e| db_error(OP, e))?);
        }
        let keys: BTreeSet<Key> = doomed
            .iter()
            .filter_map(|c| c.key.clone())
            .map(|k| (request.lane.clone(), request.target.clone(), k))
            .collect();
        dead_letter(conn, names, &seqs, &keys, LEASE_LAPSED_ERROR, now, OP).await?;
        lapsed_rows = lapsed(conn, names, request, now, OP).await?;
    }

    // 2. Lapsed claims first: they became claimable earliest, and their keys are blocked.
    let mut chosen: Vec<Candidate> = lapsed_rows
        .into_iter()
        .filter(|(c, allowed)| *allowed && !c.exhausted)
        .map(|(c, _)| c)
        .take(request.limit)
        .collect();

    // 3. Due heads, each with its key run.
    let mut after = None;
    while chosen.len() < request.limit {
        let want = request.limit - chosen.len();
        let lane = (request.lane.as_str(), request.target.as_str());
        let (page, gates) = scan(
            conn,
            names,
            lane,
            Scan::Ready,
            request.ordering,
            now,
            after,
            want,
            true,
            OP,
        )
        .await?;
        let full = page.len() == want;
        after = page.last().map(|c| (c.at, c.seq));
        let heads: Vec<Candidate> = page.into_iter().filter(|c| gates.allow(c)).collect();
        let runs = runs(conn, names, request, &heads, now, OP).await?;
        let mut runs = runs.into_iter();
        for head in heads {
            if chosen.len() >= request.limit {
                break;
            }
            let run = if head.key.is_some() {
                runs.next().unwrap_or_default()
            } else {
                Vec::new()
            };
            chosen.push(head);
            let room = request.limit - chosen.len();
            chosen.extend(run.into_iter().take(room));
        }
        if !full {
            break;
        }
    }

    // 4. Take them.
    if !chosen.is_empty() {
        let update = ClaimUpdate {
            consumer_id: &request.consumer_id,
            lease_until: now.saturating_add(request.lease),
            now,
        };
        let tokens: Vec<Uuid> = chosen.iter().map(|_| Uuid::new_v4()).collect();
        take(conn, names, &chosen, &tokens, &update, OP).await?;
        let rows = chosen
            .iter()
            .zip(&tokens)
            .map(|(c, token)| claimed(&c.row, &update, *token))
            .collect::<Vec<ClaimedRow>>();
        let sorted = unreadable::sort(rows, request.ordering);
        batch.messages = sorted.messages;
        if !sorted.unreadable.is_empty() {
            let keys: BTreeSet<Key> = sorted
                .unreadable
                .iter()
                .filter_map(|u| u.ordering_key.clone())
                .map(|k| (request.lane.clone(), request.target.clone(), k))
                .collect();
            for row in &sorted.unreadable {
                dead_letter(
                    conn,
                    names,
                    &[row.seq],
                    &BTreeSet::new(),
                    &row.error,
                    now,
                    OP,
                )
                .await?;
                batch.unreadable.push(row.answer());
            }
            let held = heads::lock(conn, names, &keys, OP).await?;
            heads::refresh(conn, names, &held, OP).await?;
        }
        if !sorted.held_back.is_empty() {
            let ids: Vec<Uuid> = sorted.held_back.iter().map(|c| c.outbox_id).collect();
            InList::new(&names.sql.held_back)
                .bind(now.as_millis())
                .bind(now.as_millis())
                .execute(conn, &ids, OP)
                .await?;
        }
    }

    if batch.messages.len() < request.limit {
        batch.next_due = NextDue::Known(
            next_due(
                conn,
                names,
                &request.lane,
                &request.target,
                request.ordering,
                now,
            )
            .await?,
        );
    }
    Ok(batch)
}

/// The key run behind each keyed head of `heads` (in their order): up to `key_run - 1` of
/// the key's next live messages, each pending and due, stopping at the first that is not,
/// and under `Block` at a dead letter in between. Two statements for the whole page.
async fn runs(
    conn: &mut MySqlConnection,
    names: &Names,
    request: &ClaimRequest,
    heads: &[Candidate],
    now: UnixMillis,
    op: StoreOp,
) -> Result<Vec<Vec<Candidate>>, StoreError> {
    let keyed: Vec<(&str, i64)> = heads
        .iter()
        .filter_map(|h| h.key.as_deref().map(|k| (k, h.seq)))
        .collect();
    let run = request.run_len() - 1;
    if keyed.is_empty() || run == 0 {
        return Ok((0..keyed.len()).map(|_| Vec::new()).collect());
    }
    // Where each run must stop: the key's next claimed message after its head, and under
    // Block its next dead letter.
    let stops_sql = stops_sql(names, keyed.len(), request.ordering);
    let mut query = sqlx::query(AssertSqlSafe(stops_sql));
    for (key, seq) in &keyed {
        query = query
            .bind(&request.lane)
            .bind(&request.target)
            .bind(*key)
            .bind(seq);
    }
    let mut stops = vec![i64::MAX; keyed.len()];
    for row in query
        .fetch_all(&mut *conn)
        .await
        .map_err(|e| db_error(op, e))?
    {
        let i: i64 = row.try_get("i").map_err(|e| db_error(op, e))?;
        let stop: Option<i64> = row.try_get("stop").map_err(|e| db_error(op, e))?;
        if let (Some(slot), Some(stop)) =
            (usize::try_from(i).ok().and_then(|i| stops.get_mut(i)), stop)
        {
            *slot = stop;
        }
    }
    let pending_sql = run_sql(names, keyed.len(), run);
    let mut query = sqlx::query(AssertSqlSafe(pending_sql));
    for ((key, seq), stop) in keyed.iter().zip(&stops) {
        query = query
            .bind(&request.lane)
            .bind(&request.target)
            .bind(*key)
            .bind(seq)
            .bind(stop);
    }
    let mut found: BTreeMap<usize, Vec<Candidate>> = BTreeMap::new();
    for row in query
        .fetch_all(&mut *conn)
        .await
        .map_err(|e| db_error(op, e))?
    {
        let i: i64 = row.try_get("i").map_err(|e| db_error(op, e))?;
        let c = candidate(row, "available_at", op)?;
        found
            .entry(usize::try_from(i).unwrap_or(usize::MAX))
            .or_default()
            .push(c);
    }
    Ok((0..keyed.len())
        .map(|i| {
            let mut run = found.remove(&i).unwrap_or_default();
            run.sort_by_key(|c| c.seq);
            run.into_iter()
                .take_while(|c| c.at <= now.as_millis())
                .collect()
        })
        .collect())
}

/// Writes the claim to the rows taken: one statement by primary key.
async fn take(
    conn: &mut MySqlConnection,
    names: &Names,
    chosen: &[Candidate],
    tokens: &[Uuid],
    update: &ClaimUpdate<'_>,
    op: StoreOp,
) -> Result<(), StoreError> {
    let cases = vec!["WHEN ? THEN ?"; chosen.len()].join(" ");
    let sql = format!(
        "UPDATE {} SET status = 'claimed', attempt_count = attempt_count + 1, claimed_by = ?, \
         claim_token = CASE seq {cases} END, lease_expires_at = ?, updated_at = ? \
         WHERE seq IN ({})",
        names.messages,
        marks(chosen.len())
    );
    let mut query = sqlx::query(AssertSqlSafe(sql)).bind(update.consumer_id);
    for (c, token) in chosen.iter().zip(tokens) {
        query = query.bind(c.seq).bind(*token);
    }
    query = query
        .bind(update.lease_until.as_millis())
        .bind(update.now.as_millis());
    for c in chosen {
        query = query.bind(c.seq);
    }
    query
        .execute(&mut *conn)
        .await
        .map_err(|e| db_error(op, e))?;
    Ok(())
}

/// Dead-letters the rows `seqs` (locked by the caller) with `error`, and moves the heads of
/// `keys`.
pub(super) async fn dead_letter(
    conn: &mut MySqlConnection,
    names: &Names,
    seqs: &[i64],
    keys: &BTreeSet<Key>,
    error: &str,
    now: UnixMillis,
    op: StoreOp,
) -> Result<(), StoreError> {
    let held = heads::lock_existing(conn, names, keys, op).await?;
    InList::new(&names.sql.dead_letter)
        .bind(error)
        .bind(now.as_millis())
        .execute(conn, seqs, op)
        .await?;
    heads::refresh(conn, names, &held, op).await
}

/// How long until the next message of (lane, target) may be claimable (see
/// `OutboxBackend::next_due`): the nearest running lease's lapse, now for a lapsed claim the
/// per-key rule lets go, and the first due time of a head it lets go. Reads in index order
/// and stops at the first it can use.
pub(super) async fn next_due(
    conn: &mut MySqlConnection,
    names: &Names,
    lane: &str,
    target: &str,
    ordering: OrderingPolicy,
    now: UnixMillis,
) -> Result<Option<Duration>, StoreError> {
    const OP: StoreOp = StoreOp::NextDue;
    let next_lapse: Option<i64> = sqlx::query_scalar(AssertSqlSafe(next_lapse_sql(names)))
        .bind(lane)
        .bind(target)
        .bind(now.as_millis())
        .fetch_one(&mut *conn)
        .await
        .map_err(|e| db_error(OP, e))?;
    let mut candidates = vec![next_lapse.map(UnixMillis::from_millis)];
    for which in [Scan::Lapsed, Scan::AllReady] {
        let mut after = None;
        let found = loop {
            let (page, gates) = scan(
                conn,
                names,
                (lane, target),
                which,
                ordering,
                now,
                after,
                PAGE,
                false,
                OP,
            )
            .await?;
            let full = page.len() == PAGE;
            after = page.last().map(|c| (c.at, c.seq));
            if let Some(first) = page.iter().find(|c| gates.allow(c)) {
                break Some(match which {
                    Scan::Lapsed => now,
                    _ => UnixMillis::from_millis(first.at),
                });
            }
            if !full {
                break None;
            }
        };
        candidates.push(found);
    }
    Ok(candidates
        .into_iter()
        .flatten()
        .min()
        .map(|at| at.saturating_duration_since(now)))
}
