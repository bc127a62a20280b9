//! Autoscaling: the default pool grows with the workload and shrinks back, by the specified
//! formulas, evaluated every `scale_interval` of (virtual) time.

mod common;

use std::sync::Arc;

use tokio::sync::Semaphore;
use worlds_engine::prelude::*;
use worlds_engine::testing::TestWorld;
use worlds_engine::{WorkerInfo, WorkerStatus};

use common::{add_one, Counter};

/// An activity that counts its starts, then waits for a permit of `gate`.
fn gated(name: &str, started: &Counter, gate: &Arc<Semaphore>) -> Activity<u64, u64> {
    let (started, gate) = (started.clone(), gate.clone());
    activity(name, move |_ctx: ActivityContext, n: u64| {
        let (started, gate) = (started.clone(), gate.clone());
        async move {
            started.bump();
            gate.acquire().await?.forget();
            Ok::<_, StepError>(n)
        }
    })
}

/// A workflow that runs `step` once.
fn one_step(name: &str, step: &Activity<u64, u64>) -> Workflow<u64, u64> {
    let step = step.clone();
    workflow(name, move |ctx: WorkflowContext, n: u64| {
        let step = step.clone();
        async move { Ok::<_, WorkflowError>(ctx.run(&step, n).await?) }
    })
}

fn count(workers: &[WorkerInfo], status: WorkerStatus) -> usize {
    workers.iter().filter(|w| w.status == status).count()
}

