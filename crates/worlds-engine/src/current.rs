//! Free functions that act on the workflow (or step) the calling code runs in, without passing
//! its context around: `current::sleep("1h")` inside a workflow is `ctx.sleep("1h")`.
//!
//! The engine makes the context available to everything the workflow (or step) future polls,
//! including helper functions several calls deep. Called anywhere else these return
//! [`ContextError::OutsideWorkflow`] (or `OutsideStep`) — an error, never a panic.
//!
//! ```
//! use worlds_engine::prelude::*;
//! use worlds_engine::current;
//!
//! /// A helper that needs no context parameter.
//! async fn wait_a_day() -> Result<(), ContextError> {
//!     current::sleep("24h").await
//! }
//!
//! let flow = workflow("patient", |_ctx: WorkflowContext, _: ()| async move {
//!     let meta = current::get_workflow_metadata()?;
//!     wait_a_day().await?;
//!     Ok::<_, WorkflowError>(meta.run_id)
//! });
//! # let _ = flow;
//! # let err = futures::executor::block_on(current::sleep("1s")).unwrap_err();
//! # assert!(matches!(err, ContextError::OutsideWorkflow { .. }));
//! ```

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::clock::Millis;
use crate::duration::IntoDuration;
use crate::engine::ambient;
use crate::engine::context::{CommandFuture, WorkflowContext, WorkflowMetadata};
use crate::engine::errors::ContextError;
use crate::engine::hook_handles::{Hook, Webhook};
use crate::hooks::HookOptions;
use crate::ActivityContext;

/// The context of the workflow this code runs in.
pub fn workflow_context(call: &'static str) -> Result<WorkflowContext, ContextError> {
    ambient::workflow_context(call)
}

/// The context of the step this code runs in.
pub fn step_context(call: &'static str) -> Result<ActivityContext, ContextError> {
    ambient::step_context(call)
}

/// A command of the current workflow, or the error of a call made outside one.
#[must_use = "futures do nothing unless awaited"]
#[derive(Debug)]
pub struct Current<T> {
    inner: Result<CommandFuture<T>, Option<ContextError>>,
}

impl<T> Current<T> {
    pub(crate) fn from(result: Result<CommandFuture<T>, ContextError>) -> Self {
        Current {
            inner: result.map_err(Some),
        }
    }
}

impl<T: DeserializeOwned> Future for Current<T> {
    type Output = Result<T, ContextError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // Neither variant is structurally pinned: `CommandFuture` is `Unpin`.
        let this = self.get_mut();
        match &mut this.inner {
            Ok(command) => Pin::new(command).poll(cx),
            Err(error) => Poll::Ready(Err(error.take().unwrap_or(ContextError::OutsideWorkflow {
                call: "a workflow function polled after it finished",
            }))),
        }
    }
}

/// Durable sleep of the current workflow ([`WorkflowContext::sleep`]).
pub fn sleep(duration: impl IntoDuration) -> Current<()> {
    Current::from(workflow_context("sleep").map(|ctx| ctx.sleep(duration)))
}

/// Durable sleep of the current workflow until a time in ms since the Unix epoch
/// ([`WorkflowContext::sleep_until`]).
pub fn sleep_until(at: Millis) -> Current<()> {
    Current::from(workflow_context("sleep_until").map(|ctx| ctx.sleep_until(at)))
}

/// A durable HTTP request of the current workflow ([`WorkflowContext::fetch`]). Needs the
/// `fetch` feature.
#[cfg(feature = "fetch")]
pub fn fetch(
    url: &str,
    request: crate::fetch::FetchRequest,
) -> Current<crate::fetch::FetchResponse> {
    Current::from(workflow_context("fetch").map(|ctx| ctx.fetch(url, request)))
}

/// A writer for the current run's default stream: the workflow's, or inside a step, the
/// step's ([`crate::streams`]).
pub fn get_writable() -> Result<Writable, ContextError> {
    get_writable_named(crate::streams::DEFAULT_STREAM)
}

