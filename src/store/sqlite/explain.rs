//! The query plans of the statements whose cost must not grow with a lane's backlog: a
//! claim (both ordering policies, its selections and its batch writes), the acks, nacks,
//! lease extensions and releases, `next_due` and a lane's stats. Guard tests read them, and
//! so can an operator wondering why a file got slow.

use sqlx::Row;

use crate::store::StoreOp;
use crate::store::{MessageFilter, OrderingPolicy, PageRequest, StoreError};

use super::read::{blocked_keys_sql, counts_sql, list_sql};
use super::row::db;
use super::statement::{bind, dynamic, filter_where};
use super::SqliteOutboxStore;
use crate::store::sql::Terms;

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
            let rows = dynamic(format!("EXPLAIN QUERY PLAN {text}"))
                .fetch_all(&self.reader)
                .await
                .map_err(db(StoreOp::Maintenance))?;
            let steps = rows
                .iter()
                .map(|row| row.try_get::<String, _>(3))
                .collect::<Result<_, _>>()
                .map_err(db(StoreOp::Maintenance))?;
            plans.push(QueryPlan { statement, steps });
        }
        Ok(plans)
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
        let rows = bind(
            dynamic(format!("EXPLAIN QUERY PLAN {}", list.text)),
            list.values,
        )
        .fetch_all(&self.reader)
        .await
        .map_err(db(StoreOp::Maintenance))?;
        let steps = rows
            .iter()
            .map(|row| row.try_get::<String, _>(3))
            .collect::<Result<_, _>>()
            .map_err(db(StoreOp::Maintenance))?;
        Ok(QueryPlan {
            statement: format!("list {filter:?}"),
            steps,
        })
    }
}
