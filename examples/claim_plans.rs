//! The cost of a claim, `next_due` and a lane's stats on PostgreSQL at 10 k, 100 k and 1 M
//! pending rows, for three key distributions (no keys, 1,000 keys, one hot key of N rows
//! among 1,000 cold keys): the "Execution Time" of `EXPLAIN (ANALYZE, FORMAT JSON)` of each
//! statement, as `PostgresOutboxStore::explain` runs it (`jit = off`, rolled back).
//!
//! ```text
//! cargo run --release --features postgres,plans --example claim_plans -- [postgres-url] [max-rows]
//! ```
//!
//! Defaults: `postgres://postgres@127.0.0.1:5432/test`, 1,000,000. Each case fills a
//! schema of its own with one `INSERT ... SELECT generate_series` (the rows enqueue writes,
//! key-head markers included, as `tests/postgres/plans.rs` documents), runs VACUUM ANALYZE
//! (what autovacuum does), measures each statement 5 times and prints the median, then
//! drops the schema.
//!
//! Last, the no-keys and 1,000-key cases time the relay's busy cycle on the server alone:
//! the store's cycle function (ack what the call before claimed, claim 64 rows in key runs
//! of 8) called in a loop by a procedure in one session, committing after each call, until
//! it has claimed half the backlog (at most 500 calls), so neither a client round trip nor
//! the relay's own work is in the figure. "µs/msg" is the loop's time per message claimed;
//! "× no keys" divides the no-keys case's by it (a throughput ratio at the same backlog):
//! what the store costs a keyed drain, apart from the relay and the machine's noise. "WAL
//! B/msg" is the write-ahead log the loop wrote per message claimed (the insert position
//! before and after it): unlike the time, it repeats to about 1 % whatever else the machine
//! is doing, so two builds' cycles can be compared by it on a noisy machine. (The
//! hot case here has one message per cold key, so after a few calls each claims one run of
//! the hot key: its loop would time something else, and is left out.)
//!
//! Beside each cycle, its layout floor on a fresh fill of its own (`floor_cost`): the same
//! number of calls, each claiming 64 rows by `seq` and acking the call before's with the
//! claim's and the ack's own SET lists, but no head looked up, no key probed or locked.
//! Without keys the rows are consecutive; with 1,000 keys they are the ones a keyed cycle
//! takes, 8 runs of 8 rows of one key each, a thousand seqs apart. The floor's "× no keys"
//! is what the rows' places and the keyed indexes cost a keyed cycle by themselves; the
//! cycle above the floor is the store's claim logic.

use std::time::Duration;

use outbox_relay::store::postgres::{Explained, PostgresConfig, PostgresOutboxStore};
use outbox_relay::store::{ClaimRequest, OrderingPolicy};

const LIMIT: usize = 100;
const RUNS: usize = 5;
/// The cycle loop: at most this many calls, rows claimed per call, the longest key run.
const CYCLES: i64 = 500;
const CYCLE_ROWS: i64 = 64;
const CYCLE_KEY_RUN: i64 = 8;

#[derive(Debug, Clone, Copy)]
enum Keys {
    None,
    Thousand,
    Hot,
}

async fn fill(store: &PostgresOutboxStore, rows: i64, keys: Keys) -> Result<(), sqlx::Error> {
    let t = store.messages_table();
    let (key, head, total) = match keys {
        Keys::None => ("NULL".to_owned(), "true".to_owned(), rows),
        Keys::Thousand => ("'k' || (i % 1000)".to_owned(), "i <= 1000".to_owned(), rows),
        Keys::Hot => (
            format!("CASE WHEN i <= {rows} THEN 'hot' ELSE 'c' || i END"),
            format!("i = 1 OR i > {rows}"),
            rows + 1_000,
        ),
    };
    let mut tx = store.pool().begin().await?;
    // The deferred check_head trigger would leave every unmarked row unmarked (each has a
    // live head before it): skipping it writes the same rows.
    sqlx::query("SET LOCAL session_replication_role = replica")
        .execute(&mut *tx)
        .await?;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO {t} (outbox_id, lane, target, payload, headers, ordering_key, status,
                          attempt_count, max_attempts, available_at, created_at, updated_at,
                          key_head)
         SELECT gen_random_uuid(), 'l', 'sink', jsonb_build_object('i', i), '{{}}', {key},
                'pending', 0, 5, ts, ts, ts, {head}
         FROM generate_series(1, $1::int8) AS i,
              LATERAL (SELECT now() - interval '1 hour' + i * interval '1 millisecond') AS n(ts)"
    )))
    .bind(total)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("VACUUM ANALYZE {t}")))
        .execute(store.pool())
        .await?;
    Ok(())
}

