//! LISTEN/NOTIFY: an enqueue wakes relays in other processes once per transaction (never for
//! a rollback or another schema), a lane pause or resume wakes every process's lane-control
//! watcher (and no lane), and a lost listener connection listens again and wakes every lane.

use std::time::Duration;

use outbox_relay::store::{LanePauseRequest, WakeUp};

use crate::{draft, open, SchemaGuard};

/// Waits for the next wake-up, failing after a generous timeout.
async fn next_wakeup(rx: &mut tokio::sync::broadcast::Receiver<WakeUp>) -> WakeUp {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("a wake-up within 10 s")
        .expect("wake-up channel open")
}

/// Counts wake-ups of `lane` until the marker lane's arrives.
async fn wakeups_before_marker(
    rx: &mut tokio::sync::broadcast::Receiver<WakeUp>,
    lane: &str,
) -> usize {
    let mut count = 0;
    loop {
        match next_wakeup(rx).await {
            WakeUp::Lane { lane: l, .. } if l == "marker" => return count,
            WakeUp::Lane { lane: l, .. } if l == lane => count += 1,
            other => panic!("unexpected wake-up {other:?}"),
        }
    }
}

#[tokio::test]
async fn wakeups_cross_processes_once_per_transaction() {
    let schema = SchemaGuard::new();
    let writer = open(schema.config()).await;
    let relay = open(schema.config()).await;
    let mut rx = relay.subscribe();

    writer.enqueue(draft("orders", 1)).await.unwrap();
    assert_eq!(
        next_wakeup(&mut rx).await,
        WakeUp::Lane {
            lane: "orders".into(),
            target: "sink".into()
        }
    );

    // 100 enqueues in one transaction, each its own statement: one notification.
    let mut tx = crate::pg(&writer).pool().begin().await.unwrap();
    for i in 0..100 {
        writer
            .enqueue_in_tx(&mut tx, draft("bulk", i))
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    writer.enqueue(draft("marker", 0)).await.unwrap();
    assert_eq!(wakeups_before_marker(&mut rx, "bulk").await, 1);

    // 100 in one enqueue_many: one notification too.
    let drafts = (0..100).map(|i| draft("many", i)).collect();
    writer.enqueue_many(drafts).await.unwrap();
    writer.enqueue(draft("marker", 1)).await.unwrap();
    assert_eq!(wakeups_before_marker(&mut rx, "many").await, 1);

    // A rolled-back enqueue wakes nobody.
    let mut tx = crate::pg(&writer).pool().begin().await.unwrap();
    writer
        .enqueue_in_tx(&mut tx, draft("ghost", 0))
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    writer.enqueue(draft("marker", 2)).await.unwrap();
    assert_eq!(wakeups_before_marker(&mut rx, "ghost").await, 0);

    // Another schema's outbox does not wake this one.
    let other = SchemaGuard::new();
    let stranger = open(other.config()).await;
    stranger.enqueue(draft("elsewhere", 0)).await.unwrap();
    writer.enqueue(draft("marker", 3)).await.unwrap();
    assert_eq!(wakeups_before_marker(&mut rx, "elsewhere").await, 0);
    schema.drop().await;
    other.drop().await;
}

/// When the listening connection dies, the store listens again and says every lane should
/// look (whatever was notified meanwhile is lost); wake-ups then flow as before.
#[tokio::test]
async fn a_lost_listener_connection_reconnects_and_wakes_everyone() {
    let schema = SchemaGuard::new();
    let store = open(schema.config()).await;
    let mut rx = store.subscribe();
    let killed: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE query LIKE 'LISTEN%' AND strpos(query, $1) > 0",
    )
    .bind(crate::pg(&store).notify_channel())
    .fetch_all(crate::pg(&store).pool())
    .await
    .unwrap();
    assert_eq!(killed, vec![true], "exactly our listener was terminated");
    assert_eq!(next_wakeup(&mut rx).await, WakeUp::All);

    store.enqueue(draft("after", 1)).await.unwrap();
    assert_eq!(
        next_wakeup(&mut rx).await,
        WakeUp::Lane {
            lane: "after".into(),
            target: "sink".into()
        }
    );
    schema.drop().await;
}

/// `listen_url`: the wake-up listener connects where it says, not where the pool does (a
/// direct connection when the pool goes through a pooler), and wake-ups arrive over it.
#[tokio::test]
async fn the_listener_connects_to_listen_url() {
    let schema = SchemaGuard::new();
    let writer = open(schema.config()).await;
    let application = format!("outbox_listen_{}", &schema.0[2..18]);
    let listen_url = format!("{}?application_name={application}", crate::database_url());
    let relay = open(schema.config().listen_url(listen_url)).await;
    let mut rx = relay.subscribe();
    let listening: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'",
    )
    .bind(&application)
    .fetch_one(crate::pg(&writer).pool())
    .await
    .unwrap();
    assert_eq!(listening, 1, "one LISTEN session from listen_url");
    writer.enqueue(draft("orders", 1)).await.unwrap();
    assert_eq!(
        next_wakeup(&mut rx).await,
        WakeUp::Lane {
            lane: "orders".into(),
            target: "sink".into()
        }
    );
    let bad = outbox_relay::store::postgres::PostgresConfig::default()
        .listen_url("mysql://user:secret@db/app");
    let error = bad.validate().unwrap_err();
    assert_eq!(error.field, "listen_url");
    assert!(!error.reason.contains("secret"), "{error}");
    drop(relay);
    schema.drop().await;
}

#[tokio::test]
async fn a_lane_pause_and_its_resume_notify_other_processes() {
    let schema = SchemaGuard::new();
    let operator = open(schema.config()).await;
    let relay = open(schema.config()).await;
    let mut rx = relay.subscribe();
    let request = LanePauseRequest::new("orders", "sink", "wakeup-test");
    operator.pause_lane(&request).await.unwrap();
    let woken = next_wakeup(&mut rx).await;
    assert_eq!(woken, WakeUp::LaneControl);
    assert!(woken.concerns_lane_control() && !woken.concerns("orders", "sink"));
    // Paused again (a new reason): the row changes, so it notifies again.
    operator
        .pause_lane(&request.clone().reason("still upgrading"))
        .await
        .unwrap();
    assert_eq!(next_wakeup(&mut rx).await, WakeUp::LaneControl);
    assert!(operator
        .resume_lane("orders", "sink")
        .await
        .unwrap()
        .is_some());
    assert_eq!(next_wakeup(&mut rx).await, WakeUp::LaneControl);
    // Resuming a lane that is not paused changes nothing and notifies nothing: the next
    // wake-up is the marker's.
    assert!(operator
        .resume_lane("orders", "sink")
        .await
        .unwrap()
        .is_none());
    operator.enqueue(draft("marker", 0)).await.unwrap();
    assert_eq!(wakeups_before_marker(&mut rx, "orders").await, 0);
    schema.drop().await;
}
