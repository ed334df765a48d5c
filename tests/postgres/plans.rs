//! Guards on the cost of a claim, `next_due` and stats at 100,000 pending rows: every scan
//! node of `EXPLAIN (ANALYZE, FORMAT JSON)` reads a small multiple of the claim's limit, for
//! every key distribution (no keys; 1,000 keys with a retrying head and a dead head; one hot
//! key of 100,000 messages among 1,000 cold keys, and that hot key alone), under both
//! ordering policies, before and after ANALYZE, and with lapsed claims to take first. The
//! claims are pinned with heads only and with key runs of [`RUN`]: a run's rows count
//! towards the limit, so a claim with runs reads no more than one without.

use std::time::Duration;

use outbox_relay::message::ClaimRef;
use outbox_relay::store::postgres::Explained;
use outbox_relay::store::{ClaimRequest, OrderingPolicy};
use outbox_relay::Outbox;
use serde_json::Value;

use crate::{open, SchemaGuard};

const ROWS: i64 = 100_000;
const LIMIT: usize = 100;
/// Rows one scan node may read: the limit, the probes of the rows met, slack for rows a
/// claim steps over (a blocked head, a key in flight), and for the dead versions of rows
/// updated in the test that an index still points to (a bitmap scan counts them).
const MAX_READ: f64 = (3 * LIMIT + 20) as f64;
/// The key run of the claims pinned with runs, as the relay asks for it with a fast handler.
const RUN: usize = 16;

/// How the 100,000 rows are keyed.
#[derive(Debug, Clone, Copy)]
pub(super) enum Keys {
    None,
    Thousand,
    /// 100,000 rows of key `hot` and one row of each of 1,000 cold keys.
    Hot,
}

/// Fills lane `l`, target `sink` with one `INSERT ... SELECT generate_series`, writing what
/// enqueue writes: status pending, due (an hour ago, in seq order), and `key_head` set on
/// rows without a key and on the first row of each key only. The deferred `check_head`
/// trigger is skipped (`session_replication_role = replica`): it would find every unmarked
/// row behind a live head of its key and leave it unmarked, so skipping it writes the same
/// rows, 100 times faster. With 1,000 keys, key `k1`'s head is retrying (due in an hour, one
/// attempt used) and key `k2`'s head is dead-lettered (its successor marked, as ack's
/// `promote_heads` leaves it), so under Block `k2` is blocked.
pub(super) async fn fill(store: &Outbox, rows: i64, keys: Keys) {
    let t = crate::pg(store).messages_table();
    let (key, head) = match keys {
        Keys::None => ("NULL", "true"),
        Keys::Thousand => ("'k' || (i % 1000)", "i <= 1000"),
        Keys::Hot => (
            "CASE WHEN i <= {rows} THEN 'hot' ELSE 'c' || i END",
            "i = 1 OR i > {rows}",
        ),
    };
    let (key, head) = (
        key.replace("{rows}", &rows.to_string()),
        head.replace("{rows}", &rows.to_string()),
    );
    let total = match keys {
        Keys::Hot => rows + 1_000,
        _ => rows,
    };
    let mut tx = crate::pg(store).pool().begin().await.expect("begin");
    sqlx::query("SET LOCAL session_replication_role = replica")
        .execute(&mut *tx)
        .await
        .expect("replica role");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO {t} (outbox_id, lane, target, payload, headers, ordering_key, status,
                          attempt_count, max_attempts, available_at, created_at, updated_at,
                          key_head)
         SELECT gen_random_uuid(), 'l', 'sink', jsonb_build_object('i', i), '{{}}', {key},
                'pending', 0, 5, ts, ts, ts, {head}
         FROM generate_series(1, $1::int8) AS i,
              LATERAL (SELECT now() - interval '1 hour' + i * interval '1 millisecond') AS n(ts)"
    )))
    .bind(total)
    .execute(&mut *tx)
    .await
    .expect("fill");
    if let Keys::Thousand = keys {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "UPDATE {t} SET available_at = now() + interval '1 hour', attempt_count = 1,
                            last_error = 'retrying'
             WHERE seq = (SELECT min(seq) FROM {t} WHERE ordering_key = 'k1');
             UPDATE {t} SET status = 'dead_letter', attempt_count = 5, last_error = 'dead'
             WHERE seq = (SELECT min(seq) FROM {t} WHERE ordering_key = 'k2');
             UPDATE {t} SET key_head = true
             WHERE seq = (SELECT min(seq) FROM {t} WHERE ordering_key = 'k2'
                          AND status = 'pending')"
        )))
        .execute(&mut *tx)
        .await
        .expect("retrying and dead heads");
    }
    tx.commit().await.expect("commit fill");
}

