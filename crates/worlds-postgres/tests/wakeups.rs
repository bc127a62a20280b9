//! Wake-ups between two stores on one schema (LISTEN/NOTIFY) — also after the server ended a
//! store's listening session — a graceful close handing runs over at once, and dead members
//! forgotten.

mod common;

use std::time::Duration;

use bytes::Bytes;
use sqlx::Connection;
use worlds_engine::store::{EventStore, LeaseStore, NewChunk, StreamStore};
use worlds_engine::EventKind;
use worlds_postgres::PostgresOptions;

use common::pair::Pair;

/// Within this long a notification must have arrived.
const HINT: Duration = Duration::from_secs(1);

fn any(_: &str, _: Option<&str>) -> bool {
    true
}

#[tokio::test]
async fn another_store_is_woken_by_a_new_run_a_write_to_its_run_and_a_stream_chunk() {
    let Some(pair) = Pair::new(Duration::from_secs(30)).await else {
        return;
    };
    let changes = pair.b.changes().expect("the store raises a change signal");
    // The signal raised when B started listening (made up by the first scan).
    let _ = tokio::time::timeout(HINT, changes.notified()).await;

    // A creates a run: B is told there may be a run to claim.
    let a_run = pair.create(&pair.a).await;
    tokio::time::timeout(HINT, changes.notified())
        .await
        .expect("B woken by A's new run");

    // A writes to a run B holds (a cancellation): B is told.
    let b_run = pair.create(&pair.b).await;
    let _ = tokio::time::timeout(Duration::from_millis(200), changes.notified()).await;
    pair.a
        .append(
            &b_run,
            vec![pair.event(&b_run, EventKind::WorkflowCancelled { reason: None })],
        )
        .await
        .unwrap();
    tokio::time::timeout(HINT, changes.notified())
        .await
        .expect("B woken by A's write to B's run");
    assert_eq!(pair.b.external_changes().await.unwrap(), vec![b_run]);

    // A live read in B sees A's chunk.
    let mut signal = pair.b.watch_streams(&a_run);
    pair.a
        .write_chunk(
            &a_run,
            "out",
            NewChunk {
                id: "chnk_1".into(),
                created_at: 1_767_225_600_000,
                key: None,
                data: Bytes::from_static(b"hello"),
            },
        )
        .await
        .unwrap();
    tokio::time::timeout(HINT, signal.changed())
        .await
        .expect("B's stream reader woken by A's chunk");
    let (chunks, _) = pair.b.stream_chunks(&a_run, "out", 0, 10).await.unwrap();
    assert_eq!(chunks.len(), 1);
    assert_eq!(&chunks[0].data[..], b"hello");
    pair.finish().await;
}

#[tokio::test]
async fn a_closed_store_hands_its_runs_over_at_once() {
    let Some(pair) = Pair::new(Duration::from_secs(30)).await else {
        return;
    };
    let run = pair.create(&pair.a).await;
    assert!(pair.b.claim_runs(&any).await.unwrap().is_empty());
    let changes = pair.b.changes().unwrap();
    let _ = tokio::time::timeout(Duration::from_millis(300), changes.notified()).await;
    pair.a.close().await.unwrap();
    // Long before the 30 s lease would expire: B is told and claims the run.
    tokio::time::timeout(HINT, changes.notified())
        .await
        .expect("B woken by A's release");
    assert_eq!(pair.b.claim_runs(&any).await.unwrap(), vec![run.clone()]);
    assert!(pair.b.held_epoch(&run).unwrap() > 1);
    let members: i64 = sqlx::query_scalar("SELECT count(*) FROM members")
        .fetch_one(&common::sql(&pair.schema))
        .await
        .unwrap();
    assert_eq!(members, 1, "the closed member's row is gone");
    pair.finish().await;
}

#[tokio::test]
async fn members_long_dead_are_forgotten() {
    if !common::database_up().await {
        return;
    }
    let schema = common::fresh_schema();
    let options = PostgresOptions {
        lease_duration: Duration::from_millis(200),
        heartbeat_interval: Some(Duration::from_millis(50)),
        forget_dead_members_after: Duration::from_millis(300),
        ..common::options(&schema)
    };
    let dead = common::store(&schema, options.clone()).await;
    dead.stop_heartbeat();
    let present = |store: &worlds_postgres::PostgresStore, member: String| {
        let pool = common::sql(store.schema());
        async move {
            sqlx::query_scalar::<_, bool>(
                "SELECT EXISTS (SELECT 1 FROM members WHERE member_id = $1)",
            )
            .bind(member)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    assert!(present(&dead, dead.member_id().to_owned()).await);
    let alive = common::store(&schema, options).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        !present(&alive, dead.member_id().to_owned()).await,
        "the dead member's row was deleted"
    );
    assert!(present(&alive, alive.member_id().to_owned()).await);
    alive.stop_heartbeat();
    dead.close().await.unwrap();
    alive.close().await.unwrap();
    common::drop_schema(&schema).await;
}

#[tokio::test]
async fn a_store_whose_listener_session_was_terminated_listens_again() {
    let Some(pair) = Pair::new(Duration::from_secs(30)).await else {
        return;
    };
    let changes = pair.b.changes().expect("the store raises a change signal");
    let _ = tokio::time::timeout(HINT, changes.notified()).await;

    // The server ends B's listening session (B's other sessions stay).
    let mut admin = sqlx::PgConnection::connect(&common::url()).await.unwrap();
    let ended: i64 = sqlx::query_scalar(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
         WHERE application_name = $1 AND query LIKE 'LISTEN%' AND pid <> pg_backend_pid()",
    )
    .bind(format!("worlds-engine {}", pair.schema))
    .fetch_one(&mut admin)
    .await
    .unwrap();
    assert_eq!(ended, 2, "one listening session per store");

    // Each store listens again (and raises the signal, for whatever it missed meanwhile).
    tokio::time::timeout(Duration::from_secs(10), changes.notified())
        .await
        .expect("B raises the signal when it listens again");
    let app = format!("worlds-engine {}", pair.schema);
    let listening_again = async {
        loop {
            let n: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'",
            )
            .bind(&app)
            .fetch_one(&mut admin)
            .await
            .unwrap();
            if n == 2 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), listening_again)
        .await
        .expect("both stores listen again");

    // And hears the next notification: A's new run wakes B (a signal left over from the
    // reconnect is taken first, so only the notification can answer the wait).
    let _ = tokio::time::timeout(Duration::from_millis(300), changes.notified()).await;
    pair.create(&pair.a).await;
    tokio::time::timeout(HINT, changes.notified())
        .await
        .expect("B woken by A's new run after listening again");
    admin.close().await.unwrap();
    pair.finish().await;
}