fn ids(workers: &[WorkerInfo]) -> Vec<String> {
    let mut ids: Vec<String> = workers.iter().map(|w| w.id.clone()).collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn the_pool_grows_under_load_and_shrinks_back_by_the_specified_formulas() {
    let gate = Arc::new(Semaphore::new(0));
    let started = Counter::default();
    let block = gated("block", &started, &gate);
    let quick_calls = Counter::default();
    let quick = add_one("quick", &quick_calls);
    let (blocked, quick_flow) = (one_step("blocked", &block), one_step("quick", &quick));
    let mut config = WorldConfig::memory();
    config.min_workers = 2;
    config.max_workers = 10;
    let t = TestWorld::with_config(config).await;
    t.register(&block).unwrap().register(&quick).unwrap();
    t.register(&blocked).unwrap().register(&quick_flow).unwrap();

    // Both workers are held by blocked steps; two more runs wait in the queue.
    let b1 = t
        .execute(&blocked, 1, WorkflowOptions::default())
        .await
        .unwrap();
    let b2 = t
        .execute(&blocked, 2, WorkflowOptions::default())
        .await
        .unwrap();
    t.settle().await;
    assert_eq!(started.get(), 2);
    assert_eq!(count(&t.workers().list(), WorkerStatus::Busy), 2);
    let q1 = t
        .execute(&quick_flow, 10, WorkflowOptions::default())
        .await
        .unwrap();
    let q2 = t
        .execute(&quick_flow, 20, WorkflowOptions::default())
        .await
        .unwrap();
    t.settle().await;
    assert_eq!(q1.query().await.unwrap().status, RunStatus::Pending);

    // No evaluation before the first 10 s.
    t.advance("9s").await;
    assert_eq!(t.workers().list().len(), 2);

    // Workload 2/2 >= 0.7: up by min(ceil((10 - 2) / 2), 8) = 4. The new workers take the
    // waiting runs at once.
    t.advance("1s").await;
    let workers = t.workers().list();
    assert_eq!(workers.len(), 6, "{workers:?}");
    assert_eq!(count(&workers, WorkerStatus::Busy), 2);
    assert_eq!(count(&workers, WorkerStatus::Idle), 4);
    assert_eq!(q1.query().await.unwrap().status, RunStatus::Completed);
    assert_eq!(q2.query().await.unwrap().status, RunStatus::Completed);
    assert_eq!(quick_calls.get(), 2);

    // Workload 2/6 = 0.33: between the thresholds, no change.
    t.advance("10s").await;
    assert_eq!(t.workers().list().len(), 6);

    // Released, the pool idles and shrinks by floor((current - 2) / 2): 6 → 4 → 3, then stays
    // at 3, since floor(1 / 2) = 0.
    gate.add_permits(2);
    assert_eq!(b1.result().await.unwrap(), 1);
    assert_eq!(b2.result().await.unwrap(), 2);
    t.settle().await;
    let mut sizes = Vec::new();
    for _ in 0..4 {
        t.advance("10s").await;
        let workers = t.workers().list();
        assert!(
            workers.iter().all(|w| w.status == WorkerStatus::Idle),
            "stopped workers leave the list: {workers:?}"
        );
        sizes.push(workers.len());
    }
    assert_eq!(sizes, vec![4, 3, 3, 3]);
    // The newest workers were stopped first.
    assert_eq!(
        ids(&t.workers().list()),
        vec!["worker-1", "worker-2", "worker-3"]
    );
    assert_eq!(t.get_metrics().workers.total, 3);
}

#[tokio::test]
async fn a_busy_worker_chosen_for_stopping_finishes_its_task_first() {
    let gate = Arc::new(Semaphore::new(0));
    let started = Counter::default();
    let block = gated("block", &started, &gate);
    let blocked = one_step("blocked", &block);
    // Scale up while every worker is busy; once at max, a full pool counts as "low" (1.0 <=
    // 1.0) and shrinks by floor((3 - 1) / 2) = 1 — with no idle worker to stop, a busy one.
    let mut config = WorldConfig::memory();
    config.min_workers = 1;
    config.max_workers = 3;
    config.scale_threshold = 1.0;
    config.scale_down_threshold = 1.0;
    let t = TestWorld::with_config(config).await;
    t.register(&block).unwrap().register(&blocked).unwrap();
    let mut runs = Vec::new();
    for n in 0..3 {
        runs.push(
            t.execute(&blocked, n, WorkflowOptions::default())
                .await
                .unwrap(),
        );
    }
    t.settle().await;
    assert_eq!(started.get(), 1);

    t.advance("10s").await; // 1/1 busy: up by ceil(2 / 2) = 1
    assert_eq!(t.workers().list().len(), 2);
    assert_eq!(started.get(), 2);
    t.advance("10s").await; // 2/2 busy: up by ceil(1 / 2) = 1
    assert_eq!(t.workers().list().len(), 3);
    assert_eq!(started.get(), 3);

    t.advance("10s").await; // 3/3 busy at max: down by 1, the newest
    let workers = t.workers().list();
    assert_eq!(workers.len(), 3, "{workers:?}");
    let stopping: Vec<&WorkerInfo> = workers
        .iter()
        .filter(|w| w.status == WorkerStatus::Stopping)
        .collect();
    assert_eq!(stopping.len(), 1, "{workers:?}");
    assert_eq!(stopping[0].id, "worker-3");
    let task = stopping[0].current_task.clone().expect("it keeps its task");
    assert!(task.contains("'block'"), "{task}");
    assert_eq!(
        t.get_metrics().workers.busy,
        3,
        "a stopping worker still works"
    );

    // Let the steps finish: the stopping worker completes its task, then leaves.
    gate.add_permits(3);
    for (n, run) in runs.iter().enumerate() {
        assert_eq!(run.result().await.unwrap(), n as u64);
    }
    t.settle().await;
    let workers = t.workers().list();
    assert_eq!(ids(&workers), vec!["worker-1", "worker-2"], "{workers:?}");
    assert!(workers.iter().all(|w| w.status == WorkerStatus::Idle));
    assert_eq!(started.get(), 3, "no step ran twice");

    // Two idle workers, min 1: floor((2 - 1) / 2) = 0, the pool stays at 2.
    t.advance("10s").await;
    assert_eq!(t.workers().list().len(), 2);
}

#[tokio::test]
async fn dedicated_queue_workers_are_neither_counted_nor_scaled() {
    let gate = Arc::new(Semaphore::new(0));
    let started = Counter::default();
    let block = gated("block", &started, &gate);
    let blocked = one_step("blocked", &block);
    let mut config = WorldConfig::memory();
    config.task_queues = vec!["io".into()];
    let t = TestWorld::with_config(config).await;
    t.register(&block).unwrap().register(&blocked).unwrap();
    for n in 0..2 {
        t.execute(&blocked, n, WorkflowOptions::default())
            .await
            .unwrap();
    }
    t.settle().await;
    assert_eq!(t.workers().list().len(), 3);

    // Counting the idle "io" worker, the workload would be 2/3 < 0.7; the default pool alone
    // is 2/2 busy, which scales up by 4.
    t.advance("10s").await;
    let workers = t.workers().list();
    assert_eq!(workers.len(), 7, "{workers:?}");
    assert_eq!(workers.iter().filter(|w| w.task_queue.is_some()).count(), 1);

    // Idle again, the default pool shrinks toward its minimum; the "io" worker stays.
    gate.add_permits(2);
    t.settle().await;
    for _ in 0..3 {
        t.advance("10s").await;
    }
    let workers = t.workers().list();
    assert_eq!(
        workers.len(),
        4,
        "3 default workers and the io worker: {workers:?}"
    );
    assert!(workers
        .iter()
        .any(|w| w.task_queue.as_deref() == Some("io")));
}

#[tokio::test]
async fn light_load_keeps_the_minimum_and_long_waits_skip_over_the_ticks() {
    let calls = Counter::default();
    let step = add_one("add-one", &calls);
    let s = step.clone();
    let flow = workflow("monthly", move |ctx: WorkflowContext, n: u64| {
        let s = s.clone();
        async move {
            let mut v = n;
            for _ in 0..3 {
                ctx.sleep("240h").await?;
                v = ctx.run(&s, v).await?;
            }
            Ok::<_, WorkflowError>(v)
        }
    });
    let t = TestWorld::new().await;
    t.register(&step).unwrap().register(&flow).unwrap();
    let run = t
        .execute(&flow, 0, WorkflowOptions::default())
        .await
        .unwrap();
    // Thirty days of virtual time; the autoscaler, the workers' heartbeats and the monitor
    // tick on the way without the harness stopping at each tick.
    let state = t.run_until_complete(&run.id, "1000h").await.unwrap();
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(run.result().await.unwrap(), 3);
    t.advance("1h").await;
    let workers = t.workers().list();
    assert_eq!(ids(&workers), vec!["worker-1", "worker-2"], "{workers:?}");
    assert!(t.workers().dead().is_empty());
}
