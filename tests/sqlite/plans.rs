//! `EXPLAIN QUERY PLAN` guards: a claim (both ordering policies, heads alone and with their
//! key runs), `next_due` and a lane's stats read indexes in order and stop, a key run within
//! its bounds; the batch writes (the claim's marking, ack, nack, extend, release) find each
//! row they name by its key; none scans the table or sorts the lane in a temporary B-tree;
//! key probes read the live-only key index down to the status, or the dead-letter index,
//! never the key index migration 3 dropped. Checked on a file with a backlog of every kind
//! (no key, a hot key, many cold keys, claims, dead letters), before and after `ANALYZE`,
//! since statistics can change a plan. And a page of the listing (`GET /api/v1/messages`)
//! under every filter reads one range of a listing index from its cursor, a status change
//! writing none of the lane's.

use outbox_relay::store::OutboxBackend as _;
use std::sync::Arc;
use std::time::Duration;

use outbox_relay::store::sqlite::{QueryPlan, SqliteOutboxStore};
use outbox_relay::store::{
    ClaimRequest, MessageFilter, Nack, NackDisposition, OrderingPolicy, Outbox, PageRequest,
};
use outbox_relay::time::ManualClock;
use outbox_relay::time::UnixMillis;
use outbox_relay::{OutboxMessageDraft, OutboxStatus};
use serde_json::json;
use sqlx::Connection;

/// What each statement must read (the rest must not scan the table either).
const EXPECTED_INDEX: &[(&str, &str)] = &[
    ("claim_doomed", "outbox_leases"),
    ("claim_lapsed", "outbox_leases"),
    ("claim_ready", "outbox_ready"),
    ("claim_runs", "outbox_ready"),
    ("next_due", "outbox_ready"),
    ("stats oldest_due", "outbox_pending"),
    ("stats blocked_keys", "outbox_dead_keys"),
    // The batch writes loop over their `json_each` array and look each row up by key.
    ("mark_claimed", "INTEGER PRIMARY KEY (rowid=?)"),
    ("dead_letter_lapsed", "INTEGER PRIMARY KEY (rowid=?)"),
    ("ack", "sqlite_autoindex_outbox_1 (outbox_id=?)"),
    ("nack", "sqlite_autoindex_outbox_1 (outbox_id=?)"),
    ("extend_lease", "sqlite_autoindex_outbox_1 (outbox_id=?)"),
    ("release", "sqlite_autoindex_outbox_1 (outbox_id=?)"),
];

fn drafts(
    lane: &str,
    values: std::ops::Range<i64>,
    key: impl Fn(i64) -> Option<String>,
) -> Vec<OutboxMessageDraft> {
    values
        .map(|v| {
            let draft = OutboxMessageDraft::new(lane, "billing", json!({ "v": v })).unwrap();
            match key(v) {
                Some(key) => draft.with_ordering_key(key),
                None => draft,
            }
        })
        .collect()
}

/// A lane with 3,000 unkeyed rows, a hot key of 3,000, 300 cold keys of 3, claims (some
/// lapsed), dead letters (some blocking) and delivered rows; and a second lane.
async fn fill(store: &Outbox, clock: &ManualClock) {
    let mut all = drafts("orders", 0..3_000, |_| None);
    all.extend(drafts("orders", 0..3_000, |_| Some("hot".into())));
    all.extend(drafts("orders", 0..900, |v| {
        Some(format!("cold-{}", v % 300))
    }));
    all.extend(drafts("returns", 0..500, |v| Some(format!("r-{}", v % 50))));
    for chunk in all.chunks(500) {
        store.enqueue_many(chunk.to_vec()).await.unwrap();
    }
    let claim = |limit| ClaimRequest::new("orders", "billing", limit, Duration::from_secs(5), "r");
    let batch = store.claim(&claim(200)).await.unwrap();
    let nacks: Vec<_> = batch.messages[..50]
        .iter()
        .map(|m| Nack {
            claim: m.claim().unwrap(),
            error: "boom".into(),
            disposition: NackDisposition::Permanent,
        })
        .collect();
    store.nack(&nacks).await.unwrap();
    let acks: Vec<_> = batch.messages[50..150]
        .iter()
        .filter_map(|m| m.claim())
        .collect();
    store.ack(&acks).await.unwrap();
    clock.advance(Duration::from_secs(10)); // the other 50 claims lapse
    store.claim(&claim(20)).await.unwrap();
    // Key runs in flight: the hot key's and some cold keys' next messages.
    store.claim(&claim(40).with_key_run(8)).await.unwrap();
}

