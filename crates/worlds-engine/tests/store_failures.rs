//! A store that cannot be reached for one write: the run is resumed from its history and goes
//! on, instead of being left waiting on something nobody will record.

mod common;

use std::sync::Arc;

use common::wrapped_store::WrappedStore;
use common::Counter;
use worlds_engine::prelude::*;
use worlds_engine::testing::{TestWorld, TestWorldOptions};
use worlds_engine::{ActivityStatus, Event, EventKind, ResolveData};

/// The retry of a failed attempt cannot be recorded: the attempt must not stay "running".
#[tokio::test]
async fn a_retry_that_could_not_be_recorded_is_settled_from_history() {
    let calls = Counter::default();
    let counted = calls.clone();
    let flaky = activity("flaky", move |_ctx: ActivityContext, n: u64| {
        let counted = counted.clone();
        async move {
            if counted.bump() == 1 {
                return Err(StepError::msg("first attempt fails"));
            }
            Ok::<_, StepError>(n + 1)
        }
    });
    let step = flaky.clone();
    let flow = workflow("flaky-flow", move |ctx: WorkflowContext, n: u64| {
        let step = step.clone();
        async move { Ok::<_, WorkflowError>(ctx.run(&step, n).await?) }
    });
    let store = Arc::new(WrappedStore::default());
    // The append recording attempt 1's failure and its retry is refused, once.
    store.refuse(1, |events: &[Event]| {
        events
            .iter()
            .any(|e| matches!(e.kind, EventKind::ActivityFailed { retrying: true, .. }))
    });
    let t = TestWorld::with_options(TestWorldOptions {
        store: Some(store.clone()),
        ..TestWorldOptions::default()
    })
    .await;
    t.register(&flaky).unwrap().register(&flow).unwrap();
    let run = t
        .execute(&flow, 1, WorkflowOptions::default())
        .await
        .unwrap();
    t.settle().await;
    // The resync waits a moment (a background pause) before it reads the run back.
    t.advance("1s").await;
    let state = t.run_until_complete(&run.id, "10m").await.unwrap();
    assert_eq!(state.status, RunStatus::Completed, "{:?}", state.activities);
    assert_eq!(run.result().await.unwrap(), 2);
    let step = &state.activities[0];
    assert_eq!(step.status, ActivityStatus::Completed);
    // Attempt 1 ended as lost (its failure never reached the store); attempt 2 succeeded.
    assert_eq!((step.attempt, calls.get()), (2, 2));
    assert!(store.refuse.lock().unwrap().as_ref().unwrap().times == 0);
}

// Found by the simulation (`testing::simulation`): writes that fail, or that land and report a
// failure all the same (a connection cut after the commit), must not leave a run stuck or
// turn into a failure of the run.

fn world_on(store: &Arc<WrappedStore>, autostart: bool) -> TestWorldOptions {
    TestWorldOptions {
        store: Some(store.clone() as Arc<dyn worlds_engine::store::Store>),
        autostart,
        ..TestWorldOptions::default()
    }
}

fn double() -> Activity<u64, u64> {
    activity("double", |_ctx: ActivityContext, n: u64| async move {
        Ok::<_, StepError>(n * 2)
    })
}

fn simple(step: &Activity<u64, u64>) -> Workflow<u64, u64> {
    let step = step.clone();
    workflow("simple", move |ctx: WorkflowContext, n: u64| {
        let step = step.clone();
        async move { Ok::<_, WorkflowError>(ctx.run(&step, n).await?) }
    })
}

fn parent_of(child: &Workflow<u64, u64>) -> Workflow<u64, u64> {
    let child = child.clone();
    workflow("parent", move |ctx: WorkflowContext, n: u64| {
        let child = child.clone();
        async move {
            let got = ctx
                .execute_child(&child, n, WorkflowOptions::default())
                .await?;
            Ok::<_, WorkflowError>(got + 1)
        }
    })
    // A failed child fails the parent for good: no attempt of the whole workflow hides it.
    .with_options(WorkflowOptions::new().failure_strategy(FailureStrategy::Ignore))
}

fn is_start(events: &[Event]) -> bool {
    events
        .iter()
        .any(|e| matches!(&e.kind, EventKind::WorkflowQueued(q) if q.parent_id.is_none()))
}

fn is_child_start(events: &[Event]) -> bool {
    events
        .iter()
        .any(|e| matches!(&e.kind, EventKind::WorkflowQueued(q) if q.parent_id.is_some()))
}

fn is_completion(events: &[Event]) -> bool {
    events
        .iter()
        .any(|e| matches!(e.kind, EventKind::WorkflowCompleted { .. }))
}

fn is_child_result(events: &[Event]) -> bool {
    events
        .iter()
        .any(|e| matches!(e.kind, EventKind::ChildWorkflowCompleted { .. }))
}

