//! Restarts: a new world on the same store resumes every unfinished run from its history.
//! Recorded steps are not re-run, timers come back, and a step lost mid-attempt is retried.

mod common;

use common::order_flow;

use std::sync::Arc;

use common::{add_one, event_types, Counter};
use worlds_engine::prelude::*;
use worlds_engine::store::{EventStore, MemoryStore, RunStore, Store};
use worlds_engine::testing::{TestWorld, TestWorldOptions, DEFAULT_START};
use worlds_engine::{Event, RunStatus};

async fn world_on(store: &Arc<dyn Store>, start: i64) -> TestWorld {
    TestWorld::with_options(TestWorldOptions {
        store: Some(store.clone()),
        initial_time: start,
        // Definitions are registered before the world starts and resumes the store's runs.
        autostart: false,
        ..TestWorldOptions::default()
    })
    .await
}

#[tokio::test]
async fn a_new_world_on_the_same_store_resumes_a_sleeping_run() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (reserved_1, charged_1) = (Counter::default(), Counter::default());
    let first = world_on(&store, DEFAULT_START).await;
    let (reserve, charge) = (
        add_one("reserve", &reserved_1),
        add_one("charge", &charged_1),
    );
    first.register(&reserve).unwrap().register(&charge).unwrap();
    let flow = order_flow(&reserve, &charge);
    first.register(&flow).unwrap();
    first.start().await.unwrap();
    let run = first
        .execute(&flow, 1, WorkflowOptions::default())
        .await
        .unwrap();
    first.settle().await;
    assert_eq!(reserved_1.get(), 1);
    assert_eq!(run.query().await.unwrap().status, RunStatus::Running);
    let asleep_at = first.now();
    first.shutdown().await.unwrap();
    drop(first);

    // Same store, fresh engine, fresh code objects: nothing in memory survives.
    let (reserved_2, charged_2) = (Counter::default(), Counter::default());
    let second = world_on(&store, asleep_at + 10).await;
    let (reserve, charge) = (
        add_one("reserve", &reserved_2),
        add_one("charge", &charged_2),
    );
    second
        .register(&reserve)
        .unwrap()
        .register(&charge)
        .unwrap();
    second.register(order_flow(&reserve, &charge)).unwrap();
    second.start().await.unwrap();
    let state = second.run_until_complete(&run.id, "2h").await.unwrap();
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(state.output.unwrap().decode::<u64>().unwrap(), 3);
    assert_eq!(reserved_2.get(), 0, "the recorded step must not run again");
    assert_eq!((charged_1.get(), charged_2.get()), (0, 1));
}

/// The pattern the README teaches for programs that start their runs when they start: a
/// workflow id from the business key with `OnConflict::UseExisting`. The restarted program
/// makes the same `execute()` call and gets the run already there, sleeping or finished, so no
/// step runs a second time; with default options it would start a second run.
#[tokio::test]
async fn a_restarted_program_that_starts_its_run_again_finds_the_same_run() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let reserved = Counter::default();
    let charged = Counter::default();
    let options = || {
        WorkflowOptions::new()
            .workflow_id("order-A-1001")
            .on_conflict(OnConflict::UseExisting)
    };
    let mut at = DEFAULT_START;
    let mut ids = Vec::new();
    // Three "program starts": mid-sleep, then after the run finished.
    for hours in [0, 2, 0] {
        let world = world_on(&store, at).await;
        let (reserve, charge) = (add_one("reserve", &reserved), add_one("charge", &charged));
        world.register(&reserve).unwrap().register(&charge).unwrap();
        let flow = order_flow(&reserve, &charge);
        world.register(&flow).unwrap();
        world.start().await.unwrap();
        let run = world.execute(&flow, 1, options()).await.unwrap();
        ids.push(run.id.clone());
        if hours > 0 {
            world.run_until_complete(&run.id, "2h").await.unwrap();
            assert_eq!(run.result().await.unwrap(), 3);
        }
        world.settle().await;
        at = world.now() + 10;
        world.shutdown().await.unwrap();
    }
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
    assert_eq!((reserved.get(), charged.get()), (1, 1));
    let runs = store
        .list_runs(&worlds_engine::WorkflowQueryFilter::new())
        .await
        .unwrap();
    assert_eq!(runs.data.len(), 1);
}

#[tokio::test]
async fn a_step_lost_mid_attempt_is_retried_and_the_stale_attempt_cannot_record() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
    let release_rx = Arc::new(parking_lot::Mutex::new(Some(release_rx)));
    let stuck = {
        let release_rx = release_rx.clone();
        activity("slow", move |_ctx: ActivityContext, n: u64| {
            let rx = release_rx.lock().take();
            async move {
                if let Some(rx) = rx {
                    let _ = rx.await;
                }
                Ok::<_, StepError>(n * 100)
            }
        })
    };
    let flow = {
        let stuck = stuck.clone();
        workflow("one-slow-step", move |ctx: WorkflowContext, n: u64| {
            let stuck = stuck.clone();
            async move { Ok::<_, WorkflowError>(ctx.run(&stuck, n).await?) }
        })
    };
    let first = world_on(&store, DEFAULT_START).await;
    first.register(&stuck).unwrap().register(&flow).unwrap();
    first.start().await.unwrap();
    let run = first
        .execute(&flow, 7, WorkflowOptions::default())
        .await
        .unwrap();
    first.settle().await;
    // The first world "dies" with attempt 1 in flight (its task is never finished by it).
    let second = world_on(&store, first.now() + 10).await;
    second.register(&stuck).unwrap().register(&flow).unwrap();
    second.start().await.unwrap();
    let state = second.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(state.status, RunStatus::Completed);
    let step = &state.activities[0];
    assert_eq!(step.attempt, 2);
    let lost = state
        .history
        .iter()
        .find_map(|e| match &e.kind {
            worlds_engine::EventKind::ActivityFailed {
                error, attempt: 1, ..
            } => Some(error.clone()),
            _ => None,
        })
        .expect("attempt 1 is recorded as lost");
    assert_eq!(lost.code.as_deref(), Some("WORKER_LOST"));

    // The old attempt finishes late: the store refuses its record, the result stands.
    release_tx.send(()).unwrap();
    first.settle().await;
    let after = second.query(&run.id).await.unwrap();
    assert_eq!(after.history.len(), state.history.len());
    assert_eq!(after.output, state.output);
}

