//! Fresh stores for each scenario, and the bulk fill of their backlogs.
//!
//! Every scenario gets an empty store (a PostgreSQL schema of its own, or a new SQLite file),
//! so the table holds exactly the backlog being measured. The fill goes through
//! `enqueue_many` in batches of [`FILL_BATCH`] (several at once on PostgreSQL): slower than
//! `COPY`, but it is the store's own write path, so whatever bookkeeping the store keeps
//! beside its rows (indexes, per-key heads) is exactly as a service would leave it.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_relay::store::mysql::MysqlOutboxStore;
use outbox_relay::store::postgres::{PostgresConfig, PostgresOutboxStore};
use outbox_relay::{InMemoryOutboxStore, Outbox, OutboxMessageDraft, SqliteOutboxStore};

use crate::options::{Keys, StoreKind, COLD_KEYS, HOT_KEY_CAP};

/// Drafts per `enqueue_many`.
pub const FILL_BATCH: usize = 5_000;
/// `enqueue_many` calls in flight at once on PostgreSQL (SQLite has one writer).
const PG_FILL_WRITERS: usize = 3;
/// The target every benchmark message is for.
pub const TARGET: &str = "target";

static NEXT_STORE: AtomicUsize = AtomicUsize::new(0);

/// Where a benchmark store lives, so a second relay "process" can open the same outbox.
#[derive(Debug, Clone)]
pub enum Location {
    Postgres {
        url: String,
        schema: String,
    },
    Sqlite {
        path: PathBuf,
    },
    /// A MySQL database of the scenario's own (its URL), dropped on [`BenchStore::remove`].
    Mysql {
        url: String,
        database: String,
    },
    /// The one in-memory outbox: a second relay shares it.
    Memory(Outbox),
}

/// An empty store of its own, removed on [`BenchStore::remove`].
pub struct BenchStore {
    pub kind: StoreKind,
    pub store: Outbox,
    pub location: Location,
    /// PostgreSQL's pool, for the raw-SQL ceiling and the cleanup.
    pub pg_pool: Option<sqlx::PgPool>,
    /// MySQL's pool, for the raw-SQL ceiling and the cleanup.
    pub mysql_pool: Option<sqlx::MySqlPool>,
    /// The messages table, as SQL text (schema-qualified on PostgreSQL), for raw SQL.
    pub table: String,
    _dir: Option<tempfile::TempDir>,
}

/// Whether PostgreSQL tables get `ANALYZE` after each fill (`OUTBOX_BENCH_ANALYZE=1`).
pub fn analyze_after_fill() -> bool {
    std::env::var("OUTBOX_BENCH_ANALYZE").is_ok_and(|v| v == "1")
}

impl BenchStore {
    /// A fresh store: a new schema `bench_<pid>_<n>` or a new temporary SQLite file.
    pub async fn create(kind: StoreKind, pg_url: &str) -> Result<Self, String> {
        let n = NEXT_STORE.fetch_add(1, Ordering::Relaxed);
        match kind {
            StoreKind::Postgres => {
                let schema = format!("bench_{}_{n}", std::process::id());
                let store = open_postgres(pg_url, &schema).await?;
                Ok(Self {
                    kind,
                    mysql_pool: None,
                    pg_pool: Some(store.pool().clone()),
                    table: store.messages_table().to_owned(),
                    store: Outbox::new(store),
                    location: Location::Postgres {
                        url: pg_url.to_owned(),
                        schema,
                    },
                    _dir: None,
                })
            }
            StoreKind::Sqlite => {
                let dir = tempfile::tempdir().map_err(|e| format!("temporary directory: {e}"))?;
                let path = dir.path().join(format!("bench_{n}.db"));
                let store = open_sqlite(&path)
                    .await
                    .map_err(|e| format!("SQLite {}: {e}", path.display()))?;
                Ok(Self {
                    kind,
                    pg_pool: None,
                    mysql_pool: None,
                    table: store.table_name().to_owned(),
                    store: Outbox::new(store),
                    location: Location::Sqlite { path },
                    _dir: Some(dir),
                })
            }
            StoreKind::Mysql => {
                let database = format!("bench_{}_{n}", std::process::id());
                let server = crate::options::mysql_url();
                let admin = sqlx::MySqlPool::connect(&server)
                    .await
                    .map_err(|e| format!("MySQL {server}: {e}"))?;
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE `{database}`")))
                    .execute(&admin)
                    .await
                    .map_err(|e| format!("MySQL create database {database}: {e}"))?;
                admin.close().await;
                let base = server.rsplit_once('/').map_or(server.as_str(), |(b, _)| b);
                let url = format!("{base}/{database}");
                let store = MysqlOutboxStore::connect(&url)
                    .await
                    .map_err(|e| format!("MySQL {url}: {e}"))?;
                Ok(Self {
                    kind,
                    pg_pool: None,
                    mysql_pool: Some(store.pool().clone()),
                    table: store.messages_table().to_owned(),
                    store: Outbox::new(store),
                    location: Location::Mysql { url, database },
                    _dir: None,
                })
            }
            StoreKind::Memory => {
                let store = Outbox::new(InMemoryOutboxStore::new());
                Ok(Self {
                    kind,
                    pg_pool: None,
                    mysql_pool: None,
                    table: String::new(),
                    store: store.clone(),
                    location: Location::Memory(store),
                    _dir: None,
                })
            }
        }
    }

