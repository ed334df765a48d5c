//! The migrations a DBA owns: the SQL files under `migrations/` are what the code runs
//! (each store's files are the source, embedded in the build and renamed for the configured
//! names; each directory holds exactly the files its store runs), running them with the
//! database's own client gives the schema the relay's `migrate` gives, and a second run of a
//! file changes nothing.
//!
//! PostgreSQL must be reachable at `OUTBOX_TEST_DATABASE_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`), and `psql` and `sqlite3` be on PATH
//! (`.ci/run` installs them); the tests panic otherwise. The MySQL files run with the
//! `mysql` client against the server at `OUTBOX_TEST_MYSQL_URL` (default
//! `mysql://root@127.0.0.1:3306/test`), each run in a database of its own.
#![cfg(all(feature = "postgres", feature = "sqlite", feature = "mysql"))]

use std::path::{Path, PathBuf};
use std::process::Command;

use outbox_relay::store::mysql::{MysqlConfig, MysqlOutboxStore};
use outbox_relay::store::postgres::{PostgresConfig, PostgresOutboxStore};
use outbox_relay::store::sqlite::SqliteOutboxStore;
use outbox_relay::store::ClaimRequest;
use outbox_relay::{Outbox, OutboxMessageDraft};
use sqlx::postgres::PgPoolOptions;

fn database_url() -> String {
    std::env::var("OUTBOX_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

fn migrations_dir(kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("migrations")
        .join(kind)
}

#[test]
fn the_postgres_files_are_the_builds_migrations() {
    let dir = migrations_dir("postgres");
    let mut present: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".sql"))
        .collect();
    present.sort_by_key(|name| name[1..name.find("__").unwrap()].parse::<i32>().unwrap());
    let latest = PostgresOutboxStore::latest_schema_version();
    assert_eq!(
        present.len(),
        usize::try_from(latest).unwrap(),
        "{present:?}"
    );
    for (name, version) in present.iter().zip(1..) {
        assert!(name.starts_with(&format!("V{version}__")), "{present:?}");
        let on_disk = std::fs::read_to_string(dir.join(name)).unwrap();
        let printed =
            PostgresOutboxStore::migration_sql(&PostgresConfig::default(), version - 1, version)
                .unwrap();
        assert!(on_disk == printed, "{name} is not what the build runs");
    }
}

/// The MySQL files are the source the store includes: every file of the directory, in
/// version order, is the migration of its version (no file left out, none out of order).
#[test]
fn the_mysql_directory_holds_the_migrations_the_store_runs() {
    let files = mysql_files();
    let versions: Vec<i64> = (1..=MysqlOutboxStore::latest_schema_version()).collect();
    assert_eq!(
        files.iter().map(|(v, _, _)| *v).collect::<Vec<_>>(),
        versions,
        "{}: V1__… to V{}__…, one file each",
        migrations_dir("mysql").display(),
        versions.len()
    );
    for (version, name, text) in files {
        assert_eq!(
            MysqlOutboxStore::migration_sql("outbox", version - 1, version).unwrap(),
            text,
            "{name} is not the store's migration {version}: list it in src/store/mysql/schema.rs"
        );
    }
}

/// The MySQL files, in version order: (version, file name, text).
fn mysql_files() -> Vec<(i64, String, String)> {
    let dir = migrations_dir("mysql");
    let mut files: Vec<(i64, String, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".sql"))
        .map(|name| {
            let version = name
                .strip_prefix('V')
                .and_then(|rest| rest.split_once("__"))
                .and_then(|(n, _)| n.parse().ok())
                .unwrap_or_else(|| panic!("{name}: not V<n>__<what>.sql"));
            let text = std::fs::read_to_string(dir.join(&name)).unwrap();
            (version, name, text)
        })
        .collect();
    files.sort();
    files
}

#[path = "support/mysql.rs"]
mod mysql_support;

