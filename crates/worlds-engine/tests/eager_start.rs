//! Eager start (`WorldConfig::eager_start`): a run started from outside has its first workflow
//! task run by the start call itself when a worker is idle and nothing is queued, and goes to
//! the queue otherwise; a start call dropped mid-task hands the run to the workers.

mod common;

use std::sync::Arc;

use common::wrapped_store::WrappedStore;
use worlds_engine::prelude::*;
use worlds_engine::testing::{TestWorld, TestWorldOptions};
use worlds_engine::{Event, EventKind};

fn double() -> Activity<u64, u64> {
    activity("double", |_ctx: ActivityContext, n: u64| async move {
        Ok::<_, StepError>(n * 2)
    })
}

/// Sleeps an hour, then doubles its input.
fn nap_then_double(step: &Activity<u64, u64>) -> Workflow<u64, u64> {
    let step = step.clone();
    workflow("nap-then-double", move |ctx: WorkflowContext, n: u64| {
        let step = step.clone();
        async move {
            ctx.sleep("1h").await?;
            Ok::<_, WorkflowError>(ctx.run(&step, n).await?)
        }
    })
}

/// The event types of a run, read from the store (no task has to run for it).
async fn events(t: &TestWorld, run_id: &str) -> Vec<&'static str> {
    t.world()
        .query(run_id)
        .await
        .unwrap()
        .history
        .iter()
        .map(|e| e.kind.type_name())
        .collect()
}

async fn world(config: WorldConfig) -> (TestWorld, Workflow<u64, u64>) {
    let t = TestWorld::with_config(config).await;
    let step = double();
    let flow = nap_then_double(&step);
    t.register(&step).unwrap().register(&flow).unwrap();
    // The workers start waiting for tasks.
    t.settle().await;
    (t, flow)
}

#[tokio::test]
async fn the_start_call_runs_the_first_workflow_task_when_a_worker_is_idle() {
    let (t, flow) = world(common::memory_config()).await;
    let run = t
        .execute(&flow, 4, WorkflowOptions::default())
        .await
        .unwrap();
    // Nothing else ran since (the test runtime has one thread): the call itself advanced the
    // run to its sleep.
    assert_eq!(
        events(&t, &run.id).await,
        ["workflow_queued", "workflow_started", "timer_scheduled"]
    );
    assert_eq!(t.world().waits(&run.id).await.unwrap().len(), 1);
    t.advance("1h").await;
    let state = t.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(run.result().await.unwrap(), 8);
}

#[tokio::test]
async fn runs_started_as_soon_as_the_world_has_started_find_its_workers_idle() {
    let world = World::new(common::memory_config()).unwrap();
    let step = double();
    let flow = nap_then_double(&step);
    world.register(&step).unwrap().register(&flow).unwrap();
    world.start().await.unwrap();
    // Nothing yields between `start` and these calls (the test runtime has one thread): the
    // workers were ready when `start` returned, so each call runs its run's first task.
    for n in 0..3 {
        let run = world
            .execute(&flow, n, WorkflowOptions::default())
            .await
            .unwrap();
        let history = world.query(&run.id).await.unwrap().history;
        let kinds: Vec<_> = history.iter().map(|e| e.kind.type_name()).collect();
        assert_eq!(
            kinds,
            ["workflow_queued", "workflow_started", "timer_scheduled"]
        );
    }
    world.shutdown().await.unwrap();
}

#[tokio::test]
async fn without_eager_start_the_first_workflow_task_waits_for_a_worker() {
    let mut config = common::memory_config();
    config.eager_start = false;
    let (t, flow) = world(config).await;
    let run = t
        .execute(&flow, 4, WorkflowOptions::default())
        .await
        .unwrap();
    assert_eq!(events(&t, &run.id).await, ["workflow_queued"]);
    t.settle().await;
    assert_eq!(
        events(&t, &run.id).await,
        ["workflow_queued", "workflow_started", "timer_scheduled"]
    );
}

#[tokio::test]
async fn a_start_made_while_every_worker_is_busy_is_queued() {
    let release = Arc::new(tokio::sync::Notify::new());
    let held = release.clone();
    let wait = activity("wait", move |_ctx: ActivityContext, _: ()| {
        let held = held.clone();
        async move {
            held.notified().await;
            Ok::<_, StepError>(())
        }
    });
    let w = wait.clone();
    let occupy = workflow("occupy", move |ctx: WorkflowContext, _: ()| {
        let w = w.clone();
        async move { Ok::<_, WorkflowError>(ctx.run(&w, ()).await?) }
    });
    let mut config = common::memory_config();
    config.min_workers = 1;
    config.max_workers = 1;
    let (t, flow) = world(config).await;
    t.register(&wait).unwrap().register(&occupy).unwrap();
    let occupier = t
        .execute(&occupy, (), WorkflowOptions::default())
        .await
        .unwrap();
    t.settle().await;
    assert_eq!(
        t.workers().list()[0].status,
        worlds_engine::WorkerStatus::Busy
    );

    // No worker waits: the run is queued, as a worker would not take it now either.
    let run = t
        .execute(&flow, 4, WorkflowOptions::default())
        .await
        .unwrap();
    assert_eq!(events(&t, &run.id).await, ["workflow_queued"]);
    release.notify_one();
    t.run_until_complete(&occupier.id, "1m").await.unwrap();
    t.settle().await;
    assert_eq!(
        events(&t, &run.id).await,
        ["workflow_queued", "workflow_started", "timer_scheduled"]
    );
}

fn is_workflow_start(events: &[Event]) -> bool {
    events
        .iter()
        .any(|e| matches!(e.kind, EventKind::WorkflowStarted { .. }))
}

#[tokio::test]
async fn a_start_call_dropped_during_the_first_task_hands_the_run_to_the_workers() {
    let store = Arc::new(WrappedStore::default());
    // The first task's first write waits at the gate.
    let starts = store.hold(is_workflow_start);
    let t = TestWorld::with_options(TestWorldOptions {
        store: Some(store.clone()),
        ..TestWorldOptions::default()
    })
    .await;
    let step = double();
    let flow = nap_then_double(&step);
    t.register(&step).unwrap().register(&flow).unwrap();
    t.settle().await;

    let options = WorkflowOptions::new().workflow_id("dropped-start");
    // The call creates the run, then stops in its first task, at the gate; the caller gives up.
    starts.drop_at_gate(t.execute(&flow, 5, options)).await;
    // Every later start of the run goes through.
    starts.open();
    t.settle().await;
    t.advance("1h").await;
    let state = t.run_until_complete("dropped-start", "1m").await.unwrap();
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(state.output.unwrap().decode::<u64>().unwrap(), 10);
}
