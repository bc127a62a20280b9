//! Idempotency keys and workflow id conflicts: a repeated start within the key's time to live
//! returns the first run, a later one starts a new run, a continuation that reuses its key
//! never waits on the run that starts it, and keys survive a restart on disk.

mod common;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use worlds_engine::clock::VirtualClock;
use worlds_engine::prelude::*;
use worlds_engine::testing::{TestWorld, DEFAULT_START};
use worlds_engine::ErrorKind;
use worlds_engine::WorkflowQueryFilter;

use common::memory_config;

/// A workflow that naps an hour, so its runs stay in flight while the tests repeat starts.
fn napper() -> Workflow<u64, u64> {
    workflow("napper", |ctx: WorkflowContext, n: u64| async move {
        ctx.sleep("1h").await?;
        Ok::<_, WorkflowError>(n)
    })
}

fn keyed(key: &str) -> WorkflowOptions {
    WorkflowOptions::new().idempotency_key(key)
}

async fn napper_world() -> (TestWorld, Workflow<u64, u64>) {
    let world = TestWorld::with_config(memory_config()).await;
    let flow = napper();
    world.register(&flow).unwrap();
    (world, flow)
}

async fn run_count(world: &World) -> usize {
    world
        .query_workflows(WorkflowQueryFilter::new())
        .await
        .unwrap()
        .len()
}

#[tokio::test]
async fn a_repeat_within_the_ttl_returns_the_first_run_and_a_later_one_starts_anew() {
    let (world, flow) = napper_world().await;
    let first = world.execute(&flow, 1, keyed("req-1")).await.unwrap();
    world.advance("4999ms").await;
    let repeat = world.execute(&flow, 2, keyed("req-1")).await.unwrap();
    assert_eq!(
        repeat.id, first.id,
        "a duplicate within 5 s is the same run"
    );
    assert!(
        first.is_new() && !repeat.is_new(),
        "the handles say which call started it"
    );
    assert_eq!(run_count(&world).await, 1);
    let state = first.query().await.unwrap();
    assert_eq!(state.idempotency_key.as_deref(), Some("req-1"));
    assert_eq!(
        state.status,
        RunStatus::Running,
        "the first run is still in flight"
    );

    // Another key is another request.
    let other = world.execute(&flow, 3, keyed("req-2")).await.unwrap();
    assert_ne!(other.id, first.id);

    world.advance("1ms").await;
    let later = world.execute(&flow, 4, keyed("req-1")).await.unwrap();
    assert_ne!(
        later.id, first.id,
        "5 s after the first start the key is free again"
    );
    assert_eq!(run_count(&world).await, 3);
    // The TTL runs from the key's last start: the new run is what it returns now.
    world.advance("2s").await;
    let again = world.execute(&flow, 5, keyed("req-1")).await.unwrap();
    assert_eq!(again.id, later.id);

    let state = world.run_until_complete(&first.id, "2h").await.unwrap();
    assert_eq!(state.output.unwrap().decode::<u64>().unwrap(), 1);
}

#[tokio::test]
async fn the_ttl_is_a_world_setting() {
    let mut config = memory_config();
    config.idempotency_ttl = worlds_engine::duration::Dur(Duration::from_secs(60));
    let world = TestWorld::with_config(config).await;
    let flow = napper();
    world.register(&flow).unwrap();
    let first = world.execute(&flow, 1, keyed("req")).await.unwrap();
    world.advance("59s").await;
    assert_eq!(
        world.execute(&flow, 1, keyed("req")).await.unwrap().id,
        first.id
    );
    world.advance("1s").await;
    assert_ne!(
        world.execute(&flow, 1, keyed("req")).await.unwrap().id,
        first.id
    );
}

#[tokio::test]
async fn concurrent_starts_with_one_key_make_one_run() {
    let (world, flow) = napper_world().await;
    let starts = (0..8).map(|n| world.execute(&flow, n, keyed("burst")));
    let handles = futures::future::join_all(starts).await;
    let first = handles[0].as_ref().unwrap().id.clone();
    for handle in &handles {
        assert_eq!(handle.as_ref().unwrap().id, first);
    }
    assert_eq!(run_count(&world).await, 1);
}

