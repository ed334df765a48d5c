//! What `migrate` creates and where: migrations that are idempotent and safe to run from two
//! processes at once, the claim's partial indexes, and the schema and table prefix, chosen
//! and checked before any connection.

use std::time::Duration;

use outbox_relay::store::postgres::{PostgresConfig, PostgresOutboxStore};
use outbox_relay::store::{ClaimRequest, StoreError};
use outbox_relay::Outbox;
use sqlx::Row;

use crate::{count_rows, draft, open, pool, SchemaGuard};

#[tokio::test]
async fn migrations_are_idempotent_and_safe_concurrently() {
    let schema = SchemaGuard::new();
    let store = open(schema.config()).await;
    crate::pg(&store).migrate().await.unwrap();
    crate::pg(&store).migrate().await.unwrap();

    // Two processes migrating a fresh schema at the same moment.
    let fresh = SchemaGuard::new();
    let a = PostgresOutboxStore::new(pool().await, fresh.config())
        .await
        .unwrap();
    let b = PostgresOutboxStore::new(pool().await, fresh.config())
        .await
        .unwrap();
    let (ra, rb) = tokio::join!(a.migrate(), b.migrate());
    ra.unwrap();
    rb.unwrap();
    let versions: Vec<i32> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT version FROM \"{}\".outbox_migrations ORDER BY version",
        fresh.0
    )))
    .fetch_all(a.pool())
    .await
    .unwrap();
    assert_eq!(versions, vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    // Migration 5: the compared columns in "C", and the head trigger made again over them.
    let collations: Vec<(String, String)> = sqlx::query_as(
        "SELECT a.attname::text, coalesce(c.collname::text, '') FROM pg_attribute a
         LEFT JOIN pg_collation c ON c.oid = a.attcollation
         WHERE a.attrelid = to_regclass($1) AND a.attname IN
               ('lane', 'target', 'ordering_key', 'dedupe_key', 'status', 'claimed_by')
         ORDER BY 1",
    )
    .bind(a.messages_table())
    .fetch_all(a.pool())
    .await
    .unwrap();
    let expected: Vec<(String, String)> = [
        ("claimed_by", "default"),
        ("dedupe_key", "C"),
        ("lane", "C"),
        ("ordering_key", "C"),
        ("status", "C"),
        ("target", "C"),
    ]
    .iter()
    .map(|(a, c)| ((*a).to_owned(), (*c).to_owned()))
    .collect();
    assert_eq!(collations, expected);
    let triggers: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass($1)
         AND tgname::text LIKE '%check_head' AND tgdeferrable AND tginitdeferred",
    )
    .bind(a.messages_table())
    .fetch_one(a.pool())
    .await
    .unwrap();
    assert_eq!(triggers, 1, "the deferred check_head trigger");
    let a = Outbox::new(a);
    a.enqueue(draft("l", 1)).await.unwrap();
    assert_eq!(count_rows(&Outbox::new(b)).await, 1);
    schema.drop().await;
    fresh.drop().await;
}

#[tokio::test]
async fn claims_use_partial_indexes_over_heads_and_claims() {
    let schema = SchemaGuard::new();
    let store = open(schema.config()).await;
    let def = |name: &'static str| {
        let pool = crate::pg(&store).pool().clone();
        let schema = schema.0.clone();
        async move {
            let row = sqlx::query(
                "SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND indexname = $2",
            )
            .bind(&schema)
            .bind(name)
            .fetch_one(&pool)
            .await
            .unwrap_or_else(|e| panic!("index {name}: {e}"));
            row.get::<String, _>("indexdef")
        }
    };
    // Due pending heads only: the rows queued behind a key's head are not in it.
    let head = def("outbox_head_idx").await;
    assert!(head.contains("(lane, target, available_at, seq)"), "{head}");
    assert!(
        head.contains("'pending'") && head.contains("key_head") && !head.contains("'claimed'"),
        "{head}"
    );
    // Lapsed claims in lapse order, over claimed rows only.
    let lease = def("outbox_lease_idx").await;
    assert!(
        lease.contains("(lane, target, lease_expires_at, seq)"),
        "{lease}"
    );
    assert!(
        lease.contains("'claimed'") && !lease.contains("'pending'"),
        "{lease}"
    );
    schema.drop().await;
}