fn check(plans: &[QueryPlan], table: &str, when: &str) {
    assert!(plans.len() >= 19, "{when}: {plans:#?}");
    let runs = plans
        .iter()
        .filter(|plan| plan.statement.starts_with("claim_runs"))
        .count();
    assert_eq!(runs, 2, "{when}: the key-run claim under both policies");
    for plan in plans {
        let shown = format!("{when}, {}:\n  {}", plan.statement, plan.steps.join("\n  "));
        for step in &plan.steps {
            // The aliases the statements give the outbox table.
            let scans_table = [table, "c", "e", "l", "r"].iter().any(|name| {
                step == &format!("SCAN {name}") || step.starts_with(&format!("SCAN {name} "))
            });
            assert!(!scans_table, "a full scan of the lane: {shown}");
            // Migration 3 dropped it for `outbox_key_live`.
            assert!(
                !step.contains("key_order"),
                "the dropped key index: {shown}"
            );
            // A key probe reads its key's few rows, never a lane-wide index: its live rows
            // in the live-only key index (by status), or its dead letters.
            if ["SEARCH e ", "SEARCH l ", "SEARCH r "]
                .iter()
                .any(|alias| step.starts_with(alias))
            {
                assert!(
                    step.contains("outbox_key_live") || step.contains("outbox_dead_keys"),
                    "a key probe off its index: {shown}"
                );
            }
            // Down to the status: a key's claimed rows apart from its pending backlog.
            if step.contains("outbox_key_live") {
                assert!(
                    step.contains("ordering_key=? AND status=?"),
                    "a live key probe that reads every live row of its key: {shown}"
                );
            }
            // A key run is read from its head to its end, a range of its key's index.
            if step.starts_with("SEARCH r ") {
                assert!(
                    step.contains("rowid>") && step.contains("rowid<"),
                    "a key run read without its bounds: {shown}"
                );
            }
            assert!(
                !step.contains("USE TEMP B-TREE FOR ORDER BY"),
                "the lane sorted in a temporary B-tree: {shown}"
            );
        }
        // A key run is read in the live-only key index, and `Block` probes dead heads in
        // the dead-letter index.
        if plan.statement.starts_with("claim_runs") {
            assert!(
                plan.steps.iter().any(|step| step
                    .starts_with("SEARCH r USING COVERING INDEX outbox_key_live")
                    || step.starts_with("SEARCH r USING INDEX outbox_key_live")),
                "a key run off the live key index: {shown}"
            );
        }
        if plan.statement == "claim_ready (Block)" {
            assert!(
                plan.steps
                    .iter()
                    .any(|step| step.contains("outbox_dead_keys")),
                "a dead head probed off the dead-letter index: {shown}"
            );
        }
        if let Some((_, index)) = EXPECTED_INDEX
            .iter()
            .find(|(name, _)| plan.statement.starts_with(name))
        {
            assert!(
                plan.steps.iter().any(|step| step.contains(index)),
                "{index} unused: {shown}"
            );
        }
    }
}

#[tokio::test]
async fn hot_statements_read_indexes_in_order_before_and_after_analyze() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox.db");
    let clock = ManualClock::new(UnixMillis::from_millis(1_700_000_000_000));
    let open = || {
        SqliteOutboxStore::builder(&path)
            .clock(Arc::new(clock.clone()))
            .open()
    };
    let store = open().await.unwrap();
    let store = std::sync::Arc::new(store);
    fill(&Outbox::from_arc(store.clone()), &clock).await;
    let table = store.table_name().to_owned();
    check(
        &store.hot_query_plans().await.unwrap(),
        &table,
        "without statistics",
    );
    store.close().await;

    let url = format!("sqlite://{}", path.display());
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    sqlx::query("ANALYZE").execute(&mut conn).await.unwrap();
    conn.close().await.unwrap();
    // A fresh store, so its connections load the statistics.
    let store = open().await.unwrap();
    check(
        &store.hot_query_plans().await.unwrap(),
        &table,
        "after ANALYZE",
    );
    // The statements still answer as they should on that file.
    for ordering in [OrderingPolicy::Skip, OrderingPolicy::Block] {
        assert!(store
            .next_due("orders", "billing", ordering)
            .await
            .unwrap()
            .is_some());
    }
}