/// The median "Execution Time" (ms) of `RUNS` explains of `statement`.
async fn median_ms(store: &PostgresOutboxStore, statement: &Explained) -> f64 {
    let mut times = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        match store.explain(statement).await {
            Ok(plan) => times.push(plan[0]["Execution Time"].as_f64().unwrap_or(f64::NAN)),
            Err(error) => {
                eprintln!("explain {statement:?}: {error}");
                return f64::NAN;
            }
        }
    }
    times.sort_by(f64::total_cmp);
    times[RUNS / 2]
}

/// What one message claimed costs calls of the store's cycle function made by a procedure in
/// one session, each acking the claims of the call before and committing, for half of
/// `rows` (at most [`CYCLES`] calls).
#[derive(Debug, Clone, Copy)]
struct CycleCost {
    micros: f64,
    /// Bytes of write-ahead log.
    wal_bytes: f64,
}

impl CycleCost {
    /// What a loop that failed reports (its row shows NaN), after printing why.
    fn failed(what: &str, error: impl std::fmt::Display) -> Self {
        eprintln!("{what}: {error}");
        CycleCost {
            micros: f64::NAN,
            wal_bytes: f64::NAN,
        }
    }
}

/// A store on a schema of its own. The 1 M fill and its VACUUM take longer than the default
/// 30 s statement timeout.
async fn case_store(
    url: &str,
    schema: &str,
) -> Result<PostgresOutboxStore, outbox_relay::StoreError> {
    PostgresOutboxStore::connect_with(
        url,
        PostgresConfig::default()
            .schema(schema.to_owned())
            .statement_timeout(Duration::from_secs(3_600)),
    )
    .await
}

/// Drops the schema [`case_store`] made.
async fn drop_schema(store: &PostgresOutboxStore, schema: &str) -> Result<(), sqlx::Error> {
    let drop = format!("DROP SCHEMA \"{schema}\" CASCADE");
    sqlx::raw_sql(sqlx::AssertSqlSafe(drop))
        .execute(store.pool())
        .await
        .map(|_| ())
}

/// The loop's [`CycleCost`] per message.
async fn cycle_cost(
    store: &PostgresOutboxStore,
    schema: &str,
    rows: i64,
) -> Result<CycleCost, sqlx::Error> {
    let function: String = sqlx::query_scalar(
        "SELECT format('%I.%I', n.nspname, p.proname) FROM pg_proc p
         JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = $1 AND p.proname LIKE '%\\_cycle\\_%'",
    )
    .bind(schema)
    .fetch_one(store.pool())
    .await?;
    let body = format!(
        "SELECT coalesce(array_agg(c.outbox_id) FILTER (WHERE c.outbox_id IS NOT NULL), '{{}}'),
                coalesce(array_agg(c.claim_token) FILTER (WHERE c.outbox_id IS NOT NULL), '{{}}')
         INTO ids, tokens
         FROM {function}(NULL, 'l', 'sink', {CYCLE_ROWS}, 60000, 'plans', ids, tokens,
                         false, true, {CYCLE_KEY_RUN}) c;
         claimed := claimed + cardinality(ids);"
    );
    let declarations = "ids uuid[] := '{}'; tokens uuid[] := '{}';";
    timed_loop(store, schema, "cycle_loop", declarations, "", &body, rows).await
}

