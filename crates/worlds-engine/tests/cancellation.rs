//! Cancellation: what a cancelled run stops doing, what its running step sees, which errors
//! cancel answers with, and how it reaches children.

mod common;

use std::sync::Arc;

use common::{add_one, event_types, test_world, test_world_with, Counter, Mode};
use parking_lot::Mutex;
use tokio::sync::{oneshot, Notify};
use worlds_engine::prelude::*;
use worlds_engine::WorkerStatus;
use worlds_engine::WorkflowQueryFilter;

/// Lets every runnable task take its turn. Used instead of `settle` while a run's task sits in
/// the queue with no free worker: `settle` would wait for it.
async fn let_tasks_run() {
    for _ in 0..256 {
        tokio::task::yield_now().await;
    }
}

/// An activity that counts its starts, then waits until `release` is notified.
fn blocker(name: &str, started: &Counter, release: &Arc<Notify>) -> Activity<(), String> {
    let (started, release) = (started.clone(), release.clone());
    activity(name, move |_ctx: ActivityContext, _: ()| {
        let (started, release) = (started.clone(), release.clone());
        async move {
            started.bump();
            release.notified().await;
            Ok::<_, StepError>("released".to_owned())
        }
    })
}

/// A workflow that runs `step` once and returns its result.
fn single_step<O>(name: &str, step: &Activity<(), O>) -> Workflow<(), O>
where
    O: serde::Serialize + serde::de::DeserializeOwned + Send + 'static,
{
    let step = step.clone();
    workflow(name, move |ctx: WorkflowContext, _: ()| {
        let step = step.clone();
        async move { Ok::<_, WorkflowError>(ctx.run(&step, ()).await?) }
    })
}

/// A workflow that sleeps an hour, then runs `step`.
fn napper_then(step: &Activity<u64, u64>) -> Workflow<(), u64> {
    let step = step.clone();
    workflow("napper", move |ctx: WorkflowContext, _: ()| {
        let step = step.clone();
        async move {
            ctx.sleep("1h").await?;
            Ok::<_, WorkflowError>(ctx.run(&step, 1).await?)
        }
    })
}

async fn cancel_ends_a_run_waiting_on_a_timer(mode: Mode) {
    let calls = Counter::default();
    let step = add_one("after-nap", &calls);
    let napper = napper_then(&step);
    let t = test_world(mode).await;
    t.register(&step).unwrap().register(&napper).unwrap();
    let run = t
        .execute(&napper, (), WorkflowOptions::default())
        .await
        .unwrap();
    t.settle().await;
    assert_eq!(run.query().await.unwrap().status, RunStatus::Running);

    run.cancel().await.unwrap();
    let state = run.query().await.unwrap();
    assert_eq!(state.status, RunStatus::Cancelled);
    assert_eq!(state.completed_at, Some(t.now()));
    assert_eq!(
        event_types(&state).last().copied(),
        Some("workflow_cancelled")
    );
    match run.result().await {
        Err(WorldError::RunCancelled { run_id }) => assert_eq!(run_id, run.id),
        other => panic!("expected RunCancelled, got {other:?}"),
    }

    t.advance("2h").await;
    assert_eq!(run.query().await.unwrap().history, state.history);
    assert_eq!(calls.get(), 0);
}

