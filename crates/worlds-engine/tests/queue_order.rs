//! Task queue, end to end: with one worker, queued runs are served by priority (highest first),
//! then first in, first out; and tasks routed to a named task queue run on the worker
//! dedicated to it, even while every general worker is busy.

mod common;

use std::sync::Arc;

use common::{test_world_with, Mode};
use parking_lot::Mutex;
use tokio::sync::Semaphore;
use worlds_engine::prelude::*;
use worlds_engine::testing::TestWorld;
use worlds_engine::{ActivityStatus, WorkerInfo, WorkerStatus};

/// An activity that blocks until the test adds a permit to `gate`: it keeps a worker busy
/// for as long as the test needs, without any wall-clock wait.
fn hold(gate: &Arc<Semaphore>) -> Activity<(), ()> {
    let gate = gate.clone();
    activity("hold", move |_ctx: ActivityContext, _: ()| {
        let gate = gate.clone();
        async move {
            gate.acquire().await?.forget();
            Ok::<_, StepError>(())
        }
    })
}

/// An activity that appends its input to `order`.
fn noting(name: &str, order: &Arc<Mutex<Vec<String>>>) -> Activity<String, ()> {
    let seen = order.clone();
    activity(name, move |_ctx: ActivityContext, label: String| {
        let seen = seen.clone();
        async move {
            seen.lock().push(label);
            Ok::<_, StepError>(())
        }
    })
}

/// A workflow that runs `hold`: it occupies a worker until the test opens the gate.
fn blocker(hold: &Activity<(), ()>) -> Workflow<(), ()> {
    let h = hold.clone();
    workflow("blocker", move |ctx: WorkflowContext, _: ()| {
        let h = h.clone();
        async move { Ok::<_, WorkflowError>(ctx.run(&h, ()).await?) }
    })
}

