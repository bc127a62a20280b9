//! Appends committed without waiting for the server's flush (`append_written`,
//! `append_nowait`): a server that restarts before flushing loses them, and the store must then
//! read the run back instead of going on from what it remembers.

mod common;

use std::future::Future;
use std::time::Duration;

use sqlx::{Connection, PgConnection};
use worlds_engine::store::{EventStore, LeaseStore};
use worlds_engine::{EventKind, WorldError};

use common::pair::Pair;

/// What a server that lost the run's commits after `keep` events holds of it.
async fn forget_after(schema: &str, run_id: &str, keep: i64) {
    let mut conn = PgConnection::connect(&common::url()).await.unwrap();
    sqlx::query("SELECT set_config('search_path', $1, false)")
        .bind(schema)
        .execute(&mut conn)
        .await
        .unwrap();
    for sql in [
        "DELETE FROM events WHERE run_id = $1 AND seq >= $2",
        "UPDATE runs SET next_seq = $2 WHERE run_id = $1",
    ] {
        sqlx::query(sql)
            .bind(run_id)
            .bind(keep)
            .execute(&mut conn)
            .await
            .unwrap();
    }
    conn.close().await.unwrap();
}

#[tokio::test]
async fn commits_the_server_lost_are_found_and_the_run_is_read_back() {
    let Some(pair) = Pair::new(Duration::from_secs(30)).await else {
        return;
    };
    let run = pair.create(&pair.a).await;
    let written = pair
        .a
        .append_written(&run, vec![pair.schedule(&run, 0)])
        .await
        .unwrap();
    assert_eq!(written.events[0].seq, 2);
    // The server restarts and comes back without the last commit.
    forget_after(&pair.schema, &run, 2).await;

    let changed = pair.a.external_changes().await.unwrap();
    assert_eq!(
        changed,
        std::slice::from_ref(&run),
        "the run went back: it changed"
    );
    // What this store remembers of the run is ahead of the database: not used.
    let tip = pair.a.history_tip(&run, 0).await;
    assert!(matches!(tip, Err(WorldError::Unavailable(_))), "{tip:?}");
    let refused = pair.a.append(&run, vec![pair.schedule(&run, 1)]).await;
    assert!(
        matches!(refused, Err(WorldError::Unavailable(_))),
        "{refused:?}"
    );

    // Read back whole, the run goes on from what the database holds.
    assert_eq!(pair.a.history(&run, 0).await.unwrap().len(), 2);
    let again = pair
        .a
        .append(&run, vec![pair.schedule(&run, 0)])
        .await
        .unwrap();
    assert_eq!(again.events[0].seq, 2);
    pair.finish().await;
}

#[tokio::test]
async fn a_writer_connection_lost_before_a_flush_reads_back_the_runs_it_wrote() {
    let Some(pair) = Pair::new(Duration::from_secs(30)).await else {
        return;
    };
    let mut conn = PgConnection::connect(&common::url()).await.unwrap();
    // The writer flushes by itself once idle (100 ms): on a busy machine that may come first,
    // and then the commit is safe and nothing is read back. Tried until the session ends first.
    let mut quiet = None;
    for _ in 0..20 {
        let run = pair.create(&pair.a).await;
        pair.a
            .append_written(&run, vec![pair.schedule(&run, 0)])
            .await
            .unwrap();
        // The writer's session ends while its last statement is that commit (its flush would
        // be another statement), as when the server restarts.
        let ended: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE application_name = $1 AND query LIKE 'WITH u AS%') t",
        )
        .bind(format!("worlds-engine {}", pair.schema))
        .fetch_one(&mut conn)
        .await
        .unwrap();
        if ended == 1 {
            quiet = Some(run);
            break;
        }
        pair.a.wait_durable(&run).await.unwrap();
    }
    conn.close().await.unwrap();
    let quiet = quiet.expect("the writer's session ended before its flush");

    // The writer finds out on its next write (or on the flush it makes before going idle):
    // a run's creation, which it tries again on a fresh connection. A wait for the quiet
    // run's appends to be durable is refused.
    let busy = pair.create(&pair.a).await;
    pair.a
        .append(&busy, vec![pair.schedule(&busy, 0)])
        .await
        .unwrap();
    let flushed = pair.a.wait_durable(&quiet).await;
    assert!(
        matches!(flushed, Err(WorldError::Unavailable(_))),
        "{flushed:?}"
    );
    // The run nothing was appended to since is read back too: its last commit may be gone.
    let tip = pair.a.history_tip(&quiet, 0).await;
    assert!(matches!(tip, Err(WorldError::Unavailable(_))), "{tip:?}");
    assert_eq!(pair.a.history(&quiet, 0).await.unwrap().len(), 3);
    pair.a.history_tip(&quiet, 0).await.unwrap();
    pair.finish().await;
}

/// An append this store does not settle at call time (it does not hold the run) is handed to
/// the store's writer, which runs its statement: a caller dropped after the hand-over does not
/// take the append back, and the run's next flush answers only once it is written. The
/// liveness monitor relies on this: it aborts a dead worker's task, flushes the run, then reads
/// it, and must see a step start that task had already sent (or the step would be queued
/// again under an attempt number the late start then takes).
#[tokio::test]
async fn an_append_whose_caller_was_dropped_is_written_before_the_runs_next_flush() {
    let Some(pair) = Pair::new(Duration::from_secs(30)).await else {
        return;
    };
    let run = pair.create(&pair.a).await;
    let mut append = Box::pin(pair.b.append(&run, vec![pair.cancellation(&run)]));
    // One poll hands the append over; the caller then goes away.
    let handed_over = append
        .as_mut()
        .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()));
    assert!(
        handed_over.is_pending(),
        "the append was settled at once: {handed_over:?}"
    );
    drop(append);
    pair.b.wait_durable(&run).await.unwrap();
    let history = pair.b.history(&run, 0).await.unwrap();
    assert!(
        history
            .iter()
            .any(|e| matches!(e.kind, EventKind::WorkflowCancelled { .. })),
        "the append was lost with its caller"
    );
    pair.finish().await;
}