/// Not in both modes: the macro takes no attributes, and the bug does not depend on the mode.
#[tokio::test]
async fn cancel_leaves_no_deadline_armed() {
    let step = add_one("after-nap", &Counter::default());
    let napper = napper_then(&step);
    let never = Arc::new(Notify::new());
    let hang = blocker("hang", &Counter::default(), &never);
    let stuck_flow = single_step("stuck", &hang);
    let t = test_world(Mode::Cached).await;
    t.register(&step)
        .unwrap()
        .register(&napper)
        .unwrap()
        .register(&hang)
        .unwrap()
        .register(&stuck_flow)
        .unwrap();
    let run = t
        .execute(&napper, (), WorkflowOptions::default())
        .await
        .unwrap();
    t.settle().await;
    run.cancel().await.unwrap();

    // A run stuck on a step that never ends leaves `run_until_complete` nothing to wait for
    // but armed deadlines: it jumps to each one, then gives up. Time staying put shows that
    // the cancelled run's hour-long sleep left nothing behind.
    let stuck = t
        .execute(&stuck_flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    let before = t.now();
    assert!(t.run_until_complete(&stuck.id, "100h").await.is_err());
    assert_eq!(
        t.now(),
        before,
        "time jumped to a deadline nothing waits for"
    );
}

async fn running_step_sees_the_cancel_and_its_late_result_is_dropped(mode: Mode) {
    let started = Counter::default();
    let release = Arc::new(Notify::new());
    let (seen_tx, mut seen_rx) = oneshot::channel::<bool>();
    let seen_tx = Arc::new(Mutex::new(Some(seen_tx)));
    let (st, rel) = (started.clone(), release.clone());
    let step = activity("long-job", move |ctx: ActivityContext, _: ()| {
        let (st, rel, seen_tx) = (st.clone(), rel.clone(), seen_tx.clone());
        async move {
            st.bump();
            // Work handed to another task keeps a clone of the context, and learns there
            // that it should stop.
            let watcher = ctx.clone();
            let tx = seen_tx.lock().take();
            tokio::spawn(async move {
                watcher.cancelled().await;
                if let Some(tx) = tx {
                    let _ = tx.send(watcher.is_cancelled());
                }
            });
            rel.notified().await;
            Ok::<_, StepError>("late result".to_owned())
        }
    });
    let flow = single_step("long-job-flow", &step);
    let t = test_world(mode).await;
    t.register(&step).unwrap().register(&flow).unwrap();
    let run = t
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    t.settle().await;
    assert_eq!(started.get(), 1);
    assert_eq!(seen_rx.try_recv(), Err(oneshot::error::TryRecvError::Empty));

    run.cancel().await.unwrap();
    t.settle().await;
    assert_eq!(seen_rx.try_recv(), Ok(true), "the step saw the cancel");
    let cancelled = run.query().await.unwrap();

    release.notify_one();
    t.settle().await;
    let state = run.query().await.unwrap();
    assert_eq!(state.status, RunStatus::Cancelled);
    assert_eq!(
        state.history,
        cancelled.history,
        "{:?}",
        event_types(&state)
    );
    assert!(!event_types(&state).contains(&"activity_completed"));
    assert_eq!(started.get(), 1, "not retried either");
}

/// Not in both modes: the macro takes no attributes, and the bug does not depend on the mode.
#[tokio::test]
async fn step_can_clean_up_after_the_cancel_in_its_own_future() {
    let started = Counter::default();
    let cleaned_up = Counter::default();
    let (st, cl) = (started.clone(), cleaned_up.clone());
    // What `ActivityContext::cancelled` is documented for: wait for the cancel, tidy up, stop.
    let step = activity("tidy-job", move |ctx: ActivityContext, _: ()| {
        let (st, cl) = (st.clone(), cl.clone());
        async move {
            st.bump();
            ctx.cancelled().await;
            if ctx.is_cancelled() {
                cl.bump();
            }
            Err::<String, _>(StepError::fatal("stopped on cancel"))
        }
    });
    let flow = single_step("tidy-flow", &step);
    let t = test_world(Mode::Cached).await;
    t.register(&step).unwrap().register(&flow).unwrap();
    let run = t
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    t.settle().await;
    assert_eq!((started.get(), cleaned_up.get()), (1, 0));

    run.cancel().await.unwrap();
    t.settle().await;
    assert_eq!(cleaned_up.get(), 1, "the step saw the cancel and tidied up");
    let state = run.query().await.unwrap();
    assert_eq!(
        event_types(&state).last().copied(),
        Some("workflow_cancelled"),
        "its failure after the cancel is not recorded"
    );
}

async fn cancelling_a_queued_run_drops_its_work(mode: Mode) {
    let busy_started = Counter::default();
    let release = Arc::new(Notify::new());
    let busy = blocker("busy", &busy_started, &release);
    let busy_flow = single_step("busy-flow", &busy);
    let probe_calls = Counter::default();
    let probe = add_one("probe", &probe_calls);
    let p = probe.clone();
    let probe_flow = workflow("probe-flow", move |ctx: WorkflowContext, _: ()| {
        let p = p.clone();
        async move { Ok::<_, WorkflowError>(ctx.run(&p, 1).await?) }
    });
    let mut config = common::memory_config();
    config.min_workers = 1;
    config.max_workers = 1;
    let t = test_world_with(mode, config).await;
    t.register(&busy)
        .unwrap()
        .register(&busy_flow)
        .unwrap()
        .register(&probe)
        .unwrap()
        .register(&probe_flow)
        .unwrap();
    let occupier = t
        .execute(&busy_flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    t.settle().await;
    assert_eq!(busy_started.get(), 1);
    assert!(t
        .workers()
        .list()
        .iter()
        .all(|w| w.status == WorkerStatus::Busy));

    let queued = t
        .execute(&probe_flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    let_tasks_run().await;
    assert_eq!(queued.query().await.unwrap().status, RunStatus::Pending);
    queued.cancel().await.unwrap();

    release.notify_one();
    t.run_until_complete(&occupier.id, "1m").await.unwrap();
    assert_eq!(occupier.result().await.unwrap(), "released");
    t.settle().await;
    assert_eq!(probe_calls.get(), 0);
    let state = queued.query().await.unwrap();
    assert_eq!(
        event_types(&state),
        vec!["workflow_queued", "workflow_cancelled"]
    );
}

async fn cancel_drops_queued_steps_and_frees_the_worker(mode: Mode) {
    let started = Counter::default();
    let release = Arc::new(Notify::new());
    let slow = blocker("slow", &started, &release);
    let probe_calls = Counter::default();
    let probe = add_one("probe", &probe_calls);
    let (s, p) = (slow.clone(), probe.clone());
    // Both steps are queued at once; the only worker takes the slow one, the probe waits.
    let both = workflow("both", move |ctx: WorkflowContext, _: ()| {
        let (s, p) = (s.clone(), p.clone());
        async move {
            let (a, b) = futures::join!(ctx.run(&s, ()), ctx.run(&p, 1));
            Ok::<_, WorkflowError>(format!("{}/{}", a?, b?))
        }
    });
    let after_calls = Counter::default();
    let after_step = add_one("after", &after_calls);
    let after = workflow("after", {
        let a = after_step.clone();
        move |ctx: WorkflowContext, n: u64| {
            let a = a.clone();
            async move { Ok::<_, WorkflowError>(ctx.run(&a, n).await?) }
        }
    });
    let mut config = common::memory_config();
    config.min_workers = 1;
    config.max_workers = 1;
    let t = test_world_with(mode, config).await;
    t.register(&slow)
        .unwrap()
        .register(&probe)
        .unwrap()
        .register(&both)
        .unwrap()
        .register(&after_step)
        .unwrap()
        .register(&after)
        .unwrap();
    let run = t
        .execute(&both, (), WorkflowOptions::default())
        .await
        .unwrap();
    let_tasks_run().await;
    assert_eq!(started.get(), 1);
    assert_eq!(probe_calls.get(), 0);

    run.cancel().await.unwrap();
    // No release: the cancel alone frees the worker, once the step's cleanup grace is over.
    t.settle().await;
    assert_eq!(t.workers().list()[0].status, WorkerStatus::Busy);
    t.advance("5s").await;
    assert_eq!(t.workers().list()[0].status, WorkerStatus::Idle);
    let later = t
        .execute(&after, 1, WorkflowOptions::default())
        .await
        .unwrap();
    t.run_until_complete(&later.id, "1m").await.unwrap();
    assert_eq!(later.result().await.unwrap(), 2);
    assert_eq!(
        probe_calls.get(),
        0,
        "the cancelled run's queued step never ran"
    );
    assert_eq!(started.get(), 1);
}

async fn cancel_is_idempotent_and_refuses_finished_or_unknown_runs(mode: Mode) {
    let napper = workflow("napper", |ctx: WorkflowContext, _: ()| async move {
        ctx.sleep("1h").await?;
        Ok::<_, WorkflowError>(())
    });
    let calls = Counter::default();
    let step = add_one("quick", &calls);
    let quick = single_step_u64(&step);
    let t = test_world(mode).await;
    t.register(&napper)
        .unwrap()
        .register(&step)
        .unwrap()
        .register(&quick)
        .unwrap();

    // By workflow id, then by run id: both name the same run.
    let run = t
        .execute(&napper, (), WorkflowOptions::new().workflow_id("nap-1"))
        .await
        .unwrap();
    t.settle().await;
    t.cancel("nap-1").await.unwrap();
    run.cancel().await.unwrap();
    let state = run.query().await.unwrap();
    assert_eq!(state.status, RunStatus::Cancelled);
    let cancels = event_types(&state)
        .into_iter()
        .filter(|t| *t == "workflow_cancelled")
        .count();
    assert_eq!(cancels, 1);

    let done = t
        .execute(&quick, (), WorkflowOptions::default())
        .await
        .unwrap();
    t.run_until_complete(&done.id, "1m").await.unwrap();
    let err = done.cancel().await.unwrap_err();
    assert_eq!(err.http_status(), 409, "{err}");
    assert_eq!(
        done.query().await.unwrap().status,
        RunStatus::Completed,
        "a refused cancel changes nothing"
    );

    let err = t.cancel("wrun_no_such_run").await.unwrap_err();
    assert_eq!(err.http_status(), 404, "{err}");
}

fn single_step_u64(step: &Activity<u64, u64>) -> Workflow<(), u64> {
    let step = step.clone();
    workflow("quick-flow", move |ctx: WorkflowContext, _: ()| {
        let step = step.clone();
        async move { Ok::<_, WorkflowError>(ctx.run(&step, 1).await?) }
    })
}

async fn cancelling_a_parent_cancels_its_running_child(mode: Mode) {
    let child = workflow("sleepy-child", |ctx: WorkflowContext, _: ()| async move {
        ctx.sleep("1h").await?;
        Ok::<_, WorkflowError>(1)
    });
    let c = child.clone();
    let parent = workflow("parent", move |ctx: WorkflowContext, _: ()| {
        let c = c.clone();
        async move {
            let n: u32 = ctx
                .execute_child(&c, (), WorkflowOptions::default())
                .await?;
            Ok::<_, WorkflowError>(n)
        }
    });
    let t = test_world(mode).await;
    t.register(&child).unwrap().register(&parent).unwrap();
    let run = t
        .execute(&parent, (), WorkflowOptions::default())
        .await
        .unwrap();
    t.settle().await;
    let children = t
        .query_workflows(WorkflowQueryFilter::new().parent_id(&run.id))
        .await
        .unwrap();
    assert_eq!(children.len(), 1);
    let child_id = children[0].id.clone();
    assert_eq!(children[0].status, RunStatus::Running);

    run.cancel().await.unwrap();
    assert_eq!(run.query().await.unwrap().status, RunStatus::Cancelled);
    let child_state = t.query(&child_id).await.unwrap();
    assert_eq!(child_state.status, RunStatus::Cancelled);
    let reason = child_state.error.expect("the child records why");
    assert_eq!(reason.code.as_deref(), Some("CANCELLED"));
    assert!(reason.message.contains(&run.id), "{}", reason.message);

    t.advance("2h").await;
    let child_state = t.query(&child_id).await.unwrap();
    assert!(!event_types(&child_state).contains(&"timer_fired"));
}

async fn cancelled_child_surfaces_to_its_parent_as_child_failed(mode: Mode) {
    let child = workflow("sleepy-child", |ctx: WorkflowContext, _: ()| async move {
        ctx.sleep("1h").await?;
        Ok::<_, WorkflowError>(1)
    });
    let c = child.clone();
    let parent = workflow("patient-parent", move |ctx: WorkflowContext, _: ()| {
        let c = c.clone();
        async move {
            match ctx
                .execute_child::<(), u32>(&c, (), WorkflowOptions::default())
                .await
            {
                Ok(n) => Ok(format!("child said {n}")),
                Err(ContextError::ChildFailed { error, .. }) => Ok::<_, WorkflowError>(format!(
                    "child gone: {}",
                    error.code.unwrap_or_default()
                )),
                Err(other) => Err(other.into()),
            }
        }
    });
    let t = test_world(mode).await;
    t.register(&child).unwrap().register(&parent).unwrap();
    let run = t
        .execute(&parent, (), WorkflowOptions::default())
        .await
        .unwrap();
    t.settle().await;
    let child_id = run.query().await.unwrap().children[0].clone();
    t.cancel(&child_id).await.unwrap();
    t.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(run.result().await.unwrap(), "child gone: CANCELLED");
}

in_both_modes!(
    cancel_ends_a_run_waiting_on_a_timer,
    running_step_sees_the_cancel_and_its_late_result_is_dropped,
    cancelling_a_queued_run_drops_its_work,
    cancel_drops_queued_steps_and_frees_the_worker,
    cancel_is_idempotent_and_refuses_finished_or_unknown_runs,
    cancelling_a_parent_cancels_its_running_child,
    cancelled_child_surfaces_to_its_parent_as_child_failed,
);