/// Claims in flight in another lane: 1,000 keyed rows of lane `busy` claimed under a lease of
/// an hour. A claim of lane `l` must not read them: its check "is a row of this key in
/// flight?" is one probe per head, not a hash of every live lease in the table (which the
/// planner picks unless told otherwise, see `key_free`).
async fn claims_elsewhere(store: &Outbox) {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO {} (outbox_id, lane, target, payload, headers, ordering_key, status,
                         attempt_count, max_attempts, available_at, claimed_by, claim_token,
                         lease_expires_at, created_at, updated_at, key_head)
         SELECT gen_random_uuid(), 'busy', 'sink', '{{}}', '{{}}', 'b' || i, 'claimed', 1, 5,
                now(), 'elsewhere', gen_random_uuid(), now() + interval '1 hour', now(), now(),
                true
         FROM generate_series(1, 1000) AS i",
        crate::pg(store).messages_table()
    )))
    .execute(crate::pg(store).pool())
    .await
    .expect("claims in flight elsewhere");
}

/// Every node that reads the messages table: (what, rows read over all its loops).
/// `counts`: also the scans an aggregate reads whole (stats' counts); else they are left out.
fn scans(node: &Value, out: &mut Vec<(String, f64)>, counts: bool) {
    let kind = node.get("Node Type").and_then(Value::as_str);
    if let Some(kind) = kind {
        if let Some(relation) = node
            .get("Index Name")
            .or_else(|| node.get("Relation Name"))
            .and_then(Value::as_str)
        {
            let num = |k: &str| node.get(k).and_then(Value::as_f64).unwrap_or(0.0);
            let loops = num("Actual Loops");
            let read = (num("Actual Rows")
                + num("Rows Removed by Filter")
                + num("Rows Removed by Index Recheck"))
                * loops;
            out.push((format!("{kind} on {relation}"), read));
        }
    }
    for child in ["Plan", "Plans"] {
        match node.get(child) {
            Some(Value::Array(items)) => items
                .iter()
                .filter(|n| counts || !(kind == Some("Aggregate") && is_scan(n)))
                .for_each(|n| scans(n, out, counts)),
            Some(n @ Value::Object(_)) => scans(n, out, counts),
            _ => {}
        }
    }
}

fn is_scan(node: &Value) -> bool {
    node.get("Node Type")
        .and_then(Value::as_str)
        .is_some_and(|kind| kind.ends_with("Scan") && kind != "CTE Scan")
}

/// Asserts that no node scans the table sequentially and that none reads more than
/// [`MAX_READ`] rows; `counts`: whether the scans an aggregate reads whole count too.
/// Prints the plan on failure.
fn check(what: &str, plan: &Value, counts: bool) {
    check_within(what, plan, counts, MAX_READ);
}

/// [`check`], with `max_read` rows a node may read.
pub(super) fn check_within(what: &str, plan: &Value, counts: bool, max_read: f64) {
    let root = &plan[0];
    let mut nodes = Vec::new();
    scans(root, &mut nodes, counts);
    let pretty = serde_json::to_string_pretty(root).unwrap_or_default();
    for (node, read) in &nodes {
        assert!(
            !node.starts_with("Seq Scan"),
            "{what}: {node} reads the whole table\n{pretty}"
        );
        assert!(
            *read <= max_read,
            "{what}: {node} read {read} rows, over {max_read}\n{pretty}"
        );
    }
    assert!(!nodes.is_empty(), "{what}: no scan found in\n{pretty}");
    let mut lease_scans = Vec::new();
    lease_index_conditions(root, &mut lease_scans);
    for condition in &lease_scans {
        assert!(
            condition.contains("lease_expires_at"),
            "{what}: lease_idx read without a lease bound ({condition}): every claimed row of \
             the lane, dead versions included, instead of a key index\n{pretty}"
        );
    }
}

/// The index conditions of every scan of `lease_idx` in the plan.
fn lease_index_conditions(node: &Value, out: &mut Vec<String>) {
    if node
        .get("Index Name")
        .and_then(Value::as_str)
        .is_some_and(|name| name.ends_with("_lease_idx"))
    {
        let condition = node.get("Index Cond").and_then(Value::as_str).unwrap_or("");
        out.push(condition.to_owned());
    }
    for child in ["Plan", "Plans"] {
        match node.get(child) {
            Some(Value::Array(items)) => items.iter().for_each(|n| lease_index_conditions(n, out)),
            Some(n @ Value::Object(_)) => lease_index_conditions(n, out),
            _ => {}
        }
    }
}