/// Creates procedure `name` in `schema`, which runs `body` (with `c` the call's number from
/// 0, adding what it claimed to `claimed`) and commits, `p_n` times, after `prelude` and
/// with `declarations` declared; calls it once for half of `rows` (at most [`CYCLES`]
/// calls) and answers its [`CycleCost`] per message claimed.
async fn timed_loop(
    store: &PostgresOutboxStore,
    schema: &str,
    name: &str,
    declarations: &str,
    prelude: &str,
    body: &str,
    rows: i64,
) -> Result<CycleCost, sqlx::Error> {
    let procedure = format!("\"{schema}\".{name}");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE PROCEDURE {procedure}(p_n int8, INOUT p_micros float8 DEFAULT NULL,
                                       INOUT p_wal float8 DEFAULT NULL)
         LANGUAGE plpgsql AS $$
         DECLARE
             {declarations}
             started timestamptz := clock_timestamp();
             wal_at pg_lsn := pg_current_wal_insert_lsn();
             claimed int8 := 0;
         BEGIN
             {prelude}
             FOR c IN 0..p_n - 1 LOOP
                 {body}
                 COMMIT;
             END LOOP;
             p_micros := extract(epoch FROM clock_timestamp() - started) * 1e6
                 / greatest(claimed, 1);
             p_wal := pg_wal_lsn_diff(pg_current_wal_insert_lsn(), wal_at)
                 / greatest(claimed, 1);
         END $$"
    )))
    .execute(store.pool())
    .await?;
    // The simple protocol: a procedure that commits must be called outside a transaction.
    let mut conn = store.pool().acquire().await?;
    let calls = (rows / 2 / CYCLE_ROWS).clamp(1, CYCLES);
    let row = sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CALL {procedure}({calls})")))
        .fetch_one(&mut *conn)
        .await?;
    Ok(CycleCost {
        micros: sqlx::Row::try_get(&row, "p_micros")?,
        wal_bytes: sqlx::Row::try_get(&row, "p_wal")?,
    })
}

/// The layout floor of a cycle: the loop's row writes without the store's claim logic. A
/// procedure claims 64 rows a call by `seq` and acks the call before's, with the claim's and
/// the ack's own SET lists, on a fresh fill of `rows`: without keys 64 consecutive rows; with
/// 1,000 keys 8 runs of 8, each run one key's next 8 rows (a thousand seqs apart, as a keyed
/// claim of the cycle's runs takes them: `seq = r * 1000 + k + 1` holds key `(k + 1) % 1000`).
/// No head is looked up and no key is probed or locked, so the figure is what the rows'
/// places and the indexes cost; the store's cycle above it is that plus its claim logic.
async fn floor_cost(
    store: &PostgresOutboxStore,
    schema: &str,
    rows: i64,
    keys: Keys,
) -> Result<CycleCost, sqlx::Error> {
    let t = store.messages_table();
    let seqs = match keys {
        Keys::None => {
            format!("SELECT generate_series(c * {CYCLE_ROWS} + 1, (c + 1) * {CYCLE_ROWS})")
        }
        Keys::Thousand | Keys::Hot => {
            // Blocks of 8 keys × 8 rows: 125 blocks across the 1,000 keys, then the next 8
            // rows of each key.
            let width = 1_000 / CYCLE_KEY_RUN;
            format!(
                "SELECT r * 1000 + k + 1
                 FROM generate_series((c / {width}) * {CYCLE_KEY_RUN},
                                      (c / {width}) * {CYCLE_KEY_RUN} + {CYCLE_KEY_RUN} - 1) r,
                      generate_series((c % {width}) * {CYCLE_KEY_RUN},
                                      (c % {width}) * {CYCLE_KEY_RUN} + {CYCLE_KEY_RUN} - 1) k"
            )
        }
    };
    let body = format!(
        "WITH u AS (
             UPDATE {t} m SET status = 'claimed', attempt_count = m.attempt_count + 1,
                    claimed_by = 'floor', claim_token = gen_random_uuid(),
                    lease_expires_at = now() + interval '60 s', updated_at = now(),
                    key_head = true
             WHERE m.seq = ANY (ARRAY({seqs}))
             RETURNING m.outbox_id)
         SELECT coalesce(array_agg(u.outbox_id), '{{}}') INTO current FROM u;
         UPDATE {t} m SET status = 'delivered', claimed_by = NULL, claim_token = NULL,
                lease_expires_at = NULL, updated_at = now()
         WHERE m.outbox_id = ANY (previous);
         previous := current;
         claimed := claimed + cardinality(current);"
    );
    // As the relay's statements run: the cycle function sets both for its own calls.
    let prelude = "PERFORM set_config('synchronous_commit', 'off', false);
                   PERFORM set_config('jit', 'off', false);";
    let declarations = "previous uuid[] := '{}'; current uuid[];";
    timed_loop(
        store,
        schema,
        "floor_loop",
        declarations,
        prelude,
        &body,
        rows,
    )
    .await
}

