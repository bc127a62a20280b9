//! Metrics: uptime, worker and run counts, throughput over a 60 s rolling window, workload.

mod common;

use std::sync::Arc;

use tokio::sync::Semaphore;
use worlds_engine::clock::{Clock, VirtualClock};
use worlds_engine::prelude::*;
use worlds_engine::telemetry::{Throughput, WorkerMetrics, WorkflowMetrics};
use worlds_engine::testing::{TestWorld, DEFAULT_START};

use common::{add_one, Counter};

#[tokio::test]
async fn counts_runs_by_status_workers_throughput_and_workload() {
    let calls = Counter::default();
    let step = add_one("add-one", &calls);
    let s = step.clone();
    let ok = workflow("ok", move |ctx: WorkflowContext, n: u64| {
        let s = s.clone();
        async move { Ok::<_, WorkflowError>(ctx.run(&s, n).await?) }
    });
    let bad = workflow("bad", |_ctx: WorkflowContext, _: ()| async move {
        Err::<(), _>(WorkflowError::msg("no"))
    });
    let nap = workflow("nap", |ctx: WorkflowContext, _: ()| async move {
        ctx.sleep("1h").await?;
        Ok::<_, WorkflowError>(())
    });
    let gate = Arc::new(Semaphore::new(0));
    let g = gate.clone();
    let hold = activity("hold", move |_ctx: ActivityContext, _: ()| {
        let g = g.clone();
        async move {
            g.acquire().await?.forget();
            Ok::<_, StepError>(())
        }
    });
    let h = hold.clone();
    let held = workflow("held", move |ctx: WorkflowContext, _: ()| {
        let h = h.clone();
        async move { Ok::<_, WorkflowError>(ctx.run(&h, ()).await?) }
    });
    let mut config = WorldConfig::memory();
    config.min_workers = 2;
    config.max_workers = 2;
    let t = TestWorld::with_config(config).await;
    t.register(&step).unwrap().register(&ok).unwrap();
    t.register(&bad).unwrap().register(&nap).unwrap();
    t.register(&hold).unwrap().register(&held).unwrap();
    let start = t.now();

    let idle = t.get_metrics();
    assert_eq!(idle.uptime, 0);
    assert_eq!(
        idle.workers,
        WorkerMetrics {
            total: 2,
            idle: 2,
            busy: 0
        }
    );
    assert_eq!(idle.workflows, WorkflowMetrics::default());
    assert_eq!(idle.workload, 0.0);

    // 5 completed, 2 failed, 1 cancelled, 1 sleeping, 2 holding both workers, 1 waiting.
    t.advance("10s").await;
    for n in 0..5 {
        let run = t.execute(&ok, n, WorkflowOptions::default()).await.unwrap();
        t.run_until_complete(&run.id, "1m").await.unwrap();
    }
    for _ in 0..2 {
        let options = WorkflowOptions::new().failure_strategy(FailureStrategy::Ignore);
        let run = t.execute(&bad, (), options).await.unwrap();
        let state = t.run_until_complete(&run.id, "1m").await.unwrap();
        assert_eq!(state.status, RunStatus::Failed);
    }
    let cancelled = t
        .execute(&nap, (), WorkflowOptions::default())
        .await
        .unwrap();
    let sleeping = t
        .execute(&nap, (), WorkflowOptions::default())
        .await
        .unwrap();
    t.settle().await;
    cancelled.cancel().await.unwrap();
    let h1 = t
        .execute(&held, (), WorkflowOptions::default())
        .await
        .unwrap();
    let h2 = t
        .execute(&held, (), WorkflowOptions::default())
        .await
        .unwrap();
    t.settle().await;
    let waiting = t
        .execute(&ok, 100, WorkflowOptions::default())
        .await
        .unwrap();
    t.settle().await;
    assert_eq!(waiting.query().await.unwrap().status, RunStatus::Pending);

    let m = t.get_metrics();
    assert_eq!(m.uptime, 10_000);
    assert_eq!(
        m.workflows,
        WorkflowMetrics {
            queued: 1,
            running: 3,
            completed: 5,
            failed: 2,
            cancelled: 1,
            compensated: 0,
        }
    );
    assert_eq!(
        m.workers,
        WorkerMetrics {
            total: 2,
            idle: 0,
            busy: 2
        }
    );
    assert_eq!(m.workload, 1.0);
    assert_eq!(
        m.throughput,
        Throughput {
            per_minute: 5,
            per_hour: 300,
        }
    );

    // The window is 60 s: at 59.999 s the completions are still in it, at 60 s they are out.
    // Counts since start are kept.
    t.advance(59_999u64).await;
    assert_eq!(t.get_metrics().throughput.per_minute, 5);
    t.advance(1u64).await;
    let m = t.get_metrics();
    assert_eq!(m.uptime, 70_000);
    assert_eq!(m.throughput, Throughput::default());
    assert_eq!(m.workflows.completed, 5);
    assert_eq!(m.workload, 1.0, "still held");

    // Released: the held runs and the waiting one complete; the sleeper still runs.
    gate.add_permits(2);
    for run in [&h1.id, &h2.id, &waiting.id] {
        t.run_until_complete(run, "1m").await.unwrap();
    }
    t.settle().await;
    let m = t.get_metrics();
    assert_eq!(
        m.workflows,
        WorkflowMetrics {
            queued: 0,
            running: 1,
            completed: 8,
            failed: 2,
            cancelled: 1,
            compensated: 0,
        }
    );
    assert_eq!(m.throughput.per_minute, 3);
    assert_eq!(m.throughput.per_hour, 180);
    assert_eq!(
        m.workers,
        WorkerMetrics {
            total: 2,
            idle: 2,
            busy: 0
        }
    );
    assert_eq!(m.workload, 0.0);
    assert_eq!(m.uptime as i64, t.now() - start);

    t.run_until_complete(&sleeping.id, "2h").await.unwrap();
    let m = t.get_metrics();
    assert_eq!((m.workflows.running, m.workflows.completed), (0, 9));
}

