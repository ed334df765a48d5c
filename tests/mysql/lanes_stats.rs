//! `lanes_stats` over 1,000 lanes of 10 messages each (half of them keyed): the call is one
//! statement on the server, counted by the session's `Questions` around it on a pool of one
//! connection; and (feature `plans`) that statement reads every figure by an index under
//! each lane, never a scan of the messages or keys table, on both dialects.

use outbox_relay::store::mysql::{MysqlConfig, MysqlOutboxStore};
use outbox_relay::{Outbox, OutboxMessageDraft};
use serde_json::json;

use crate::support::{open, TestDatabase};

const LANES: usize = 1_000;
const PER_LANE: usize = 10;

/// The asked lanes, `lane-0` … `lane-999` of target `sink`.
fn lanes() -> Vec<(String, String)> {
    (0..LANES)
        .map(|i| (format!("lane-{i}"), "sink".to_owned()))
        .collect()
}

/// Enqueues `PER_LANE` messages in each lane, every other one with an ordering key.
async fn fill(store: &Outbox) {
    for chunk in lanes().chunks(LANES / 2) {
        let mut drafts = Vec::with_capacity(chunk.len() * PER_LANE);
        for (lane, target) in chunk {
            for i in 0..PER_LANE {
                let draft = OutboxMessageDraft::new(lane, target, json!({ "i": i })).unwrap();
                drafts.push(if i % 2 == 0 {
                    draft.with_ordering_key(format!("k{}", i % 4))
                } else {
                    draft
                });
            }
        }
        store.enqueue_many(drafts).await.unwrap();
    }
}

/// The session's count of statements run (`Questions`).
async fn questions(store: &MysqlOutboxStore) -> i64 {
    let (_, value): (String, String) = sqlx::query_as("SHOW SESSION STATUS LIKE 'Questions'")
        .fetch_one(store.pool())
        .await
        .unwrap();
    value.parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lanes_stats_of_a_thousand_lanes_is_one_statement() {
    let db = TestDatabase::create().await;
    fill(&Outbox::new(open(&db, MysqlConfig::default()).await)).await;
    // One connection: every statement of the call runs in the session counted.
    let outbox =
        Outbox::new(MysqlOutboxStore::new(db.pool(1).await, MysqlConfig::default()).unwrap());
    let store: &MysqlOutboxStore = outbox.backend().unwrap();
    let asked = lanes();
    // The first call prepares the statement and probes the server; the second is counted.
    assert_eq!(outbox.lanes_stats(&asked).await.unwrap().len(), LANES);
    let start = questions(store).await;
    let show = questions(store).await - start;
    let stats = outbox.lanes_stats(&asked).await.unwrap();
    let statements = questions(store).await - start - 2 * show;
    assert_eq!(stats.len(), LANES);
    assert!(stats.iter().all(|s| s.pending == PER_LANE as u64));
    assert_eq!(
        statements, 1,
        "lanes_stats of {LANES} lanes ran {statements} statements (SHOW STATUS counts {show})"
    );
    db.drop_now().await;
}

#[cfg(feature = "plans")]
mod plans {
    use outbox_relay::store::mysql::{Explain, MysqlConfig};
    use outbox_relay::Outbox;
    use serde_json::Value;

    use super::{fill, lanes, LANES, PER_LANE};
    use crate::support::{open, Server, TestDatabase};

    /// Every read of a table other than the asked lanes (`q`): `(table, access, rows)`.
    fn reads(plan: &Value, out: &mut Vec<(String, String, u64)>) {
        match plan {
            Value::Object(map) => {
                let name = map.get("table_name").and_then(Value::as_str);
                // MySQL's second format says `index` for any index access and names which
                // in `index_access_type`.
                let access = map
                    .get("index_access_type")
                    .or_else(|| map.get("access_type"))
                    .and_then(Value::as_str);
                if let (Some(name), Some(access)) = (name, access) {
                    if name != "q" {
                        let rows = ["r_rows", "actual_rows", "rows", "estimated_rows"]
                            .iter()
                            .find_map(|k| map.get(*k).and_then(Value::as_f64))
                            .unwrap_or(0.0);
                        out.push((name.to_owned(), access.to_owned(), rows.ceil() as u64));
                    }
                }
                map.values().for_each(|v| reads(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| reads(v, out)),
            _ => {}
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lanes_stats_reads_indexes_under_each_lane() {
        lanes_stats_reads_indexes_under_each_lane_on(Server::Main).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lanes_stats_reads_indexes_under_each_lane_on_oracle_mysql() {
        lanes_stats_reads_indexes_under_each_lane_on(Server::OracleMysql).await;
    }

    async fn lanes_stats_reads_indexes_under_each_lane_on(server: Server) {
        let db = TestDatabase::create_on(server).await;
        let store = Outbox::new(open(&db, MysqlConfig::default()).await);
        fill(&store).await;
        let mysql: &outbox_relay::MysqlOutboxStore = store.backend().unwrap();
        let messages = mysql.messages_table().to_owned();
        for table in [messages.replace("_messages`", "_keys`"), messages] {
            sqlx::query(sqlx::AssertSqlSafe(format!("ANALYZE TABLE {table}")))
                .execute(mysql.pool())
                .await
                .unwrap();
        }
        for how in [Explain::Plan, Explain::Analyze] {
            let plan = mysql.explain_lanes_stats(&lanes(), how).await.unwrap();
            let shown = serde_json::to_string_pretty(&plan.plan).unwrap_or_default();
            let mut found = Vec::new();
            reads(&plan.plan, &mut found);
            // Four counts, the oldest due, the keys and their dead letters.
            assert!(found.len() >= 7, "{how:?}: reads {found:?}:\n{shown}");
            for (table, access, rows) in &found {
                assert!(
                    !matches!(access.as_str(), "ALL" | "index" | "index_scan" | "table"),
                    "{how:?}: a full scan ({access}) of {table}:\n{}\n{shown}",
                    plan.sql
                );
                // Twice a lane: room for an estimate, far below the table's rows.
                assert!(
                    *rows <= 2 * PER_LANE as u64,
                    "{how:?}: reads {rows} rows of {table} per lane (a lane holds {PER_LANE}, the \
                     table {}):\n{shown}",
                    LANES * PER_LANE
                );
            }
        }
        db.drop_now().await;
    }
}
