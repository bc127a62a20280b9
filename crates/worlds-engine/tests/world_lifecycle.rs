//! The world's life: default and invalid configuration, unsupported storage modes, runs
//! executed before `start`, graceful `shutdown`, ids that carry virtual creation time, and the
//! run timestamps (`started_at` once, `completed_at` at the end).

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use common::{add_one, event_types, test_world, Counter, Mode};
use parking_lot::Mutex;
use tokio::sync::Semaphore;
use worlds_engine::clock::VirtualClock;
use worlds_engine::duration::Dur;
use worlds_engine::ids::timestamp_ms;
use worlds_engine::prelude::*;
use worlds_engine::testing::DEFAULT_START;
use worlds_engine::{ErrorKind, RunStatus, WorkerStatus};

#[test]
fn default_config_has_the_documented_defaults() {
    let c = WorldConfig::default();
    assert_eq!(c.min_workers, 2);
    assert_eq!(c.max_workers, 10);
    assert_eq!(c.scale_threshold, 0.7);
    assert_eq!(c.scale_down_threshold, 0.3);
    assert_eq!(c.persistence, Persistence::Hybrid);
    assert_eq!(c.persistence_path, PathBuf::from(".worlds-engine"));
    assert_eq!(c.failure_strategy, FailureStrategy::Retry);
    assert_eq!(c.heartbeat_interval, Dur(Duration::from_millis(5000)));
    assert_eq!(c.heartbeat_timeout, Dur(Duration::from_millis(30000)));
    assert_eq!(c.max_payload_bytes, 4 * 1024 * 1024);
    assert!(!c.evict_after_every_task);
    assert!(c.task_queues.is_empty());
    assert!(c.validate().is_ok(), "the defaults are valid");
    // The memory preset differs only in where state is kept.
    let m = WorldConfig::memory();
    assert_eq!(m.persistence, Persistence::Memory);
    let mut hybrid = m;
    hybrid.persistence = Persistence::Hybrid;
    assert_eq!(hybrid, c);
}

#[test]
fn hybrid_persistence_opens_a_locked_hybrid_store_at_the_persistence_path() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = WorldConfig::default();
    assert_eq!(config.persistence, Persistence::Hybrid);
    config.persistence_path = dir.path().join("store");
    let world = World::new(config.clone()).unwrap();
    assert!(dir.path().join("store/state/format.json").exists());
    assert!(dir.path().join("store/state/wal.ndjson").exists());
    assert!(dir.path().join("store/workflows").is_dir());
    // A second world on the same directory is refused while the first holds it.
    let err = World::new(config.clone()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err:?}");
    let message = err.to_string();
    assert!(message.contains("hybrid"), "names the mode: {message}");
    assert!(
        message.contains("Persistence::File") && message.contains("PostgreSQL"),
        "says what to use instead: {message}"
    );
    // Once the first world is gone, the directory opens again.
    drop(world);
    World::new(config).unwrap();
    // The memory preset is accepted.
    World::new(WorldConfig::memory()).unwrap();
}

#[test]
fn file_persistence_opens_a_file_store_at_the_persistence_path() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = WorldConfig::default();
    config.persistence = Persistence::File;
    config.persistence_path = dir.path().join("store");
    World::new(config).unwrap();
    assert!(dir.path().join("store/state/format.json").exists());
    assert!(dir.path().join("store/workflows").is_dir());
}

#[test]
fn invalid_config_is_invalid_input_naming_the_field() {
    type Tweak = fn(&mut WorldConfig);
    let cases: [(&str, Tweak); 8] = [
        ("min_workers", |c| c.min_workers = 0),
        ("max_workers", |c| {
            c.min_workers = 4;
            c.max_workers = 3;
        }),
        ("scale_threshold", |c| c.scale_threshold = 1.5),
        ("scale_threshold", |c| c.scale_threshold = -0.1),
        ("scale_threshold", |c| c.scale_threshold = f64::NAN),
        ("scale_down_threshold", |c| c.scale_down_threshold = -0.5),
        ("scale_down_threshold", |c| {
            c.scale_threshold = 0.4;
            c.scale_down_threshold = 0.6;
        }),
        ("max_payload_bytes", |c| c.max_payload_bytes = 0),
    ];
    for (field, tweak) in cases {
        let mut config = WorldConfig::memory();
        tweak(&mut config);
        let err = World::new(config.clone()).unwrap_err();
        match &err {
            WorldError::InvalidInput { field: f, .. } => assert_eq!(f, field, "{config:?}"),
            other => panic!("{field}: expected InvalidInput, got {other:?}"),
        }
        assert_eq!(err.http_status(), 400);
        assert!(err.to_string().contains(field), "{err}");
    }
    // Boundaries that are valid: one worker, min == max, thresholds at 0 and 1.
    let mut edge = WorldConfig::memory();
    edge.min_workers = 1;
    edge.max_workers = 1;
    edge.scale_threshold = 1.0;
    edge.scale_down_threshold = 0.0;
    World::new(edge).unwrap();
}

