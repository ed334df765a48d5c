//! The conformance suite against `MysqlOutboxStore` on MariaDB (or MySQL) at
//! `OUTBOX_TEST_MYSQL_URL`, over a real connection (`oracle_mysql.rs`: on Oracle MySQL). Each case gets a database of its own, dropped when it
//! ends.

#[path = "../support/mysql.rs"]
mod support;

outbox_relay::conformance!(support::harness);
