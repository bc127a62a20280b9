//! Starting many runs in one call: every item gets its run, handles come back in item order,
//! a refused item leaves the others alone, and durable stores keep the whole batch.

mod common;

use std::sync::Arc;
use std::time::Instant;

use worlds_engine::clock::{SystemClock, VirtualClock};
use worlds_engine::prelude::*;
use worlds_engine::testing::{TestWorld, DEFAULT_START};
use worlds_engine::ErrorKind;

use common::memory_config;

fn double() -> Workflow<u64, u64> {
    workflow("double", |_ctx: WorkflowContext, n: u64| async move {
        Ok::<_, WorkflowError>(n * 2)
    })
}

fn named(i: u64) -> (u64, WorkflowOptions) {
    (i, WorkflowOptions::new().workflow_id(format!("b-{i}")))
}

#[tokio::test]
async fn a_batch_starts_every_run_and_returns_handles_in_order() {
    let world = TestWorld::with_config(memory_config()).await;
    let flow = double();
    world.register(&flow).unwrap();
    let started = world
        .execute_batch(&flow, (0..100).map(named))
        .await
        .unwrap();
    assert_eq!(started.len(), 100);
    for (i, handle) in started.iter().enumerate() {
        let handle = handle.as_ref().unwrap();
        assert_eq!(handle.workflow_id, format!("b-{i}"));
    }
    for (i, handle) in started.into_iter().enumerate() {
        let handle = handle.unwrap();
        world.run_until_complete(&handle.id, "1m").await.unwrap();
        assert_eq!(handle.result().await.unwrap(), 2 * i as u64);
    }
    let empty = world
        .execute_batch(&flow, Vec::<(u64, WorkflowOptions)>::new())
        .await
        .unwrap();
    assert!(empty.is_empty());
}

#[tokio::test]
async fn refused_items_fail_alone() {
    let mut config = memory_config();
    config.max_payload_bytes = 64;
    let world = TestWorld::with_config(config).await;
    let echo = workflow("echo", |_ctx: WorkflowContext, s: String| async move {
        Ok::<_, WorkflowError>(s)
    });
    world.register(&echo).unwrap();
    world
        .execute(
            &echo,
            "x".into(),
            WorkflowOptions::new().workflow_id("taken"),
        )
        .await
        .unwrap();
    let id = |id: &str| WorkflowOptions::new().workflow_id(id);
    let items = vec![
        ("ok-0".to_string(), id("a")),
        ("taken id".to_string(), id("taken")),
        ("ok-2".to_string(), id("b")),
        ("same id twice".to_string(), id("b")),
        ("y".repeat(100), id("c")),
        ("empty id".to_string(), id("")),
        ("ok-6".to_string(), WorkflowOptions::new()),
    ];
    let started = world.execute_batch(&echo, items).await.unwrap();
    let kinds: Vec<Option<ErrorKind>> = started
        .iter()
        .map(|r| r.as_ref().err().map(WorldError::kind))
        .collect();
    assert_eq!(
        kinds,
        [
            None,
            Some(ErrorKind::Conflict),
            None,
            Some(ErrorKind::Conflict),
            Some(ErrorKind::PayloadTooLarge),
            Some(ErrorKind::InvalidInput),
            None,
        ]
    );
    for i in [0, 2, 6] {
        let handle = started[i].as_ref().unwrap();
        world.run_until_complete(&handle.id, "1m").await.unwrap();
        assert!(handle.result().await.unwrap().starts_with("ok-"));
    }
    // The run holding "b" is the batch's first item with it.
    assert_eq!(
        world
            .handle::<String>("b")
            .await
            .unwrap()
            .result()
            .await
            .unwrap(),
        "ok-2"
    );
}

#[tokio::test]
async fn an_unregistered_workflow_or_a_stopped_world_fails_the_whole_batch() {
    let world = TestWorld::with_config(memory_config()).await;
    let flow = double();
    let err = world
        .execute_batch(&flow, (0..3).map(named))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    world.register(&flow).unwrap();
    world.shutdown().await.unwrap();
    let err = world
        .execute_batch(&flow, (0..3).map(named))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
}