/// Every listing filter the API offers over lane `orders`, and a lookup by ids.
fn listing_filters() -> Vec<MessageFilter> {
    let lane = MessageFilter::lane("orders", "billing");
    let keyed = MessageFilter {
        ordering_key: Some("hot".into()),
        ..lane.clone()
    };
    let since = std::time::SystemTime::from(UnixMillis::from_millis(1_700_000_000_000));
    let mut filters = vec![
        lane.clone(),
        keyed.clone(),
        lane.clone().enqueued_between(Some(since), None),
        lane.clone().with_error_containing("boom"),
        MessageFilter::all().with_ids([uuid::Uuid::nil()]),
    ];
    for status in OutboxStatus::ALL {
        filters.push(lane.clone().with_status(status));
        filters.push(keyed.clone().with_status(status));
        filters.push(
            lane.clone()
                .with_status(status)
                .with_error_containing("boom"),
        );
        filters.push(
            lane.clone()
                .with_status(status)
                .enqueued_between(None, Some(since)),
        );
    }
    filters
}

/// A page of a lane reads one range from the cursor on, in seq order: of `outbox_list` (or
/// `outbox_list_key`, by key), which hold no status, or of the index that holds exactly the
/// asked status's rows of the lane or key. No scan of the table, no sort of the lane. A lookup
/// by ids reads the id index and sorts only those rows.
async fn check_listing(store: &SqliteOutboxStore, when: &str) {
    use OutboxStatus::{Claimed, DeadLetter, Delivered, Pending};
    for filter in listing_filters() {
        for after in [None, Some(3_000)] {
            let plan = store
                .list_query_plan(&filter, PageRequest { after, limit: 50 })
                .await
                .unwrap();
            let shown = format!("{when}, {}:\n  {}", plan.statement, plan.steps.join("\n  "));
            let reads: Vec<&String> = plan
                .steps
                .iter()
                .filter(|step| step.starts_with("SEARCH outbox") || step.starts_with("SCAN outbox"))
                .collect();
            assert!(!reads.is_empty(), "nothing read: {shown}");
            let keyed = filter.ordering_key.is_some();
            let index = match (filter.ids.is_empty(), keyed, filter.status) {
                (false, _, _) => "USING INDEX sqlite_autoindex_outbox_1 (outbox_id=?",
                (true, false, Some(Pending)) => {
                    "USING INDEX outbox_pending (lane=? AND target=? AND rowid>?)"
                }
                (true, false, Some(DeadLetter)) => {
                    "USING INDEX outbox_list_dead (lane=? AND target=? AND rowid>?)"
                }
                (true, false, None | Some(Claimed | Delivered)) => {
                    "USING INDEX outbox_list (lane=? AND target=? AND rowid>?)"
                }
                (true, true, Some(DeadLetter)) => {
                    "USING INDEX outbox_dead_keys (lane=? AND target=? AND ordering_key=? \
                     AND rowid>?)"
                }
                (true, true, Some(Pending | Claimed)) => {
                    "USING INDEX outbox_key_live (lane=? AND target=? AND ordering_key=? \
                     AND status=? AND rowid>?)"
                }
                (true, true, None | Some(Delivered)) => {
                    "USING INDEX outbox_list_key (lane=? AND target=? AND ordering_key=? \
                     AND rowid>?)"
                }
            };
            for step in reads {
                assert!(step.contains(index), "{index} unused: {shown}");
            }
            if filter.ids.is_empty() {
                assert!(
                    !plan.steps.iter().any(|step| step.contains("TEMP B-TREE")),
                    "the lane sorted in a temporary B-tree: {shown}"
                );
            }
            let ranges = plan
                .steps
                .iter()
                .filter(|s| s.starts_with("SEARCH outbox"))
                .count();
            assert_eq!(ranges, 1, "one range: {shown}");
        }
    }
}

