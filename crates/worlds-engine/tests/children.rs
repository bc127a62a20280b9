//! Child workflows: results and failures reach the parent, parent and child are linked in
//! their states and history, and children run concurrently and nest.

mod common;

use common::{add_one, event_types, test_world, Counter, Mode};
use worlds_engine::prelude::*;
use worlds_engine::WorkflowQueryFilter;

/// A child that doubles its input after a short sleep, so the parent really waits on it.
fn doubler(name: &str) -> Workflow<u64, u64> {
    workflow(name, |ctx: WorkflowContext, n: u64| async move {
        ctx.sleep("1s").await?;
        Ok::<_, WorkflowError>(n * 2)
    })
}

async fn child_result_reaches_the_parent_and_both_are_linked(mode: Mode) {
    let calls = Counter::default();
    let step = add_one("add-one", &calls);
    let s = step.clone();
    let child = workflow("child", move |ctx: WorkflowContext, n: u64| {
        let s = s.clone();
        async move { Ok::<_, WorkflowError>(ctx.run(&s, n).await?) }
    });
    let c = child.clone();
    let parent = workflow("parent", move |ctx: WorkflowContext, n: u64| {
        let c = c.clone();
        async move {
            let from_child = ctx.execute_child(&c, n, WorkflowOptions::default()).await?;
            Ok::<_, WorkflowError>(from_child * 10)
        }
    });
    let t = test_world(mode).await;
    t.register(&step)
        .unwrap()
        .register(&child)
        .unwrap()
        .register(&parent)
        .unwrap();
    let run = t
        .execute(&parent, 4, WorkflowOptions::default())
        .await
        .unwrap();
    let state = t.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(run.result().await.unwrap(), 50);
    assert_eq!(calls.get(), 1, "the child's step ran once");

    assert_eq!(state.children.len(), 1);
    let child_id = &state.children[0];
    let child_state = t.query(child_id).await.unwrap();
    assert_eq!(child_state.name, "child");
    assert_eq!(child_state.status, RunStatus::Completed);
    assert_eq!(child_state.parent_id.as_deref(), Some(run.id.as_str()));

    let found = t
        .query_workflows(WorkflowQueryFilter::new().parent_id(&run.id))
        .await
        .unwrap();
    let found: Vec<&str> = found.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(found, vec![child_id.as_str()]);

    let types = event_types(&state);
    let started = types.iter().position(|t| *t == "child_workflow_started");
    let completed = types.iter().position(|t| *t == "child_workflow_completed");
    assert!(
        matches!((started, completed), (Some(a), Some(b)) if a < b),
        "{types:?}"
    );
}

async fn failing_child_can_be_handled_by_the_parent(mode: Mode) {
    let child = workflow("doomed-child", |ctx: WorkflowContext, _: ()| async move {
        ctx.sleep("1s").await?;
        Err::<u32, _>(WorkflowError::msg("inventory mismatch"))
    });
    let c = child.clone();
    let parent = workflow("careful-parent", move |ctx: WorkflowContext, _: ()| {
        let c = c.clone();
        async move {
            match ctx.execute_child(&c, (), WorkflowOptions::default()).await {
                Ok(n) => Ok(format!("child said {n}")),
                Err(ContextError::ChildFailed {
                    name,
                    child_id,
                    error,
                }) => Ok::<_, WorkflowError>(format!(
                    "fallback after {name} ({child_id}) failed: {}",
                    error.message
                )),
                Err(other) => Err(other.into()),
            }
        }
    });
    let t = test_world(mode).await;
    t.register(&child).unwrap().register(&parent).unwrap();
    let run = t
        .execute(&parent, (), WorkflowOptions::default())
        .await
        .unwrap();
    let state = t.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(state.status, RunStatus::Completed);
    let child_id = &state.children[0];
    assert_eq!(t.query(child_id).await.unwrap().status, RunStatus::Failed);
    let result = run.result().await.unwrap();
    assert!(
        result.starts_with(&format!(
            "fallback after doomed-child ({child_id}) failed: "
        )),
        "{result}"
    );
    assert!(result.contains("inventory mismatch"), "{result}");
    assert!(event_types(&state).contains(&"child_workflow_failed"));
}

