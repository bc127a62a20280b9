//! Workflow and activity definitions ([`Workflow`], [`Activity`], [`Definition`]), and the
//! context calls that take one (`ctx.run`, `ctx.execute_child`). The registry that holds them
//! by name is the runtime's (`engine/registry.rs`).

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{codes, StructuredError};
use crate::model::{ActivityOptions, WorkflowOptions};
use crate::payload::Payload;
use crate::retry::FatalError;

use super::activity::{ActivityContext, ActivityFn};
use super::context::{CommandFuture, WorkflowContext};
use super::errors::{StepError, WorkflowError};

/// What a workflow's code returns.
pub(crate) type WorkflowFuture = BoxFuture<'static, Result<Payload, WorkflowError>>;
/// Workflow code, taking its context and its input.
pub(crate) type WorkflowFn = Arc<dyn Fn(WorkflowContext, Payload) -> WorkflowFuture + Send + Sync>;
type Validate = fn(&Payload) -> Result<(), serde_json::Error>;

fn validate_as<T: DeserializeOwned>(payload: &Payload) -> Result<(), serde_json::Error> {
    payload.decode::<T>().map(drop)
}

/// A workflow definition: a name, an async function of `(WorkflowContext, I)`, and default
/// options. Make one with [`workflow`].
pub struct Workflow<I, O> {
    pub(crate) def: WorkflowDef,
    _types: PhantomData<fn(I) -> O>,
}

impl<I, O> Clone for Workflow<I, O> {
    fn clone(&self) -> Self {
        Self {
            def: self.def.clone(),
            _types: PhantomData,
        }
    }
}

impl<I, O> std::fmt::Debug for Workflow<I, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workflow")
            .field("name", &self.def.name)
            .finish()
    }
}

#[derive(Clone)]
pub(crate) struct WorkflowDef {
    pub(crate) name: Arc<str>,
    pub(crate) handler: WorkflowFn,
    pub(crate) options: WorkflowOptions,
    pub(crate) validate: Validate,
}

impl<I, O> Workflow<I, O> {
    /// The registered name.
    pub fn name(&self) -> &str {
        &self.def.name
    }

    /// Sets the default options used when this workflow is executed.
    pub fn with_options(mut self, options: WorkflowOptions) -> Self {
        self.def.options = options;
        self
    }

    /// The default options.
    pub fn options(&self) -> &WorkflowOptions {
        &self.def.options
    }
}

/// Defines a workflow from a name and an async function.
///
/// The function receives a [`WorkflowContext`] and the deserialized input. It must be
/// deterministic: everything it learns from the outside world must come through the context
/// (steps, timers, `ctx.now()`…), because after a restart it is run again against the recorded
/// history.
///
/// ```
/// use worlds_engine::prelude::*;
/// let greet = workflow("greet", |_ctx: WorkflowContext, name: String| async move {
///     Ok::<_, WorkflowError>(format!("hello, {name}"))
/// });
/// assert_eq!(greet.name(), "greet");
/// ```
pub fn workflow<I, O, F, Fut>(name: impl Into<String>, handler: F) -> Workflow<I, O>
where
    I: DeserializeOwned + Send + 'static,
    O: Serialize + Send + 'static,
    F: Fn(WorkflowContext, I) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, WorkflowError>> + Send + 'static,
{
    let name: Arc<str> = name.into().into();
    let label = name.clone();
    let handler: WorkflowFn = Arc::new(move |ctx, payload: Payload| {
        let input = payload.decode::<I>();
        match input {
            Ok(input) => handler(ctx, input)
                .map(|result| {
                    let output = result?;
                    Payload::encode(&output).map_err(|e| {
                        serialization(format!("the output could not be serialized: {e}")).into()
                    })
                })
                .boxed(),
            Err(e) => {
                let message = format!("input of workflow '{label}' does not match its type: {e}");
                async move { Err(serialization(message).into()) }.boxed()
            }
        }
    });
    Workflow {
        def: WorkflowDef {
            name,
            handler,
            options: WorkflowOptions::default(),
            validate: validate_as::<I>,
        },
        _types: PhantomData,
    }
}

/// An activity definition: a name, an async function of `(ActivityContext, I)`, and default
/// options (retry, timeouts, task queue). Make one with [`activity`].
pub struct Activity<I, O> {
    pub(crate) def: ActivityDef,
    _types: PhantomData<fn(I) -> O>,
}

impl<I, O> Clone for Activity<I, O> {
    fn clone(&self) -> Self {
        Self {
            def: self.def.clone(),
            _types: PhantomData,
        }
    }
}

impl<I, O> std::fmt::Debug for Activity<I, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Activity")
            .field("name", &self.def.name)
            .finish()
    }
}

#[derive(Clone)]
pub(crate) struct ActivityDef {
    pub(crate) name: Arc<str>,
    pub(crate) handler: ActivityFn,
    pub(crate) options: ActivityOptions,
}

impl<I, O> Activity<I, O> {
    /// The registered name.
    pub fn name(&self) -> &str {
        &self.def.name
    }

    /// Sets the default options: retry policy, timeouts, task queue.
    pub fn with_options(mut self, options: ActivityOptions) -> Self {
        self.def.options = options;
        self
    }

    /// The default options.
    pub fn options(&self) -> &ActivityOptions {
        &self.def.options
    }
}