/// A writer for the current run's stream `name`; see [`get_writable`].
pub fn get_writable_named(name: &str) -> Result<Writable, ContextError> {
    if let Ok(step) = ambient::step_context("get_writable") {
        return Ok(Writable::Step(step.get_writable_named(name)));
    }
    let ctx = workflow_context("get_writable")?;
    Ok(Writable::Workflow(ctx.get_writable_named(name)))
}

/// A stream writer of the current workflow or step, from [`get_writable`].
#[derive(Debug)]
pub enum Writable {
    /// Written by workflow code: writes do not wait, and replay never duplicates them.
    Workflow(crate::streams::WorkflowStream),
    /// Written by a step: each write is stored before it returns.
    Step(crate::streams::StepStream),
}

impl Writable {
    /// Writes a chunk.
    pub async fn write(&self, data: impl Into<bytes::Bytes>) -> Result<(), crate::WorldError> {
        match self {
            Writable::Workflow(stream) => stream
                .write(data)
                .map_err(|e| crate::WorldError::invalid("chunk", e.to_string())),
            Writable::Step(stream) => stream.write(data).await.map(|_| ()),
        }
    }

    /// Writes a value as a JSON chunk.
    pub async fn write_json<T: Serialize + ?Sized>(
        &self,
        value: &T,
    ) -> Result<(), crate::WorldError> {
        match self {
            Writable::Workflow(stream) => stream
                .write_json(value)
                .map_err(|e| crate::WorldError::invalid("chunk", e.to_string())),
            Writable::Step(stream) => stream.write_json(value).await.map(|_| ()),
        }
    }

    /// Closes the stream: readers end after its last chunk.
    pub async fn close(&self) -> Result<(), crate::WorldError> {
        match self {
            Writable::Workflow(stream) => {
                stream.close();
                Ok(())
            }
            Writable::Step(stream) => stream.close().await,
        }
    }
}

/// A hook of the current workflow ([`WorkflowContext::create_hook`]).
pub fn create_hook<T: DeserializeOwned>() -> Result<Hook<T>, ContextError> {
    Ok(workflow_context("create_hook")?.create_hook())
}

/// A hook of the current workflow, with options ([`WorkflowContext::create_hook_with`]).
pub fn create_hook_with<T: DeserializeOwned>(
    options: HookOptions,
) -> Result<Hook<T>, ContextError> {
    Ok(workflow_context("create_hook_with")?.create_hook_with(options))
}

/// A webhook of the current workflow ([`WorkflowContext::create_webhook`]).
pub fn create_webhook() -> Result<Webhook, ContextError> {
    Ok(workflow_context("create_webhook")?.create_webhook())
}

/// Whether the current workflow takes the new branch of patch `id`
/// ([`WorkflowContext::patched`]).
pub fn patched(id: &str) -> Result<bool, ContextError> {
    Ok(workflow_context("patched")?.patched(id))
}

/// Marks patch `id` as the only branch left ([`WorkflowContext::deprecate_patch`]).
pub fn deprecate_patch(id: &str) -> Result<(), ContextError> {
    workflow_context("deprecate_patch")?.deprecate_patch(id);
    Ok(())
}

/// Facts about the current workflow run: workflow id, run id, name, start time, attempt.
pub fn get_workflow_metadata() -> Result<WorkflowMetadata, ContextError> {
    Ok(workflow_context("get_workflow_metadata")?.get_metadata())
}

/// Facts about the step (activity attempt) this code runs in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepMetadata {
    /// The step id (`step_…`).
    pub step_id: String,
    /// The step's name (its activity's, or a named step's).
    pub name: String,
    /// The attempt, from 1.
    pub attempt: u32,
    /// The run the step belongs to.
    pub run_id: String,
    /// That run's workflow id.
    pub workflow_id: String,
}

/// Facts about the current step: its id, name and attempt, and its run.
pub fn get_step_metadata() -> Result<StepMetadata, ContextError> {
    let ctx = step_context("get_step_metadata")?;
    Ok(StepMetadata {
        step_id: ctx.activity_id().to_owned(),
        name: ctx.name().to_owned(),
        attempt: ctx.attempt(),
        run_id: ctx.run_id().to_owned(),
        workflow_id: ctx.workflow_id().to_owned(),
    })
}