/// Runs `sql` with the `mysql` client on database `database` of the test server; its
/// output on failure.
fn mysql_client(database: &str, sql: &str) -> Result<(), String> {
    let server = url::Url::parse(&mysql_support::server_url()).expect("a MySQL URL");
    let mut command = Command::new("mysql");
    command
        .arg(format!(
            "--host={}",
            server.host_str().unwrap_or("127.0.0.1")
        ))
        .arg(format!("--port={}", server.port().unwrap_or(3306)))
        .arg(format!("--user={}", server.username()))
        .arg(database);
    if let Some(password) = server.password() {
        command.env("MYSQL_PWD", password);
    }
    let output = command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(sql.as_bytes())?;
            child.wait_with_output()
        })
        .expect("the mysql client runs (install mariadb-client)");
    if output.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

/// `SHOW CREATE TABLE` of every table of the outbox, without the auto-increment counter.
async fn mysql_tables(pool: &sqlx::MySqlPool) -> Vec<String> {
    use sqlx::Row;
    let mut tables = Vec::new();
    for table in ["messages", "keys", "lane_control", "migrations"] {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SHOW CREATE TABLE `outbox_{table}`"
        )))
        .fetch_one(pool)
        .await
        .unwrap();
        let text: String = row.try_get(1).unwrap();
        let text = text
            .split(' ')
            .filter(|word| !word.starts_with("AUTO_INCREMENT="))
            .collect::<Vec<_>>()
            .join(" ");
        tables.push(text);
    }
    tables
}

/// The files, run with the `mysql` client, give the tables `migrate` gives; a store then
/// finds nothing to do and works; running a file again fails on its version and changes
/// nothing.
#[tokio::test]
async fn the_mysql_files_give_the_schema_migrate_gives() {
    let by_files = mysql_support::TestDatabase::create().await;
    let by_code = mysql_support::TestDatabase::create().await;
    for (_, name, text) in mysql_files() {
        mysql_client(&by_files.name, &text).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let code_store = mysql_support::open(&by_code, MysqlConfig::default()).await;
    let files_pool = by_files.pool(2).await;
    let from_files = mysql_tables(&files_pool).await;
    assert_eq!(from_files, mysql_tables(code_store.pool()).await);

    let store = MysqlOutboxStore::new(files_pool.clone(), MysqlConfig::default()).unwrap();
    assert_eq!(
        store.schema_version().await.unwrap(),
        Some(MysqlOutboxStore::latest_schema_version())
    );
    store.migrate().await.unwrap();
    let outbox = Outbox::new(store);
    outbox
        .enqueue(OutboxMessageDraft::new("l", "t", serde_json::json!({"n": 1})).unwrap())
        .await
        .unwrap();
    let request = ClaimRequest::new("l", "t", 10, std::time::Duration::from_secs(5), "r");
    assert_eq!(outbox.claim(&request).await.unwrap().messages.len(), 1);

    let (_, name, first) = &mysql_files()[0];
    let again = mysql_client(&by_files.name, first);
    assert!(
        again.as_ref().is_err_and(|e| e.contains("Duplicate entry")),
        "{name} run twice: {again:?}"
    );
    assert_eq!(mysql_tables(&files_pool).await, from_files);
    by_files.drop_now().await;
    by_code.drop_now().await;
}

/// Runs `sql` with `psql`, stopping at the first error; its output on failure.
fn psql(sql: &str) -> Result<(), String> {
    let output = Command::new("psql")
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", &database_url()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(sql.as_bytes())?;
            child.wait_with_output()
        })
        .expect("psql runs (install postgresql-client)");
    if output.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

