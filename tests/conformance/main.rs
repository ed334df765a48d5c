//! One conformance suite, run against every store backend: the cases live in the library
//! (`src/testing/`, feature `testing`, so a backend outside the crate runs them too);
//! `outbox_relay::conformance!` turns them into `#[tokio::test]`s for one backend. Each
//! backend module (`memory.rs`, `sqlite.rs`, `postgres.rs`, `mysql.rs`, and
//! `postgres_statements.rs` without PostgreSQL's cycle function, `postgres_pgbouncer.rs`
//! through PgBouncer in transaction mode) calls it with a function that builds a fresh,
//! isolated harness (its own file, its own schema). `external.rs` runs it against a backend
//! written as a user would, outside the crate.

mod external;
mod memory;
#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "postgres")]
mod postgres_pgbouncer;
#[cfg(feature = "postgres")]
mod postgres_statements;
#[cfg(feature = "sqlite")]
mod sqlite;
