//! The query plans of the statements whose cost must not grow with a lane's backlog: a
//! claim (both ordering policies, its selections and its batch writes), the acks, nacks,
//! lease extensions and releases, `next_due` and a lane's stats; and of the operator's reads
//! of dead letters, which must not grow with a lane's history. Guard tests read them, and so
//! can an operator wondering why a file got slow.

use sqlx::Row;

use crate::store::StoreOp;
use crate::store::{MessageFilter, OrderingPolicy, PageRequest, StoreError};

use super::key_state::count_dead_sql;
use super::read::{blocked_keys_sql, counts_sql, list_sql};
use super::row::db;
use super::statement::{bind, dynamic, filter_where};
use super::SqliteOutboxStore;
use crate::store::sql::{Terms, Value};

/// One statement's plan, as `EXPLAIN QUERY PLAN` words it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryPlan {
    /// Which statement, e.g. `claim_ready (Block)`.
    pub statement: String,
    /// The plan's steps in order, e.g. `SEARCH c USING INDEX outbox_ready (...)`.
    pub steps: Vec<String>,
}

impl SqliteOutboxStore {
    /// The plans SQLite chooses, on this file and its statistics as they stand, for the
    /// statements a relay runs every cycle: each claim selection under both ordering
    /// policies, `next_due` under both, the batch writes (the claim's marking and
    /// dead-lettering, ack, nack, extend_lease, release), and the stats of one lane.
    #[cfg_attr(docsrs, doc(cfg(feature = "plans")))]
    pub async fn hot_query_plans(&self) -> Result<Vec<QueryPlan>, StoreError> {
        let sql = &self.sql;
        let mut statements: Vec<(String, String)> = Vec::new();
        for ordering in [OrderingPolicy::Skip, OrderingPolicy::Block] {
            let policy = sql.policy(ordering);
            for (name, text) in [
                ("claim_doomed", &policy.claim_doomed),
                ("claim_lapsed", &policy.claim_lapsed),
                ("claim_ready", &policy.claim_ready),
                ("claim_runs", &policy.claim_runs),
                ("next_due", &policy.next_due),
            ] {
                statements.push((format!("{name} ({ordering:?})"), text.to_string()));
            }
        }
        for (name, text) in [
            ("mark_claimed", &sql.mark_claimed),
            ("dead_letter_lapsed", &sql.dead_letter_lapsed),
            ("ack", &sql.ack),
            ("ack_first", &sql.ack_first),
            ("ack_delete", &sql.ack_delete),
            ("ack_delete_first", &sql.ack_delete_first),
            ("nack", &sql.nack),
            ("extend_lease", &sql.extend),
            ("release", &sql.release),
        ] {
            statements.push((name.into(), text.to_string()));
        }
        let lane = MessageFilter::lane("lane", "target");
        let counted = filter_where(&lane, "", Terms::All);
        let live = filter_where(&lane, "l.", Terms::All);
        statements.push(("stats counts".into(), counts_sql(sql, &counted.clause)));
        statements.push(("stats oldest_due".into(), sql.oldest_due.to_string()));
        statements.push((
            "stats blocked_keys".into(),
            blocked_keys_sql(sql, &counted.clause, &live.clause),
        ));
        let mut plans = Vec::with_capacity(statements.len());
        for (statement, text) in statements {
            // Unbound parameters are NULL: the plan does not depend on their values.
            plans.push(self.query_plan(statement, &text, Vec::new()).await?);
        }
        Ok(plans)
    }

    /// The plans SQLite chooses for the operator's reads of a lane's dead letters: a page of
    /// the keys a dead head holds (`Outbox::blocked_keys`, the web UI's blocked keys page),
    /// and the count of the dead letters a requeue or a discard would change
    /// (`Outbox::count_dead_letters`) of a lane and of one key.
    #[cfg_attr(docsrs, doc(cfg(feature = "plans")))]
    pub async fn dead_letter_query_plans(&self) -> Result<Vec<QueryPlan>, StoreError> {
        let lane = MessageFilter::lane("lane", "target");
        let key = MessageFilter {
            ordering_key: Some("key".into()),
            ..lane.clone()
        };
        let (lane_count, lane_values) = count_dead_sql(&self.sql.table, &lane);
        let (key_count, key_values) = count_dead_sql(&self.sql.table, &key);
        let mut plans = Vec::with_capacity(3);
        for (statement, text, values) in [
            (
                "blocked_keys",
                self.sql.blocked_keys.to_string(),
                Vec::new(),
            ),
            ("count_dead_letters (lane)", lane_count, lane_values),
            ("count_dead_letters (key)", key_count, key_values),
        ] {
            plans.push(self.query_plan(statement.into(), &text, values).await?);
        }
        Ok(plans)
    }

    async fn query_plan(
        &self,
        statement: String,
        text: &str,
        values: Vec<Value>,
    ) -> Result<QueryPlan, StoreError> {
        let rows = bind(dynamic(format!("EXPLAIN QUERY PLAN {text}")), values)
            .fetch_all(&self.reader)
            .await
            .map_err(db(StoreOp::Maintenance))?;
        let steps = rows
            .iter()
            .map(|row| row.try_get::<String, _>(3))
            .collect::<Result<_, _>>()
            .map_err(db(StoreOp::Maintenance))?;
        Ok(QueryPlan { statement, steps })
    }

    /// The plan SQLite chooses for a page of the listing (`Outbox::list`, `GET
    /// /api/v1/messages`) under `filter`: the index range it reads.
    #[cfg_attr(docsrs, doc(cfg(feature = "plans")))]
    pub async fn list_query_plan(
        &self,
        filter: &MessageFilter,
        page: PageRequest,
    ) -> Result<QueryPlan, StoreError> {
        let list = list_sql(&self.sql.table, filter, page);
        self.query_plan(format!("list {filter:?}"), &list.text, list.values)
            .await
    }
}
