//! A claimed row that cannot be read back into a message, on every SQL store: the row is
//! dead-lettered alone, with a `last_error` naming the column, and every other row of the
//! claim is delivered. The bad rows are written by hand with SQL, as a producer in another
//! language or a bug would write them. (The in-memory store keeps typed messages, so it
//! cannot hold such a row at all.)
//!
//! - store level: the claim's answer (the messages read, the rows dead-lettered), the
//!   `ack_and_claim` answer (acks that committed are answered applied), and under
//!   `OrderingPolicy::Block` the key run behind an unreadable head released, not handed out;
//! - relay level: 10 valid rows and 1 bad one through a real relay lane give 10 deliveries
//!   and 1 dead letter.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use outbox_relay::relay::RelayEvent;
use outbox_relay::store::{
    ClaimOutcome, ClaimRequest, MessageFilter, OrderingPolicy, UnreadableRow, UNREADABLE_ROW_ERROR,
};
use outbox_relay::{LaneConfig, Outbox, OutboxMessageDraft, OutboxRelay};
use serde_json::json;
use uuid::Uuid;

use crate::{wait_for, TestHandler};

const LANE: &str = "unreadable";
const TARGET: &str = "sink";

/// A way to spoil one row by hand: the `SET` clause for each store, and the column the
/// store must then name.
#[derive(Debug, Clone, Copy)]
struct Spoil {
    column: &'static str,
    set: &'static str,
}

/// What PostgreSQL's column types still let through and the relay cannot read.
#[cfg(feature = "postgres")]
const POSTGRES_SPOILS: [Spoil; 4] = [
    Spoil {
        column: "headers",
        set: r#"headers = '{"tenant": 7}'"#,
    },
    Spoil {
        column: "headers",
        set: r#"headers = '["not", "a", "map"]'"#,
    },
    Spoil {
        column: "max_attempts",
        set: "max_attempts = 5000000000",
    },
    // A count the claim takes past u32: the claim itself writes 4294967296.
    Spoil {
        column: "attempt_count",
        set: "attempt_count = 4294967295, max_attempts = 4294967300",
    },
];

/// What SQLite's loose column types let through.
#[cfg(feature = "sqlite")]
const SQLITE_SPOILS: [Spoil; 5] = [
    Spoil {
        column: "headers",
        set: "headers = 'not json'",
    },
    Spoil {
        column: "headers",
        set: r#"headers = '{"tenant": 7}'"#,
    },
    Spoil {
        column: "max_attempts",
        set: "max_attempts = 5000000000",
    },
    Spoil {
        column: "payload",
        set: r#"payload = '{"unterminated": '"#,
    },
    Spoil {
        column: "outbox_id",
        set: "outbox_id = 'not-a-uuid'",
    },
];

/// A SQL store and the means to write its table by hand.
enum SqlStore {
    #[cfg(feature = "sqlite")]
    Sqlite(Arc<outbox_relay::SqliteOutboxStore>, tempfile::TempDir),
    #[cfg(feature = "postgres")]
    Postgres(
        Arc<outbox_relay::PostgresOutboxStore>,
        crate::stores::PgSchema,
    ),
}

/// A row as the test reads it back with SQL (the store's own reads cannot decode it).
#[derive(Debug, PartialEq)]
struct RawRow {
    status: String,
    attempt_count: i64,
    last_error: Option<String>,
}

