//! The conformance suite against `MysqlOutboxStore` on MariaDB (or MySQL 8), over a real
//! connection. Each case gets a database of its own, dropped when it ends.

#[path = "../support/mysql.rs"]
mod support;

outbox_relay::conformance!(support::harness);