#[tokio::test]
async fn schema_and_prefix_are_chosen_and_checked() {
    let schema = SchemaGuard::new();
    let store = open(schema.config().table_prefix("relay_q")).await;
    assert_eq!(
        crate::pg(&store).messages_table(),
        format!("\"{}\".\"relay_q_messages\"", schema.0)
    );
    let sent = store.enqueue(draft("l", 1)).await.unwrap();
    let batch = store
        .claim(&ClaimRequest::new(
            "l",
            "sink",
            1,
            Duration::from_secs(5),
            "r",
        ))
        .await
        .unwrap();
    assert_eq!(batch.messages[0].outbox_id, sent.message.outbox_id);
    let exists: bool = sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
        .bind(format!("{}.relay_q_migrations", schema.0))
        .fetch_one(crate::pg(&store).pool())
        .await
        .unwrap();
    assert!(exists);

    for (config, field) in [
        (PostgresConfig::default().schema("Public"), "schema"),
        (PostgresConfig::default().schema("a;drop"), "schema"),
        (
            PostgresConfig::default().table_prefix("bad-prefix"),
            "table_prefix",
        ),
        (PostgresConfig::default().table_prefix(""), "table_prefix"),
    ] {
        match PostgresOutboxStore::new(pool().await, config.clone()).await {
            Err(StoreError::Validation(e)) => assert_eq!(e.field, field),
            other => panic!("expected a validation error naming {field}, got {other:?}"),
        }
        // Checked before any connection is tried.
        match PostgresOutboxStore::connect_with("postgres://nobody@127.0.0.1:1/x", config).await {
            Err(StoreError::Validation(e)) => assert_eq!(e.field, field),
            other => panic!("expected a validation error naming {field}, got {other:?}"),
        }
    }
    schema.drop().await;
}

/// A migration that must wait for a lock on the outbox table (a service's transaction
/// enqueued and has not committed) gives up after `migration_lock_timeout`, naming the
/// table and the session that holds it, with nothing applied: waiting on, it would hold
/// every later enqueue behind it in the table's lock queue. Once that transaction ends,
/// the same migration goes through.
#[tokio::test]
async fn a_migration_waiting_for_a_lock_gives_up_after_its_lock_timeout_naming_the_holder() {
    let schema = SchemaGuard::new();
    let lock_timeout = Duration::from_millis(500);
    let store = open(schema.config().migration_lock_timeout(lock_timeout)).await;
    // As if migrated by a build before migration 5 (re-runnable: it drops and remakes its
    // trigger, and its ALTER TABLE needs a lock no enqueue can share).
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DELETE FROM \"{}\".outbox_migrations WHERE version = 5",
        schema.0
    )))
    .execute(crate::pg(&store).pool())
    .await
    .unwrap();

    // A service's transaction that enqueued and is still open.
    let mut service = crate::pg(&store).pool().begin().await.unwrap();
    store
        .enqueue_in_tx(&mut service, draft("l", 1))
        .await
        .unwrap();
    let holder: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *service)
        .await
        .unwrap();

    let started = std::time::Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(60), crate::pg(&store).migrate())
        .await
        .expect("the migration still waits for the lock after 60 s");
    let waited = started.elapsed();
    let error = result.expect_err("the migration cannot take its lock");
    let text = error.to_string();
    println!("migrate failed after {waited:?} (lock_timeout {lock_timeout:?}): {text}");
    assert_eq!(error.sqlstate().as_deref(), Some("55P03"), "{text}");
    for part in [
        "migration 5",
        "lock_timeout (500ms)",
        crate::pg(&store).messages_table(),
        &format!("held by pid {holder} ("),
        "RowExclusiveLock",
        "nothing was applied",
    ] {
        assert!(text.contains(part), "{part:?} missing from: {text}");
    }
    assert!(waited >= lock_timeout, "gave up after {waited:?}");
    let versions = |store: &Outbox| {
        let query = format!(
            "SELECT version FROM \"{}\".outbox_migrations ORDER BY version",
            schema.0
        );
        let pool = crate::pg(store).pool().clone();
        async move {
            sqlx::query_scalar::<_, i32>(sqlx::AssertSqlSafe(query))
                .fetch_all(&pool)
                .await
                .unwrap()
        }
    };
    assert_eq!(
        versions(&store).await,
        [1, 2, 3, 4, 6, 7, 8, 9, 10],
        "nothing half applied"
    );
    // Enqueues go on meanwhile: nothing waits behind a migration that gave up.
    tokio::time::timeout(Duration::from_secs(60), store.enqueue(draft("l", 2)))
        .await
        .expect("an enqueue is not held up")
        .unwrap();

    service.commit().await.unwrap();
    crate::pg(&store)
        .migrate()
        .await
        .expect("the lock is free now");
    assert_eq!(versions(&store).await, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    assert_eq!(count_rows(&store).await, 2);
    schema.drop().await;
}