impl SqlStore {
    #[cfg(feature = "sqlite")]
    async fn sqlite() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = outbox_relay::SqliteOutboxStore::open(dir.path().join("outbox.db"))
            .await
            .unwrap();
        SqlStore::Sqlite(Arc::new(store), dir)
    }

    #[cfg(feature = "postgres")]
    async fn postgres(cycle_function: bool) -> Self {
        use outbox_relay::store::postgres::{PostgresConfig, PostgresOutboxStore};
        let schema = crate::stores::PgSchema::new();
        let url = crate::stores::pg_url();
        let store = PostgresOutboxStore::connect_with(
            &url,
            PostgresConfig::default()
                .schema(schema.name())
                .cycle_function(cycle_function),
        )
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL is required at {url}: {e}"));
        SqlStore::Postgres(Arc::new(store), schema)
    }

    fn store(&self) -> Outbox {
        match self {
            #[cfg(feature = "sqlite")]
            SqlStore::Sqlite(store, _) => Outbox::from_arc(store.clone()),
            #[cfg(feature = "postgres")]
            SqlStore::Postgres(store, _) => Outbox::from_arc(store.clone()),
        }
    }

    /// Runs `UPDATE <table> SET <set> WHERE seq = <seq>`, as a producer writing SQL would.
    async fn spoil(&self, seq: i64, set: &str) {
        match self {
            #[cfg(feature = "sqlite")]
            SqlStore::Sqlite(store, _) => {
                let sql = format!("UPDATE {} SET {set} WHERE seq = ?", store.table_name());
                let outbox = Outbox::from_arc(store.clone());
                let mut tx = outbox.begin().await.unwrap();
                let done = sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(seq)
                    .execute(tx.connection())
                    .await
                    .unwrap();
                assert_eq!(done.rows_affected(), 1, "{set}");
                tx.commit().await.unwrap();
            }
            #[cfg(feature = "postgres")]
            SqlStore::Postgres(store, _) => {
                let sql = format!("UPDATE {} SET {set} WHERE seq = $1", store.messages_table());
                let done = sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(seq)
                    .execute(store.pool())
                    .await
                    .unwrap();
                assert_eq!(done.rows_affected(), 1, "{set}");
            }
        }
    }

    /// The row at `seq`, read with SQL.
    async fn raw(&self, seq: i64) -> RawRow {
        use sqlx::Row;
        match self {
            #[cfg(feature = "sqlite")]
            SqlStore::Sqlite(store, _) => {
                let sql = format!(
                    "SELECT status, attempt_count, last_error FROM {} WHERE seq = ?",
                    store.table_name()
                );
                let outbox = Outbox::from_arc(store.clone());
                let mut tx = outbox.begin().await.unwrap();
                let row = sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(seq)
                    .fetch_one(tx.connection())
                    .await
                    .unwrap();
                let raw = RawRow {
                    status: row.get(0),
                    attempt_count: row.get(1),
                    last_error: row.get(2),
                };
                tx.commit().await.unwrap();
                raw
            }
            #[cfg(feature = "postgres")]
            SqlStore::Postgres(store, _) => {
                let sql = format!(
                    "SELECT status, attempt_count, last_error FROM {} WHERE seq = $1",
                    store.messages_table()
                );
                let row = sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(seq)
                    .fetch_one(store.pool())
                    .await
                    .unwrap();
                RawRow {
                    status: row.get(0),
                    attempt_count: row.get(1),
                    last_error: row.get(2),
                }
            }
        }
    }

    async fn cleanup(self) {
        use crate::stores::Cleanup;
        match self {
            #[cfg(feature = "sqlite")]
            SqlStore::Sqlite(_, dir) => dir.cleanup().await,
            #[cfg(feature = "postgres")]
            SqlStore::Postgres(store, schema) => {
                store.pool().close().await;
                schema.cleanup().await
            }
        }
    }
}

/// What the test enqueued: id, sequence and ordering key of each row, in enqueue order.
struct Enqueued {
    ids: Vec<Uuid>,
    seqs: Vec<i64>,
    keys: Vec<Option<String>>,
}

/// Enqueues `n` messages of `lane`, `key(i)` their ordering keys.
async fn enqueue(
    store: &Outbox,
    lane: &str,
    n: usize,
    key: impl Fn(usize) -> Option<String>,
) -> Enqueued {
    let drafts = (0..n)
        .map(|i| {
            let mut draft = OutboxMessageDraft::new(lane, TARGET, json!({ "n": i })).unwrap();
            draft.ordering_key = key(i);
            draft
        })
        .collect();
    let answers = store.enqueue_many(drafts).await.unwrap();
    Enqueued {
        ids: answers.iter().map(|a| a.message.outbox_id).collect(),
        seqs: answers.iter().map(|a| a.message.seq).collect(),
        keys: answers
            .iter()
            .map(|a| a.message.ordering_key.clone())
            .collect(),
    }
}