/// Defines an activity (a step) from a name and an async function.
///
/// Activities do the real work — I/O, calls to other systems — and may run more than once if a
/// process dies mid-way, so make them idempotent. Their results are recorded: once recorded, an
/// activity is never run again for that workflow command.
///
/// ```
/// use worlds_engine::prelude::*;
/// let double = activity("double", |_ctx: ActivityContext, n: u64| async move {
///     Ok::<_, StepError>(n * 2)
/// })
/// .with_options(ActivityOptions::new().retry(retry_patterns::api()));
/// assert_eq!(double.name(), "double");
/// ```
pub fn activity<I, O, F, Fut>(name: impl Into<String>, handler: F) -> Activity<I, O>
where
    I: DeserializeOwned + Send + 'static,
    O: Serialize + Send + 'static,
    F: Fn(ActivityContext, I) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, StepError>> + Send + 'static,
{
    let name: Arc<str> = name.into().into();
    let label = name.clone();
    let handler: ActivityFn = Arc::new(move |ctx, payload: Payload| match payload.decode::<I>() {
        Ok(input) => handler(ctx, input)
            .map(|result| {
                let output = result?;
                Payload::encode(&output).map_err(|e| {
                    let message = format!("the output could not be serialized: {e}");
                    FatalError::new(message)
                        .with_code(codes::SERIALIZATION)
                        .into()
                })
            })
            .boxed(),
        Err(e) => {
            let message = format!("input of activity '{label}' does not match its type: {e}");
            let error = FatalError::new(message).with_code(codes::SERIALIZATION);
            async move { Err(error.into()) }.boxed()
        }
    });
    Activity {
        def: ActivityDef {
            name,
            handler,
            options: ActivityOptions::default(),
        },
        _types: PhantomData,
    }
}

/// Anything that can be registered on a world: a workflow or an activity.
pub enum Definition {
    /// A workflow.
    #[doc(hidden)]
    Workflow(WorkflowDefHandle),
    /// An activity.
    #[doc(hidden)]
    Activity(ActivityDefHandle),
    /// A typed hook factory: registering it lets `resume_hook` check payloads.
    #[doc(hidden)]
    Hook {
        /// The definition's name.
        name: String,
        /// Its payload check.
        validator: crate::hooks::HookValidator,
    },
}

impl<T: serde::Serialize + serde::de::DeserializeOwned + 'static>
    From<&crate::hooks::HookDefinition<T>> for Definition
{
    fn from(hook: &crate::hooks::HookDefinition<T>) -> Self {
        Definition::Hook {
            name: hook.name().to_owned(),
            validator: hook.validator(),
        }
    }
}

/// Opaque carrier of a workflow definition.
#[doc(hidden)]
pub struct WorkflowDefHandle(pub(crate) WorkflowDef);

/// Opaque carrier of an activity definition.
#[doc(hidden)]
pub struct ActivityDefHandle(pub(crate) ActivityDef);

impl<I, O> From<Workflow<I, O>> for Definition {
    fn from(w: Workflow<I, O>) -> Self {
        Definition::Workflow(WorkflowDefHandle(w.def))
    }
}

impl<I, O> From<&Workflow<I, O>> for Definition {
    fn from(w: &Workflow<I, O>) -> Self {
        Definition::Workflow(WorkflowDefHandle(w.def.clone()))
    }
}

impl<I, O> From<Activity<I, O>> for Definition {
    fn from(a: Activity<I, O>) -> Self {
        Definition::Activity(ActivityDefHandle(a.def))
    }
}

impl<I, O> From<&Activity<I, O>> for Definition {
    fn from(a: &Activity<I, O>) -> Self {
        Definition::Activity(ActivityDefHandle(a.def.clone()))
    }
}

/// A failure to convert a value to or from its JSON payload: recorded with the
/// `SERIALIZATION` code.
fn serialization(message: String) -> StructuredError {
    StructuredError::new(message).with_code(codes::SERIALIZATION)
}

/// The calls that take a definition.
impl WorkflowContext {
    /// Runs an activity with its default options and returns its result.
    ///
    /// The step is scheduled when this is *called* (not when the future is first polled), so
    /// steps combined with `futures::join!` keep their program order on every replay.
    pub fn run<I, O>(&self, activity: &Activity<I, O>, input: I) -> CommandFuture<O>
    where
        I: Serialize,
        O: DeserializeOwned,
    {
        self.run_step(&activity.def.name, input, None)
    }

    /// Runs an activity with options that override its defaults for this call.
    pub fn run_with<I, O>(
        &self,
        activity: &Activity<I, O>,
        input: I,
        options: ActivityOptions,
    ) -> CommandFuture<O>
    where
        I: Serialize,
        O: DeserializeOwned,
    {
        self.run_step(&activity.def.name, input, Some(options))
    }

    /// Starts a child workflow and waits for its result. The child's `parent_id` is this run.
    pub fn execute_child<I, O>(
        &self,
        workflow: &Workflow<I, O>,
        input: I,
        options: WorkflowOptions,
    ) -> CommandFuture<O>
    where
        I: Serialize,
        O: DeserializeOwned,
    {
        self.execute_child_by_name(&workflow.def.name, input, options)
    }

    /// Registers a compensation that runs one step: `activity` with `input`.
    pub fn add_compensation_step<I, O>(&self, activity: &Activity<I, O>, input: I)
    where
        I: Serialize,
    {
        let name = activity.def.name.to_string();
        let input = Payload::encode(&input);
        self.add_compensation(move |ctx| async move {
            let input = input.map_err(|e| {
                WorkflowError::msg(format!(
                    "compensation input of '{name}' does not serialize: {e}"
                ))
            })?;
            ctx.run_by_name::<Payload, serde::de::IgnoredAny>(&name, input)
                .await?;
            Ok(())
        });
    }
}
