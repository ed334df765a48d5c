//! What only the MySQL store does, on MariaDB (or MySQL) at `OUTBOX_TEST_MYSQL_URL`
//! (default `mysql://root@127.0.0.1:3306/test`), and the differential run and the plan
//! guards again on Oracle MySQL at `OUTBOX_TEST_MYSQL8_URL` (default
//! `mysql://root@127.0.0.1:3307/test`, started by `.ci/mysql-sid`); the tests panic when a
//! server is unreachable. Each test creates a database of its own and drops it. In `mysql/`: the differential run
//! against the in-memory reference store (`differential.rs`), schedules the simulation draws
//! played by several relays at once and judged by its checker (`drawn_plans.rs`, on the
//! main server), the EXPLAIN guards on the
//! claim's cost (`plans.rs`), on `lanes_stats`'s one statement (`lanes_stats.rs`, with its
//! statement count) and on a scanning listing's (`list_plans.rs`), wake-ups and
//! pickup latency (`wakeups.rs`), the migrations' runs (`migrate.rs`), and the caller's transaction with the key-head lock
//! (`caller_tx.rs`).
#![cfg(feature = "mysql")]

#[path = "support/mysql.rs"]
mod support;

#[path = "mysql/caller_tx.rs"]
mod caller_tx;
#[path = "mysql/differential.rs"]
mod differential;
#[path = "support/differential.rs"]
mod differential_support;
#[path = "support/drawn_plan.rs"]
mod drawn_plan;
#[path = "mysql/drawn_plans.rs"]
mod drawn_plans;
#[path = "mysql/lanes_stats.rs"]
mod lanes_stats;
#[cfg(feature = "plans")]
#[path = "mysql/list_plans.rs"]
mod list_plans;
#[path = "mysql/migrate.rs"]
mod migrate;
#[cfg(feature = "plans")]
#[path = "mysql/plans.rs"]
mod plans;
#[path = "mysql/wakeups.rs"]
mod wakeups;