async fn concurrent_children_both_complete(mode: Mode) {
    let child = doubler("doubler");
    let c = child.clone();
    let parent = workflow("fan-out", move |ctx: WorkflowContext, _: ()| {
        let c = c.clone();
        async move {
            let (a, b) = futures::join!(
                ctx.execute_child(&c, 1, WorkflowOptions::default()),
                ctx.execute_child(&c, 20, WorkflowOptions::default()),
            );
            Ok::<_, WorkflowError>((a?, b?))
        }
    });
    let t = test_world(mode).await;
    t.register(&child).unwrap().register(&parent).unwrap();
    let run = t
        .execute(&parent, (), WorkflowOptions::default())
        .await
        .unwrap();
    let started_at = t.now();
    let state = t.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(run.result().await.unwrap(), (2, 40));
    assert_eq!(state.children.len(), 2);
    // They slept side by side, not one after the other.
    assert_eq!(state.completed_at, Some(started_at + 1_000));
    for child_id in &state.children {
        let child_state = t.query(child_id).await.unwrap();
        assert_eq!(child_state.status, RunStatus::Completed);
        assert_eq!(child_state.parent_id.as_deref(), Some(run.id.as_str()));
    }
}

async fn unregistered_child_fails_with_not_registered(mode: Mode) {
    let parent = workflow("hopeful-parent", |ctx: WorkflowContext, _: ()| async move {
        let outcome = ctx
            .execute_child_by_name::<u32, u32>("ghost", 1, WorkflowOptions::default())
            .await;
        match outcome {
            Err(ContextError::ChildFailed { name, error, .. }) => {
                Ok::<_, WorkflowError>(format!("{name}: {}", error.code.unwrap_or_default()))
            }
            other => Err(WorkflowError::msg(format!("unexpected: {other:?}"))),
        }
    });
    let t = test_world(mode).await;
    t.register(&parent).unwrap();
    let run = t
        .execute(&parent, (), WorkflowOptions::default())
        .await
        .unwrap();
    t.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(run.result().await.unwrap(), "ghost: NOT_REGISTERED");
}

async fn grandchildren_complete(mode: Mode) {
    let leaf = doubler("leaf");
    let l = leaf.clone();
    let middle = workflow("middle", move |ctx: WorkflowContext, n: u64| {
        let l = l.clone();
        async move {
            let doubled = ctx.execute_child(&l, n, WorkflowOptions::default()).await?;
            Ok::<_, WorkflowError>(doubled + 1)
        }
    });
    let m = middle.clone();
    let top = workflow("top", move |ctx: WorkflowContext, n: u64| {
        let m = m.clone();
        async move {
            let from_middle = ctx.execute_child(&m, n, WorkflowOptions::default()).await?;
            Ok::<_, WorkflowError>(from_middle * 100)
        }
    });
    let t = test_world(mode).await;
    t.register(&leaf)
        .unwrap()
        .register(&middle)
        .unwrap()
        .register(&top)
        .unwrap();
    let run = t
        .execute(&top, 3, WorkflowOptions::default())
        .await
        .unwrap();
    let state = t.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(run.result().await.unwrap(), (3 * 2 + 1) * 100);

    let middle_state = t.query(&state.children[0]).await.unwrap();
    assert_eq!(middle_state.name, "middle");
    assert_eq!(middle_state.parent_id.as_deref(), Some(run.id.as_str()));
    let leaf_state = t.query(&middle_state.children[0]).await.unwrap();
    assert_eq!(leaf_state.name, "leaf");
    assert_eq!(leaf_state.status, RunStatus::Completed);
    assert_eq!(
        leaf_state.parent_id.as_deref(),
        Some(middle_state.id.as_str())
    );
}

in_both_modes!(
    child_result_reaches_the_parent_and_both_are_linked,
    failing_child_can_be_handled_by_the_parent,
    concurrent_children_both_complete,
    unregistered_child_fails_with_not_registered,
    grandchildren_complete,
);