fn claim_request(ordering: OrderingPolicy) -> ClaimRequest {
    ClaimRequest::new("l", "sink", LIMIT, Duration::from_secs(60), "guard").with_ordering(ordering)
}

async fn check_all(store: &Outbox, label: &str) {
    for ordering in [OrderingPolicy::Skip, OrderingPolicy::Block] {
        for run in [1, RUN] {
            let request = claim_request(ordering).with_key_run(run);
            let plan = crate::pg(store)
                .explain(&Explained::Claim(request.clone()))
                .await
                .expect("explain claim");
            check(
                &format!("{label}: claim {ordering:?}, run {run}"),
                &plan,
                true,
            );
            let plan = crate::pg(store)
                .explain(&Explained::FastClaim(request))
                .await
                .expect("explain the one-statement claim");
            check(
                &format!("{label}: fast claim {ordering:?}, run {run}"),
                &plan,
                true,
            );
        }
        let plan = crate::pg(store)
            .explain(&Explained::NextDue {
                lane: "l".into(),
                target: "sink".into(),
                ordering,
            })
            .await
            .expect("explain next_due");
        check(&format!("{label}: next_due {ordering:?}"), &plan, true);
    }
    // The counts (pending, claimed, delivered, dead) read their status's rows whole, from
    // narrow partial indexes when that is cheaper (here every row is pending, so the
    // planner may as well read the table): they are left out. The oldest due pending
    // message and the blocked keys are pinned like the claim.
    let plan = crate::pg(store)
        .explain(&Explained::LaneStats {
            lane: "l".into(),
            target: "sink".into(),
        })
        .await
        .expect("explain stats");
    check(&format!("{label}: stats"), &plan, false);
    // The web UI's blocked keys: the keyed dead letters from their index, each key's head
    // from its index, never the lane's history in enqueue order.
    let plan = crate::pg(store)
        .explain(&Explained::BlockedKeys {
            lane: "l".into(),
            target: "sink".into(),
            limit: 50,
        })
        .await
        .expect("explain blocked keys");
    check(&format!("{label}: blocked keys"), &plan, true);
}

async fn guard(keys: Keys) {
    let schema = SchemaGuard::new();
    let store = open(schema.config()).await;
    fill(&store, ROWS, keys).await;
    claims_elsewhere(&store).await;
    // A fresh table, before ANALYZE: the planner knows nothing of the rows yet.
    check_all(&store, &format!("{keys:?}, before ANALYZE")).await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "VACUUM ANALYZE {}",
        crate::pg(&store).messages_table()
    )))
    .execute(crate::pg(&store).pool())
    .await
    .expect("analyze");
    check_all(&store, &format!("{keys:?}")).await;

    // Lapsed claims to take first: claims whose lease lapsed at once.
    let lapsing = ClaimRequest::new("l", "sink", LIMIT / 2, Duration::ZERO, "lapsing");
    let lapsed = store.claim(&lapsing).await.expect("claim");
    assert!(!lapsed.messages.is_empty(), "{keys:?}: nothing claimed");
    check_all(&store, &format!("{keys:?}, with lapsed claims")).await;
    let retaken = store
        .claim(&claim_request(OrderingPolicy::Skip))
        .await
        .expect("claim");
    let first: Vec<_> = retaken
        .messages
        .iter()
        .take(lapsed.messages.len())
        .collect();
    for (old, new) in lapsed.messages.iter().zip(&first) {
        assert_eq!(
            old.outbox_id, new.outbox_id,
            "{keys:?}: lapsed claims come first"
        );
    }

    if let Keys::Hot = keys {
        // Only the hot key left: the claim must not step over its 99,999 queued rows.
        let acks: Vec<ClaimRef> = retaken
            .messages
            .iter()
            .map(|m| ClaimRef {
                outbox_id: m.outbox_id,
                claim_token: m.claim_token.expect("token"),
            })
            .collect();
        store.ack(&acks).await.expect("ack");
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE {} SET status = 'delivered', delivered_at = now()
             WHERE ordering_key <> 'hot' AND status = 'pending'",
            crate::pg(&store).messages_table()
        )))
        .execute(crate::pg(&store).pool())
        .await
        .expect("cold keys delivered");
        check_all(&store, "hot key alone").await;
        let batch = store
            .claim(&claim_request(OrderingPolicy::Skip))
            .await
            .expect("claim");
        assert_eq!(
            batch.messages.len(),
            1,
            "one message of the hot key at a time"
        );
        assert_eq!(batch.messages[0].ordering_key.as_deref(), Some("hot"));
        // With a run, the messages queued right behind it, in order.
        store
            .ack(&[batch.messages[0].claim().expect("claimed")])
            .await
            .expect("ack");
        let run = store
            .claim(&claim_request(OrderingPolicy::Skip).with_key_run(RUN))
            .await
            .expect("claim a run");
        let seqs: Vec<i64> = run.messages.iter().map(|m| m.seq).collect();
        assert_eq!(seqs.len(), RUN, "a run of the hot key: {seqs:?}");
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]) && seqs[0] > batch.messages[0].seq,
            "the hot key's next messages, in order: {seqs:?}"
        );
    }
    schema.drop().await;
}

