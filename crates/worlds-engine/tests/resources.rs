//! Application state for steps: provided on the world, read from the step's context.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use worlds_engine::prelude::*;

use common::{test_world, Mode};

/// Stands in for a connection pool.
#[derive(Default)]
struct Pool {
    queries: AtomicUsize,
}

async fn steps_read_provided_resources(mode: Mode) {
    let world = test_world(mode).await;
    world.provide(Pool::default());
    let lookup = activity("lookup", |ctx: ActivityContext, id: u32| async move {
        let pool: Arc<Pool> = ctx.resource()?;
        pool.queries.fetch_add(1, Ordering::SeqCst);
        Ok::<_, StepError>(id * 10)
    });
    let step = lookup.clone();
    let flow = workflow("uses-pool", move |ctx: WorkflowContext, id: u32| {
        let step = step.clone();
        async move {
            let a = ctx.run(&step, id).await?;
            // A named step reaches the same pool through its context.
            let b = ctx
                .step_with(
                    "count",
                    ActivityOptions::new(),
                    |step: ActivityContext| async move {
                        let pool = step.resource::<Pool>()?;
                        Ok::<_, StepError>(pool.queries.load(Ordering::SeqCst))
                    },
                )
                .await?;
            Ok::<_, WorkflowError>((a, b))
        }
    });
    world.register(&lookup).unwrap().register(&flow).unwrap();
    let run = world
        .execute(&flow, 4, WorkflowOptions::default())
        .await
        .unwrap();
    let state = world.run_until_complete(&run.id, "1m").await.unwrap();
    let (a, b): (u32, usize) = state.output.unwrap().decode().unwrap();
    assert_eq!((a, b), (40, 1));
    world.shutdown().await.unwrap();
}

in_both_modes!(steps_read_provided_resources);

#[tokio::test]
async fn a_missing_resource_fails_the_step_naming_its_type() {
    let world = test_world(Mode::Cached).await;
    let lookup = activity("needs-pool", |ctx: ActivityContext, _: ()| async move {
        ctx.resource::<Pool>()?;
        Ok::<_, StepError>(())
    });
    let step = lookup.clone();
    let flow = workflow("no-pool", move |ctx: WorkflowContext, _: ()| {
        let step = step.clone();
        async move {
            ctx.run(&step, ()).await?;
            Ok::<_, WorkflowError>(())
        }
    });
    world.register(&lookup).unwrap().register(&flow).unwrap();
    let run = world
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    let state = world.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(state.status, RunStatus::Failed);
    let message = state.error.unwrap().message;
    assert!(
        message.contains("Pool") && message.contains("world.provide"),
        "{message}"
    );
    world.shutdown().await.unwrap();
}