/// Runs the background resync (it waits a moment before it reads runs back), then the run.
async fn finish(t: &TestWorld, id: &str) -> worlds_engine::WorkflowState {
    t.settle().await;
    t.advance("1s").await;
    t.run_until_complete(id, "10m").await.unwrap()
}

#[tokio::test]
async fn a_start_that_landed_but_reported_a_failure_still_runs() {
    let store = Arc::new(WrappedStore::default());
    store.fail_after_writing(1, is_start);
    let t = TestWorld::with_options(world_on(&store, true)).await;
    let step = double();
    let flow = simple(&step);
    t.register(&step).unwrap().register(&flow).unwrap();
    let options = WorkflowOptions::new().workflow_id("order-7");
    assert!(t.execute(&flow, 7, options).await.is_err());
    let state = finish(&t, "order-7").await;
    assert_eq!(state.status, RunStatus::Completed);
}

/// Runs a parent whose child doubles 5 on a world over `store`, and checks it completes with
/// 11 and that the store's planned failure happened.
async fn parent_completes(store: &Arc<WrappedStore>) {
    let t = TestWorld::with_options(world_on(store, true)).await;
    let step = double();
    let child = simple(&step);
    let parent = parent_of(&child);
    t.register(&step).unwrap().register(&child).unwrap();
    t.register(&parent).unwrap();
    let run = t
        .execute(&parent, 5, WorkflowOptions::default())
        .await
        .unwrap();
    let state = finish(&t, &run.id).await;
    assert_eq!(
        store.refuse.lock().unwrap().as_ref().unwrap().times,
        0,
        "the planned failure happened"
    );
    assert_eq!(state.status, RunStatus::Completed, "{:?}", state.error);
    assert_eq!(run.result().await.unwrap(), 11);
}

#[tokio::test]
async fn a_child_whose_creation_could_not_be_written_is_created_again_not_failed() {
    let store = Arc::new(WrappedStore::default());
    store.refuse(1, is_child_start);
    parent_completes(&store).await;
}

#[tokio::test]
async fn a_child_whose_end_landed_but_reported_a_failure_still_reaches_its_parent() {
    let store = Arc::new(WrappedStore::default());
    // The first completion written is the child's (the parent waits on it).
    store.fail_after_writing(1, is_completion);
    parent_completes(&store).await;
}

#[tokio::test]
async fn a_finished_child_whose_result_the_parent_never_recorded_reaches_it_after_a_restart() {
    let store = Arc::new(WrappedStore::default());
    // The process cannot record the child's result in the parent, then dies.
    store.refuse(usize::MAX, is_child_result);
    let step = double();
    let child = simple(&step);
    let parent = parent_of(&child);
    let run_id = {
        let t = TestWorld::with_options(world_on(&store, true)).await;
        t.register(&step).unwrap().register(&child).unwrap();
        t.register(&parent).unwrap();
        let run = t
            .execute(&parent, 5, WorkflowOptions::default())
            .await
            .unwrap();
        t.settle().await;
        t.advance("5s").await;
        let state = t.world().get_run(&run.id, ResolveData::None).await.unwrap();
        assert_eq!(state.status, RunStatus::Running);
        run.id
    };
    store.heal();
    let t = TestWorld::with_options(world_on(&store, false)).await;
    t.register(&step).unwrap().register(&child).unwrap();
    t.register(&parent).unwrap();
    t.world().start().await.unwrap();
    let state = finish(&t, &run_id).await;
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(state.output.unwrap().decode::<u64>().unwrap(), 11);
}

#[tokio::test]
async fn a_hook_payload_that_landed_but_reported_a_failure_still_wakes_its_run() {
    let store = Arc::new(WrappedStore::default());
    store.fail_after_writing(1, |events: &[Event]| {
        events
            .iter()
            .any(|e| matches!(e.kind, EventKind::HookReceived { .. }))
    });
    let t = TestWorld::with_options(world_on(&store, true)).await;
    let flow = workflow("approve", |ctx: WorkflowContext, _: ()| async move {
        let hook = ctx.create_hook_with::<String>(HookOptions::new().token("approve-1"));
        Ok::<_, WorkflowError>(hook.wait().await?)
    });
    t.register(&flow).unwrap();
    let run = t
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    t.settle().await;
    assert!(t.resume_hook("approve-1", "yes").await.is_err());
    let state = finish(&t, &run.id).await;
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(run.result().await.unwrap(), "yes");
}

/// The start of step `position` (any attempt).
fn starts_step(events: &[Event], position: u32) -> bool {
    events
        .iter()
        .any(|e| matches!(e.kind, EventKind::ActivityStarted { position: p, .. } if p == position))
}

