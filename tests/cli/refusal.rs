//! A store that refuses the relay for good (a PostgreSQL role without rights) is not
//! retried forever: after a few attempts the daemon exits 1 naming the cause.

use crate::{free_port, postgres_url, test_config, Sandbox, Schema};

/// Runs SQL as the test's superuser.
pub(crate) fn sql(statements: &[String]) {
    let url = postgres_url();
    let statements = statements.to_vec();
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(async move {
            use sqlx::Connection;
            let mut conn = sqlx::PgConnection::connect(&url).await?;
            for statement in statements {
                sqlx::raw_sql(sqlx::AssertSqlSafe(statement))
                    .execute(&mut conn)
                    .await?;
            }
            Ok::<_, sqlx::Error>(())
        })
        .expect("PostgreSQL runs the test's SQL");
}

/// A login role of the test's own, dropped (with its grants) when the test ends.
pub(crate) struct TestRole {
    pub(crate) name: String,
}

impl Drop for TestRole {
    fn drop(&mut self) {
        let name = &self.name;
        sql(&[
            format!("DROP OWNED BY {name}"),
            format!("DROP ROLE IF EXISTS {name}"),
        ]);
    }
}

#[test]
fn a_role_without_rights_on_postgres_makes_the_relay_exit_1_naming_the_cause() {
    let schema = Schema {
        name: format!("cli_{}", uuid::Uuid::new_v4().simple()),
    };
    let sandbox = Sandbox::new();
    let extra = format!("schema = \"{}\"", schema.name);
    sandbox.write(
        "relay.toml",
        &test_config(&postgres_url(), &extra, free_port()),
    );
    sandbox.ok(&["--config", "relay.toml", "migrate"]);
    sandbox.enqueue(
        &["--config", "relay.toml"],
        "orders",
        "audit",
        &["--payload", "1"],
    );

    // May read the outbox, not change it.
    let role = TestRole {
        name: format!("reader_{}", uuid::Uuid::new_v4().simple()),
    };
    sql(&[
        format!("CREATE ROLE {} LOGIN", role.name),
        format!("GRANT USAGE ON SCHEMA {} TO {}", schema.name, role.name),
        format!(
            "GRANT SELECT ON ALL TABLES IN SCHEMA {} TO {}",
            schema.name, role.name
        ),
    ]);
    let url = format!("postgres://{}@127.0.0.1:5432/test", role.name);
    let relay = sandbox.start(&[
        "--config",
        "relay.toml",
        "--database-url",
        &url,
        "run",
        "--no-migrate",
    ]);
    let (status, stderr) = relay.wait_for_exit();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("gave up after") && stderr.contains("permission denied"),
        "{stderr}"
    );
}
