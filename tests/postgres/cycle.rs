//! The cycle function (`src/store/postgres/sql/cycle.sql`): `migrate` creates it, the store's
//! claims and ack-and-claims go through it (one round trip), and a store over a database
//! without it runs the same steps as statements.

use outbox_relay::store::OutboxBackend as _;
use std::time::Duration;

use outbox_relay::store::{ClaimOutcome, ClaimRequest, NextDue};

use crate::{draft, open, pool, PostgresOutboxStore, SchemaGuard};

/// The cycle functions in the test's schema.
async fn cycle_functions(schema: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT p.oid::regprocedure::text FROM pg_proc p
         JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = $1 AND p.proname LIKE 'outbox\\_cycle\\_%'",
    )
    .bind(schema)
    .fetch_all(&pool().await)
    .await
    .expect("functions")
}

fn request() -> ClaimRequest {
    ClaimRequest::new("l", "sink", 10, Duration::from_secs(30), "r")
}

#[tokio::test]
async fn claims_run_through_the_cycle_function_that_migrate_creates() {
    let schema = SchemaGuard::new();
    let store = open(schema.config()).await;
    let functions = cycle_functions(&schema.0).await;
    assert_eq!(functions.len(), 1, "{functions:?}");

    // Key k holds two rows: the ack of its head and the claim of its successor in one call.
    store
        .enqueue_many(vec![
            draft("l", 1).with_ordering_key("k"),
            draft("l", 2).with_ordering_key("k"),
            draft("l", 3),
        ])
        .await
        .expect("enqueue");
    let first = store.claim(&request()).await.expect("claim");
    assert_eq!(first.messages.len(), 2, "the head of k and the keyless row");
    assert_eq!(first.messages[0].ordering_key.as_deref(), Some("k"));
    let head = first.messages[0].claim().expect("claimed");
    let answer = store
        .ack_and_claim(&[head, head], &request())
        .await
        .expect("ack_and_claim");
    assert_eq!(
        answer.acked,
        vec![ClaimOutcome::Applied, ClaimOutcome::LostClaim],
        "a repeated ack is answered once"
    );
    let next = answer.claimed.expect("claim");
    assert_eq!(next.messages.len(), 1, "k's successor, promoted by the ack");
    assert_eq!(next.messages[0].ordering_key.as_deref(), Some("k"));
    // An empty claim answers next_due in the same call.
    let other = first.messages[1].claim().expect("claimed");
    let idle = store
        .ack_and_claim(&[other], &request())
        .await
        .expect("ack_and_claim")
        .claimed
        .expect("claim");
    assert!(idle.messages.is_empty());
    let due = match idle.next_due {
        NextDue::Known(Some(due)) => due,
        other => panic!("an empty claim should answer next_due (the lease): {other:?}"),
    };
    assert!(
        due > Duration::from_secs(25) && due <= Duration::from_secs(30),
        "{due:?}"
    );

    // Without the function the store's calls fail: they did go through it.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP FUNCTION {}",
        functions[0]
    )))
    .execute(crate::pg(&store).pool())
    .await
    .expect("drop function");
    let error = store.claim(&request()).await.expect_err("no function");
    assert!(error.to_string().contains("claim"), "{error}");

    // A store over that database (no migrate) runs the statements instead.
    let statements = PostgresOutboxStore::new(crate::pg(&store).pool().clone(), schema.config())
        .await
        .expect("store");
    store.enqueue(draft("l", 4)).await.expect("enqueue");
    let claimed = statements.claim(&[request()]).await.expect("claim");
    assert_eq!(claimed.len(), 1, "one batch per request");
    assert_eq!(claimed[0].messages.len(), 1);
    // And migrate brings the function back.
    statements.migrate().await.expect("migrate");
    assert_eq!(cycle_functions(&schema.0).await, functions);
    schema.drop().await;
}
