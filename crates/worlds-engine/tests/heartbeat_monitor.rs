//! Heartbeat monitoring: workers beat while alive; one that falls silent past the heartbeat
//! timeout is declared dead, its task goes to another worker and a replacement keeps the pool
//! at its size.

mod common;

use std::sync::Arc;

use tokio::sync::Notify;
use worlds_engine::prelude::*;
use worlds_engine::telemetry::HeartbeatKind;
use worlds_engine::testing::TestWorld;
use worlds_engine::{EventKind, WorkerStatus};

use common::{event_types, Counter};

/// An activity whose first attempt hangs forever; later attempts return their number.
fn hangs_first_time(attempts: &Counter) -> Activity<(), u32> {
    let attempts = attempts.clone();
    activity("hang", move |ctx: ActivityContext, _: ()| {
        let attempts = attempts.clone();
        async move {
            attempts.bump();
            if ctx.attempt() == 1 {
                futures::future::pending::<()>().await;
            }
            Ok::<_, StepError>(ctx.attempt())
        }
    })
}

fn one_step<O>(name: &str, step: &Activity<(), O>) -> Workflow<(), O>
where
    O: serde::Serialize + serde::de::DeserializeOwned + Send + 'static,
{
    let step = step.clone();
    workflow(name, move |ctx: WorkflowContext, _: ()| {
        let step = step.clone();
        async move { Ok::<_, WorkflowError>(ctx.run(&step, ()).await?) }
    })
}

#[tokio::test]
async fn workers_beat_on_every_interval_idle_or_busy() {
    let release = Arc::new(Notify::new());
    let r = release.clone();
    let wait = activity("wait", move |ctx: ActivityContext, _: ()| {
        let r = r.clone();
        async move {
            ctx.heartbeat("halfway");
            r.notified().await;
            Ok::<_, StepError>(())
        }
    });
    let flow = one_step("wait-flow", &wait);
    let t = TestWorld::new().await;
    t.register(&wait).unwrap().register(&flow).unwrap();
    let run = t
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    t.settle().await;
    let start = t.now();

    t.advance("5s").await;
    let workers = t.workers().list();
    assert_eq!(
        workers
            .iter()
            .filter(|w| w.status == WorkerStatus::Busy)
            .count(),
        1
    );
    for w in &workers {
        assert_eq!(w.last_heartbeat, start + 5_000, "{w:?}");
    }
    t.advance("12s").await;
    for w in t.workers().list() {
        assert_eq!(w.last_heartbeat, start + 17_000, "{w:?}");
    }

    let beats = t.workers().heartbeats().await;
    let worker_beats: Vec<_> = beats
        .iter()
        .filter(|b| b.kind == HeartbeatKind::Worker)
        .collect();
    assert_eq!(worker_beats.len(), 2);
    assert!(worker_beats
        .iter()
        .all(|b| !b.dead && b.last_beat == t.now()));
    assert!(worker_beats
        .iter()
        .any(|b| b.message.as_deref().is_some_and(|m| m.contains("'wait'"))));
    // The running attempt: its beat is the one it sent, at the start.
    let step_id = run.query().await.unwrap().activities[0].id.clone();
    let activity_beats: Vec<_> = beats
        .iter()
        .filter(|b| b.kind == HeartbeatKind::Activity)
        .collect();
    assert_eq!(activity_beats.len(), 1, "{beats:?}");
    assert_eq!(activity_beats[0].id, step_id);
    assert_eq!(activity_beats[0].message.as_deref(), Some("halfway"));
    assert_eq!(activity_beats[0].last_beat, start);
    assert!(!activity_beats[0].dead, "no heartbeat timeout set on it");

    release.notify_one();
    t.run_until_complete(&run.id, "1m").await.unwrap();
    assert!(t.workers().dead().is_empty());
}

