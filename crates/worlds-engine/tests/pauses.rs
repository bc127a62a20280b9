//! Pausing a workflow or a task queue: new work is held (stored, waiting on the pause, shown
//! with who paused it and why), running work goes on, and a resume lets the held work run.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{add_one, memory_config, Counter};
use worlds_engine::model::{PauseTarget, WaitOn};
use worlds_engine::prelude::*;
use worlds_engine::store::{MemoryStore, PauseStore};
use worlds_engine::testing::{TestWorld, TestWorldOptions};
use worlds_engine::{ResolveData, RunStatus};

fn chain(step: &Activity<u64, u64>, queue: Option<&str>) -> Workflow<u64, u64> {
    let step = step.clone();
    let queue = queue.map(str::to_owned);
    workflow("chain", move |ctx: WorkflowContext, n: u64| {
        let (step, queue) = (step.clone(), queue.clone());
        async move {
            let a = ctx.run(&step, n).await?;
            let b = match queue {
                Some(q) => {
                    ctx.run_with(&step, a, ActivityOptions::new().task_queue(q))
                        .await?
                }
                None => ctx.run(&step, a).await?,
            };
            Ok::<_, WorkflowError>(b)
        }
    })
}

async fn status(t: &TestWorld, id: &str) -> RunStatus {
    t.world()
        .get_run(id, ResolveData::None)
        .await
        .unwrap()
        .status
}

