//! # worlds-engine
//!
//! A durable workflow engine you embed in your program. Workflows are async functions whose
//! steps (activities) are recorded as they complete; if the process dies, or the run is evicted
//! from memory while it waits, the workflow runs again from the top against its recorded
//! history and carries on from where it was, without redoing recorded steps.
//!
//! The roles, and how data flows between them:
//!
//! * [`World`] — what your program creates: holds the registered definitions, a [`store`], a
//!   task [`queue`] and the workers, and starts runs.
//! * A **workflow** ([`workflow()`]) — deterministic orchestration code. It talks to the outside
//!   only through its [`WorkflowContext`]: `ctx.run(step)`, `ctx.sleep(..)`,
//!   `ctx.execute_child(..)`, `ctx.now()`.
//! * An **activity** ([`activity()`]) — a step that does real work, retried by its
//!   [`RetryConfig`](retry::RetryConfig), with timeouts and heartbeats ([`ActivityContext`]).
//! * The **history** — the run's append-only list of [`Event`]s; run state
//!   ([`WorkflowState`]) is derived from it.
//! * The [`clock`] — the only source of time, so tests ([`testing::TestWorld`]) can skip days.
//!
//! ```
//! use worlds_engine::prelude::*;
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let charge = activity("charge", |_ctx: ActivityContext, cents: u64| async move {
//!     Ok::<_, StepError>(format!("receipt-{cents}"))
//! });
//! let step = charge.clone();
//! let checkout = workflow("checkout", move |ctx: WorkflowContext, cents: u64| {
//!     let step = step.clone();
//!     async move { Ok::<_, WorkflowError>(ctx.run(&step, cents).await?) }
//! });
//!
//! let world = World::new(WorldConfig::memory())?;
//! world.register(&charge)?.register(&checkout)?;
//! world.start().await?;
//! let run = world.execute(&checkout, 1999, WorkflowOptions::default()).await?;
//! assert_eq!(run.result().await?, "receipt-1999");
//! # Ok::<(), WorldError>(())
//! # }).unwrap();
//! ```

#![forbid(unsafe_code)]

pub mod clock;
pub mod current;
pub mod duration;
mod engine;
pub mod error;
pub mod fetch;
pub mod hooks;
pub mod http;
pub mod ids;
pub mod model;
mod payload;
pub mod queue;
pub mod resources;
pub mod retry;
pub mod runtime;
pub mod store;
pub mod streams;
pub mod telemetry;
pub mod testing;
mod worker;
mod world;

pub use engine::activity::ActivityContext;
pub use engine::context::{CommandFuture, WorkflowContext, WorkflowMetadata};
pub use engine::definitions::{activity, workflow, Activity, Definition, Workflow};
pub use engine::errors::{ContextError, StepError, WorkflowError};
pub use error::{ErrorKind, NonDeterminism, StructuredError, WorldError};
pub use hooks::{
    define_hook, Hook, HookDefinition, HookOptions, HookResumed, HookTicket, Webhook,
    WebhookRequest,
};
pub use model::{
    ActivityOptions, ActivityState, ActivityStatus, CompensationState, Event, EventKind,
    FailureStrategy, HookState, HookStatus, OnConflict, Page, ResolveData, RunStatus, StatusFilter,
    WorkflowOptions, WorkflowQueryFilter, WorkflowState,
};
pub use payload::Payload;
pub use runtime::initialize_runtime;
pub use streams::{StepStream, StreamChunk, StreamInfo, WorkflowStream, DEFAULT_STREAM};
pub use telemetry::{HeartbeatEntry, HeartbeatKind, WorldMetrics};
pub use worker::{WorkerInfo, WorkerStatus};
pub use world::{HookSecret, Persistence, WorkflowHandle, World, WorldConfig};

/// Everything the common path needs: `use worlds_engine::prelude::*;`.
pub mod prelude {
    pub use crate::retry::{retry_patterns, Backoff, FatalError, RetryConfig, RetryableError};
    pub use crate::{
        activity, define_hook, workflow, Activity, ActivityContext, ActivityOptions, ContextError,
        FailureStrategy, Hook, HookDefinition, HookOptions, OnConflict, Persistence, RunStatus,
        StepError, WebhookRequest, Workflow, WorkflowContext, WorkflowError, WorkflowHandle,
        WorkflowOptions, WorkflowQueryFilter, WorkflowState, World, WorldConfig, WorldError,
    };
}

/// The README's code, compiled as a doctest so it cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