#[tokio::test]
async fn keyed_and_use_existing_items_behave_as_in_execute() {
    let world = TestWorld::with_config(memory_config()).await;
    let flow = double();
    world.register(&flow).unwrap();
    let first = world
        .execute(&flow, 1, WorkflowOptions::new().workflow_id("held"))
        .await
        .unwrap();
    let items = vec![
        (2, WorkflowOptions::new().idempotency_key("k")),
        (3, WorkflowOptions::new()),
        (4, WorkflowOptions::new().idempotency_key("k")),
        (
            5,
            WorkflowOptions::new()
                .workflow_id("held")
                .on_conflict(OnConflict::UseExisting),
        ),
    ];
    let started: Vec<_> = world
        .execute_batch(&flow, items)
        .await
        .unwrap()
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(started[0].id, started[2].id, "one key, one run");
    assert_ne!(started[0].id, started[1].id);
    assert_eq!(started[3].id, first.id);
    world
        .run_until_complete(&started[0].id, "1m")
        .await
        .unwrap();
    assert_eq!(started[2].result().await.unwrap(), 4);
}

fn durable_world(dir: &std::path::Path, mode: Persistence) -> World {
    let mut config = memory_config();
    config.persistence = mode;
    config.persistence_path = dir.to_path_buf();
    World::with_clock(config, Arc::new(VirtualClock::new(DEFAULT_START))).unwrap()
}

async fn a_batch_is_durable(mode: Persistence) {
    let dir = tempfile::tempdir().unwrap();
    let flow = double();
    let ids: Vec<String> = {
        let world = durable_world(dir.path(), mode);
        world.register(&flow).unwrap();
        let mut items: Vec<_> = (0..50).map(named).collect();
        items.push(named(7));
        let started = world.execute_batch(&flow, items).await.unwrap();
        assert_eq!(
            started[50].as_ref().unwrap_err().kind(),
            ErrorKind::Conflict
        );
        let ids = started[..50]
            .iter()
            .map(|r| r.as_ref().unwrap().id.clone())
            .collect();
        world.shutdown().await.unwrap();
        ids
    };
    let world = durable_world(dir.path(), mode);
    world.register(&flow).unwrap();
    world.start().await.unwrap();
    for (i, id) in ids.iter().enumerate() {
        let handle = world.handle::<u64>(id).await.unwrap();
        assert_eq!(handle.workflow_id, format!("b-{i}"));
        assert_eq!(handle.result().await.unwrap(), 2 * i as u64);
    }
    world.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_batch_on_the_file_store_is_durable() {
    a_batch_is_durable(Persistence::File).await;
}

#[tokio::test]
async fn a_batch_on_the_hybrid_store_is_durable() {
    a_batch_is_durable(Persistence::Hybrid).await;
}

/// Measures a batch against one `execute` per run; by hand, in a release build:
/// `cargo test --release -p worlds-engine --test batch_start -- --ignored --nocapture`.
/// Runs are created and queued, not executed (the world is not started).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, run by hand"]
async fn measure_batch_against_one_by_one() {
    const RUNS: u64 = 10_000;
    for mode in [Persistence::Memory, Persistence::File, Persistence::Hybrid] {
        let mut took = Vec::new();
        for batch in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let mut config = WorldConfig::memory();
            config.persistence = mode;
            config.persistence_path = dir.path().to_path_buf();
            let world = World::with_clock(config, Arc::new(SystemClock)).unwrap();
            let flow = double();
            world.register(&flow).unwrap();
            let began = Instant::now();
            if batch {
                let started = world
                    .execute_batch(&flow, (0..RUNS).map(|i| (i, WorkflowOptions::new())))
                    .await
                    .unwrap();
                assert!(started.iter().all(Result::is_ok));
            } else {
                for i in 0..RUNS {
                    world
                        .execute(&flow, i, WorkflowOptions::new())
                        .await
                        .unwrap();
                }
            }
            took.push(began.elapsed());
        }
        let ratio = took[0].as_secs_f64() / took[1].as_secs_f64().max(f64::EPSILON);
        println!(
            "{mode:?}: {RUNS} runs one by one {:?}, in one batch {:?}: {ratio:.1}x",
            took[0], took[1]
        );
    }
}