#[tokio::test]
async fn a_key_of_another_workflow_is_a_conflict() {
    let (world, flow) = napper_world().await;
    let other = workflow("other", |_ctx: WorkflowContext, _: u64| async move {
        Ok::<_, WorkflowError>(0u64)
    });
    world.register(&other).unwrap();
    world.execute(&flow, 1, keyed("shared")).await.unwrap();
    let err = world.execute(&other, 1, keyed("shared")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
    assert!(err.to_string().contains("napper"), "{err}");
}

#[tokio::test]
async fn a_taken_workflow_id_is_409_unless_the_caller_asks_for_the_existing_run() {
    let (world, flow) = napper_world().await;
    let id = WorkflowOptions::new().workflow_id("order-1");
    let first = world.execute(&flow, 1, id.clone()).await.unwrap();

    let err = world.execute(&flow, 2, id.clone()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert_eq!(err.http_status(), 409);

    let existing = world
        .execute(&flow, 2, id.clone().on_conflict(OnConflict::UseExisting))
        .await
        .unwrap();
    assert_eq!(existing.id, first.id);
    assert_eq!(existing.workflow_id, "order-1");
    assert!(first.is_new() && !existing.is_new());
    assert!(!world.handle::<u64>(&first.id).await.unwrap().is_new());
    assert_eq!(run_count(&world).await, 1);

    // A finished run is returned too: its result is what the caller gets.
    world.run_until_complete(&first.id, "2h").await.unwrap();
    let done = world
        .execute(&flow, 3, id.clone().on_conflict(OnConflict::UseExisting))
        .await
        .unwrap();
    assert_eq!(done.result().await.unwrap(), 1);

    // ...but never a run of another workflow.
    let other = workflow("other", |_ctx: WorkflowContext, _: u64| async move {
        Ok::<_, WorkflowError>(0u64)
    });
    world.register(&other).unwrap();
    let err = world
        .execute(&other, 1, id.on_conflict(OnConflict::UseExisting))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
}

/// The deadlock that tracking keys until their run finishes would cause: each run of `chain`
/// starts its continuation with the same key, from a step, while the run itself is still in
/// flight (waiting for that step). With the key held until the run finished, the step would be
/// refused or kept waiting forever; with a time to live, the continuation is a new run.
#[tokio::test]
async fn a_continuation_started_with_its_own_key_is_a_new_run_not_a_deadlock() {
    type Cell = Arc<OnceLock<(Arc<TestWorld>, Workflow<u32, Vec<String>>)>>;
    let cell: Cell = Arc::default();
    let queue_next = {
        let cell = cell.clone();
        activity("queue-next", move |_ctx: ActivityContext, link: u32| {
            let cell = cell.clone();
            async move {
                let (world, chain) = cell.get().expect("set before the first run");
                let next = world.execute(chain, link + 1, keyed("chain")).await?;
                Ok::<_, StepError>(next.id)
            }
        })
    };
    let step = queue_next.clone();
    let chain = workflow("chain", move |ctx: WorkflowContext, link: u32| {
        let step = step.clone();
        async move {
            let mut seen = vec![ctx.get_metadata().run_id];
            if link < 3 {
                // Past the TTL, so the key is free for the continuation.
                ctx.sleep("6s").await?;
                seen.push(ctx.run(&step, link).await?);
            }
            Ok::<_, WorkflowError>(seen)
        }
    });
    let world = Arc::new(TestWorld::with_config(memory_config()).await);
    world
        .register(&queue_next)
        .unwrap()
        .register(&chain)
        .unwrap();
    assert!(cell.set((world.clone(), chain.clone())).is_ok());

    let first = world.execute(&chain, 1, keyed("chain")).await.unwrap();
    let state = world.run_until_complete(&first.id, "1m").await.unwrap();
    assert_eq!(state.status, RunStatus::Completed);
    let seen: Vec<String> = state.output.unwrap().decode().unwrap();
    assert_eq!(seen[0], first.id);
    assert_ne!(seen[1], first.id, "the continuation is a run of its own");

    let second = world.run_until_complete(&seen[1], "1m").await.unwrap();
    let seen2: Vec<String> = second.output.unwrap().decode().unwrap();
    assert_ne!(seen2[1], seen[1]);
    let third = world.run_until_complete(&seen2[1], "1m").await.unwrap();
    assert_eq!(third.status, RunStatus::Completed);
    assert_eq!(run_count(&world).await, 3);
}

/// A durable world on a directory, on a virtual clock.
fn file_world(dir: &std::path::Path, clock: &VirtualClock, mode: Persistence) -> World {
    let mut config = memory_config();
    config.persistence = mode;
    config.persistence_path = dir.to_path_buf();
    World::with_clock(config, Arc::new(clock.clone())).unwrap()
}

async fn keys_survive_a_restart(mode: Persistence) {
    let dir = tempfile::tempdir().unwrap();
    let clock = VirtualClock::new(DEFAULT_START);
    let flow = napper();
    let first_id = {
        let world = file_world(dir.path(), &clock, mode);
        world.register(&flow).unwrap();
        let run = world.execute(&flow, 1, keyed("req-1")).await.unwrap();
        world.shutdown().await.unwrap();
        run.id
    };
    clock.advance(Duration::from_secs(3));
    let world = file_world(dir.path(), &clock, mode);
    world.register(&flow).unwrap();
    let repeat = world.execute(&flow, 2, keyed("req-1")).await.unwrap();
    assert_eq!(repeat.id, first_id, "the key was read back from disk");
    clock.advance(Duration::from_secs(2));
    let later = world.execute(&flow, 3, keyed("req-1")).await.unwrap();
    assert_ne!(later.id, first_id);
    world.shutdown().await.unwrap();
}

#[tokio::test]
async fn keys_survive_a_restart_on_the_file_store() {
    keys_survive_a_restart(Persistence::File).await;
}

#[tokio::test]
async fn keys_survive_a_restart_on_the_hybrid_store() {
    keys_survive_a_restart(Persistence::Hybrid).await;
}

#[tokio::test]
async fn processes_sharing_a_directory_share_keys() {
    let dir = tempfile::tempdir().unwrap();
    let clock = VirtualClock::new(DEFAULT_START);
    let flow = napper();
    let a = file_world(dir.path(), &clock, Persistence::File);
    let b = file_world(dir.path(), &clock, Persistence::File);
    a.register(&flow).unwrap();
    b.register(&flow).unwrap();
    let first = a.execute(&flow, 1, keyed("req-1")).await.unwrap();
    let repeat = b.execute(&flow, 2, keyed("req-1")).await.unwrap();
    assert_eq!(
        repeat.id, first.id,
        "b found a's run through the key's record"
    );
    assert_eq!(repeat.query().await.unwrap().status, RunStatus::Pending);

    // Concurrent starts from both processes still make one run.
    let (x, y) = tokio::join!(
        a.execute(&flow, 3, keyed("req-2")),
        b.execute(&flow, 4, keyed("req-2"))
    );
    assert_eq!(x.unwrap().id, y.unwrap().id);

    clock.advance(Duration::from_secs(5));
    let later = b.execute(&flow, 5, keyed("req-1")).await.unwrap();
    assert_ne!(later.id, first.id);
    assert_eq!(
        a.execute(&flow, 6, keyed("req-1")).await.unwrap().id,
        later.id
    );
}
