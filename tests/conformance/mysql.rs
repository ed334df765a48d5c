//! The conformance suite against `MysqlOutboxStore`, over a real connection, on both
//! dialects: on the server at `OUTBOX_TEST_MYSQL_URL` (MariaDB in CI), and in
//! `oracle_mysql` on Oracle MySQL at `OUTBOX_TEST_MYSQL8_URL` (default
//! `mysql://root@127.0.0.1:3307/test`, which `.ci/mysql-sid` starts; those cases fail when
//! it is unreachable or speaks MariaDB's dialect). Each case gets a database of its own,
//! dropped when it ends.

#[path = "../support/mysql.rs"]
mod support;

outbox_relay::conformance!(support::harness);

/// The same cases on Oracle MySQL.
mod oracle_mysql {
    outbox_relay::conformance!(super::support::harness_oracle_mysql);
}