/// A rolling upgrade across migration 6 (the producer function): a relay started on the
/// schema before it (version 5) goes on claiming and acking while another process of the
/// new build migrates, and enqueues through the new function during and after. Migration 6
/// changed none of the relay's statements, so the relay of the build before runs these
/// very statements. Nothing is lost, and no store call of the old relay fails.
#[tokio::test]
async fn a_relay_on_version_5_runs_on_through_migration_6() {
    use std::collections::BTreeSet;

    use outbox_relay::{
        handler_fn, DeliveryError, LaneConfig, OutboxMessage, OutboxRelay, RelayEvent,
    };
    use tokio::sync::mpsc;

    let schema = SchemaGuard::new();
    let setup = open(schema.config()).await;
    // As the build before migration 6 left it.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP FUNCTION \"{s}\".outbox_enqueue(text, text, json, text, text, jsonb, interval, bigint);
         DROP TABLE \"{s}\".outbox_lane_control;
         DELETE FROM \"{s}\".outbox_migrations WHERE version >= 6",
        s = schema.0
    )))
    .execute(crate::pg(&setup).pool())
    .await
    .unwrap();
    assert_eq!(crate::pg(&setup).schema_version().await.unwrap(), Some(5));

    let old = Outbox::new(
        PostgresOutboxStore::new(pool().await, schema.config())
            .await
            .unwrap(),
    );
    let (tx, mut rx) = mpsc::unbounded_channel();
    let builder = OutboxRelay::builder(&old).lane(
        LaneConfig::new("l", "sink")
            .concurrency(4)
            .max_poll_interval(Duration::from_millis(100)),
        handler_fn(move |message: OutboxMessage| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(message.outbox_id);
                Ok::<(), DeliveryError>(())
            }
        }),
    );
    let mut events = builder.subscribe();
    let relay = builder.start().await.unwrap();

    let mut expected = BTreeSet::new();
    for n in 0..20 {
        expected.insert(old.enqueue(draft("l", n)).await.unwrap().message.outbox_id);
    }
    // The new build migrates while the old relay works and its service enqueues.
    let new = PostgresOutboxStore::new(pool().await, schema.config())
        .await
        .unwrap();
    let (migrated, during) = tokio::join!(new.migrate(), async {
        let mut ids = Vec::new();
        for n in 20..40 {
            ids.push(old.enqueue(draft("l", n)).await.unwrap().message.outbox_id);
        }
        ids
    });
    migrated.unwrap();
    expected.extend(during);
    assert_eq!(new.schema_version().await.unwrap(), Some(10));
    // After: a service of the new build enqueues through the function.
    for n in 40..60 {
        let id: uuid::Uuid = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT outbox_id FROM \"{}\".outbox_enqueue('l', 'sink', $1::json)",
            schema.0
        )))
        .bind(format!("{{\"value\": {n}}}"))
        .fetch_one(new.pool())
        .await
        .unwrap();
        expected.insert(id);
    }

    let mut delivered = BTreeSet::new();
    while delivered.len() < expected.len() {
        let id = tokio::time::timeout(Duration::from_secs(60), rx.recv())
            .await
            .unwrap_or_else(|_| panic!("{} of {} delivered", delivered.len(), expected.len()))
            .unwrap();
        delivered.insert(id);
    }
    assert_eq!(delivered, expected, "every message, nothing else");
    relay.shutdown(Duration::from_secs(10)).await.unwrap();
    while let Ok(event) = events.try_recv() {
        assert!(
            !matches!(event, RelayEvent::StoreError { .. }),
            "the old relay's store call failed: {event:?}"
        );
    }
    schema.drop().await;
}