/// A history recorded by an earlier build, replayed by today's code: the workflow must pick up
/// where the history stops without re-running the recorded step.
#[tokio::test]
async fn a_recorded_history_fixture_replays_with_current_code() {
    let text = include_str!("fixtures/histories/fixture_order_v1.json");
    let events: Vec<Event> = serde_json::from_str(text).expect("fixture parses");
    let store = MemoryStore::new();
    let mut events = events.into_iter();
    let first = events.next().unwrap();
    let run_id = first.run_id.clone();
    store.create_run(first).await.unwrap();
    store.append(&run_id, events.collect()).await.unwrap();
    let store: Arc<dyn Store> = Arc::new(store);

    let (reserved, charged) = (Counter::default(), Counter::default());
    let world = world_on(&store, DEFAULT_START + 60_000).await;
    let (reserve, charge) = (add_one("reserve", &reserved), add_one("charge", &charged));
    world.register(&reserve).unwrap().register(&charge).unwrap();
    world.register(order_flow(&reserve, &charge)).unwrap();
    world.start().await.unwrap();
    let state = world.run_until_complete(&run_id, "2h").await.unwrap();
    assert_eq!(state.status, RunStatus::Completed, "{:?}", state.error);
    assert_eq!(state.output.unwrap().decode::<u64>().unwrap(), 42 + 2);
    assert_eq!((reserved.get(), charged.get()), (0, 1));
}

/// The parent recorded `child_workflow_started`, and the process stopped before the child run
/// was created. A restart creates the child from what the parent recorded, and the parent
/// finishes with the child's result.
#[tokio::test]
async fn a_child_recorded_but_never_created_is_created_on_restart() {
    use worlds_engine::model::EVENT_FORMAT_VERSION;
    use worlds_engine::{EventKind, Payload};

    let store = MemoryStore::new();
    let run_id = "wrun_01KDVDNA007FD6E3WZ6S6E0B1F".to_owned();
    let child_id = "wrun_01KDVDNA007FD6E3WZ6S6E0B1Z".to_owned();
    let event = |seq: u64, kind: EventKind| Event {
        id: format!("evnt_01KDVDNA007FD6E3WZ6S6E0C{seq:02}"),
        run_id: run_id.clone(),
        seq,
        timestamp: DEFAULT_START,
        version: EVENT_FORMAT_VERSION,
        kind,
    };
    store
        .create_run(event(
            0,
            EventKind::WorkflowQueued(Box::new(worlds_engine::model::QueuedRun::new(
                "parent",
                "parent-1",
                Payload::encode(&20u64).unwrap(),
            ))),
        ))
        .await
        .unwrap();
    store
        .append(
            &run_id,
            vec![
                event(
                    1,
                    EventKind::WorkflowStarted {
                        attempt: 1,
                        first_position: 0,
                    },
                ),
                event(
                    2,
                    EventKind::ChildWorkflowStarted {
                        position: 0,
                        child_id: child_id.clone(),
                        name: "child".into(),
                        input: Some(Payload::encode(&21u64).unwrap()),
                        options: None,
                    },
                ),
            ],
        )
        .await
        .unwrap();
    let store: Arc<dyn Store> = Arc::new(store);

    let calls = Counter::default();
    let step = add_one("child-step", &calls);
    let child = {
        let step = step.clone();
        workflow("child", move |ctx: WorkflowContext, n: u64| {
            let step = step.clone();
            async move { Ok::<_, WorkflowError>(ctx.run(&step, n).await?) }
        })
    };
    let parent = {
        let child = child.clone();
        workflow("parent", move |ctx: WorkflowContext, n: u64| {
            let child = child.clone();
            async move {
                let got = ctx
                    .execute_child(&child, n + 1, WorkflowOptions::default())
                    .await?;
                Ok::<_, WorkflowError>(got)
            }
        })
    };
    // Definitions first, then start: starting resumes what the store holds.
    let world = TestWorld::with_options(TestWorldOptions {
        store: Some(store.clone()),
        initial_time: DEFAULT_START + 1_000,
        autostart: false,
        ..TestWorldOptions::default()
    })
    .await;
    world.register(&step).unwrap().register(&child).unwrap();
    world.register(&parent).unwrap();
    world.start().await.unwrap();
    let state = world.run_until_complete(&run_id, "1h").await.unwrap();
    assert_eq!(state.status, RunStatus::Completed, "{:?}", state.error);
    assert_eq!(state.output.clone().unwrap().decode::<u64>().unwrap(), 22);
    let child_state = world.query(&child_id).await.unwrap();
    assert_eq!(child_state.parent_id.as_deref(), Some(run_id.as_str()));
    assert_eq!(calls.get(), 1);
    assert!(
        !event_types(&state).contains(&"workflow_retry"),
        "the parent must not have needed a retry"
    );
}