/// Every column, index, function and trigger of `schema`, as text.
async fn catalog(pool: &sqlx::PgPool, schema: &str) -> Vec<String> {
    let query = "
        SELECT 'column ' || c.relname || '.' || a.attname || ' ' ||
               format_type(a.atttypid, a.atttypmod) || ' ' || coalesce(co.collname::text, '') ||
               ' ' || a.attnotnull::text || ' ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
          FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
          JOIN pg_namespace n ON n.oid = c.relnamespace
          LEFT JOIN pg_collation co ON co.oid = a.attcollation AND a.attcollation <> 100
          LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
         WHERE n.nspname = $1 AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
        UNION ALL
        SELECT 'index ' || replace(indexdef, $1, 'S') FROM pg_indexes WHERE schemaname = $1
        UNION ALL
        SELECT 'function ' || p.proname || ' ' ||
               -- The key-head lock class is a hash of the table's name: N in both.
               md5(regexp_replace(replace(p.prosrc, $1, 'S'), '-?[0-9]{6,}', 'N', 'g'))
          FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1
        UNION ALL
        SELECT 'trigger ' || replace(pg_get_triggerdef(t.oid), $1, 'S')
          FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
          JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = $1 AND NOT t.tgisinternal
        ORDER BY 1";
    sqlx::query_scalar(query)
        .bind(schema)
        .fetch_all(pool)
        .await
        .unwrap()
}

/// A DBA runs the files with `psql`, one version at a time; the schema is the relay's
/// own, to the column, index, function and trigger; a relay that may not write DDL runs on
/// it; a file run twice fails on the version it records and changes nothing.
#[tokio::test]
async fn psql_running_the_files_gives_the_relays_schema() {
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .connect(&database_url())
        .await
        .expect("PostgreSQL at OUTBOX_TEST_DATABASE_URL");
    let by_dba = format!("t_{}", uuid::Uuid::new_v4().simple());
    let by_relay = format!("t_{}", uuid::Uuid::new_v4().simple());
    let config = PostgresConfig::default().schema(by_dba.clone());
    let latest = PostgresOutboxStore::latest_schema_version();
    for version in 1..=latest {
        let sql = PostgresOutboxStore::migration_sql(&config, version - 1, version).unwrap();
        psql(&sql).unwrap_or_else(|e| panic!("migration {version} through psql: {e}"));
    }
    let again = PostgresOutboxStore::migration_sql(&config, latest - 1, latest).unwrap();
    let error = psql(&again).expect_err("a second run of a file fails");
    assert!(error.contains("duplicate key"), "{error}");

    let relay = PostgresOutboxStore::new(
        pool.clone(),
        PostgresConfig::default().schema(by_relay.clone()),
    )
    .await
    .unwrap();
    relay.migrate().await.unwrap();
    let relay_catalog = catalog(&pool, &by_relay).await;
    let dba_catalog = catalog(&pool, &by_dba).await;
    // The relay adds its build's cycle function beside the migrations; the files do not.
    let without_cycle = |c: Vec<String>| -> Vec<String> {
        c.into_iter()
            .filter(|l| !l.starts_with("function outbox_cycle"))
            .collect()
    };
    assert_eq!(without_cycle(relay_catalog.clone()), dba_catalog);
    assert!(relay_catalog.len() > 30, "{relay_catalog:#?}");

    // A relay over the DBA's schema, as with `run --no-migrate`: it works as it is.
    let store = PostgresOutboxStore::new(pool.clone(), config.clone())
        .await
        .unwrap();
    assert_eq!(store.schema_version().await.unwrap(), Some(latest));
    let store = Outbox::new(store);
    let draft = OutboxMessageDraft::new("l", "t", serde_json::json!({"n": 1})).unwrap();
    store.enqueue(draft).await.unwrap();
    let claimed = store
        .claim(&ClaimRequest::new(
            "l",
            "t",
            10,
            std::time::Duration::from_secs(30),
            "c",
        ))
        .await
        .unwrap();
    assert_eq!(claimed.messages.len(), 1);

    for schema in [by_dba, by_relay] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA \"{schema}\" CASCADE"
        )))
        .execute(&pool)
        .await
        .unwrap();
    }
}

