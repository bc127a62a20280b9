//! Recovering failed runs by hand on PostgreSQL: a run that failed in one member is retried
//! from another while the first is still alive. The reopening leaves the run to whichever
//! member claims it; the failed step runs again, the steps before it do not.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use worlds_engine::model::ReopenRequest;
use worlds_engine::prelude::*;

fn counting(name: &str, calls: &Arc<AtomicUsize>, broken: &Arc<AtomicBool>) -> Activity<u64, u64> {
    let (calls, broken) = (calls.clone(), broken.clone());
    activity(name, move |_ctx: ActivityContext, n: u64| {
        let (calls, broken) = (calls.clone(), broken.clone());
        async move {
            calls.fetch_add(1, Ordering::SeqCst);
            if broken.load(Ordering::SeqCst) {
                return Err(StepError::fatal("the payment API refused the key"));
            }
            Ok::<_, StepError>(n + 1)
        }
    })
}

struct Member {
    world: World,
    flow: Workflow<u64, u64>,
}

/// A member with `a; b; c`, where b fails while `broken` is set; the counters are shared
/// by every member, as an outside system would see the calls.
async fn member(schema: &str, calls: &[Arc<AtomicUsize>; 3], broken: &Arc<AtomicBool>) -> Member {
    let mut config = common::world_config(schema);
    config.failure_strategy = FailureStrategy::Ignore;
    let world = worlds_postgres::open(config).await.unwrap();
    let never = Arc::new(AtomicBool::new(false));
    let (a, b, c) = (
        counting("a", &calls[0], &never),
        counting("b", &calls[1], broken),
        counting("c", &calls[2], &never),
    );
    let (sa, sb, sc) = (a.clone(), b.clone(), c.clone());
    let flow = workflow("order", move |ctx: WorkflowContext, n: u64| {
        let (a, b, c) = (sa.clone(), sb.clone(), sc.clone());
        async move {
            let x = ctx.run(&a, n).await?;
            let y = ctx.run(&b, x).await?;
            Ok::<_, WorkflowError>(ctx.run(&c, y).await?)
        }
    });
    world.register(&a).unwrap();
    world.register(&b).unwrap();
    world.register(&c).unwrap();
    world.register(&flow).unwrap();
    world.start().await.unwrap();
    Member { world, flow }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_failed_in_one_member_is_retried_from_another() {
    if !common::database_up().await {
        return;
    }
    let schema = common::fresh_schema();
    let calls = [
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    ];
    let broken = Arc::new(AtomicBool::new(true));
    let first = member(&schema, &calls, &broken).await;
    let mut ids = Vec::new();
    for n in 0..10u64 {
        let run = first
            .world
            .execute(&first.flow, n * 10, WorkflowOptions::default())
            .await
            .unwrap();
        ids.push(run.id);
    }
    for id in &ids {
        let state = common::until(&first.world, id, |s| s.status.is_terminal()).await;
        assert_eq!(state.status, RunStatus::Failed);
    }
    let count = |i: usize| calls[i].load(Ordering::SeqCst);
    assert_eq!((count(0), count(1), count(2)), (10, 10, 0));

    // The fix is out; another member retries the runs while the first is still up.
    broken.store(false, Ordering::SeqCst);
    let second = member(&schema, &calls, &broken).await;
    for id in &ids {
        let reopened = second
            .world
            .reopen(id, ReopenRequest::retry().by("ops").reason("key rotated"))
            .await
            .unwrap();
        assert_eq!(reopened.kept_until, 1);
    }
    for (n, id) in ids.iter().enumerate() {
        common::until(&second.world, id, |s| s.status.is_terminal()).await;
        let state = second.world.query(id).await.unwrap();
        assert_eq!(state.status, RunStatus::Completed, "{:?}", state.error);
        assert_eq!(
            state.output.unwrap().decode::<u64>().unwrap(),
            n as u64 * 10 + 3
        );
    }
    assert_eq!(
        (count(0), count(1), count(2)),
        (10, 20, 10),
        "a ran once per run; b again; c once"
    );
    first.world.shutdown().await.unwrap();
    second.world.shutdown().await.unwrap();
    common::drop_schema(&schema).await;
}
