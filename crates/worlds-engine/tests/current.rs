//! The `current::` free functions: the workflow or step context without passing it around.

mod common;

use worlds_engine::current::{self, StepMetadata};
use worlds_engine::prelude::*;

use common::{test_world, Mode};

/// A helper several calls away from the workflow function, with no context parameter.
async fn nap_then_report() -> Result<String, ContextError> {
    current::sleep("1h").await?;
    let meta = current::get_workflow_metadata()?;
    Ok(format!("{} attempt {}", meta.name, meta.attempt))
}

async fn workflow_code_reaches_its_context_through_free_functions(mode: Mode) {
    let world = test_world(mode).await;
    let describe = activity("describe", |_ctx: ActivityContext, _: ()| async move {
        let meta: StepMetadata = current::get_step_metadata()?;
        Ok::<_, StepError>(meta)
    });
    let step = describe.clone();
    let flow = workflow("ambient", move |_ctx: WorkflowContext, _: ()| {
        let step = step.clone();
        async move {
            let report = nap_then_report().await?;
            let ctx = current::workflow_context("test")?;
            let meta = ctx.run(&step, ()).await?;
            let hook = current::create_hook_with::<u8>(HookOptions::new().token("ambient-1"))?;
            let n = hook.wait().await?;
            Ok::<_, WorkflowError>((report, meta, n))
        }
    });
    world.register(&describe).unwrap().register(&flow).unwrap();
    let run = world
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    world.advance("61m").await;
    world.settle().await;
    world.resume_hook("ambient-1", &7u8).await.unwrap();
    let state = world.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(state.status, RunStatus::Completed, "{:?}", state.error);
    let (report, meta, n): (String, StepMetadata, u8) = state.output.unwrap().decode().unwrap();
    assert_eq!(report, "ambient attempt 1");
    assert_eq!(meta.name, "describe");
    assert_eq!(meta.attempt, 1);
    assert_eq!(meta.run_id, run.id);
    assert!(meta.step_id.starts_with("step_"));
    assert_eq!(n, 7);
    world.shutdown().await.unwrap();
}

#[tokio::test]
async fn outside_a_workflow_or_step_they_return_errors() {
    let err = current::sleep("1s").await.unwrap_err();
    assert!(
        matches!(err, ContextError::OutsideWorkflow { call: "sleep" }),
        "{err}"
    );
    assert!(err.to_string().contains("outside a workflow"));
    assert!(current::create_hook::<u8>().is_err());
    assert!(current::create_webhook().is_err());
    assert!(current::get_workflow_metadata().is_err());
    let err = current::get_step_metadata().unwrap_err();
    assert!(matches!(err, ContextError::OutsideStep { .. }), "{err}");
}

#[tokio::test]
async fn step_functions_are_not_workflow_functions() {
    // Inside a step, the workflow's context is not available (steps may do real I/O and are
    // not replayed): a durable sleep there is an error, not a hang.
    let world = test_world(Mode::Cached).await;
    let confused = activity("confused", |_ctx: ActivityContext, _: ()| async move {
        current::sleep("1s").await?;
        Ok::<_, StepError>(())
    });
    let step = confused.clone();
    let flow = workflow("confused-flow", move |ctx: WorkflowContext, _: ()| {
        let step = step.clone();
        async move {
            ctx.run(&step, ()).await?;
            Ok::<_, WorkflowError>(())
        }
    });
    world.register(&confused).unwrap().register(&flow).unwrap();
    let run = world
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    let state = world.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(state.status, RunStatus::Failed);
    assert!(state.error.unwrap().message.contains("outside a workflow"));
    world.shutdown().await.unwrap();
}

async fn get_writable_writes_from_workflow_and_step_code(mode: Mode) {
    let world = test_world(mode).await;
    let progress = activity("progress", |_ctx: ActivityContext, _: ()| async move {
        let stream = current::get_writable()?;
        stream.write("from the step").await?;
        Ok::<_, StepError>(())
    });
    let step = progress.clone();
    let flow = workflow("streaming", move |ctx: WorkflowContext, _: ()| {
        let step = step.clone();
        async move {
            current::get_writable()?.write("from the workflow").await?;
            ctx.run(&step, ()).await?;
            ctx.sleep("1m").await?;
            current::get_writable()?.close().await?;
            Ok::<_, WorkflowError>(())
        }
    });
    world.register(&progress).unwrap().register(&flow).unwrap();
    let run = world
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    world.run_until_complete(&run.id, "1h").await.unwrap();
    let page = world
        .streams()
        .chunks(&run.id, "default", None, 10)
        .await
        .unwrap();
    let texts: Vec<String> = page
        .data
        .iter()
        .map(|c| c.text().unwrap().to_owned())
        .collect();
    assert_eq!(
        texts,
        ["from the workflow", "from the step"],
        "replay adds no chunk"
    );
    assert!(world.streams().info(&run.id, "default").await.unwrap().done);
    world.shutdown().await.unwrap();
}

in_both_modes!(
    workflow_code_reaches_its_context_through_free_functions,
    get_writable_writes_from_workflow_and_step_code,
);
