//! The runtime API: start runs, resume hooks and read runs from anywhere in a program —
//! request handlers, background jobs, steps — without passing the [`World`] around.
//!
//! [`initialize_runtime`] connects these functions to a world; every call after it uses that
//! world. Called before, they fail with an unavailable error (503) saying so, instead of
//! panicking. Calling it again with another world switches them to that one. The connection
//! does not keep the world alive: once every handle to it is gone, the functions fail with 503
//! again (so a dropped durable world lets go of its directory as usual).
//!
//! ```
//! use worlds_engine::prelude::*;
//! use worlds_engine::runtime;
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let greet = workflow("greet", |_ctx: WorkflowContext, name: String| async move {
//!     Ok::<_, WorkflowError>(format!("hello {name}"))
//! });
//! let world = World::new(WorldConfig::memory())?;
//! world.register(&greet)?;
//! runtime::initialize_runtime(&world);
//! world.start().await?;
//!
//! // Anywhere else in the program:
//! let run = runtime::start(&greet, "ada".to_string(), WorkflowOptions::new()).await?;
//! assert_eq!(run.result().await?, "hello ada");
//! let state = runtime::get_run(&run.id).await?;
//! assert_eq!(state.status, RunStatus::Completed);
//! # Ok::<(), WorldError>(())
//! # }).unwrap();
//! ```

use std::sync::{Arc, RwLock, Weak};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::engine::definitions::Workflow;
use crate::engine::Engine;
use crate::error::WorldError;
use crate::hooks::{HookResumed, WebhookRequest};
use crate::model::{Page, ResolveData, WorkflowOptions, WorkflowQueryFilter, WorkflowState};
use crate::payload::Payload;
use crate::world::{WorkflowHandle, World};

/// The world the runtime API uses, set by [`initialize_runtime`].
static RUNTIME: RwLock<Option<Weak<Engine>>> = RwLock::new(None);

/// Connects the runtime API to `world`: from now on the functions of this module act on it.
/// Calling it again replaces the world they use.
///
/// Call it before [`World::start`] if steps use the runtime API, so that runs resumed by the
/// start find it connected.
pub fn initialize_runtime(world: &World) {
    let mut slot = RUNTIME.write().unwrap_or_else(|e| e.into_inner());
    *slot = Some(Arc::downgrade(world.engine()));
}

/// True once [`initialize_runtime`] has been called (even if that world was dropped since).
pub fn is_initialized() -> bool {
    RUNTIME.read().unwrap_or_else(|e| e.into_inner()).is_some()
}

fn engine() -> Result<Arc<Engine>, WorldError> {
    let slot = RUNTIME.read().unwrap_or_else(|e| e.into_inner());
    let Some(world) = slot.as_ref() else {
        return Err(WorldError::Unavailable(
            "the runtime API is not connected to a world: call worlds_engine::runtime::initialize_runtime(&world) first".into(),
        ));
    };
    world.upgrade().ok_or_else(|| {
        WorldError::Unavailable(
            "the world connected to the runtime API was dropped: call worlds_engine::runtime::initialize_runtime(&world) with the current one".into(),
        )
    })
}

/// Starts a run of a workflow, like [`World::execute`]; the same errors, plus 503 before
/// [`initialize_runtime`].
pub async fn start<I, O>(
    workflow: &Workflow<I, O>,
    input: I,
    options: WorkflowOptions,
) -> Result<WorkflowHandle<O>, WorldError>
where
    I: Serialize,
    O: DeserializeOwned,
{
    start_by_name(workflow.name(), input, options).await
}

/// Starts a run of a registered workflow by name, like [`World::execute_by_name`].
pub async fn start_by_name<I, O>(
    name: &str,
    input: I,
    options: WorkflowOptions,
) -> Result<WorkflowHandle<O>, WorldError>
where
    I: Serialize,
    O: DeserializeOwned,
{
    let engine = engine()?;
    let input = Payload::encode(&input)
        .map_err(|e| WorldError::serde(format!("input of workflow '{name}'"), e))?;
    let ((run_id, workflow_id), created) = engine.start_run(name, input, options).await?;
    Ok(WorkflowHandle::new(&engine, run_id, workflow_id).created(created))
}

/// Resumes the hook holding `token` with a payload, like [`World::resume_hook`].
pub async fn resume_hook<P: Serialize + ?Sized>(
    token: &str,
    payload: &P,
) -> Result<HookResumed, WorldError> {
    let engine = engine()?;
    let payload =
        Payload::encode(payload).map_err(|e| WorldError::serde("payload of the hook", e))?;
    engine.resume_hook(token, payload, None).await
}

/// Resumes the webhook holding `token` with an HTTP request, like [`World::resume_webhook`].
pub async fn resume_webhook(
    token: &str,
    request: &WebhookRequest,
) -> Result<HookResumed, WorldError> {
    let engine = engine()?;
    let payload = Payload::encode(request).map_err(|e| WorldError::serde("webhook request", e))?;
    engine
        .resume_hook(token, payload, Some(&request.method))
        .await
}

/// The state of a run, by run id or workflow id, as it is now (no waiting for it to finish):
/// status, input, output, activities… without the history (read that with
/// [`World::query`]). 404 if there is no such run.
pub async fn get_run(id: &str) -> Result<WorkflowState, WorldError> {
    engine()?.get_run(id, ResolveData::All).await
}

/// One page of runs matching the filter, newest first, like [`World::list_runs`]; pass the
/// returned cursor back for the next page.
///
/// ```no_run
/// # async fn f() -> Result<(), worlds_engine::WorldError> {
/// use worlds_engine::{runtime, RunStatus, WorkflowQueryFilter};
/// let page = runtime::query_runs(
///     WorkflowQueryFilter::new().status(RunStatus::Completed).limit(10),
/// )
/// .await?;
/// for run in page.data {
///     println!("{} {}", run.id, run.status);
/// }
/// # Ok(()) }
/// ```
pub async fn query_runs(filter: WorkflowQueryFilter) -> Result<Page<WorkflowState>, WorldError> {
    engine()?.list_runs(&filter).await
}