/// Runs `sql` with the `sqlite3` shell on the file `path`, stopping at the first error; its
/// output on failure.
fn sqlite3(path: &Path, sql: &str) -> Result<(), String> {
    let output = Command::new("sqlite3")
        .arg("-bail")
        .arg(path)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(sql.as_bytes())?;
            child.wait_with_output()
        })
        .expect("sqlite3 runs (install sqlite3)");
    if output.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

/// The SQLite files, in version order: (name, text).
fn sqlite_files() -> Vec<(String, String)> {
    let dir = migrations_dir("sqlite");
    let mut files: Vec<(i64, String, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".sql"))
        .map(|name| {
            let version = name[1..].split("__").next().unwrap().parse().unwrap();
            let text = std::fs::read_to_string(dir.join(&name)).unwrap();
            (version, name, text)
        })
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|(_, name, text)| (name, text))
        .collect()
}

/// The SQLite files through the `sqlite3` shell, as they are, give the file the store
/// makes; `migrate --print-sql`'s text for a table prefix gives the file the store makes
/// with that prefix. Either opens as it is (no migration left to run) and works; running a
/// file again fails on its version and changes nothing.
#[tokio::test]
async fn sqlite3_running_the_files_gives_the_stores_schema() {
    let dir = std::env::temp_dir().join(format!("outbox-files-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let files = sqlite_files();
    assert_eq!(
        files.len() as i64,
        SqliteOutboxStore::latest_schema_version()
    );
    let latest = SqliteOutboxStore::latest_schema_version();
    let as_written: Vec<&str> = files.iter().map(|(_, text)| text.as_str()).collect();
    assert_eq!(
        SqliteOutboxStore::migration_sql("", 0, latest).unwrap(),
        as_written.join("\n"),
        "the SQL for the default table is the files as they are"
    );
    let schema = |path: &Path| {
        let output = Command::new("sqlite3")
            .arg(path)
            .arg("SELECT type, name, sql FROM sqlite_master ORDER BY type, name")
            .output()
            .unwrap();
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    for prefix in ["", "app_"] {
        let by_dba = dir.join(format!("{prefix}dba.db"));
        let by_store = dir.join(format!("{prefix}store.db"));
        if prefix.is_empty() {
            for (name, text) in &files {
                sqlite3(&by_dba, text).unwrap_or_else(|e| panic!("{name}: {e}"));
            }
        } else {
            let sql = SqliteOutboxStore::migration_sql(prefix, 0, latest).unwrap();
            sqlite3(&by_dba, &sql).unwrap();
        }
        // Read while the store is open: its connections closing in the background
        // checkpoint the WAL and remove it, which a concurrent reader can meet half done.
        let opened = SqliteOutboxStore::builder(&by_store)
            .table_prefix(prefix)
            .open()
            .await
            .unwrap();
        let (dba, store_schema) = (schema(&by_dba), schema(&by_store));
        drop(opened);
        assert!(dba.contains(&format!("{prefix}outbox_key_live")), "{dba}");
        assert_eq!(dba, store_schema);

        let last = SqliteOutboxStore::migration_sql(prefix, latest - 1, latest).unwrap();
        let again = sqlite3(&by_dba, &last);
        assert!(
            again
                .as_ref()
                .is_err_and(|e| e.contains("UNIQUE constraint failed")),
            "migration {latest} run twice: {again:?}"
        );
        assert_eq!(schema(&by_dba), dba);

        let store = SqliteOutboxStore::builder(&by_dba)
            .table_prefix(prefix)
            .open()
            .await
            .unwrap();
        assert_eq!(store.table_name(), format!("{prefix}outbox"));
        let store = Outbox::new(store);
        let draft = OutboxMessageDraft::new("l", "t", serde_json::json!({"n": 1})).unwrap();
        store.enqueue(draft).await.unwrap();
        let claimed = store
            .claim(&ClaimRequest::new(
                "l",
                "t",
                10,
                std::time::Duration::from_secs(30),
                "c",
            ))
            .await
            .unwrap();
        assert_eq!(claimed.messages.len(), 1);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