#[tokio::test]
async fn a_world_not_started_reports_its_queue_and_no_uptime() {
    let calls = Counter::default();
    let step = add_one("add-one", &calls);
    let s = step.clone();
    let ok = workflow("ok", move |ctx: WorkflowContext, n: u64| {
        let s = s.clone();
        async move { Ok::<_, WorkflowError>(ctx.run(&s, n).await?) }
    });
    let clock = VirtualClock::new(DEFAULT_START);
    let world = World::with_clock(WorldConfig::memory(), Arc::new(clock.clone())).unwrap();
    world.register(&step).unwrap().register(&ok).unwrap();
    let run = world
        .execute(&ok, 1, WorkflowOptions::default())
        .await
        .unwrap();
    clock.advance(std::time::Duration::from_secs(5));
    let m = world.get_metrics();
    assert_eq!(m.uptime, 0);
    assert_eq!(m.workflows.queued, 1);
    assert_eq!(m.workers.total, 0);
    assert_eq!(m.workload, 0.0, "no workers: 0, not NaN");

    world.start().await.unwrap();
    clock.advance(std::time::Duration::from_secs(2));
    assert_eq!(run.result().await.unwrap(), 2);
    let m = world.get_metrics();
    assert_eq!(m.uptime, 2_000);
    assert_eq!(m.workflows.queued, 0);
    assert_eq!(m.workflows.completed, 1);
    world.shutdown().await.unwrap();
    assert_eq!(world.get_metrics().uptime, 0);
    assert_eq!(world.get_metrics().workflows.completed, 1);
    assert_eq!(clock.now_ms(), DEFAULT_START + 7_000);
}

/// `status_changes` moves when a run is accepted and when it ends, and the metrics carry how
/// long the run took on the world's clock.
#[tokio::test]
async fn status_changes_move_and_latency_is_measured() {
    let nap = workflow("nap", |ctx: WorkflowContext, _: ()| async move {
        ctx.sleep("3s").await?;
        Ok::<_, WorkflowError>(())
    });
    let t = TestWorld::new().await;
    t.register(&nap).unwrap();
    let mut changes = t.status_changes();
    let run = t
        .execute(&nap, (), WorkflowOptions::default())
        .await
        .unwrap();
    assert!(changes.has_changed().unwrap(), "accepting a run moves it");
    changes.mark_unchanged();
    t.run_until_complete(&run.id, "1m").await.unwrap();
    assert!(changes.has_changed().unwrap(), "ending it moves it");
    let latency = t.get_metrics().latency;
    assert_eq!(latency.count, 1);
    assert!(
        (3_000..4_000).contains(&latency.total_ms),
        "the 3 s sleep, on virtual time: {latency:?}"
    );
    let median = latency.quantile_ms(0.5).unwrap();
    assert!(
        (2_500..=5_000).contains(&median),
        "{median}: within the run's bucket"
    );
}
