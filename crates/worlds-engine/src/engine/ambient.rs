//! The workflow or step the current task runs: a task-local context the engine sets around
//! workflow code and step code, read by [`crate::current`] and by the log layer.

use std::future::Future;

use crate::telemetry::logs::LogCategory;

use super::authoring::activity::ActivityContext;
use super::authoring::context::WorkflowContext;
use super::authoring::errors::ContextError;

tokio::task_local! {
    static WORKFLOW: WorkflowContext;
    static STEP: ActivityContext;
}

/// Runs `future` with `ctx` as the current workflow.
pub(crate) fn in_workflow<F: Future>(
    ctx: WorkflowContext,
    future: F,
) -> impl Future<Output = F::Output> {
    WORKFLOW.scope(ctx, future)
}

/// Runs `future` with `ctx` as the current step.
pub(crate) fn in_step<F: Future>(
    ctx: ActivityContext,
    future: F,
) -> impl Future<Output = F::Output> {
    STEP.scope(ctx, future)
}

/// The context of the workflow this code runs in.
pub(crate) fn workflow_context(call: &'static str) -> Result<WorkflowContext, ContextError> {
    WORKFLOW
        .try_with(WorkflowContext::clone)
        .map_err(|_| ContextError::OutsideWorkflow { call })
}

/// The context of the step this code runs in.
pub(crate) fn step_context(call: &'static str) -> Result<ActivityContext, ContextError> {
    STEP.try_with(ActivityContext::clone)
        .map_err(|_| ContextError::OutsideStep { call })
}

/// The log category of an event with none of its own: the kind of code it runs in.
pub(crate) fn log_category() -> LogCategory {
    if STEP.try_with(|_| ()).is_ok() {
        LogCategory::Activity
    } else if WORKFLOW.try_with(|_| ()).is_ok() {
        LogCategory::Workflow
    } else {
        LogCategory::System
    }
}
