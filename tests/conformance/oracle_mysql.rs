//! The conformance suite against `MysqlOutboxStore` on Oracle MySQL, the other dialect
//! (`OUTBOX_TEST_MYSQL8_URL`, default `mysql://root@127.0.0.1:3307/test`, which
//! `.ci/mysql-sid` starts; the cases fail when it is unreachable or speaks MariaDB's
//! dialect). Each case gets a database of its own, dropped when it ends.

#[path = "../support/mysql.rs"]
mod support;

outbox_relay::conformance!(support::harness_oracle_mysql);