/// Yields to the runtime until `done` holds, for at most a bounded number of turns, so a
/// broken engine fails the test instead of hanging it (`settle` would wait forever on a task
/// that no free worker may take).
async fn yield_until<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..2_000 {
        if done().await {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("gave up waiting for {what}");
}

fn one_worker() -> WorldConfig {
    let mut config = common::memory_config();
    config.min_workers = 1;
    config.max_workers = 1;
    config
}

async fn single_worker_serves_queued_runs_by_priority_then_fifo(mode: Mode) {
    let gate = Arc::new(Semaphore::new(0));
    let hold = hold(&gate);
    let order: Arc<Mutex<Vec<String>>> = Arc::default();
    let first = noting("first", &order);
    let blocker = blocker(&hold);
    let f = first.clone();
    let job = workflow("job", move |ctx: WorkflowContext, label: String| {
        let f = f.clone();
        async move { Ok::<_, WorkflowError>(ctx.run(&f, label).await?) }
    });
    let t = test_world_with(mode, one_worker()).await;
    t.register(&hold)
        .unwrap()
        .register(&first)
        .unwrap()
        .register(&blocker)
        .unwrap()
        .register(&job)
        .unwrap();
    assert_eq!(t.workers().list().len(), 1);

    // Occupy the only worker, so every job below waits in the queue together.
    let blocked = t
        .execute(&blocker, (), WorkflowOptions::default())
        .await
        .unwrap();
    t.settle().await;
    let workers = t.workers().list();
    assert_eq!(workers[0].status, WorkerStatus::Busy, "{workers:?}");
    assert!(
        workers[0]
            .current_task
            .as_deref()
            .is_some_and(|task| task.contains("'hold'")),
        "{workers:?}"
    );

    let jobs = [
        ("low-1", 0),
        ("high-1", 5),
        ("mid", 1),
        ("high-2", 5),
        ("low-2", 0),
        ("negative", -3),
    ];
    let mut handles = Vec::new();
    for (label, priority) in jobs {
        handles.push(
            t.execute(
                &job,
                label.to_owned(),
                WorkflowOptions::new().priority(priority),
            )
            .await
            .unwrap(),
        );
    }
    // Not `settle`: it waits for the queue to drain, which cannot happen while the only
    // worker is held. Give every other task plenty of turns instead.
    for _ in 0..200 {
        tokio::task::yield_now().await;
    }
    assert!(
        order.lock().is_empty(),
        "nothing ran while the worker was busy"
    );

    gate.add_permits(1);
    for handle in &handles {
        t.run_until_complete(&handle.id, "1m").await.unwrap();
        handle.result().await.unwrap();
    }
    t.run_until_complete(&blocked.id, "1m").await.unwrap();
    assert_eq!(
        *order.lock(),
        vec!["high-1", "high-2", "mid", "low-1", "low-2", "negative"],
        "highest priority first; equal priorities in the order they were queued"
    );
}

fn gpu_worker(workers: &[WorkerInfo]) -> WorkerInfo {
    let gpu: Vec<&WorkerInfo> = workers
        .iter()
        .filter(|w| w.task_queue.as_deref() == Some("gpu"))
        .collect();
    assert_eq!(
        gpu.len(),
        1,
        "one dedicated worker per task queue: {workers:?}"
    );
    gpu[0].clone()
}

fn general_worker(workers: &[WorkerInfo]) -> WorkerInfo {
    let general: Vec<&WorkerInfo> = workers.iter().filter(|w| w.task_queue.is_none()).collect();
    assert_eq!(general.len(), 1, "{workers:?}");
    general[0].clone()
}

async fn activity_routed_to_a_task_queue_runs_on_its_dedicated_worker(mode: Mode) {
    let gate = Arc::new(Semaphore::new(0));
    let hold = hold(&gate);
    // Routed by its definition's default options...
    let render = activity("render", |_ctx: ActivityContext, n: u64| async move {
        Ok::<_, StepError>(n * 10)
    })
    .with_options(ActivityOptions::new().task_queue("gpu"));
    // ...and one routed per call.
    let encode = activity("encode", |_ctx: ActivityContext, n: u64| async move {
        Ok::<_, StepError>(n + 1)
    });
    let (h, r, e) = (hold.clone(), render.clone(), encode.clone());
    let flow = workflow("pipeline", move |ctx: WorkflowContext, n: u64| {
        let (h, r, e) = (h.clone(), r.clone(), e.clone());
        async move {
            // All three are queued together: `hold` (default queue) first, so the general
            // worker takes it and is stuck; only the gpu worker can then take the other two.
            let (held, rendered, encoded) = futures::join!(
                ctx.run(&h, ()),
                ctx.run(&r, n),
                ctx.run_with(&e, n, ActivityOptions::new().task_queue("gpu")),
            );
            held?;
            Ok::<_, WorkflowError>((rendered?, encoded?))
        }
    });
    let mut config = one_worker();
    config.task_queues = vec!["gpu".into()];
    let t: TestWorld = test_world_with(mode, config).await;
    t.register(&hold)
        .unwrap()
        .register(&render)
        .unwrap()
        .register(&encode)
        .unwrap()
        .register(&flow)
        .unwrap();
    let workers = t.workers().list();
    assert_eq!(workers.len(), 2, "one general worker and one for 'gpu'");
    assert_eq!(gpu_worker(&workers).tasks_completed, 0);

    let run = t
        .execute(&flow, 4, WorkflowOptions::default())
        .await
        .unwrap();
    let (tw, run_id) = (&t, &run.id);
    yield_until(
        "the gpu steps to finish while the general worker is held",
        || async move {
            let state = tw.query(run_id).await.unwrap();
            state.activities.len() == 3
                && state.activities[1].status == ActivityStatus::Completed
                && state.activities[2].status == ActivityStatus::Completed
        },
    )
    .await;

    let workers = t.workers().list();
    let gpu = gpu_worker(&workers);
    let general = general_worker(&workers);
    assert_eq!(
        gpu.tasks_completed, 2,
        "render and encode ran on the gpu worker"
    );
    assert_eq!(general.status, WorkerStatus::Busy);
    assert!(
        general
            .current_task
            .as_deref()
            .is_some_and(|task| task.contains("'hold'")),
        "{general:?}"
    );
    let state = t.query(&run.id).await.unwrap();
    assert_eq!(state.activities[0].status, ActivityStatus::Running);

    gate.add_permits(1);
    t.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(run.result().await.unwrap(), (40, 5));
    // The dedicated worker took nothing but its own queue's tasks: the run's workflow tasks
    // (default queue) went to the start call (the first, run eagerly) and the general worker.
    let workers = t.workers().list();
    assert_eq!(gpu_worker(&workers).tasks_completed, 2);
    assert!(general_worker(&workers).tasks_completed >= 2);
}

/// With one worker, a run's next task (the step its workflow task scheduled, the workflow task
/// its step's completion calls for) runs before the runs waiting in the queue: runs finish one
/// after another instead of all together at the end. After 16 such follow-ups in a row (8
/// steps) the worker serves the queue once, so a long run cannot keep the others waiting.
async fn a_worker_carries_a_run_on_before_serving_the_queue(mode: Mode) {
    let gate = Arc::new(Semaphore::new(0));
    let hold = hold(&gate);
    let order: Arc<Mutex<Vec<String>>> = Arc::default();
    let note = noting("note", &order);
    let blocker = blocker(&hold);
    let n = note.clone();
    let job = workflow(
        "steps",
        move |ctx: WorkflowContext, (name, steps): (String, u32)| {
            let n = n.clone();
            async move {
                for i in 1..=steps {
                    ctx.run(&n, format!("{name}{i}")).await?;
                }
                Ok::<_, WorkflowError>(())
            }
        },
    );
    let t = test_world_with(mode, one_worker()).await;
    t.register(&hold)
        .unwrap()
        .register(&note)
        .unwrap()
        .register(&blocker)
        .unwrap()
        .register(&job)
        .unwrap();
    let blocked = t
        .execute(&blocker, (), WorkflowOptions::default())
        .await
        .unwrap();
    t.settle().await;
    let mut handles = Vec::new();
    for (name, steps) in [("a", 3), ("b", 3), ("long", 12), ("short", 1)] {
        handles.push(
            t.execute(&job, (name.to_owned(), steps), WorkflowOptions::default())
                .await
                .unwrap(),
        );
    }
    gate.add_permits(1);
    for handle in &handles {
        t.run_until_complete(&handle.id, "1m").await.unwrap();
    }
    t.run_until_complete(&blocked.id, "1m").await.unwrap();
    let expected: Vec<String> = ["a1", "a2", "a3", "b1", "b2", "b3"]
        .into_iter()
        .map(String::from)
        .chain((1..=8).map(|i| format!("long{i}")))
        .chain(["short1".to_owned()])
        .chain((9..=12).map(|i| format!("long{i}")))
        .collect();
    assert_eq!(*order.lock(), expected);
}

in_both_modes!(
    single_worker_serves_queued_runs_by_priority_then_fifo,
    activity_routed_to_a_task_queue_runs_on_its_dedicated_worker,
    a_worker_carries_a_run_on_before_serving_the_queue,
);
