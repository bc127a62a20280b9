//! Timers belong to the holder of their run: another member neither takes nor sees them,
//! until it takes the run over; a finished run has none.

mod common;

use std::time::Duration;

use worlds_engine::store::{EventStore, LeaseStore, Timer, TimerKind, TimerStore};
use worlds_engine::{EventKind, Payload};

use common::pair::Pair;

fn sleep(run_id: &str, fire_at: i64, position: u32) -> Timer {
    Timer {
        fire_at,
        run_id: run_id.to_owned(),
        kind: TimerKind::Sleep { position },
    }
}

fn any(_: &str, _: Option<&str>) -> bool {
    true
}

#[tokio::test]
async fn only_the_holder_takes_a_runs_timers_and_a_new_holder_gets_them() {
    let lease = Duration::from_millis(600);
    let Some(pair) = Pair::new(lease).await else {
        return;
    };
    let run = pair.create(&pair.a).await;
    pair.a.add_timer(sleep(&run, 1_000, 0)).await.unwrap();

    // B does not hold the run: it neither sees nor takes the timer.
    assert_eq!(pair.b.next_timer_at().await.unwrap(), None);
    assert!(pair
        .b
        .take_due_timers(i64::MAX, 10)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(pair.a.next_timer_at().await.unwrap(), Some(1_000));

    // A's heartbeat stops: until B claims the run, nobody fires its timer.
    pair.a.stop_heartbeat();
    tokio::time::sleep(lease + Duration::from_millis(400)).await;
    assert!(pair
        .b
        .take_due_timers(i64::MAX, 10)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(pair.b.claim_runs(&any).await.unwrap(), vec![run.clone()]);
    // The old holder lost it: it takes nothing any more; the new holder does.
    assert!(pair
        .a
        .take_due_timers(i64::MAX, 10)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(pair.b.next_timer_at().await.unwrap(), Some(1_000));
    assert_eq!(
        pair.b.take_due_timers(i64::MAX, 10).await.unwrap(),
        vec![sleep(&run, 1_000, 0)]
    );

    // A finished run has no timers left.
    pair.b.add_timer(sleep(&run, 2_000, 1)).await.unwrap();
    let output = Payload::from(serde_json::json!(1));
    pair.b
        .append(
            &run,
            vec![pair.event(&run, EventKind::WorkflowCompleted { output })],
        )
        .await
        .unwrap();
    assert_eq!(pair.b.next_timer_at().await.unwrap(), None);
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM timers WHERE run_id = $1")
        .bind(&run)
        .fetch_one(&common::sql(&pair.schema))
        .await
        .unwrap();
    assert_eq!(left, 0);
    pair.finish().await;
}
