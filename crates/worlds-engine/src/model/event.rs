//! History events: the append-only record every run state is derived from.

use serde::{Deserialize, Serialize};

use crate::clock::Millis;
use crate::error::StructuredError;
use crate::payload::Payload;

use super::runtime::{AttributeChange, RuntimeInfo};
use super::{ActivityOptions, FailureStrategy, RunStatus, WorkflowOptions};

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The version of the event format this build writes. Every event carries the version it was
/// written with, so later builds can read (and migrate) older histories.
pub const EVENT_FORMAT_VERSION: u16 = 1;

/// One entry in a run's history.
///
/// `seq` numbers a run's events densely from 0; `id` is a globally unique `evnt_` ULID.
///
/// Its JSON form is one flat object: the header fields, `"type"`, then the kind's fields
/// (see `event_json.rs` for why it is written by hand).
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Globally unique event id (`evnt_…`).
    pub id: String,
    /// The run this event belongs to.
    pub run_id: String,
    /// Position in the run's history, dense from 0.
    pub seq: u64,
    /// When it was recorded, in ms since the Unix epoch (world clock).
    pub timestamp: Millis,
    /// The event format version it was written with (`"v"` in JSON).
    pub version: u16,
    /// What happened.
    pub kind: EventKind,
}

/// Which kind of non-deterministic value a `value_recorded` event holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ValueKind {
    /// `ctx.now()`.
    Now,
    /// `ctx.random()`.
    Random,
    /// `ctx.uuid()`.
    Uuid,
}

/// How a failed run was reopened (see [`EventKind::RunReopened`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReopenAction {
    /// Run again from the failed part: every result recorded before the last failure is kept.
    Retry,
    /// Run again from a chosen earlier command position.
    Reset,
    /// A quarantined run goes on from where it stopped, under fixed code.
    Resume,
}

impl ReopenAction {
    /// The lower-case name used in events, the API and the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            ReopenAction::Retry => "retry",
            ReopenAction::Reset => "reset",
            ReopenAction::Resume => "resume",
        }
    }
}

impl std::fmt::Display for ReopenAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The run as `execute()` accepted it: what a `workflow_queued` event records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueuedRun {
    /// Registered workflow name.
    pub name: String,
    /// User-facing workflow id (defaults to the run id).
    pub workflow_id: String,
    /// The input.
    pub input: Payload,
    /// The parent run, for child workflows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    /// The parent's command position that started this child.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_position: Option<u32>,
    /// Task queue the workflow's tasks go to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_queue: Option<String>,
    /// Queue priority (higher first).
    #[serde(default)]
    pub priority: i32,
    /// Run timeout in ms, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// What to do if the workflow fails (resolved when the run was accepted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_strategy: Option<FailureStrategy>,
    /// How many restarts the `retry` strategy allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
    /// The caller's idempotency key, if any: a second start with the same key soon after
    /// returns this run (see `WorkflowOptions::idempotency_key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// The code version of the world that accepted the run
    /// ([`WorldConfig::code_version`](crate::WorldConfig::code_version)), if it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code_version: Option<String>,
    /// True for a run whose workflow code runs outside this engine (a Workflow DevKit app,
    /// another language's runtime): its history is written through
    /// [`World::external`](crate::World::external) by that runtime, and the engine stores it,
    /// shows it and answers for it, but never executes, recovers or times it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub external: bool,
    /// What the outside runtime of a run driven from outside recorded about it (its protocol
    /// version, execution context and first attributes), if anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<Box<RuntimeInfo>>,
}

impl QueuedRun {
    /// Workflow `name` under `workflow_id` with `input`, every option left at its default: no
    /// parent, the default queue and priority, no timeout, the world's failure strategy and
    /// retries, no idempotency key. Set fields on the result for the rest.
    pub fn new(name: impl Into<String>, workflow_id: impl Into<String>, input: Payload) -> Self {
        QueuedRun {
            name: name.into(),
            workflow_id: workflow_id.into(),
            input,
            parent_id: None,
            parent_position: None,
            task_queue: None,
            priority: 0,
            timeout_ms: None,
            failure_strategy: None,
            max_retries: None,
            idempotency_key: None,
            code_version: None,
            external: false,
            runtime: None,
        }
    }
}