fn request(lane: &str, limit: usize) -> ClaimRequest {
    ClaimRequest::new(lane, TARGET, limit, Duration::from_secs(60), "relay-a")
}

/// Checks the answer for the one unreadable row, and the row as the store left it.
async fn assert_dead_lettered_alone(
    sql: &SqlStore,
    answer: &[UnreadableRow],
    id: Option<Uuid>,
    seq: i64,
    spoil: Spoil,
) {
    assert_eq!(answer.len(), 1, "{spoil:?}: {answer:?}");
    assert_eq!((answer[0].outbox_id, answer[0].seq), (id, seq), "{spoil:?}");
    let prefix = format!("{UNREADABLE_ROW_ERROR}: {}: ", spoil.column);
    assert!(
        answer[0].error.starts_with(&prefix),
        "{spoil:?}: the error should start {prefix:?}: {:?}",
        answer[0].error
    );
    let raw = sql.raw(seq).await;
    assert_eq!(raw.status, "dead_letter", "{spoil:?}: {raw:?}");
    assert_eq!(
        raw.last_error.as_deref(),
        Some(answer[0].error.as_str()),
        "{spoil:?}"
    );
    if spoil.column != "attempt_count" {
        assert_eq!(
            raw.attempt_count, 1,
            "{spoil:?}: the one claim that found it"
        );
    }
}

/// Each spoil in a lane of its own: 10 valid rows and 1 bad one (the 4th), one claim of 20.
/// The answer is the 10 valid messages, in order, and the bad row, dead-lettered alone;
/// the next claim finds nothing (the bad row is not claimed again).
async fn claim_answers_every_readable_row_and_dead_letters_the_other(
    sql: &SqlStore,
    spoils: &[Spoil],
) {
    let store = sql.store();
    for (n, spoil) in spoils.iter().enumerate() {
        let lane = format!("{LANE}_{n}");
        let sent = enqueue(&store, &lane, 11, |_| None).await;
        sql.spoil(sent.seqs[3], spoil.set).await;
        let batch = store.claim(&request(&lane, 20)).await.unwrap();
        let got: Vec<Uuid> = batch.messages.iter().map(|m| m.outbox_id).collect();
        let want: Vec<Uuid> = sent
            .ids
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != 3)
            .map(|(_, id)| *id)
            .collect();
        assert_eq!(got, want, "{spoil:?}");
        let id = (spoil.column != "outbox_id").then_some(sent.ids[3]);
        assert_dead_lettered_alone(sql, &batch.unreadable, id, sent.seqs[3], *spoil).await;
        assert!(batch.dead_lettered.is_empty(), "{spoil:?}");
        let again = store.claim(&request(&lane, 20)).await.unwrap();
        assert!(
            again.messages.is_empty() && again.unreadable.is_empty(),
            "{spoil:?}: {again:?}"
        );
    }
}

