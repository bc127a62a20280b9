//! A busy worker leaves room for the runtime's other tasks: on a memory store a task may never
//! wait for anything, yet a worker with a long queue of ready work still lets the tasks that
//! share its thread (the timer loop, other workers, the application's own) run every few tasks.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use worlds_engine::prelude::*;

/// One runtime thread (the test's default runtime), one worker, 20 runs of 10 steps queued at
/// once: a task that only counts how many steps ran between two of its turns sees a few at a
/// time, not the whole backlog in one go.
#[tokio::test]
async fn a_worker_with_ready_work_lets_other_tasks_run() {
    let done = Arc::new(AtomicUsize::new(0));
    let step = {
        let done = done.clone();
        activity("count", move |_ctx: ActivityContext, n: u64| {
            let done = done.clone();
            async move {
                done.fetch_add(1, Ordering::SeqCst);
                Ok::<_, StepError>(n + 1)
            }
        })
    };
    let flow = {
        let step = step.clone();
        workflow("ten_steps", move |ctx: WorkflowContext, _: ()| {
            let step = step.clone();
            async move {
                let mut n = 0;
                for _ in 0..10 {
                    n = ctx.run(&step, n).await?;
                }
                Ok::<_, WorkflowError>(n)
            }
        })
    };
    let mut config = WorldConfig::memory();
    config.min_workers = 1;
    config.max_workers = 1;
    let world = World::new(config).unwrap();
    world.register(&step).unwrap();
    world.register(&flow).unwrap();
    world.start().await.unwrap();

    let mut handles = Vec::new();
    for _ in 0..20 {
        handles.push(
            world
                .execute(&flow, (), WorkflowOptions::default())
                .await
                .unwrap(),
        );
    }
    // The most steps that ran between two turns of this task (the first counted from now).
    let before = done.load(Ordering::SeqCst);
    let watcher = tokio::spawn({
        let done = done.clone();
        async move {
            let mut widest = 0;
            let mut last = before;
            while last < 200 {
                tokio::task::yield_now().await;
                let now = done.load(Ordering::SeqCst);
                widest = widest.max(now - last);
                last = now;
            }
            widest
        }
    });
    for handle in handles {
        assert_eq!(handle.result().await.unwrap(), 10);
    }
    let widest = watcher.await.unwrap();
    assert!(
        widest <= 8,
        "{widest} steps ran while the other task waited for its turn"
    );
    world.shutdown().await.unwrap();
}