fn virtual_world(config: WorldConfig) -> (World, VirtualClock) {
    let clock = VirtualClock::new(DEFAULT_START);
    let world = World::with_clock(config, Arc::new(clock.clone())).unwrap();
    (world, clock)
}

async fn turns(n: usize) {
    for _ in 0..n {
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn execute_before_start_queues_the_run_until_start() {
    let calls = Counter::default();
    let step = add_one("add-one", &calls);
    let s = step.clone();
    let flow = workflow("early", move |ctx: WorkflowContext, n: u64| {
        let s = s.clone();
        async move { Ok::<_, WorkflowError>(ctx.run(&s, n).await?) }
    });
    let (world, _clock) = virtual_world(WorldConfig::memory());
    world.register(&step).unwrap().register(&flow).unwrap();
    assert!(world.workers().list().is_empty(), "no workers before start");

    let run = world
        .execute(&flow, 1, WorkflowOptions::default())
        .await
        .unwrap();
    turns(100).await;
    let state = world.query(&run.id).await.unwrap();
    assert_eq!(state.status, RunStatus::Pending);
    assert_eq!(state.started_at, None);
    assert_eq!(event_types(&state), vec!["workflow_queued"]);
    assert_eq!(calls.get(), 0);

    world.start().await.unwrap();
    assert_eq!(world.workers().list().len(), 2);
    assert_eq!(run.result().await.unwrap(), 2);
    assert_eq!(calls.get(), 1, "started once, not once per start path");
    let state = world.query(&run.id).await.unwrap();
    assert_eq!(
        event_types(&state)
            .iter()
            .filter(|t| **t == "workflow_started")
            .count(),
        1
    );
    world.shutdown().await.unwrap();
}

#[tokio::test]
async fn starting_twice_does_not_add_workers() {
    let (world, _clock) = virtual_world(WorldConfig::memory());
    world.start().await.unwrap();
    world.start().await.unwrap();
    assert_eq!(world.workers().list().len(), 2);
    world.shutdown().await.unwrap();
}

#[tokio::test]
async fn shutdown_lets_the_running_step_finish_then_refuses_new_runs() {
    // `entered` tells the test the step is running; `gate` lets it finish.
    let entered = Arc::new(Semaphore::new(0));
    let gate = Arc::new(Semaphore::new(0));
    let saw_cancel: Arc<Mutex<Option<bool>>> = Arc::default();
    let calls = Counter::default();
    let (en, ga, sc, c) = (
        entered.clone(),
        gate.clone(),
        saw_cancel.clone(),
        calls.clone(),
    );
    let slow = activity("slow", move |ctx: ActivityContext, n: u64| {
        let (en, ga, sc, c) = (en.clone(), ga.clone(), sc.clone(), c.clone());
        async move {
            c.bump();
            en.add_permits(1);
            ga.acquire().await?.forget();
            *sc.lock() = Some(ctx.is_cancelled());
            Ok::<_, StepError>(n * 2)
        }
    });
    let s = slow.clone();
    let flow = workflow("slow-flow", move |ctx: WorkflowContext, n: u64| {
        let s = s.clone();
        async move { Ok::<_, WorkflowError>(ctx.run(&s, n).await?) }
    });
    let (world, _clock) = virtual_world(WorldConfig::memory());
    world.register(&slow).unwrap().register(&flow).unwrap();
    world.start().await.unwrap();
    let run = world
        .execute(&flow, 21, WorkflowOptions::default())
        .await
        .unwrap();
    let mut running = false;
    for _ in 0..1_000 {
        if let Ok(permit) = entered.try_acquire() {
            permit.forget();
            running = true;
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(running, "the step never started");

    let (shutdown, refused) = tokio::join!(world.shutdown(), async {
        // Shutdown has begun (it is waiting for the busy worker): new runs are refused now,
        // before the step is let go.
        turns(20).await;
        let refused = world
            .execute(&flow, 1, WorkflowOptions::default())
            .await
            .unwrap_err();
        gate.add_permits(1);
        refused
    });
    shutdown.unwrap();
    assert!(matches!(refused, WorldError::Unavailable(_)), "{refused:?}");
    assert_eq!(refused.http_status(), 503);

    // The step in hand finished normally and its result was recorded.
    assert_eq!(
        *saw_cancel.lock(),
        Some(false),
        "shutdown did not cancel the step"
    );
    let state = world.query(&run.id).await.unwrap();
    assert_eq!(state.activities.len(), 1);
    assert_eq!(
        state.activities[0].status,
        worlds_engine::ActivityStatus::Completed
    );
    assert_eq!(
        state.activities[0]
            .output
            .as_ref()
            .unwrap()
            .decode::<u64>()
            .unwrap(),
        42
    );
    // Stopped workers are either listed as stopped or no longer listed; none is still working.
    assert!(world
        .workers()
        .list()
        .iter()
        .all(|w| w.status == WorkerStatus::Stopped));

    // Still refused afterwards, and nothing was created by the refused calls.
    let err = world
        .execute(&flow, 2, WorkflowOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, WorldError::Unavailable(_)), "{err:?}");
    assert_eq!(err.http_status(), 503);
    let all = world
        .query_workflows(worlds_engine::WorkflowQueryFilter::new())
        .await
        .unwrap();
    assert_eq!(all.len(), 1);

    // Starting again picks the run up where it was; the finished step is not repeated.
    world.start().await.unwrap();
    assert_eq!(run.result().await.unwrap(), 42);
    assert_eq!(calls.get(), 1);
    world.shutdown().await.unwrap();
}

#[tokio::test]
async fn ids_carry_their_creation_time_from_the_virtual_clock() {
    let calls = Counter::default();
    let step = add_one("add-one", &calls);
    let s = step.clone();
    let flow = workflow("stamped", move |ctx: WorkflowContext, n: u64| {
        let s = s.clone();
        async move { Ok::<_, WorkflowError>(ctx.run(&s, n).await?) }
    });
    let t = test_world(Mode::Cached).await;
    t.register(&step).unwrap().register(&flow).unwrap();
    assert_eq!(t.now(), DEFAULT_START);

    let mut previous = String::new();
    for gap in ["90s", "36h", "1ms"] {
        t.advance(gap).await;
        let at = t.now();
        let run = t
            .execute(&flow, 1, WorkflowOptions::default())
            .await
            .unwrap();
        assert_eq!(timestamp_ms(&run.id), Some(at), "{}", run.id);
        let state = t.run_until_complete(&run.id, "1m").await.unwrap();
        assert_eq!(state.created_at, at);
        assert_eq!(timestamp_ms(&state.history[0].id), Some(at));
        assert_eq!(
            timestamp_ms(&state.activities[0].id),
            Some(state.activities[0].scheduled_at)
        );
        assert!(run.id > previous, "later runs sort after earlier ones");
        previous = run.id;
    }
    assert_eq!(t.now(), DEFAULT_START + 90_000 + 36 * 3_600_000 + 1);
}

async fn started_at_is_set_once_and_completed_at_at_the_end(mode: Mode) {
    let calls = Counter::default();
    let step = add_one("add-one", &calls);
    let s = step.clone();
    let flow = workflow("timed", move |ctx: WorkflowContext, n: u64| {
        let s = s.clone();
        async move {
            let x = ctx.run(&s, n).await?;
            ctx.sleep("1h").await?;
            Ok::<_, WorkflowError>(ctx.run(&s, x).await?)
        }
    });
    let boom = workflow("boom", |ctx: WorkflowContext, _: ()| async move {
        ctx.sleep("10m").await?;
        Err::<(), _>(WorkflowError::msg("boom"))
    });
    let t = test_world(mode).await;
    t.register(&step)
        .unwrap()
        .register(&flow)
        .unwrap()
        .register(&boom)
        .unwrap();
    let t0 = t.now();
    let run = t
        .execute(&flow, 1, WorkflowOptions::default())
        .await
        .unwrap();
    t.advance("5m").await;
    let state = t.query(&run.id).await.unwrap();
    assert_eq!(state.status, RunStatus::Running);
    assert_eq!(state.started_at, Some(t0));
    assert_eq!(state.completed_at, None);

    // Every wake-up (a replay, in evicting mode) leaves started_at alone.
    let done = t.run_until_complete(&run.id, "2h").await.unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(done.started_at, Some(t0));
    assert_eq!(done.completed_at, Some(t0 + 3_600_000));
    assert_eq!(done.updated_at, t0 + 3_600_000);
    assert_eq!(
        event_types(&done)
            .iter()
            .filter(|t| **t == "workflow_started")
            .count(),
        1
    );

    // Failed and cancelled runs get completed_at too.
    let failed = t
        .execute(&boom, (), WorkflowOptions::default())
        .await
        .unwrap();
    let f0 = t.now();
    let failed_state = t.run_until_complete(&failed.id, "1h").await.unwrap();
    assert_eq!(failed_state.status, RunStatus::Failed);
    assert_eq!(failed_state.started_at, Some(f0));
    assert_eq!(failed_state.completed_at, Some(f0 + 600_000));

    let cancelled = t
        .execute(&boom, (), WorkflowOptions::default())
        .await
        .unwrap();
    t.advance("1m").await;
    let c_at = t.now();
    cancelled.cancel().await.unwrap();
    let cancelled_state = t.query(&cancelled.id).await.unwrap();
    assert_eq!(cancelled_state.status, RunStatus::Cancelled);
    assert_eq!(cancelled_state.completed_at, Some(c_at));
    assert!(cancelled_state.started_at.unwrap() < c_at);
}

in_both_modes!(started_at_is_set_once_and_completed_at_at_the_end);