/// Yields to the test runtime until `done` holds (or panics after many turns).
async fn turn_until(what: &str, done: impl Fn() -> bool) {
    for _ in 0..10_000 {
        if done() {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("{what} did not happen");
}

// Found by the simulation (seed 85555 of `worlds simulate`, once workers paused between
// tasks): a run read back from its history while one of its steps was recording its start.
// Recovery saw the step as not started and queued attempt 1 again; the start then landed, the
// attempt that made it had been cancelled by the let-go, and the queued copy was refused (the
// attempt was running already). Nobody ran the step again, and the run waited forever.
#[tokio::test]
async fn a_run_read_back_while_a_step_records_its_start_still_runs_that_step() {
    let store = Arc::new(WrappedStore::default());
    // Every start of "ship" (step 0) waits at the gate; "bill" (step 1) cannot record its
    // first start, which sends the run to be read back from its history.
    let ship_starts = store.hold(|events: &[Event]| starts_step(events, 0));
    store.refuse(1, |events: &[Event]| starts_step(events, 1));
    let t = TestWorld::with_options(world_on(&store, true)).await;
    let ship = activity("ship", |_ctx: ActivityContext, n: u64| async move {
        Ok::<_, StepError>(n + 1)
    });
    let bill = activity("bill", |_ctx: ActivityContext, n: u64| async move {
        Ok::<_, StepError>(n * 10)
    });
    let (s, b) = (ship.clone(), bill.clone());
    let flow = workflow("ship-and-bill", move |ctx: WorkflowContext, n: u64| {
        let (ship, bill) = (s.clone(), b.clone());
        async move {
            let (shipped, billed) = futures::join!(ctx.run(&ship, n), ctx.run(&bill, n));
            Ok::<_, WorkflowError>(shipped? + billed?)
        }
    });
    t.register(&ship).unwrap().register(&bill).unwrap();
    t.register(&flow).unwrap();
    let run = t
        .execute(&flow, 4, WorkflowOptions::default())
        .await
        .unwrap();
    let arrived = || {
        ship_starts
            .arrived
            .load(std::sync::atomic::Ordering::SeqCst)
    };
    turn_until("the start of ship reaching the gate", || arrived() == 1).await;
    turn_until("the refusal of bill's start", || {
        store.refuse.lock().unwrap().as_ref().unwrap().times == 0
    })
    .await;

    // The read-back is due (it waits a moment first) while ship's start is still held.
    t.clock().set(t.now() + 1_000);
    for _ in 0..200 {
        tokio::task::yield_now().await;
    }
    // Ship's first start lands; then whatever start comes next.
    ship_starts.let_one_through();
    for _ in 0..200 {
        tokio::task::yield_now().await;
    }
    ship_starts.let_one_through();

    let state = t.run_until_complete(&run.id, "10m").await.unwrap();
    assert_eq!(state.status, RunStatus::Completed, "{:?}", state.activities);
    assert_eq!(run.result().await.unwrap(), 5 + 40);
    // Attempt 1 of ship was lost to the read-back; attempt 2 ran it.
    let ship_state = &state.activities[0];
    assert_eq!((ship_state.name.as_str(), ship_state.attempt), ("ship", 2));
    let lost = state.history.iter().any(|e| {
        matches!(&e.kind, EventKind::ActivityFailed { position: 0, attempt: 1, error, .. }
            if error.code.as_deref() == Some("WORKER_LOST"))
    });
    assert!(lost, "attempt 1 of ship is recorded as lost");
}

/// Starts a run with a timeout and drops the start call while the timeout's timer is being
/// armed (after the creation landed); the run must still be driven to its end.
async fn a_start_dropped_while_its_timeout_is_armed(eager_start: bool) {
    let store = Arc::new(WrappedStore::default());
    let timers = store.hold_timers();
    let mut config = worlds_engine::WorldConfig::memory();
    config.eager_start = eager_start;
    let t = TestWorld::with_options(TestWorldOptions {
        store: Some(store.clone()),
        config,
        ..TestWorldOptions::default()
    })
    .await;
    let step = double();
    let flow = simple(&step);
    t.register(&step).unwrap().register(&flow).unwrap();
    t.settle().await;
    let options = WorkflowOptions::new()
        .workflow_id("dropped-start")
        .timeout(std::time::Duration::from_secs(3600));
    // The caller gives up on the call with the run created, its timeout not yet armed.
    timers.drop_at_gate(t.execute(&flow, 21, options)).await;
    timers.open();
    let state = finish(&t, "dropped-start").await;
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(state.output.unwrap().decode::<u64>().unwrap(), 42);
}

#[tokio::test]
async fn a_start_dropped_while_its_timeout_is_armed_still_runs() {
    a_start_dropped_while_its_timeout_is_armed(false).await;
}

#[tokio::test]
async fn an_eager_start_dropped_while_its_timeout_is_armed_still_runs() {
    a_start_dropped_while_its_timeout_is_armed(true).await;
}