#[tokio::test]
async fn listing_pages_read_the_lane_index_in_order_before_and_after_analyze() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox.db");
    let clock = ManualClock::new(UnixMillis::from_millis(1_700_000_000_000));
    let open = || {
        SqliteOutboxStore::builder(&path)
            .clock(Arc::new(clock.clone()))
            .open()
    };
    let store = Arc::new(open().await.unwrap());
    fill(&Outbox::from_arc(store.clone()), &clock).await;
    check_listing(&store, "without statistics").await;
    store.close().await;
    let url = format!("sqlite://{}", path.display());
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    sqlx::query("ANALYZE").execute(&mut conn).await.unwrap();
    conn.close().await.unwrap();
    let store = open().await.unwrap();
    check_listing(&store, "after ANALYZE").await;
}

/// The operator's reads of dead letters read only indexes of dead letters and of live key
/// rows, never the lane's history: the blocked keys page the lane's keyed dead letters
/// (`outbox_dead_keys`), each key's head down to its status in `outbox_key_live`, and the
/// page's messages by seq; a count of dead letters the lane's (`outbox_list_dead`) or the
/// key's (`outbox_dead_keys`) range. The one sort is of the held keys, in the blocked keys
/// page.
async fn check_dead_letter_reads(store: &SqliteOutboxStore, when: &str) {
    let plans = store.dead_letter_query_plans().await.unwrap();
    assert_eq!(plans.len(), 3, "{when}: {plans:#?}");
    for plan in &plans {
        let shown = format!("{when}, {}:\n  {}", plan.statement, plan.steps.join("\n  "));
        let expected: &[&str] = match plan.statement.as_str() {
            "blocked_keys" => &[
                "SEARCH d USING COVERING INDEX outbox_dead_keys (lane=? AND target=?",
                "SEARCH l USING COVERING INDEX outbox_key_live \
                 (lane=? AND target=? AND ordering_key=? AND status=?)",
                "SEARCH m USING INTEGER PRIMARY KEY (rowid=?)",
            ],
            "count_dead_letters (lane)" => {
                &["USING COVERING INDEX outbox_list_dead (lane=? AND target=?)"]
            }
            "count_dead_letters (key)" => &["USING COVERING INDEX outbox_dead_keys \
                 (lane=? AND target=? AND ordering_key=?)"],
            other => panic!("an unexpected statement {other}: {shown}"),
        };
        for index in expected {
            assert!(
                plan.steps.iter().any(|step| step.contains(index)),
                "{index} unused: {shown}"
            );
        }
        for step in &plan.steps {
            let read = step.starts_with("SEARCH ") || step.starts_with("SCAN ");
            assert!(
                !read
                    || step.starts_with("SCAN h")
                    || step.starts_with("SCAN probed")
                    || expected.iter().any(|index| step.contains(index)),
                "an unexpected read: {shown}"
            );
        }
        let sorts = plan
            .steps
            .iter()
            .filter(|step| step.contains("TEMP B-TREE"))
            .count();
        let allowed = usize::from(plan.statement == "blocked_keys");
        assert!(sorts <= allowed, "a sort: {shown}");
    }
}

#[tokio::test]
async fn dead_letter_reads_use_dead_letter_indexes_before_and_after_analyze() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox.db");
    let clock = ManualClock::new(UnixMillis::from_millis(1_700_000_000_000));
    let open = || {
        SqliteOutboxStore::builder(&path)
            .clock(Arc::new(clock.clone()))
            .open()
    };
    let store = Arc::new(open().await.unwrap());
    fill(&Outbox::from_arc(store.clone()), &clock).await;
    check_dead_letter_reads(&store, "without statistics").await;
    store.close().await;
    let url = format!("sqlite://{}", path.display());
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    sqlx::query("ANALYZE").execute(&mut conn).await.unwrap();
    conn.close().await.unwrap();
    let store = open().await.unwrap();
    check_dead_letter_reads(&store, "after ANALYZE").await;
}
