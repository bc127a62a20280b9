//! What workflow code's handles ask of their run, as a trait the runtime implements.
//!
//! A [`WorkflowContext`](super::context::WorkflowContext), the [`CommandFuture`]s it returns,
//! its hooks and its stream writers reach their run only through a [`RunDriver`]: they issue
//! *commands* (each taking a position in program order), poll for their results and queue
//! stream writes. The replay machine (`engine/machine.rs`, `RunCore`) is the implementation:
//! it matches the commands against the run's history and hands the new ones to the executor.
//! The vocabulary of that exchange — [`CommandDesc`], [`NewCommand`], [`Resolution`],
//! [`RunInfo`] — lives here with the trait, so this side names nothing of the runtime.
//!
//! [`CommandFuture`]: super::context::CommandFuture

use std::fmt;
use std::sync::Arc;
use std::task::Waker;

use bytes::Bytes;
use futures::future::BoxFuture;

use crate::clock::{Clock, Millis};
use crate::error::StructuredError;
use crate::hooks::{HookKit, NewHook};
use crate::ids::IdGenerator;
use crate::model::{ActivityOptions, FailureStrategy, ValueKind, WorkflowOptions};
use crate::payload::Payload;
use crate::telemetry::logs::Logs;

use super::activity::ActivityFn;
use super::errors::{ContextError, WorkflowError};

/// What a command is, as far as replay matching cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CommandDesc {
    Activity {
        name: String,
    },
    Timer,
    Child {
        name: String,
    },
    Value(ValueKind),
    Compensation,
    CompensationOutcome,
    Hook,
    /// A patch marker (`ctx.patched(id)`), recorded where new code took its new branch.
    Patch {
        id: String,
    },
}

impl fmt::Display for CommandDesc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CommandDesc::Activity { name } => write!(f, "step '{name}'"),
            CommandDesc::Timer => f.write_str("a timer (sleep)"),
            CommandDesc::Child { name } => write!(f, "child workflow '{name}'"),
            CommandDesc::Value(ValueKind::Now) => f.write_str("ctx.now()"),
            CommandDesc::Value(ValueKind::Random) => f.write_str("ctx.random()"),
            CommandDesc::Value(ValueKind::Uuid) => f.write_str("ctx.uuid()"),
            CommandDesc::Compensation => f.write_str("ctx.add_compensation(..)"),
            CommandDesc::CompensationOutcome => f.write_str("the outcome of a compensation"),
            CommandDesc::Hook => f.write_str("a hook"),
            CommandDesc::Patch { id } => write!(f, "ctx.patched(\"{id}\")"),
        }
    }
}

/// What a command resolved to.
#[derive(Debug, Clone)]
pub(crate) enum Resolution {
    Value(Payload),
    Error(ContextError),
}

/// A command issued by code that history does not hold yet; the executor records it.
#[derive(Debug)]
pub(crate) enum NewCommand {
    Activity {
        position: u32,
        name: String,
        input: Payload,
        options: Option<Box<ActivityOptions>>,
        inline: bool,
    },
    Timer {
        position: u32,
        fire_at: Millis,
    },
    Child {
        position: u32,
        name: String,
        input: Payload,
        options: WorkflowOptions,
    },
    Value {
        position: u32,
        kind: ValueKind,
        value: Payload,
    },
    CompensationAdded {
        position: u32,
        compensation_id: String,
    },
    CompensationOutcome {
        position: u32,
        compensation_id: String,
        error: Option<StructuredError>,
    },
    Hook(NewHook),
    Patch {
        position: u32,
        patch_id: String,
    },
}

/// A registered compensation: workflow code to run if the workflow fails, given the run it
/// belongs to (the context wraps it back into a
/// [`WorkflowContext`](super::context::WorkflowContext)).
pub(crate) type CompensationFn =
    Box<dyn FnOnce(Arc<dyn RunDriver>) -> BoxFuture<'static, Result<(), WorkflowError>> + Send>;

/// Facts about a run that its workflow code can read.
#[derive(Debug, Clone)]
pub(crate) struct RunInfo {
    pub(crate) run_id: String,
    pub(crate) workflow_id: String,
    pub(crate) name: String,
    pub(crate) parent_id: Option<String>,
    pub(crate) created_at: Millis,
    pub(crate) started_at: Millis,
    pub(crate) attempt: u32,
    pub(crate) failure_strategy: FailureStrategy,
    pub(crate) max_retries: u32,
}

/// Builds the record of a new hook from its position and id.
pub(crate) type NewHookFn<'a> = Box<dyn FnOnce(u32, &str) -> NewHook + 'a>;

/// What a run's handles ask of it: facts about the run, the services its code uses, and the
/// commands it issues. `RunCore` (the replay machine) implements it.
pub(crate) trait RunDriver: Send + Sync {
    /// Facts about the run.
    fn info(&self) -> &RunInfo;

    /// The world's clock.
    fn clock(&self) -> &Arc<dyn Clock>;

    /// The world's id generator.
    fn ids(&self) -> &Arc<IdGenerator>;

    /// The hook token key, payload validators and webhook base URL.
    fn hooks(&self) -> &Arc<HookKit>;

    /// The world's logs, for the lines workflow code logs through its context.
    fn logs(&self) -> &Arc<Logs>;

    /// True once cancellation of the run was requested.
    fn is_cancelled(&self) -> bool;

    /// True while the code re-issues commands history already holds.
    fn is_replaying(&self) -> bool;

    /// Issues a command that resolves later; `new` builds what to record if history does not
    /// hold it. Returns its position.
    fn issue(&self, desc: CommandDesc, new: Box<dyn FnOnce(u32) -> NewCommand + '_>) -> u32;

    /// Takes a position for a command that is never recorded (its argument was refused).
    fn issue_unrecorded(&self, desc: CommandDesc) -> u32;

    /// Issues a value command (`ctx.now()`, `random()`, `uuid()`): the recorded value on
    /// replay, `fresh()` recorded the first time.
    fn issue_value(&self, kind: ValueKind, fresh: Box<dyn FnOnce() -> Payload + '_>) -> Payload;

    /// Issues a hook; returns its position and hook id (see `RunCore::issue_hook`).
    fn issue_hook(
        &self,
        fresh_id: Box<dyn FnOnce() -> String + '_>,
        new: NewHookFn<'_>,
    ) -> (u32, String);

    /// `ctx.patched(id)`: true where the code takes the patch's new branch.
    fn patch(&self, id: &str) -> bool;

    /// True if the command at `position` has its result already.
    fn has_result(&self, position: u32) -> bool;

    /// Resolves the command at `position` at once.
    fn resolve_now(&self, position: u32, resolution: Resolution);

    /// The result of the command at `position`, or `None` (and `waker` kept) while it has none.
    fn poll_slot(&self, position: u32, waker: &Waker) -> Option<Resolution>;

    /// Keeps the closure of the named step at `position` until its result is recorded.
    fn register_step(&self, position: u32, step: ActivityFn);

    /// Registers a compensation.
    fn add_compensation(&self, compensation: CompensationFn);

    /// Queues a chunk for stream `name`, stored once the workflow yields.
    fn push_stream_write(&self, name: Arc<str>, data: Bytes) -> Result<(), ContextError>;

    /// Queues the close of stream `name`.
    fn push_stream_close(&self, name: Arc<str>);
}
