//! Retention sweeps are paced: removals go in batches, one store call at a time, and after
//! each a sweep rests so its batches take at most `sweep_share` of its time.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::wrapped_store::WrappedStore;
use worlds_engine::duration::Dur;
use worlds_engine::prelude::*;
use worlds_engine::testing::{TestWorld, TestWorldOptions};
use worlds_engine::{RunStatus, WorkflowQueryFilter, PRUNE_WORKFLOW};

const DAY: Duration = Duration::from_secs(86_400);

/// A world on `store` keeping completed runs a day, sweeping every `interval` at `share`
/// percent, with `runs` completed runs.
async fn world_with_runs(
    store: &Arc<WrappedStore>,
    interval: Duration,
    share: u8,
    runs: u64,
) -> TestWorld {
    let mut config = common::memory_config();
    config.retention.completed = Dur(DAY);
    config.retention.sweep_interval = Dur(interval);
    config.retention.sweep_share = share;
    let t = TestWorld::with_options(TestWorldOptions {
        store: Some(store.clone() as Arc<dyn worlds_engine::store::Store>),
        config,
        ..TestWorldOptions::default()
    })
    .await;
    let done = workflow("done", |_ctx: WorkflowContext, n: u64| async move {
        Ok::<_, WorkflowError>(n)
    });
    t.register(&done).unwrap();
    for n in 0..runs {
        t.execute(&done, n, WorkflowOptions::default())
            .await
            .unwrap();
    }
    t
}

/// A world on a store whose removals take `delay` each, keeping completed runs a day and
/// sweeping at `share` percent; `runs` completed runs a day old.
async fn swept(share: u8, delay: Duration, runs: u64) -> Arc<WrappedStore> {
    let store = Arc::new(WrappedStore::default());
    *store.removal_delay.lock().unwrap() = delay;
    let t = world_with_runs(&store, 1000 * DAY, share, runs).await;
    t.settle().await;
    t.advance(2 * DAY).await;
    let id = t.world().prune().await.unwrap();
    let report = t.world().prune_report_when_done(&id).await.unwrap();
    // The runs, and the sweep the world started as it started (with nothing to remove then).
    assert_eq!(report.removed, runs + 1, "{report:?}");
    store
}

#[tokio::test]
async fn a_sweep_removes_in_batches_one_call_at_a_time_and_rests_between_them() {
    let delay = Duration::from_millis(30);
    // 60 runs to remove: three batches of at most 25.
    let store = swept(50, delay, 59).await;
    let calls = store.removal_calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 3, "batches of 25: {} calls", calls.len());
    for pair in calls.windows(2) {
        let ((_, ended), (next, _)) = (pair[0], pair[1]);
        assert!(next >= ended, "one call at a time");
        // At half the time, the rest after a call is as long as the call took (≥ 30 ms).
        let rest = next - ended;
        assert!(
            rest >= delay - Duration::from_millis(5),
            "rested only {rest:?} after a call of at least {delay:?}"
        );
    }
}

#[tokio::test]
async fn a_full_share_removes_without_rest() {
    let store = swept(100, Duration::from_millis(30), 59).await;
    let calls = store.removal_calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 3);
    for pair in calls.windows(2) {
        let rest = pair[1].0 - pair[0].1;
        assert!(rest < Duration::from_millis(25), "rested {rest:?}");
    }
}

#[tokio::test]
async fn a_sweep_that_outlasts_its_interval_is_not_joined_by_the_next() {
    let store = Arc::new(WrappedStore::default());
    let t = world_with_runs(&store, DAY, 100, 30).await;
    t.settle().await;
    // Two slow batches: the sweep lasts well over half a second of real time.
    *store.removal_delay.lock().unwrap() = Duration::from_millis(400);
    let sweeps = || async {
        t.world()
            .list_runs(WorkflowQueryFilter::new().workflow_name(PRUNE_WORKFLOW))
            .await
            .unwrap()
            .data
    };
    // The clock moves on by itself (no settling): the world's own loop starts a sweep.
    t.clock().advance(2 * DAY);
    let mut running = false;
    for _ in 0..400 {
        if sweeps()
            .await
            .iter()
            .any(|run| run.status == RunStatus::Running)
        {
            running = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(running, "the world started no sweep");
    // Its next interval comes while it still runs.
    t.clock().advance(DAY);
    let next = format!("{PRUNE_WORKFLOW}.{}", t.now() / (DAY.as_millis() as i64));
    tokio::time::sleep(Duration::from_millis(50)).await;
    for run in sweeps().await {
        if run.status == RunStatus::Running {
            let report = t.world().prune_report_when_done(&run.id).await.unwrap();
            assert!(report.done, "{report:?}");
        }
    }
    t.settle().await;
    let ids: Vec<String> = sweeps().await.into_iter().map(|r| r.workflow_id).collect();
    assert!(
        !ids.contains(&next),
        "a second sweep joined the first: {ids:?}"
    );
    assert_eq!(store.removal_calls.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn a_sweep_far_behind_takes_a_larger_share() {
    let store = Arc::new(WrappedStore::default());
    let delay = Duration::from_millis(30);
    *store.removal_delay.lock().unwrap() = delay;
    // Sweeps every second at 10 %: at its share a batch of 30 ms is followed by 270 ms of rest.
    let t = world_with_runs(&store, Duration::from_secs(1), 10, 59).await;
    t.settle().await;
    // The runs are a day overdue when the world's own sweep comes to them: tens of thousands
    // of its intervals behind, so it takes the whole time.
    t.clock().advance(2 * DAY);
    for _ in 0..800 {
        if store.removal_calls.lock().unwrap().len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let calls = store.removal_calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 3, "batches of 25: {} calls", calls.len());
    for pair in calls.windows(2) {
        let rest = pair[1].0 - pair[0].1;
        assert!(
            rest < Duration::from_millis(25),
            "rested {rest:?} while far behind"
        );
    }
}
