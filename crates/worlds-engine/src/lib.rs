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
//!   task queue and the workers, and starts runs.
//! * A **workflow** ([`workflow()`]) — deterministic orchestration code. It talks to the outside
//!   only through its [`WorkflowContext`]: `ctx.run(step)`, `ctx.sleep(..)`,
//!   `ctx.execute_child(..)`, `ctx.now()`.
//! * An **activity** ([`activity()`]) — a step that does real work, retried by its
//!   [`RetryConfig`](retry::RetryConfig), with timeouts and heartbeats ([`ActivityContext`]).
//! * The **history** — the run's append-only list of [`Event`]s; run state
//!   ([`WorkflowState`]) is derived from it.
//! * The [`clock`] — the only source of time, so tests (`testing::TestWorld`, feature
//!   `test-util`) can skip days.
//!
//! Definitions can also be written as `async fn`s with the attributes `#[workflow]`, `#[step]`
//! (a function whose call is a durable step) and `#[activity]` (feature `macros`); see
//! `examples/macros.rs`.
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
//!
//! # Features
//!
//! The core — worlds, definitions, contexts, hooks and webhooks (resumed with
//! [`World::resume_webhook`]), schedules, streams, the stores, metrics and logs — needs no
//! feature. What not every program needs, and what brings heavy dependencies, is opt-in:
//!
//! | feature | default | enables |
//! | --- | --- | --- |
//! | `macros` | yes | the attributes `#[workflow]`, `#[step]` and `#[activity]` (worlds-engine-macros) |
//! | `http` | no | the webhook endpoint: `World::webhook_router` (an axum `Router`), `World::serve_webhooks` and `http::WebhookServer` (axum, hyper, tower-http) |
//! | `fetch` | no | durable HTTP requests: `WorkflowContext::fetch`, `current::fetch` and the `fetch` module (reqwest, rustls) |
//! | `prometheus` | no | `World::metrics_prometheus` and `telemetry::prometheus`, with the run-duration histogram (prometheus-client) |
//! | `console-log` | no | `WorldLogs::init` and `telemetry::logs::ClockTime`: a ready-made subscriber that also prints to the console (tracing-subscriber's `fmt`) |
//! | `test-util` | no | the `testing` module: `TestWorld`, an in-memory world on virtual time; the storage conformance suite; the deterministic simulation |
//! | `fuzzing` | no | entry points for the fuzz targets in `fuzz/`; not an API |
//!
//! [`WorldConfig`] has the same fields whatever the features (`webhook_server` included), so a
//! configuration reads the same with or without them.
//!
//! # Where things are
//!
//! The crate root and the [`prelude`] hold what a workflow author uses every day: [`World`],
//! [`WorldConfig`], the definitions and their contexts, options and errors. The rest lives in
//! the module it belongs to:
//!
//! | module | holds |
//! | --- | --- |
//! | [`model`] | run statuses, history events, run and step state, options, queries and pages |
//! | [`error`] | [`WorldError`], its kinds and codes, the stored error form, non-determinism reports |
//! | [`retry`] | [`RetryConfig`](retry::RetryConfig), backoff, ready-made patterns, predicates, `with_retry` |
//! | [`hooks`] | hooks and webhooks: definitions, options, tickets, the requests that resume them |
//! | [`schedule`] | cron and one-off schedules: `Schedule`, `ScheduleConfig`, catch-up policies |
//! | [`streams`] | the chunks a run publishes while it works, their writers and readers |
//! | [`telemetry`] | metrics (`WorldMetrics`), heartbeat views, logs (the log layer, reading logs back) |
//! | [`store`] | the `Store` contract and its memory, file and hybrid implementations |
//! | [`runtime`] | free functions on a world set once with `initialize_runtime` |
//! | [`current`] | free functions on the workflow or step the calling code runs in |
//! | [`clock`] | the `Clock` trait, the system clock and a virtual clock |
//! | [`duration`] | durations as users write them (`"5s"`, `"1h"`) |
//! | [`ids`] | the prefixed identifiers of runs, steps, events, hooks and chunks |
//! | [`http`] | the webhook endpoint's options, and with `http` its router and server |
//! | `fetch` | durable HTTP requests (feature `fetch`) |
//! | `testing` | the virtual-time test harness and the deterministic simulation with fault injection (feature `test-util`) |