/// What happened, with the data needed to replay it.
///
/// `position` fields number the workflow's commands (steps, timers, children, recorded values) in
/// program order; replay matches commands to history by position.
///
/// Serialized on its own, a kind is externally tagged (`{"timer_fired":{"position":2}}`);
/// inside an [`Event`] its name becomes the event's `"type"` and its fields join the event's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum EventKind {
    /// `execute()` accepted the run; it is pending until a worker starts it. Boxed: it is the
    /// largest event and comes once per run, so every other event stays small.
    WorkflowQueued(Box<QueuedRun>),
    /// A worker began executing the workflow function (again, for a retried workflow).
    WorkflowStarted {
        /// Execution attempt of the whole workflow, from 1.
        attempt: u32,
        /// The command position this attempt starts numbering from (0 for the first attempt;
        /// a retried attempt continues after the previous attempt's commands).
        #[serde(default, skip_serializing_if = "is_zero")]
        first_position: u32,
    },
    /// The workflow failed and will start again from the beginning after a delay (the `retry`
    /// failure strategy).
    WorkflowRetry {
        /// The attempt that will start.
        attempt: u32,
        /// The delay before it, in ms.
        delay_ms: u64,
        /// Where the next attempt's command positions start.
        next_position: u32,
        /// Why the previous attempt failed.
        error: StructuredError,
    },
    /// The failed workflow's saga compensations are starting (the `compensate` strategy).
    WorkflowCompensating {},
    /// Every compensation has run (successfully or not).
    WorkflowCompensated {},
    /// The failed run is set aside for inspection (the `quarantine` strategy, or a
    /// non-deterministic run).
    WorkflowQuarantined {
        /// Why.
        reason: String,
    },
    /// A failed run was reopened by hand ([`World::reopen`](crate::World::reopen)): a retry,
    /// a reset to an earlier position, or a resume after its code was fixed. The next attempt
    /// replays the results recorded at `kept_from..kept_until` (renumbered from
    /// `next_position`) and runs everything after them again.
    RunReopened {
        /// Which operation reopened it.
        action: ReopenAction,
        /// The attempt that will start.
        attempt: u32,
        /// The first command position of the attempt whose results are kept.
        kept_from: u32,
        /// The first position not kept: the command from here on runs again.
        kept_until: u32,
        /// Where the next attempt's command positions start (after every position used so
        /// far).
        next_position: u32,
        /// Who asked for it (an API key's name, a user), if known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
        /// Why, as they said.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// The bulk operation that did it, if one did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        operation: Option<String>,
    },
    /// The run was picked up again from its history by a process that was not driving it: its
    /// world started again (after a crash, a `kill -9` or a graceful stop) or another process
    /// took it over. Recorded before anything else that process records for the run, so it
    /// marks where the run resumed, and when; replay passes over it.
    RunResumed {},
    /// The workflow registered a saga compensation.
    CompensationAdded {
        /// Command position.
        position: u32,
        /// Compensation id.
        compensation_id: String,
    },
    /// A compensation ran to completion.
    CompensationExecuted {
        /// Command position of this record.
        position: u32,
        /// Compensation id.
        compensation_id: String,
    },
    /// A compensation failed; the others still run.
    CompensationFailed {
        /// Command position of this record.
        position: u32,
        /// Compensation id.
        compensation_id: String,
        /// Why.
        error: StructuredError,
    },
    /// The workflow function returned a result.
    WorkflowCompleted {
        /// The result.
        output: Payload,
    },
    /// The workflow failed.
    WorkflowFailed {
        /// Why.
        error: StructuredError,
    },
    /// The run was cancelled.
    WorkflowCancelled {
        /// Why, if given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// The workflow asked for an activity (step) to run.
    ActivityScheduled {
        /// Command position.
        position: u32,
        /// Step id (`step_…`).
        activity_id: String,
        /// Registered activity name (or step name).
        name: String,
        /// The input.
        input: Payload,
        /// Options the workflow set for this call, over the activity's defaults.
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            deserialize_with = "super::stored_options::activity"
        )]
        options: Option<Box<ActivityOptions>>,
        /// A named step (`ctx.step`): its code is a closure in the workflow, not a registered
        /// activity.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        inline: bool,
    },
    /// A worker began an attempt of the activity.
    ActivityStarted {
        /// Command position.
        position: u32,
        /// Attempt number, from 1.
        attempt: u32,
    },
    /// The activity returned a result; this resolves the command.
    ActivityCompleted {
        /// Command position.
        position: u32,
        /// Attempt that succeeded.
        attempt: u32,
        /// The result.
        output: Payload,
    },
    /// An attempt failed. If `retrying` is false this is final and resolves the command.
    ActivityFailed {
        /// Command position.
        position: u32,
        /// Attempt that failed.
        attempt: u32,
        /// Why.
        error: StructuredError,
        /// True if another attempt is scheduled (an `activity_retry` event follows).
        retrying: bool,
    },
    /// The next attempt is scheduled after a durable delay.
    ActivityRetry {
        /// Command position.
        position: u32,
        /// The attempt that will run next.
        attempt: u32,
        /// The delay before it, in ms.
        delay_ms: u64,
    },
    /// The running attempt reported that it is alive.
    ActivityHeartbeat {
        /// Command position.
        position: u32,
        /// Attempt that beat.
        attempt: u32,
        /// Optional progress message.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// The workflow started a durable timer (`ctx.sleep`).
    TimerScheduled {
        /// Command position.
        position: u32,
        /// When it fires, ms since the Unix epoch.
        fire_at: Millis,
        /// The id an external runtime gave the wait (a DevKit `wait_…` correlation id), kept so
        /// it can find the wait again; engine timers have none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timer_id: Option<String>,
    },
    /// The timer fired; this resolves the command.
    TimerFired {
        /// Command position.
        position: u32,
    },
    /// The workflow started a child workflow.
    ChildWorkflowStarted {
        /// Command position.
        position: u32,
        /// The child's run id.
        child_id: String,
        /// The child's workflow name.
        name: String,
        /// The child's input, kept so that a restart can still create the child if the process
        /// stopped between recording this and creating it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        input: Option<Payload>,
        /// The options the child was started with.
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            deserialize_with = "super::stored_options::workflow"
        )]
        options: Option<Box<WorkflowOptions>>,
    },
    /// The child completed; this resolves the command.
    ChildWorkflowCompleted {
        /// Command position.
        position: u32,
        /// The child's run id.
        child_id: String,
        /// The child's result.
        output: Payload,
    },
    /// The child failed or was cancelled; this resolves the command.
    ChildWorkflowFailed {
        /// Command position.
        position: u32,
        /// The child's run id.
        child_id: String,
        /// Why.
        error: StructuredError,
    },
    /// A value the workflow read from the outside world (`ctx.now()`, `ctx.random()`,
    /// `ctx.uuid()`), recorded so replay sees the same value.
    ValueRecorded {
        /// Command position.
        position: u32,
        /// Which kind of value.
        kind: ValueKind,
        /// The value.
        value: Payload,
    },
    /// The workflow reached `ctx.patched(patch_id)` (or `deprecate_patch`) running code that
    /// has the patch: from here this run takes the new branch, on every replay too.
    PatchRecorded {
        /// Command position.
        position: u32,
        /// The patch's id, as the code names it.
        patch_id: String,
    },
    /// The workflow created a hook (or a webhook) that the outside world resumes with a
    /// payload. Only the SHA-256 digest of its token is kept.
    HookCreated {
        /// Command position.
        position: u32,
        /// Hook id (`hook_…`).
        hook_id: String,
        /// Hex SHA-256 digest of the token.
        token_digest: String,
        /// When it stops accepting payloads (ms since the Unix epoch), if ever.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expires_at: Option<Millis>,
        /// True for a webhook (its payload is an HTTP request).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        webhook: bool,
        /// The HTTP methods that resume a webhook, upper case; empty means `POST` only.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        methods: Vec<String>,
        /// The payload type's name, for hooks made by a registered `define_hook` factory.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        hook_type: Option<String>,
        /// The named signature a webhook's requests must carry, if not the world's default.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
        /// Data the creator attached to the hook for whoever resumes it (an external runtime's
        /// hook metadata), if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        metadata: Option<Payload>,
    },
    /// The hook was resumed with a payload; this resolves the command.
    HookReceived {
        /// Command position.
        position: u32,
        /// Hook id.
        hook_id: String,
        /// The payload.
        payload: Payload,
    },
    /// The hook's token is held by another live hook: the hook was never created. This
    /// resolves the command with a conflict error.
    HookConflict {
        /// Command position.
        position: u32,
        /// Hook id.
        hook_id: String,
        /// Hex SHA-256 digest of the token.
        token_digest: String,
    },
    /// The hook's expiry passed before a payload came; this resolves the command with an error.
    HookExpired {
        /// Command position.
        position: u32,
        /// Hook id.
        hook_id: String,
    },
    /// The run finished and the hook's token was released.
    HookDisposed {
        /// Command position.
        position: u32,
        /// Hook id.
        hook_id: String,
    },
    /// The run's attributes changed (set by its outside runtime or its code).
    AttributesSet {
        /// The changes, applied in order.
        changes: Vec<AttributeChange>,
        /// The id the runtime gave this change, if any (a second change with the same id is
        /// refused).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        correlation_id: Option<String>,
        /// Who made the change, as the runtime describes it (the workflow, or a step's
        /// attempt).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        writer: Option<Payload>,
    },
}

