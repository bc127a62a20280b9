//! The runtime API: free functions that act on the world given to `initialize_runtime`, and
//! fail with a clear error before it. The connected world is process-global, so this file
//! holds one test that walks through it in order.

use serde::{Deserialize, Serialize};
use worlds_engine::prelude::*;
use worlds_engine::runtime;
use worlds_engine::testing::TestWorld;
use worlds_engine::ErrorKind;
use worlds_engine::WorkflowQueryFilter;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Approval {
    approved: bool,
}

fn approval() -> Workflow<String, (bool, String)> {
    workflow(
        "approval",
        |ctx: WorkflowContext, order: String| async move {
            let hook = ctx
                .create_hook_with::<Approval>(HookOptions::new().token(format!("approve-{order}")));
            let webhook =
                ctx.create_webhook_with(HookOptions::new().token(format!("paid-{order}")));
            let decision = hook.wait().await?;
            let request = webhook.wait().await?;
            Ok::<_, WorkflowError>((decision.approved, request.body))
        },
    )
}

#[tokio::test]
async fn the_runtime_api_acts_on_the_initialized_world() {
    // Before initialization: errors, not panics.
    assert!(!runtime::is_initialized());
    let flow = approval();
    let err = runtime::start(&flow, "o-1".into(), WorkflowOptions::new())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert!(err.to_string().contains("initialize_runtime"), "{err}");
    assert_eq!(
        runtime::get_run("x").await.unwrap_err().kind(),
        ErrorKind::Unavailable
    );
    assert_eq!(
        runtime::query_runs(WorkflowQueryFilter::new())
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::Unavailable
    );
    assert_eq!(
        runtime::resume_hook("t", &1).await.unwrap_err().kind(),
        ErrorKind::Unavailable
    );

    let world = TestWorld::new().await;
    world.register(&flow).unwrap();
    worlds_engine::runtime::initialize_runtime(&world);
    assert!(runtime::is_initialized());

    let run = runtime::start(
        &flow,
        "o-1".into(),
        WorkflowOptions::new().workflow_id("order-1"),
    )
    .await
    .unwrap();
    world.settle().await;
    let state = runtime::get_run("order-1").await.unwrap();
    assert_eq!(state.id, run.id);
    assert_eq!(state.status, RunStatus::Running);
    assert_eq!(state.hooks.len(), 2);

    // The same errors as the world's methods.
    let err = runtime::start(
        &flow,
        "o-1".into(),
        WorkflowOptions::new().workflow_id("order-1"),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert_eq!(
        runtime::get_run("missing").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        runtime::resume_hook("no-such-token", &Approval { approved: true })
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );

    let resumed = runtime::resume_hook("approve-o-1", &Approval { approved: true })
        .await
        .unwrap();
    assert_eq!(resumed.run_id, run.id);
    world.settle().await;
    runtime::resume_webhook("paid-o-1", &WebhookRequest::new("POST", "paid in full"))
        .await
        .unwrap();
    let done = world.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(
        run.result().await.unwrap(),
        (true, "paid in full".to_string())
    );

    let by_name =
        runtime::start_by_name::<_, (bool, String)>("approval", "o-2", WorkflowOptions::new())
            .await
            .unwrap();
    world.settle().await;
    let page = runtime::query_runs(
        WorkflowQueryFilter::new()
            .status(RunStatus::Completed)
            .limit(10),
    )
    .await
    .unwrap();
    assert_eq!(page.data.len(), 1);
    assert_eq!(page.data[0].id, run.id);
    let all = runtime::query_runs(WorkflowQueryFilter::new())
        .await
        .unwrap();
    assert_eq!(all.data.len(), 2);
    assert_eq!(all.data[0].id, by_name.id, "newest first");

    // Initializing again switches to the new world.
    let other = TestWorld::new().await;
    worlds_engine::runtime::initialize_runtime(&other);
    assert_eq!(
        runtime::get_run(&run.id).await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    world.shutdown().await.unwrap();

    // The connection does not keep a world alive.
    other.shutdown().await.unwrap();
    drop(other);
    let err = runtime::get_run(&run.id).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert!(err.to_string().contains("dropped"), "{err}");
}