#![forbid(unsafe_code)]

mod atomic_file;
pub mod cli;
pub mod clock;
mod config;
pub mod current;
pub mod duration;
mod engine;
pub mod error;
#[cfg(feature = "fetch")]
pub mod fetch;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
pub mod hooks;
pub mod http;
pub mod ids;
mod macro_support;
pub mod model;
mod payload;
mod queue;
mod resources;
pub mod retry;
pub mod runtime;
pub mod schedule;
mod status;
pub mod store;
pub mod streams;
pub mod telemetry;
#[cfg(feature = "test-util")]
pub mod testing;
mod worker;
mod world;

pub use config::{
    default_data_dir, redact_url, DatabaseConfig, EncryptionKeys, HookSecret, Persistence,
    RetentionConfig, RetentionRule, RetentionVerdict, WorldConfig, DATABASE_URL_ENV, DATA_DIR_ENV,
    DEFAULT_DATA_DIR, ENCRYPTION_KEYS_ENV,
};
pub use engine::authoring::activity::ActivityContext;
pub use engine::authoring::context::{CommandFuture, WorkflowContext, WorkflowMetadata};
pub use engine::authoring::definitions::{activity, workflow, Activity, Definition, Workflow};
pub use engine::authoring::errors::{ContextError, StepError, WorkflowError};
pub use engine::authoring::hook_handles::{Hook, Webhook};
pub use engine::bulk::{BulkAction, BulkProgress, BulkRefusal, BulkRequest, BULK_WORKFLOW};
pub use engine::prune::{PruneReport, PRUNE_WORKFLOW};
pub use error::{ErrorKind, StructuredError, Unopened, WorldError};
pub use hooks::{define_hook, HookDefinition, HookOptions, HookTicket, WebhookRequest};
pub use model::{
    ActivityOptions, ActivityStatus, Event, EventKind, FailureStrategy, HookStatus, OnConflict,
    ResolveData, RunStatus, WorkflowOptions, WorkflowQueryFilter, WorkflowState,
};
pub use payload::{Payload, BYTES_KEY};
pub use worker::{WorkerInfo, WorkerStatus};
pub use world::{
    Divergence, ExternalRuns, HistoryVerdict, NewExternalRun, RetentionStatus, VerifyOptions,
    VerifyReport, WorkflowHandle, WorkflowVerified, World, WorldKeys, WorldLogs, WorldSchedules,
    WorldStreams, WorldWorkers,
};
// The attributes that turn an `async fn` into a workflow, an activity or a durable step. They
// share their names with the `activity` and `workflow` functions: macros live in a namespace of their own.
#[cfg(feature = "macros")]
pub use worlds_engine_macros::{activity, step, workflow};

/// What the code generated by the attributes calls; not a public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::macro_support::*;
}

/// What a workflow author uses day to day, `use worlds_engine::prelude::*;`: the definitions
/// and their contexts, options and errors, [`World`] and [`WorldConfig`], and the common enums.
/// Inspection ([`WorkflowState`], [`WorkflowQueryFilter`]), retry details
/// ([`retry::Backoff`]) and the rest are imported from the crate root or their module.
///
/// `workflow` and `activity` here are both the functions that make a definition from a closure
/// and the attributes (`#[workflow]`, `#[activity]`) that make one from an `async fn`; `step`
/// is the `#[step]` attribute.
pub mod prelude {
    pub use crate::retry::{retry_patterns, FatalError, RetryConfig, RetryableError};
    #[cfg(feature = "macros")]
    pub use crate::step;
    pub use crate::{
        activity, define_hook, workflow, Activity, ActivityContext, ActivityOptions, ContextError,
        FailureStrategy, HookDefinition, HookOptions, OnConflict, Persistence, RunStatus,
        StepError, WebhookRequest, Workflow, WorkflowContext, WorkflowError, WorkflowHandle,
        WorkflowOptions, World, WorldConfig, WorldError,
    };
}

/// The README's code, compiled as a doctest so it cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