/// [`floor_cost`] on a schema of its own, filled as the case's; NaN where it failed.
async fn floor_case(url: &str, rows: i64, keys: Keys) -> CycleCost {
    let schema = format!("floor_{}", uuid::Uuid::new_v4().simple());
    let store = match case_store(url, &schema).await {
        Ok(store) => store,
        Err(error) => return CycleCost::failed("floor loop", error),
    };
    let cost = match fill(&store, rows, keys).await {
        Ok(()) => floor_cost(&store, &schema, rows, keys).await,
        Err(error) => Err(error),
    }
    .unwrap_or_else(|error| CycleCost::failed("floor loop", error));
    if let Err(error) = drop_schema(&store, &schema).await {
        eprintln!("floor loop: {error}");
    }
    cost
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let max_rows: i64 = args.next().map_or(Ok(1_000_000), |s| s.parse())?;
    println!(
        "| rows | keys | claim Skip ms | claim Block ms | next_due Skip ms | next_due Block ms | stats ms | cycle µs/msg | × no keys | cycle WAL B/msg | floor µs/msg | × no keys | floor WAL B/msg |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for rows in [10_000_i64, 100_000, 1_000_000] {
        if rows > max_rows {
            break;
        }
        let mut keyless_micros = f64::NAN;
        let mut keyless_floor = f64::NAN;
        for keys in [Keys::None, Keys::Thousand, Keys::Hot] {
            let schema = format!("plans_{}", uuid::Uuid::new_v4().simple());
            let store = case_store(&url, &schema).await?;
            fill(&store, rows, keys).await?;
            let claim = |ordering| {
                Explained::Claim(
                    ClaimRequest::new("l", "sink", LIMIT, Duration::from_secs(60), "plans")
                        .with_ordering(ordering),
                )
            };
            let next_due = |ordering| Explained::NextDue {
                lane: "l".into(),
                target: "sink".into(),
                ordering,
            };
            let stats = Explained::LaneStats {
                lane: "l".into(),
                target: "sink".into(),
            };
            let explained = format!(
                "| {rows} | {keys:?} | {:.2} | {:.2} | {:.3} | {:.3} | {:.1} |",
                median_ms(&store, &claim(OrderingPolicy::Skip)).await,
                median_ms(&store, &claim(OrderingPolicy::Block)).await,
                median_ms(&store, &next_due(OrderingPolicy::Skip)).await,
                median_ms(&store, &next_due(OrderingPolicy::Block)).await,
                median_ms(&store, &stats).await,
            );
            // Last: the loop drains what the explains measured on. Hot is left out (see the
            // module docs).
            if matches!(keys, Keys::Hot) {
                println!("{explained} – | – | – | – | – | – |");
            } else {
                let cycle = cycle_cost(&store, &schema, rows)
                    .await
                    .unwrap_or_else(|error| CycleCost::failed("cycle loop", error));
                let floor = floor_case(&url, rows, keys).await;
                if matches!(keys, Keys::None) {
                    keyless_micros = cycle.micros;
                    keyless_floor = floor.micros;
                }
                println!(
                    "{explained} {:.1} | {:.2} | {:.0} | {:.1} | {:.2} | {:.0} |",
                    cycle.micros,
                    keyless_micros / cycle.micros,
                    cycle.wal_bytes,
                    floor.micros,
                    keyless_floor / floor.micros,
                    floor.wal_bytes,
                );
            }
            drop_schema(&store, &schema).await?;
        }
    }
    Ok(())
}