/// Matches the kinds that concern a command position, binding it to `$p`: `Some($then)` for
/// them, `None` for the others. One list for reading and for renumbering.
macro_rules! positioned {
    ($kind:expr, $p:ident => $then:expr) => {
        match $kind {
            EventKind::ActivityScheduled { position: $p, .. }
            | EventKind::ActivityStarted { position: $p, .. }
            | EventKind::ActivityCompleted { position: $p, .. }
            | EventKind::ActivityFailed { position: $p, .. }
            | EventKind::ActivityRetry { position: $p, .. }
            | EventKind::ActivityHeartbeat { position: $p, .. }
            | EventKind::TimerScheduled { position: $p, .. }
            | EventKind::TimerFired { position: $p }
            | EventKind::ChildWorkflowStarted { position: $p, .. }
            | EventKind::ChildWorkflowCompleted { position: $p, .. }
            | EventKind::ChildWorkflowFailed { position: $p, .. }
            | EventKind::ValueRecorded { position: $p, .. }
            | EventKind::PatchRecorded { position: $p, .. }
            | EventKind::CompensationAdded { position: $p, .. }
            | EventKind::CompensationExecuted { position: $p, .. }
            | EventKind::CompensationFailed { position: $p, .. }
            | EventKind::HookCreated { position: $p, .. }
            | EventKind::HookReceived { position: $p, .. }
            | EventKind::HookConflict { position: $p, .. }
            | EventKind::HookExpired { position: $p, .. }
            | EventKind::HookDisposed { position: $p, .. } => Some($then),
            _ => None,
        }
    };
}