    /// Lets the fill's writes settle before a measurement: on PostgreSQL a `CHECKPOINT`, so
    /// the fill's dirty pages and WAL are not written out during the measured drain (with
    /// `checkpoint_timeout` at 5 min and `checkpoint_completion_target` at 0.9, a timed
    /// checkpoint is spreading writes most of the time in a long run, and which case it
    /// overlaps is chance), and every measured case, raw or relay, starts from the same
    /// state. SQLite checkpoints its WAL as it goes (`wal_autocheckpoint`): nothing to do.
    /// A role that may not checkpoint only loses that evenness: the run goes on. With
    /// `OUTBOX_BENCH_ANALYZE=1`, PostgreSQL's table gets `ANALYZE` first, the statistics
    /// autovacuum would give it in a while (the relay's own vacuum does not analyze).
    pub async fn settle(&self) {
        if let Some(pool) = &self.pg_pool {
            if analyze_after_fill() {
                let analyze = format!("ANALYZE {}", self.table);
                if let Err(error) = sqlx::raw_sql(sqlx::AssertSqlSafe(analyze))
                    .execute(pool)
                    .await
                {
                    eprintln!("benchmark: ANALYZE before measuring failed: {error}");
                }
            }
            if let Err(error) = sqlx::raw_sql("CHECKPOINT").execute(pool).await {
                eprintln!("benchmark: CHECKPOINT before measuring failed: {error}");
            }
        }
    }

    /// Drops the PostgreSQL schema and closes the pool (the SQLite file goes with its
    /// temporary directory when this is dropped).
    pub async fn remove(&self) {
        if let (Some(pool), Location::Postgres { schema, .. }) = (&self.pg_pool, &self.location) {
            let drop = format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE");
            if let Err(error) = sqlx::raw_sql(sqlx::AssertSqlSafe(drop)).execute(pool).await {
                eprintln!("benchmark: could not drop schema {schema}: {error}");
            }
            pool.close().await;
        }
        if let (Some(pool), Location::Mysql { database, .. }) = (&self.mysql_pool, &self.location) {
            let drop = format!("DROP DATABASE IF EXISTS `{database}`");
            if let Err(error) = sqlx::raw_sql(sqlx::AssertSqlSafe(drop)).execute(pool).await {
                eprintln!("benchmark: could not drop database {database}: {error}");
            }
            pool.close().await;
        }
    }
}

/// PostgreSQL relays run the cycle function unless `OUTBOX_BENCH_CYCLE_FUNCTION=off`
/// (`PostgresConfig::cycle_function`: the statements, for a comparison).
pub fn cycle_function() -> bool {
    std::env::var("OUTBOX_BENCH_CYCLE_FUNCTION").map_or(true, |v| v != "off")
}

/// A SQLite store with the defaults, unless `OUTBOX_BENCH_SQLITE_CACHE` or
/// `OUTBOX_BENCH_SQLITE_MMAP` (bytes) set its page cache or memory map, or
/// `OUTBOX_BENCH_SQLITE_SYNC=full` and `OUTBOX_BENCH_SQLITE_CHECKPOINTS=off` its relay
/// commits and checkpoints, for a comparison.
async fn open_sqlite(
    path: &std::path::Path,
) -> Result<SqliteOutboxStore, outbox_relay::StoreError> {
    let bytes = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let mut builder = SqliteOutboxStore::builder(path);
    if let Some(cache) = bytes("OUTBOX_BENCH_SQLITE_CACHE") {
        builder = builder.cache_size(cache);
    }
    if let Some(mmap) = bytes("OUTBOX_BENCH_SQLITE_MMAP") {
        builder = builder.mmap_size(mmap);
    }
    let is = |name: &str, value: &str| std::env::var(name).is_ok_and(|v| v == value);
    builder = builder
        .synchronous_commit(is("OUTBOX_BENCH_SQLITE_SYNC", "full"))
        .background_checkpoints(!is("OUTBOX_BENCH_SQLITE_CHECKPOINTS", "off"));
    builder.open().await
}

