//! Patching on PostgreSQL: 100 runs parked on both sides of a patched call when the new code
//! goes out finish on their own branch, and new runs take the new one. Every run is evicted
//! after every task, so each wake-up replays its history from the database against the code
//! deployed now.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use worlds_engine::prelude::*;
use worlds_engine::{HookStatus, WorkflowState};

fn counting(name: &str, calls: &Arc<AtomicUsize>) -> Activity<u64, u64> {
    let calls = calls.clone();
    activity(name, move |_ctx: ActivityContext, n: u64| {
        let calls = calls.clone();
        async move {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok::<_, StepError>(n + 1)
        }
    })
}

/// The run waits on its `hook`-th hook (from 1).
fn waits_on(state: &WorkflowState, hook: usize) -> bool {
    state.hooks.len() == hook
        && state
            .hooks
            .last()
            .is_some_and(|h| h.status == HookStatus::Waiting)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_runs_finish_on_their_own_branch() {
    if !common::database_up().await {
        return;
    }
    let schema = common::fresh_schema();
    let mut config = common::world_config(&schema);
    config.evict_after_every_task = true;
    let world = worlds_postgres::open(config).await.unwrap();
    let (old, new) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (b, c) = (counting("b", &old), counting("c", &new));
    let patched = Arc::new(AtomicBool::new(false));
    let (code, sb, sc) = (patched.clone(), b.clone(), c.clone());
    // a hook; <old "b" or, patched, "c">; a hook.
    let flow = workflow("patched-flow", move |ctx: WorkflowContext, n: u64| {
        let (code, b, c) = (code.clone(), sb.clone(), sc.clone());
        async move {
            ctx.create_hook_with::<()>(HookOptions::new().token(format!("one-{n}")))
                .wait()
                .await?;
            let y = if code.load(Ordering::SeqCst) && ctx.patched("use-c") {
                ctx.run(&c, n).await?
            } else {
                ctx.run(&b, n).await?
            };
            ctx.create_hook_with::<()>(HookOptions::new().token(format!("two-{n}")))
                .wait()
                .await?;
            Ok::<_, WorkflowError>(y)
        }
    });
    world.register(&b).unwrap();
    world.register(&c).unwrap();
    world.register(&flow).unwrap();
    world.start().await.unwrap();

    // Fifty runs past the patch point on the old code, fifty before it.
    let mut runs = Vec::new();
    for n in 0..100u64 {
        let run = world
            .execute(&flow, n, WorkflowOptions::default())
            .await
            .unwrap();
        common::until(&world, &run.id, |s| waits_on(s, 1)).await;
        runs.push(run);
    }
    for n in 0..50u64 {
        world.resume_hook(&format!("one-{n}"), &()).await.unwrap();
        common::until(&world, &runs[n as usize].id, |s| waits_on(s, 2)).await;
    }
    assert_eq!(old.load(Ordering::SeqCst), 50);

    patched.store(true, Ordering::SeqCst);
    for n in 100..110u64 {
        runs.push(
            world
                .execute(&flow, n, WorkflowOptions::default())
                .await
                .unwrap(),
        );
    }
    for n in 50..110u64 {
        common::until(&world, &runs[n as usize].id, |s| waits_on(s, 1)).await;
        world.resume_hook(&format!("one-{n}"), &()).await.unwrap();
    }
    for n in 0..110u64 {
        common::until(&world, &runs[n as usize].id, |s| waits_on(s, 2)).await;
        world.resume_hook(&format!("two-{n}"), &()).await.unwrap();
    }
    for (n, run) in runs.iter().enumerate() {
        common::until(&world, &run.id, |s| s.status.is_terminal()).await;
        // With its history.
        let state = world.query(&run.id).await.unwrap();
        assert_eq!(state.status, RunStatus::Completed, "{:?}", state.error);
        let steps: Vec<&str> = state.activities.iter().map(|a| a.name.as_str()).collect();
        let marked = state
            .history
            .iter()
            .any(|e| e.kind.type_name() == "patch_recorded");
        if n < 50 {
            assert_eq!((steps.as_slice(), marked), (&["b"][..], false), "run {n}");
        } else {
            assert_eq!((steps.as_slice(), marked), (&["c"][..], true), "run {n}");
        }
    }
    assert_eq!(
        (old.load(Ordering::SeqCst), new.load(Ordering::SeqCst)),
        (50, 60),
        "no step ran twice"
    );
    world.shutdown().await.unwrap();
    common::drop_schema(&schema).await;
}