/// `ack_and_claim` with a bad row in its claim: the acks committed and are answered
/// applied (not lost), and the claim is answered as a claim alone would be.
async fn ack_and_claim_answers_its_acks_applied(sql: &SqlStore) {
    let store = sql.store();
    let sent = enqueue(&store, LANE, 11, |_| None).await;
    let first = store.claim(&request(LANE, 5)).await.unwrap();
    assert_eq!(first.messages.len(), 5);
    sql.spoil(sent.seqs[7], r#"headers = '{"tenant": 7}'"#)
        .await;
    let acks: Vec<_> = first.messages.iter().filter_map(|m| m.claim()).collect();
    let answer = store
        .ack_and_claim(&acks, &request(LANE, 20))
        .await
        .unwrap();
    assert_eq!(answer.acked, vec![ClaimOutcome::Applied; 5]);
    let batch = answer.claimed.unwrap();
    let got: Vec<Uuid> = batch.messages.iter().map(|m| m.outbox_id).collect();
    let want: Vec<Uuid> = [5, 6, 8, 9, 10].iter().map(|&i| sent.ids[i]).collect();
    assert_eq!(got, want);
    let spoil = Spoil {
        column: "headers",
        set: "",
    };
    assert_dead_lettered_alone(
        sql,
        &batch.unreadable,
        Some(sent.ids[7]),
        sent.seqs[7],
        spoil,
    )
    .await;
    let stats = store
        .stats(&MessageFilter::lane(LANE, TARGET))
        .await
        .unwrap();
    assert_eq!(
        (stats[0].delivered, stats[0].claimed, stats[0].dead_letter),
        (5, 5, 1)
    );
}

/// Under `Block`, with key runs: key `a` is rows 0, 1, 2 (row 0 bad), key `b` rows 3, 4.
/// One claim with runs of 3 takes both keys whole. Row 0 is dead-lettered, rows 1 and 2 are
/// released (pending again, the attempt not counted) because the dead letter holds key `a`,
/// and key `b` is handed out. The next claim takes nothing of key `a`.
async fn block_releases_the_run_behind_an_unreadable_head(sql: &SqlStore) {
    let store = sql.store();
    let key = |i: usize| Some(if i < 3 { "a" } else { "b" }.to_owned());
    let sent = enqueue(&store, LANE, 5, key).await;
    sql.spoil(sent.seqs[0], r#"headers = '{"tenant": 7}'"#)
        .await;
    let block = |limit| {
        request(LANE, limit)
            .with_ordering(OrderingPolicy::Block)
            .with_key_run(3)
    };
    let batch = store.claim(&block(10)).await.unwrap();
    let got: Vec<Uuid> = batch.messages.iter().map(|m| m.outbox_id).collect();
    assert_eq!(got, vec![sent.ids[3], sent.ids[4]]);
    assert_eq!(batch.unreadable.len(), 1, "{batch:?}");
    assert_eq!(batch.unreadable[0].seq, sent.seqs[0]);
    for i in [1, 2] {
        let raw = sql.raw(sent.seqs[i]).await;
        assert_eq!(
            (raw.status.as_str(), raw.attempt_count),
            ("pending", 0),
            "row {i} of the blocked key: {raw:?}"
        );
    }
    let again = store.claim(&block(10)).await.unwrap();
    assert!(again.messages.is_empty(), "key a is blocked: {again:?}");
    assert_eq!(sent.keys[0].as_deref(), Some("a"));
}

/// 10 valid rows and 1 bad one through a real relay lane: 10 deliveries (per key in
/// enqueue order, each on its first attempt) and 1 dead letter, announced by an event and
/// counted as one in the lane's status. Keys `k0`..`k2` by `n % 3`; the bad row is the 4th
/// (key `k0`, with valid rows of its key before and after it).
async fn a_relay_lane_delivers_the_ten_and_dead_letters_the_one(
    sql: &SqlStore,
    lane_name: &str,
    spoil: Spoil,
) {
    let store = sql.store();
    let sent = enqueue(&store, lane_name, 11, |i| Some(format!("k{}", i % 3))).await;
    sql.spoil(sent.seqs[3], spoil.set).await;
    let handler = TestHandler::ok();
    let lane = LaneConfig::new(lane_name, TARGET)
        .lease(Duration::from_secs(30))
        .max_poll_interval(Duration::from_secs(30));
    let (relay, mut events) =
        crate::start(OutboxRelay::builder(&store).lane(lane, handler.clone())).await;
    let mut delivered = Vec::new();
    let mut unreadable = Vec::new();
    while delivered.len() < 10 || unreadable.is_empty() {
        match wait_for(&mut events, "10 deliveries and 1 unreadable row", |e| {
            matches!(
                e,
                RelayEvent::Delivered { .. } | RelayEvent::UnreadableDeadLettered { .. }
            )
        })
        .await
        {
            RelayEvent::Delivered {
                outbox_id, attempt, ..
            } => {
                assert_eq!(attempt, 1, "{outbox_id}: no lease lapsed, no retry");
                delivered.push(outbox_id);
            }
            RelayEvent::UnreadableDeadLettered { rows, .. } => unreadable.extend(rows),
            _ => {}
        }
    }
    let id = (spoil.column != "outbox_id").then_some(sent.ids[3]);
    assert_dead_lettered_alone(sql, &unreadable, id, sent.seqs[3], spoil).await;
    let valid: HashSet<Uuid> = sent
        .ids
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3)
        .map(|(_, id)| *id)
        .collect();
    assert_eq!(delivered.iter().copied().collect::<HashSet<_>>(), valid);
    assert_eq!(handler.calls().len(), 10, "one delivery each");
    // Per key, in enqueue order: key k0 goes on past its dead letter (ordering skip).
    let mut by_key: BTreeMap<String, Vec<Uuid>> = BTreeMap::new();
    for id in &delivered {
        let i = sent.ids.iter().position(|s| s == id).unwrap();
        by_key
            .entry(sent.keys[i].clone().unwrap())
            .or_default()
            .push(*id);
    }
    for (key, got) in by_key {
        let want: Vec<Uuid> = (0..11)
            .filter(|&i| i != 3 && sent.keys[i].as_deref() == Some(key.as_str()))
            .map(|i| sent.ids[i])
            .collect();
        assert_eq!(got, want, "key {key}");
    }
    let status = relay.status().await.unwrap();
    let lane = status
        .iter()
        .find(|s| s.lane.name == lane_name)
        .expect("the lane's status");
    assert_eq!((lane.delivered, lane.dead_lettered), (10, 1));
    relay.shutdown(Duration::from_secs(10)).await.unwrap();
    let stats = store
        .stats(&MessageFilter::lane(lane_name, TARGET))
        .await
        .unwrap();
    assert_eq!(
        (
            stats[0].pending,
            stats[0].claimed,
            stats[0].delivered,
            stats[0].dead_letter
        ),
        (0, 0, 10, 1)
    );
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn claim_answers_every_readable_row_and_dead_letters_the_other() {
        let sql = SqlStore::sqlite().await;
        super::claim_answers_every_readable_row_and_dead_letters_the_other(&sql, &SQLITE_SPOILS)
            .await;
        sql.cleanup().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ack_and_claim_answers_its_acks_applied() {
        let sql = SqlStore::sqlite().await;
        super::ack_and_claim_answers_its_acks_applied(&sql).await;
        sql.cleanup().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn block_releases_the_run_behind_an_unreadable_head() {
        let sql = SqlStore::sqlite().await;
        super::block_releases_the_run_behind_an_unreadable_head(&sql).await;
        sql.cleanup().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_relay_lane_delivers_the_ten_and_dead_letters_the_one() {
        let sql = SqlStore::sqlite().await;
        super::a_relay_lane_delivers_the_ten_and_dead_letters_the_one(&sql, LANE, SQLITE_SPOILS[0])
            .await;
        sql.cleanup().await;
    }

    /// A row whose id is not a UUID: dead-lettered by its sequence, answered without an id.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_relay_lane_dead_letters_a_row_whose_id_is_not_a_uuid() {
        let sql = SqlStore::sqlite().await;
        super::a_relay_lane_delivers_the_ten_and_dead_letters_the_one(&sql, LANE, SQLITE_SPOILS[4])
            .await;
        sql.cleanup().await;
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::*;

    /// Both ways the store claims: the cycle function (one round trip that commits before
    /// the rows are read) and the statements inside a transaction of the store's own.
    async fn each_claim_path(test: impl AsyncFn(&SqlStore)) {
        for cycle_function in [true, false] {
            let sql = SqlStore::postgres(cycle_function).await;
            test(&sql).await;
            sql.cleanup().await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn claim_answers_every_readable_row_and_dead_letters_the_other() {
        each_claim_path(async |sql| {
            super::claim_answers_every_readable_row_and_dead_letters_the_other(
                sql,
                &POSTGRES_SPOILS,
            )
            .await
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ack_and_claim_answers_its_acks_applied() {
        each_claim_path(async |sql| super::ack_and_claim_answers_its_acks_applied(sql).await).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn block_releases_the_run_behind_an_unreadable_head() {
        each_claim_path(async |sql| {
            super::block_releases_the_run_behind_an_unreadable_head(sql).await
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_relay_lane_delivers_the_ten_and_dead_letters_the_one() {
        each_claim_path(async |sql| {
            for (lane, spoil) in [
                ("headers", POSTGRES_SPOILS[0]),
                ("count", POSTGRES_SPOILS[2]),
            ] {
                super::a_relay_lane_delivers_the_ten_and_dead_letters_the_one(sql, lane, spoil)
                    .await;
            }
        })
        .await;
    }
}