async fn open_postgres(url: &str, schema: &str) -> Result<PostgresOutboxStore, String> {
    let mut config = PostgresConfig::default()
        .schema(schema)
        .cycle_function(cycle_function());
    // For side-by-side runs at other vacuum cadences (0: never).
    if let Some(rows) = std::env::var("OUTBOX_BENCH_VACUUM_EVERY")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        config = config.vacuum_every((rows > 0).then_some(rows));
    }
    PostgresOutboxStore::connect_with(url, config)
        .await
        .map_err(|e| format!("PostgreSQL {url} schema {schema}: {e}"))
}

/// Another handle on the same outbox, as a second relay process would open it.
pub async fn reopen(location: &Location) -> Result<Outbox, String> {
    Ok(match location {
        Location::Postgres { url, schema } => Outbox::new(open_postgres(url, schema).await?),
        Location::Sqlite { path } => Outbox::new(
            open_sqlite(path)
                .await
                .map_err(|e| format!("SQLite {}: {e}", path.display()))?,
        ),
        Location::Mysql { url, .. } => Outbox::new(
            MysqlOutboxStore::connect(url)
                .await
                .map_err(|e| format!("MySQL {url}: {e}"))?,
        ),
        Location::Memory(store) => store.clone(),
    })
}

/// What a fill wrote.
#[derive(Debug, Clone, Copy)]
pub struct Filled {
    /// The messages a drain must deliver: payload `n` in `0..measured`.
    pub measured: usize,
    /// Every row written (the hot key's rows come on top of the measured ones).
    pub total: usize,
    pub took: Duration,
}

/// Writes `backlog` measured messages to `lane` with the given key distribution. Payloads
/// are `{"n": i}`; the hot key's rows get `n >= backlog`, so a drain can tell them apart.
pub async fn fill(
    store: &Outbox,
    kind: StoreKind,
    lane: &str,
    keys: Keys,
    backlog: usize,
) -> Result<Filled, String> {
    let started = Instant::now();
    let hot = match keys {
        Keys::Hot => backlog.min(HOT_KEY_CAP),
        _ => 0,
    };
    // The hot rows first, finished before the cold ones start, so all of them come earlier
    // in enqueue order.
    if hot > 0 {
        write(store, kind, lane, backlog..backlog + hot, |_| {
            Some("hot".to_owned())
        })
        .await?;
    }
    let key = move |i: usize| match keys {
        Keys::None => None,
        Keys::Many(n) => Some(format!("k{}", i % n.max(1))),
        Keys::Hot => Some(format!("cold{}", i % COLD_KEYS)),
    };
    write(store, kind, lane, 0..backlog, key).await?;
    Ok(Filled {
        measured: backlog,
        total: backlog + hot,
        took: started.elapsed(),
    })
}

async fn write(
    store: &Outbox,
    kind: StoreKind,
    lane: &str,
    range: std::ops::Range<usize>,
    key: impl Fn(usize) -> Option<String> + Copy + Send + Sync + 'static,
) -> Result<(), String> {
    let writers = match kind {
        StoreKind::Postgres | StoreKind::Mysql => PG_FILL_WRITERS,
        StoreKind::Sqlite | StoreKind::Memory => 1,
    };
    let chunks: Vec<std::ops::Range<usize>> = range
        .clone()
        .step_by(FILL_BATCH)
        .map(|start| start..(start + FILL_BATCH).min(range.end))
        .collect();
    let chunks = Arc::new(chunks);
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks: tokio::task::JoinSet<Result<(), String>> = tokio::task::JoinSet::new();
    for _ in 0..writers {
        let (store, chunks, next, lane) =
            (store.clone(), chunks.clone(), next.clone(), lane.to_owned());
        tasks.spawn(async move {
            loop {
                let Some(chunk) = chunks.get(next.fetch_add(1, Ordering::Relaxed)) else {
                    return Ok(());
                };
                let drafts = chunk
                    .clone()
                    .map(|i| draft(&lane, i, key(i)))
                    .collect::<Result<Vec<_>, _>>()?;
                store
                    .enqueue_many(drafts)
                    .await
                    .map_err(|e| format!("fill {lane}: {e}"))?;
            }
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.map_err(|e| format!("fill task: {e}"))??;
    }
    Ok(())
}

pub fn draft(lane: &str, n: usize, key: Option<String>) -> Result<OutboxMessageDraft, String> {
    let draft = OutboxMessageDraft::new(lane, TARGET, serde_json::json!({ "n": n }))
        .map_err(|e| format!("draft {n}: {e}"))?;
    Ok(match key {
        Some(key) => draft.with_ordering_key(key),
        None => draft,
    })
}