impl EventKind {
    /// True for what reaches a run from outside it — a cancellation, a hook's payload, a
    /// child's result — which any process may record. Everything else is recorded by the
    /// process driving the run; a store shared by several processes refuses it from the others.
    pub fn comes_from_outside(&self) -> bool {
        matches!(
            self,
            EventKind::WorkflowCancelled { .. }
                | EventKind::HookReceived { .. }
                | EventKind::ChildWorkflowCompleted { .. }
                | EventKind::ChildWorkflowFailed { .. }
        )
    }

    /// The idempotency key of a `workflow_queued` event, if it carries one.
    pub fn idempotency_key(&self) -> Option<&str> {
        match self {
            EventKind::WorkflowQueued(run) => run.idempotency_key.as_deref(),
            _ => None,
        }
    }

    /// The event's type name as written in history (`activity_completed`, …).
    pub fn type_name(&self) -> &'static str {
        match self {
            EventKind::WorkflowQueued(_) => "workflow_queued",
            EventKind::WorkflowStarted { .. } => "workflow_started",
            EventKind::WorkflowCompleted { .. } => "workflow_completed",
            EventKind::WorkflowFailed { .. } => "workflow_failed",
            EventKind::WorkflowCancelled { .. } => "workflow_cancelled",
            EventKind::WorkflowRetry { .. } => "workflow_retry",
            EventKind::WorkflowCompensating { .. } => "workflow_compensating",
            EventKind::WorkflowCompensated { .. } => "workflow_compensated",
            EventKind::WorkflowQuarantined { .. } => "workflow_quarantined",
            EventKind::RunReopened { .. } => "run_reopened",
            EventKind::RunResumed {} => "run_resumed",
            EventKind::CompensationAdded { .. } => "compensation_added",
            EventKind::CompensationExecuted { .. } => "compensation_executed",
            EventKind::CompensationFailed { .. } => "compensation_failed",
            EventKind::ActivityScheduled { .. } => "activity_scheduled",
            EventKind::ActivityStarted { .. } => "activity_started",
            EventKind::ActivityCompleted { .. } => "activity_completed",
            EventKind::ActivityFailed { .. } => "activity_failed",
            EventKind::ActivityRetry { .. } => "activity_retry",
            EventKind::ActivityHeartbeat { .. } => "activity_heartbeat",
            EventKind::TimerScheduled { .. } => "timer_scheduled",
            EventKind::HookCreated { .. } => "hook_created",
            EventKind::HookReceived { .. } => "hook_received",
            EventKind::HookConflict { .. } => "hook_conflict",
            EventKind::HookExpired { .. } => "hook_expired",
            EventKind::HookDisposed { .. } => "hook_disposed",
            EventKind::TimerFired { .. } => "timer_fired",
            EventKind::ChildWorkflowStarted { .. } => "child_workflow_started",
            EventKind::ChildWorkflowCompleted { .. } => "child_workflow_completed",
            EventKind::ChildWorkflowFailed { .. } => "child_workflow_failed",
            EventKind::ValueRecorded { .. } => "value_recorded",
            EventKind::PatchRecorded { .. } => "patch_recorded",
            EventKind::AttributesSet { .. } => "attributes_set",
        }
    }

    /// Replaces the event's payloads (inputs, outputs, recorded values, hook payloads) by
    /// `null`, or leaves an optional one out: what a list asked for with
    /// [`ResolveData::None`](super::ResolveData::None) returns. Errors and metadata stay.
    pub fn strip_data(&mut self) {
        match self {
            EventKind::WorkflowQueued(run) => run.input = Payload::null(),
            EventKind::WorkflowCompleted { output }
            | EventKind::ActivityCompleted { output, .. }
            | EventKind::ChildWorkflowCompleted { output, .. } => *output = Payload::null(),
            EventKind::ActivityScheduled { input, .. } => *input = Payload::null(),
            EventKind::ChildWorkflowStarted { input, .. } => *input = None,
            EventKind::ValueRecorded { value, .. } => *value = Payload::null(),
            EventKind::HookReceived { payload, .. } => *payload = Payload::null(),
            // Listed one by one, so that a new kind with a payload is a compile error here.
            EventKind::WorkflowStarted { .. }
            | EventKind::WorkflowRetry { .. }
            | EventKind::WorkflowCompensating {}
            | EventKind::WorkflowCompensated {}
            | EventKind::WorkflowQuarantined { .. }
            | EventKind::RunReopened { .. }
            | EventKind::RunResumed {}
            | EventKind::CompensationAdded { .. }
            | EventKind::CompensationExecuted { .. }
            | EventKind::CompensationFailed { .. }
            | EventKind::WorkflowFailed { .. }
            | EventKind::WorkflowCancelled { .. }
            | EventKind::ActivityStarted { .. }
            | EventKind::ActivityFailed { .. }
            | EventKind::ActivityRetry { .. }
            | EventKind::ActivityHeartbeat { .. }
            | EventKind::TimerScheduled { .. }
            | EventKind::TimerFired { .. }
            | EventKind::ChildWorkflowFailed { .. }
            | EventKind::PatchRecorded { .. }
            | EventKind::HookCreated { .. }
            | EventKind::HookConflict { .. }
            | EventKind::HookExpired { .. }
            | EventKind::HookDisposed { .. }
            | EventKind::AttributesSet { .. } => {}
        }
    }

    /// The command position this event concerns, if it concerns one.
    pub fn position(&self) -> Option<u32> {
        positioned!(self, position => *position)
    }

    /// The command position this event concerns, to change it (a record carried into a
    /// reopened attempt is renumbered).
    pub(crate) fn position_mut(&mut self) -> Option<&mut u32> {
        positioned!(self, position => position)
    }

    /// True for events that resolve a workflow command (the workflow is woken with a result).
    pub fn resolves_command(&self) -> bool {
        matches!(
            self,
            EventKind::ActivityCompleted { .. }
                | EventKind::ActivityFailed {
                    retrying: false,
                    ..
                }
                | EventKind::TimerFired { .. }
                | EventKind::ChildWorkflowCompleted { .. }
                | EventKind::ChildWorkflowFailed { .. }
                | EventKind::HookReceived { .. }
                | EventKind::HookConflict { .. }
                | EventKind::HookExpired { .. }
        )
    }

    /// The run status this event moves the run to, if it changes the status.
    pub fn status_change(&self) -> Option<RunStatus> {
        Some(match self {
            EventKind::WorkflowQueued(_) => RunStatus::Pending,
            EventKind::WorkflowStarted { .. } => RunStatus::Running,
            EventKind::WorkflowCompleted { .. } => RunStatus::Completed,
            EventKind::WorkflowFailed { .. } => RunStatus::Failed,
            EventKind::WorkflowCancelled { .. } => RunStatus::Cancelled,
            EventKind::WorkflowCompensating { .. } => RunStatus::Compensating,
            EventKind::WorkflowCompensated { .. } => RunStatus::Compensated,
            EventKind::RunReopened { .. } => RunStatus::Running,
            _ => return None,
        })
    }

    /// True for events after which the run's status is terminal (a failure may still be
    /// followed by compensation).
    pub fn is_terminal(&self) -> bool {
        self.status_change().is_some_and(RunStatus::is_terminal)
    }
}