#[tokio::test]
async fn a_paused_workflow_holds_new_runs_and_lets_started_ones_finish() {
    let t = TestWorld::with_config(memory_config()).await;
    let calls = Counter::default();
    let step = add_one("add", &calls);
    let flow = chain(&step, None);
    t.register(&step).unwrap();
    t.register(&flow).unwrap();
    let other = workflow("other", |_ctx: WorkflowContext, n: u64| async move {
        Ok::<_, WorkflowError>(n)
    });
    t.register(&other).unwrap();

    let target = PauseTarget::Workflow("chain".into());
    let pause = t
        .world()
        .pause(target.clone(), "ops", "provider incident")
        .await
        .unwrap();
    assert_eq!((pause.by.as_str(), pause.since), ("ops", t.now()));
    let held = t
        .world()
        .execute(&flow, 1, WorkflowOptions::default())
        .await
        .unwrap();
    let free = t
        .world()
        .execute(&other, 7, WorkflowOptions::default())
        .await
        .unwrap();
    t.advance(Duration::from_secs(600)).await;
    assert_eq!(status(&t, &held.id).await, RunStatus::Pending);
    assert_eq!(calls.get(), 0);
    assert_eq!(free.result().await.unwrap(), 7, "another workflow runs");
    let waits = t.world().waits(&held.id).await.unwrap();
    assert_eq!(waits.len(), 1, "{waits:?}");
    assert!(
        matches!(&waits[0].on, WaitOn::Paused { target: t, by, reason, step: None, .. }
            if *t == target && by == "ops" && reason == "provider incident"),
        "{waits:?}"
    );
    assert_eq!(
        waits[0].concern, None,
        "held ten minutes on purpose: no concern"
    );
    assert_eq!(t.world().pauses().await.unwrap(), vec![pause.clone()]);

    let lifted = t.world().resume(&target, "ops").await.unwrap();
    assert_eq!(lifted, Some(pause));
    assert_eq!(held.result().await.unwrap(), 3);
    assert_eq!(calls.get(), 2);
    assert_eq!(t.world().resume(&target, "ops").await.unwrap(), None);
    assert!(t.world().pauses().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_paused_queue_holds_steps_not_started_and_the_run_waits_on_it() {
    let t = TestWorld::with_config(memory_config()).await;
    let calls = Counter::default();
    let step = add_one("add", &calls);
    let flow = chain(&step, Some("slow"));
    t.register(&step).unwrap();
    t.register(&flow).unwrap();
    let queue = PauseTarget::TaskQueue("slow".into());
    t.world().pause(queue.clone(), "ops", "").await.unwrap();

    let run = t
        .world()
        .execute(&flow, 1, WorkflowOptions::default())
        .await
        .unwrap();
    t.advance(Duration::from_secs(60)).await;
    // The first step (default queue) ran; the second, on the paused queue, waits.
    assert_eq!(calls.get(), 1);
    assert_eq!(status(&t, &run.id).await, RunStatus::Running);
    let waits = t.world().waits(&run.id).await.unwrap();
    assert!(
        matches!(&waits[..], [w] if matches!(&w.on, WaitOn::Paused { target, step: Some((name, 1)), .. }
            if *target == queue && name == "add")),
        "{waits:?}"
    );
    t.world().resume(&queue, "ops").await.unwrap();
    assert_eq!(run.result().await.unwrap(), 3);
}

#[tokio::test]
async fn a_pause_set_by_another_process_is_read_within_its_refresh_and_outlives_a_restart() {
    let store = Arc::new(MemoryStore::new());
    let calls = Counter::default();
    let step = add_one("add", &calls);
    let flow = chain(&step, None);
    let world = |store: Arc<MemoryStore>| {
        let (step, flow) = (step.clone(), flow.clone());
        async move {
            let t = TestWorld::with_options(TestWorldOptions {
                store: Some(store as Arc<dyn worlds_engine::store::Store>),
                config: memory_config(),
                ..TestWorldOptions::default()
            })
            .await;
            t.register(&step).unwrap();
            t.register(&flow).unwrap();
            t
        }
    };
    let t = world(store.clone()).await;
    // Another process pauses the workflow in the shared store.
    let target = PauseTarget::Workflow("chain".into());
    store
        .save_pause(&worlds_engine::model::Pause {
            target: target.clone(),
            by: "another process".into(),
            reason: "drain".into(),
            since: t.now(),
        })
        .await
        .unwrap();
    t.advance(Duration::from_secs(3)).await;
    let run = t
        .world()
        .execute(&flow, 1, WorkflowOptions::default())
        .await
        .unwrap();
    t.advance(Duration::from_secs(60)).await;
    assert_eq!(status(&t, &run.id).await, RunStatus::Pending);
    let id = run.id.clone();
    t.world().shutdown().await.unwrap();
    drop(t);

    // The next process finds the run and the pause, and holds it from its start.
    let t = world(store.clone()).await;
    t.advance(Duration::from_secs(60)).await;
    assert_eq!(status(&t, &id).await, RunStatus::Pending);
    assert_eq!(calls.get(), 0);
    // Lifted by another process: this one starts what it held within the refresh.
    store.remove_pause(&target).await.unwrap();
    t.advance(Duration::from_secs(3)).await;
    let done = t
        .run_until_complete(&id, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(calls.get(), 2);
}

#[tokio::test]
async fn hostile_targets_are_refused_before_anything_is_stored() {
    let t = TestWorld::with_config(memory_config()).await;
    for target in [
        PauseTarget::Workflow(String::new()),
        PauseTarget::TaskQueue("a\0b".into()),
        PauseTarget::Workflow("x".repeat(worlds_engine::model::MAX_PAUSE_NAME + 1)),
    ] {
        assert!(t.world().pause(target.clone(), "ops", "").await.is_err());
        assert!(t.world().resume(&target, "ops").await.is_err());
    }
    let ok = PauseTarget::Workflow("w".into());
    assert!(t.world().pause(ok.clone(), "o\0ps", "").await.is_err());
    assert!(t
        .world()
        .pause(
            ok,
            "ops",
            &"r".repeat(worlds_engine::model::MAX_PAUSE_TEXT + 1)
        )
        .await
        .is_err());
    assert!(t.world().pauses().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_pause_outlives_the_process_on_a_hybrid_directory() {
    let dir = tempfile::tempdir().unwrap();
    let calls = Counter::default();
    let step = add_one("add", &calls);
    let flow = chain(&step, None);
    let open = || {
        let mut config = memory_config();
        config.persistence = worlds_engine::Persistence::Hybrid;
        config.persistence_path = dir.path().to_path_buf();
        let world = World::new(config).unwrap();
        world.register(&step).unwrap();
        world.register(&flow).unwrap();
        world
    };
    let world = open();
    world.start().await.unwrap();
    let target = PauseTarget::Workflow("chain".into());
    world.pause(target.clone(), "ops", "drain").await.unwrap();
    let run = world
        .execute(&flow, 1, WorkflowOptions::default())
        .await
        .unwrap();
    world.shutdown().await.unwrap();
    drop(world);

    let world = open();
    world.start().await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let state = world.get_run(&run.id, ResolveData::None).await.unwrap();
    assert_eq!(
        state.status,
        RunStatus::Pending,
        "held again after the restart"
    );
    assert_eq!(world.pauses().await.unwrap()[0].reason, "drain");
    world.resume(&target, "ops").await.unwrap();
    let handle = world.handle::<u64>(&run.id).await.unwrap();
    assert_eq!(handle.result().await.unwrap(), 3);
    assert_eq!(calls.get(), 2);
    world.shutdown().await.unwrap();
}
