//! The rules of writing a workflow (docs/RULES.md): what the engine does when one is broken.
//! Each rule's other consequences are tested where the feature is (nondeterminism.rs,
//! replay.rs, limits.rs); this file holds the ones with no other home.

mod common;

use common::{add_one, event_types, test_world, Counter, Mode};
use worlds_engine::prelude::*;
use worlds_engine::RunStatus;

/// A step called but never awaited is recorded as scheduled (commands are issued when called),
/// but the workflow returns without its result: the run ends, and the step either never runs
/// or runs with its result refused. Nothing of it reaches the workflow.
async fn a_step_that_is_not_awaited_is_lost(mode: Mode) {
    let calls = Counter::default();
    let step = add_one("add-one", &calls);
    let s = step.clone();
    let flow = workflow("forgetful", move |ctx: WorkflowContext, n: u64| {
        let s = s.clone();
        async move {
            let _forgotten = ctx.run(&s, n);
            Ok::<_, WorkflowError>(n)
        }
    });
    let t = test_world(mode).await;
    t.register(&step).unwrap().register(&flow).unwrap();
    let run = t
        .execute(&flow, 1, WorkflowOptions::default())
        .await
        .unwrap();
    let state = t.run_until_complete(&run.id, "1m").await.unwrap();
    t.settle().await;
    assert_eq!(
        state.status,
        RunStatus::Completed,
        "{:?}",
        event_types(&state)
    );
    assert_eq!(
        run.result().await.unwrap(),
        1,
        "the step's result never reached it"
    );
    let types = event_types(&state);
    assert!(types.contains(&"activity_scheduled"), "{types:?}");
    assert!(!types.contains(&"activity_completed"), "{types:?}");
    assert_eq!(types.last(), Some(&"workflow_completed"), "{types:?}");
    assert!(calls.get() <= 1, "{types:?}");
}

in_both_modes!(a_step_that_is_not_awaited_is_lost);
