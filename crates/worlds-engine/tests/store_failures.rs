//! A store that cannot be reached for one write: the run is resumed from its history and goes
//! on, instead of being left waiting on something nobody will record.

mod common;

use std::sync::Arc;

use common::wrapped_store::WrappedStore;
use common::Counter;
use worlds_engine::prelude::*;
use worlds_engine::testing::{TestWorld, TestWorldOptions};
use worlds_engine::{ActivityStatus, Event, EventKind};

/// The retry of a failed attempt cannot be recorded: the attempt must not stay "running".
#[tokio::test]
async fn a_retry_that_could_not_be_recorded_is_settled_from_history() {
    let calls = Counter::default();
    let counted = calls.clone();
    let flaky = activity("flaky", move |_ctx: ActivityContext, n: u64| {
        let counted = counted.clone();
        async move {
            if counted.bump() == 1 {
                return Err(StepError::msg("first attempt fails"));
            }
            Ok::<_, StepError>(n + 1)
        }
    });
    let step = flaky.clone();
    let flow = workflow("flaky-flow", move |ctx: WorkflowContext, n: u64| {
        let step = step.clone();
        async move { Ok::<_, WorkflowError>(ctx.run(&step, n).await?) }
    });
    let store = Arc::new(WrappedStore::default());
    // The append recording attempt 1's failure and its retry is refused, once.
    store.refuse(1, |events: &[Event]| {
        events
            .iter()
            .any(|e| matches!(e.kind, EventKind::ActivityFailed { retrying: true, .. }))
    });
    let t = TestWorld::with_options(TestWorldOptions {
        store: Some(store.clone()),
        ..TestWorldOptions::default()
    })
    .await;
    t.register(&flaky).unwrap().register(&flow).unwrap();
    let run = t
        .execute(&flow, 1, WorkflowOptions::default())
        .await
        .unwrap();
    t.settle().await;
    // The resync waits a moment (a background pause) before it reads the run back.
    t.advance("1s").await;
    let state = t.run_until_complete(&run.id, "10m").await.unwrap();
    assert_eq!(state.status, RunStatus::Completed, "{:?}", state.activities);
    assert_eq!(run.result().await.unwrap(), 2);
    let step = &state.activities[0];
    assert_eq!(step.status, ActivityStatus::Completed);
    // Attempt 1 ended as lost (its failure never reached the store); attempt 2 succeeded.
    assert_eq!((step.attempt, calls.get()), (2, 2));
    assert!(store.refuse.lock().unwrap().as_ref().unwrap().times == 0);
}