#[tokio::test]
async fn claim_plan_is_flat_without_keys() {
    guard(Keys::None).await;
}

#[tokio::test]
async fn claim_plan_is_flat_with_a_thousand_keys() {
    guard(Keys::Thousand).await;
}

#[tokio::test]
async fn claim_plan_is_flat_with_a_hot_key() {
    guard(Keys::Hot).await;
}

/// The rows of a served lane's backlog the report of the lanes nobody serves reads.
const UNSERVED_ROWS: i64 = 1_000_000;

/// The report of the lanes nobody serves at 1,000,000 pending rows: with the big lane
/// served, every scan reads a few entries per (lane, target) (one probe of `pending_idx` per
/// pair, one of the served table), never the lane's rows; with it unserved, its count stops
/// at the cap. Before and after ANALYZE.
#[tokio::test]
async fn unserved_lanes_plan_reads_pairs_not_rows_at_a_million() {
    use outbox_relay::store::served::UNSERVED_COUNT_CAP;
    use outbox_relay::store::UnservedLane;

    let schema = SchemaGuard::new();
    let store = open(schema.config()).await;
    fill(&store, UNSERVED_ROWS, Keys::None).await;
    for (lane, n) in [("ledger", 2), ("typo", 3)] {
        for value in 0..n {
            store
                .enqueue(
                    outbox_relay::OutboxMessageDraft::new(lane, "sink", serde_json::json!(value))
                        .expect("draft"),
                )
                .await
                .expect("enqueue");
        }
    }
    let served = |lanes: &[&str]| -> Vec<(String, String)> {
        lanes
            .iter()
            .map(|lane| ((*lane).to_owned(), "sink".to_owned()))
            .collect()
    };
    store
        .record_served(&served(&["l", "ledger"]), Duration::from_secs(600))
        .await
        .expect("record");
    let typo = UnservedLane {
        lane: "typo".into(),
        target: "sink".into(),
        pending: 3,
    };
    for label in ["before ANALYZE", "after ANALYZE"] {
        if label == "after ANALYZE" {
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "VACUUM ANALYZE {}",
                crate::pg(&store).messages_table()
            )))
            .execute(crate::pg(&store).pool())
            .await
            .expect("analyze");
        }
        assert_eq!(
            store.unserved_lanes(10).await.expect("report"),
            std::slice::from_ref(&typo)
        );
        let plan = crate::pg(&store)
            .explain(&Explained::UnservedLanes { limit: 10 })
            .await
            .expect("explain");
        check(
            &format!("unserved lanes, the big lane served, {label}"),
            &plan,
            true,
        );
    }

    // Nobody serves the big lane any more: its count stops at the cap.
    let served_table = crate::pg(&store)
        .messages_table()
        .replace("_messages\"", "_served_lanes\"");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DELETE FROM {served_table} WHERE lane = 'l'"
    )))
    .execute(crate::pg(&store).pool())
    .await
    .expect("the big lane's record gone");
    let report = store.unserved_lanes(10).await.expect("report");
    assert_eq!(
        report,
        [
            UnservedLane {
                lane: "l".into(),
                target: "sink".into(),
                pending: UNSERVED_COUNT_CAP,
            },
            typo
        ]
    );
    let plan = crate::pg(&store)
        .explain(&Explained::UnservedLanes { limit: 10 })
        .await
        .expect("explain");
    check_within(
        "unserved lanes, the big lane unserved: its count stops at the cap",
        &plan,
        true,
        UNSERVED_COUNT_CAP as f64 + MAX_READ,
    );
    schema.drop().await;
}