#[tokio::test]
async fn a_silent_worker_is_declared_dead_and_its_task_runs_elsewhere() {
    let attempts = Counter::default();
    let hang = hangs_first_time(&attempts);
    let flow = one_step("hang-flow", &hang);
    let t = TestWorld::new().await;
    t.register(&hang).unwrap().register(&flow).unwrap();
    let run = t
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    t.settle().await;
    assert_eq!(attempts.get(), 1);
    let stuck = t
        .workers()
        .list()
        .into_iter()
        .find(|w| w.status == WorkerStatus::Busy)
        .expect("a worker runs the hanging step");
    assert!(stuck.current_task.as_deref().unwrap().contains("'hang'"));
    assert!(t.freeze_worker_heartbeat(&stuck.id));
    assert!(!t.freeze_worker_heartbeat("worker-99"));

    // 30 s of silence is not yet *more* than the 30 s timeout.
    for _ in 0..6 {
        t.advance("5s").await;
    }
    assert!(t.workers().list().iter().any(|w| w.id == stuck.id));
    assert!(t.workers().dead().is_empty());
    assert_eq!(attempts.get(), 1);

    // At the next check it is dead: its attempt is recorded as lost and retried on another
    // worker, and a replacement joins the pool.
    t.advance("5s").await;
    let state = t.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(run.result().await.unwrap(), 2, "the second attempt ran");
    assert_eq!(attempts.get(), 2);
    assert_eq!(
        event_types(&state),
        vec![
            "workflow_queued",
            "workflow_started",
            "activity_scheduled",
            "activity_started",
            "activity_failed",
            "activity_retry",
            "activity_started",
            "activity_completed",
            "workflow_completed",
        ]
    );
    let lost = state
        .history
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::ActivityFailed { error, .. } => Some(error.clone()),
            _ => None,
        })
        .expect("the lost attempt is recorded");
    assert_eq!(lost.code.as_deref(), Some("WORKER_LOST"));

    let dead = t.workers().dead();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].id, stuck.id);
    assert_eq!(dead[0].status, WorkerStatus::Stopped);
    assert!(dead[0].current_task.as_deref().unwrap().contains("'hang'"));
    t.settle().await;
    let workers = t.workers().list();
    assert_eq!(workers.len(), 2, "the pool keeps its size: {workers:?}");
    assert!(workers.iter().all(|w| w.id != stuck.id));
    assert!(workers.iter().all(|w| w.status == WorkerStatus::Idle));
    let metrics = t.get_metrics();
    assert_eq!((metrics.workers.total, metrics.workers.busy), (2, 0));

    let beats = t.workers().heartbeats().await;
    let entry = beats.iter().find(|b| b.id == stuck.id).unwrap();
    assert!(entry.dead);
    assert!(beats
        .iter()
        .filter(|b| b.id != stuck.id)
        .all(|b| !b.dead && b.kind == HeartbeatKind::Worker));
}

#[tokio::test]
async fn a_silent_idle_worker_is_replaced() {
    let t = TestWorld::new().await;
    t.settle().await;
    assert!(t.freeze_worker_heartbeat("worker-1"));
    t.advance("31s").await;
    // One check has seen it silent past the timeout, but a worker gets a whole interval after
    // a jump of time to beat before it is judged.
    assert!(t.workers().dead().is_empty());
    t.advance("5s").await;
    let dead = t.workers().dead();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].id, "worker-1");
    assert_eq!(dead[0].current_task, None);
    let mut ids: Vec<String> = t.workers().list().into_iter().map(|w| w.id).collect();
    ids.sort();
    assert_eq!(ids, vec!["worker-2", "worker-3"]);
}

#[tokio::test]
async fn jumps_of_time_do_not_kill_healthy_workers() {
    let t = TestWorld::new().await;
    t.settle().await;
    for _ in 0..3 {
        t.advance("168h").await;
    }
    assert!(t.workers().dead().is_empty());
    let beats = t.workers().heartbeats().await;
    assert_eq!(beats.len(), 2);
    assert!(beats.iter().all(|b| !b.dead && b.last_beat == t.now()));
}

#[tokio::test]
async fn shutdown_lists_the_workers_as_stopped_and_start_replaces_them() {
    let t = TestWorld::new().await;
    t.settle().await;
    t.shutdown().await.unwrap();
    let workers = t.workers().list();
    assert_eq!(workers.len(), 2);
    assert!(workers.iter().all(|w| w.status == WorkerStatus::Stopped));
    assert!(
        t.workers().heartbeats().await.is_empty(),
        "stopped workers do not beat"
    );
    t.start().await.unwrap();
    let workers = t.workers().list();
    assert_eq!(workers.len(), 2);
    assert!(workers.iter().all(|w| w.status == WorkerStatus::Idle));
    assert!(workers
        .iter()
        .all(|w| w.id != "worker-1" && w.id != "worker-2"));
}
