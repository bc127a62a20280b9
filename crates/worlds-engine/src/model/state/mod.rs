//! Materialized run state, derived from history by [`WorkflowState::apply`].
//!
//! [`WorkflowState::check`] (may this event be appended now?) and [`WorkflowState::apply`]
//! (what it changes) dispatch each event kind to the file of its family, which holds the
//! family's rules beside their effects:
//!
//! - [`run`]: the run's own life (queued, started, retry, reopened, resumed, quarantined,
//!   completed, failed, cancelled) and its attributes;
//! - [`steps`]: activities (scheduled, started, completed, failed, retry, heartbeat);
//! - [`timers`]: timers (scheduled, fired);
//! - [`hooks`]: hooks and webhooks (created, received, conflict, expired, disposed);
//! - [`children`]: child workflows (started, completed, failed);
//! - [`values`]: recorded values and patch markers;
//! - [`compensation`]: the saga (compensating, compensated, and each compensation).
//!
//! Which run statuses may follow which is the status machine's table
//! ([`RunStatus::can_become`]); the families consult it through one helper here.

mod children;
mod compensation;
mod hooks;
mod run;
mod steps;
mod timers;
mod values;

use serde::{Deserialize, Serialize};

use crate::clock::Millis;
use crate::error::{StructuredError, WorldError};
use crate::payload::Payload;

use super::runtime::RuntimeInfo;
use super::{Event, EventKind, FailureStrategy, HookState, QueuedRun, ResolveData, RunStatus};

pub use compensation::CompensationState;
pub use run::PendingRetry;
pub use steps::{ActivityState, ActivityStatus};
use timers::PendingTimers;

/// Everything known about one run: what `world.query(id)` returns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowState {
    /// Run id (`wrun_…`).
    pub id: String,
    /// Workflow id (caller-chosen, or the run id).
    pub workflow_id: String,
    /// Registered workflow name.
    pub name: String,
    /// Current status.
    pub status: RunStatus,
    /// Input (left out with `ResolveData::None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Payload>,
    /// Result, once completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Payload>,
    /// Failure, once failed (or cancelled with a reason). Boxed: most runs never have one,
    /// and this state is kept in memory for every run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Box<StructuredError>>,
    /// Parent run, for child workflows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    /// The parent's command position that started this child.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_position: Option<u32>,
    /// Task queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_queue: Option<String>,
    /// Queue priority.
    pub priority: i32,
    /// Run timeout in ms, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// When `execute` accepted it.
    pub created_at: Millis,
    /// When a worker first started it (set once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Millis>,
    /// When it reached a terminal status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Millis>,
    /// When anything last changed.
    pub updated_at: Millis,
    /// Workflow execution attempt, from 1 once started; above 1 after `retry` restarts.
    pub attempt: u32,
    /// What happens if the workflow fails (`None`: the world's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_strategy: Option<FailureStrategy>,
    /// Restarts the `retry` strategy allows (`None`: the default, 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
    /// The idempotency key it was started with, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// The code version of the world that accepted the run, if it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code_version: Option<String>,
    /// True for a run driven from outside the engine ([`QueuedRun::external`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub external: bool,
    /// Set when the run is quarantined: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quarantine: Option<String>,
    /// Its activities, in command order.
    pub activities: Vec<ActivityState>,
    /// Child runs it started.
    pub children: Vec<String>,
    /// Its saga compensations.
    pub compensations: Vec<CompensationState>,
    /// Its hooks and webhooks, in command order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<HookState>,
    /// The full history (left out of list queries and with `ResolveData::None`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Event>,
    /// Number of events in the history.
    pub event_count: u64,
    /// When it was last reopened by hand (retry, reset, resume), if ever: its timeout counts
    /// from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reopened_at: Option<Millis>,
    /// Timers not yet fired: position → fire time. Kept in the serialized form too, so a
    /// state stored as a snapshot and read back still knows them.
    #[serde(default, skip_serializing_if = "PendingTimers::is_empty")]
    pending_timers: PendingTimers,
    /// A `workflow_retry` (or a reopening) waiting for its attempt to start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    retry_pending: Option<Box<PendingRetry>>,
    /// What the outside runtime of a run driven from outside recorded about it, with the
    /// run's attributes as they stand ([`EventKind::AttributesSet`] changes them). Boxed:
    /// runs the engine drives have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<Box<RuntimeInfo>>,
}

impl WorkflowState {
    /// The state right after its first event, which must be `workflow_queued`.
    pub fn from_first_event(event: &Event) -> Result<Self, WorldError> {
        let EventKind::WorkflowQueued(run) = &event.kind else {
            return Err(WorldError::Internal(format!(
                "run {} history starts with {} instead of workflow_queued",
                event.run_id,
                event.kind.type_name()
            )));
        };
        let QueuedRun {
            name,
            workflow_id,
            input,
            parent_id,
            parent_position,
            task_queue,
            priority,
            timeout_ms,
            failure_strategy,
            max_retries,
            idempotency_key,
            code_version,
            external,
            runtime,
        } = &**run;
        Ok(WorkflowState {
            id: event.run_id.clone(),
            workflow_id: workflow_id.clone(),
            name: name.clone(),
            status: RunStatus::Pending,
            input: Some(input.clone()),
            output: None,
            error: None,
            parent_id: parent_id.clone(),
            parent_position: *parent_position,
            task_queue: task_queue.clone(),
            priority: *priority,
            timeout_ms: *timeout_ms,
            created_at: event.timestamp,
            started_at: None,
            completed_at: None,
            updated_at: event.timestamp,
            attempt: 0,
            failure_strategy: *failure_strategy,
            max_retries: *max_retries,
            idempotency_key: idempotency_key.clone(),
            code_version: code_version.clone(),
            external: *external,
            quarantine: None,
            activities: Vec::new(),
            children: Vec::new(),
            compensations: Vec::new(),
            hooks: Vec::new(),
            history: Vec::new(),
            event_count: 1,
            reopened_at: None,
            pending_timers: PendingTimers::default(),
            retry_pending: None,
            runtime: runtime.clone(),
        })
    }

    /// Rebuilds the state from a whole history.
    pub fn from_history<E: std::borrow::Borrow<Event>>(events: &[E]) -> Result<Self, WorldError> {
        let (first, rest) = events
            .split_first()
            .ok_or_else(|| WorldError::Internal("empty history".into()))?;
        let mut state = Self::from_first_event(first.borrow())?;
        for event in rest {
            let event = event.borrow();
            state.check(&event.kind)?;
            state.apply(event);
        }
        Ok(state)
    }

    /// Checks that `kind` may be appended to this run now, without changing anything.
    ///
    /// This is where duplicate or late records are refused: a second completion of a step, an
    /// event for a run that has already finished, a status change the machine does not allow.
    pub fn check(&self, kind: &EventKind) -> Result<(), WorldError> {
        match kind {
            EventKind::WorkflowQueued(_)
            | EventKind::WorkflowStarted { .. }
            | EventKind::WorkflowRetry { .. }
            | EventKind::RunReopened { .. }
            | EventKind::RunResumed {}
            | EventKind::WorkflowQuarantined { .. }
            | EventKind::WorkflowCompleted { .. }
            | EventKind::WorkflowFailed { .. }
            | EventKind::WorkflowCancelled { .. }
            | EventKind::AttributesSet { .. } => run::check(self, kind),
            EventKind::ActivityScheduled { .. }
            | EventKind::ActivityStarted { .. }
            | EventKind::ActivityCompleted { .. }
            | EventKind::ActivityFailed { .. }
            | EventKind::ActivityRetry { .. }
            | EventKind::ActivityHeartbeat { .. } => steps::check(self, kind),
            EventKind::TimerScheduled { .. } | EventKind::TimerFired { .. } => {
                timers::check(self, kind)
            }
            EventKind::HookCreated { .. }
            | EventKind::HookReceived { .. }
            | EventKind::HookConflict { .. }
            | EventKind::HookExpired { .. }
            | EventKind::HookDisposed { .. } => hooks::check(self, kind),
            EventKind::ChildWorkflowStarted { .. }
            | EventKind::ChildWorkflowCompleted { .. }
            | EventKind::ChildWorkflowFailed { .. } => children::check(self, kind),
            EventKind::ValueRecorded { .. } | EventKind::PatchRecorded { .. } => {
                values::check(self, kind)
            }
            EventKind::WorkflowCompensating {}
            | EventKind::WorkflowCompensated {}
            | EventKind::CompensationAdded { .. }
            | EventKind::CompensationExecuted { .. }
            | EventKind::CompensationFailed { .. } => compensation::check(self, kind),
        }
    }

    /// Applies an event that [`check`](Self::check) accepted.
    pub fn apply(&mut self, event: &Event) {
        let at = event.timestamp;
        self.updated_at = at;
        self.event_count = event.seq + 1;
        let kind = &event.kind;
        match kind {
            EventKind::WorkflowQueued(_)
            | EventKind::WorkflowStarted { .. }
            | EventKind::WorkflowRetry { .. }
            | EventKind::RunReopened { .. }
            | EventKind::RunResumed {}
            | EventKind::WorkflowQuarantined { .. }
            | EventKind::WorkflowCompleted { .. }
            | EventKind::WorkflowFailed { .. }
            | EventKind::WorkflowCancelled { .. }
            | EventKind::AttributesSet { .. } => run::apply(self, kind, at),
            EventKind::ActivityScheduled { .. }
            | EventKind::ActivityStarted { .. }
            | EventKind::ActivityCompleted { .. }
            | EventKind::ActivityFailed { .. }
            | EventKind::ActivityRetry { .. }
            | EventKind::ActivityHeartbeat { .. } => steps::apply(self, kind, at),
            EventKind::TimerScheduled { .. } | EventKind::TimerFired { .. } => {
                timers::apply(self, kind)
            }
            EventKind::HookCreated { .. }
            | EventKind::HookReceived { .. }
            | EventKind::HookConflict { .. }
            | EventKind::HookExpired { .. }
            | EventKind::HookDisposed { .. } => hooks::apply(self, kind, at),
            EventKind::ChildWorkflowStarted { .. }
            | EventKind::ChildWorkflowCompleted { .. }
            | EventKind::ChildWorkflowFailed { .. } => children::apply(self, kind),
            EventKind::ValueRecorded { .. } | EventKind::PatchRecorded { .. } => {
                values::apply(self, kind)
            }
            EventKind::WorkflowCompensating {}
            | EventKind::WorkflowCompensated {}
            | EventKind::CompensationAdded { .. }
            | EventKind::CompensationExecuted { .. }
            | EventKind::CompensationFailed { .. } => compensation::apply(self, kind, at),
        }
    }

    /// Ok if the status machine lets this run become `to`; the families' status changes all
    /// go through here, so the machine's table is the one rule.
    fn may_become(&self, to: RunStatus) -> Result<(), WorldError> {
        if self.status.can_become(to) {
            Ok(())
        } else {
            Err(WorldError::InvalidTransition {
                run_id: self.id.clone(),
                from: self.status,
                to,
            })
        }
    }

    /// Ok if the run's workflow code is running, so it may record steps, timers, hooks,
    /// children and values. Compensations run workflow code too.
    fn takes_step_events(&self) -> Result<(), WorldError> {
        let status = self.status;
        if matches!(status, RunStatus::Running | RunStatus::Compensating) {
            Ok(())
        } else {
            Err(WorldError::conflict(format!(
                "run {} is {status}, so it takes no more step events",
                self.id
            )))
        }
    }

    /// Ends the run with `status` (terminal): its timers will never be awaited.
    fn finish(&mut self, status: RunStatus, at: Millis) {
        self.status = status;
        self.completed_at = Some(at);
        self.pending_timers.clear();
    }

    /// The correlation id of one of this run's events: the id of the step (`step_…`), hook
    /// (`hook_…`) or child run (`wrun_…`) it concerns, `None` for events about the run itself,
    /// its timers, recorded values and compensations. A step's later events carry only its
    /// position, so they are matched through the step scheduled there.
    pub fn correlation_id<'a>(&'a self, kind: &'a EventKind) -> Option<&'a str> {
        match kind {
            EventKind::ActivityScheduled { activity_id, .. } => Some(activity_id),
            EventKind::ActivityStarted { position, .. }
            | EventKind::ActivityCompleted { position, .. }
            | EventKind::ActivityFailed { position, .. }
            | EventKind::ActivityRetry { position, .. }
            | EventKind::ActivityHeartbeat { position, .. } => {
                self.activity(*position).map(|a| a.id.as_str())
            }
            EventKind::HookCreated { hook_id, .. }
            | EventKind::HookReceived { hook_id, .. }
            | EventKind::HookConflict { hook_id, .. }
            | EventKind::HookExpired { hook_id, .. }
            | EventKind::HookDisposed { hook_id, .. } => Some(hook_id),
            EventKind::ChildWorkflowStarted { child_id, .. }
            | EventKind::ChildWorkflowCompleted { child_id, .. }
            | EventKind::ChildWorkflowFailed { child_id, .. } => Some(child_id),
            _ => None,
        }
    }

    /// A copy for a caller, with or without payloads.
    pub fn view(&self, resolve: ResolveData) -> WorkflowState {
        let mut copy = self.clone();
        if resolve == ResolveData::None {
            copy.strip_data();
        }
        copy
    }

    /// Removes input, output and activity payloads.
    pub fn strip_data(&mut self) {
        self.input = None;
        self.output = None;
        self.history.clear();
        for a in &mut self.activities {
            a.input = None;
            a.output = None;
        }
    }
}

/// Events for the unit tests of the families.
#[cfg(test)]
mod fixtures {
    use super::*;
    use crate::model::EVENT_FORMAT_VERSION;

    /// Event `seq` of run `wrun_1`, at 1000 + `seq`.
    pub(super) fn ev(seq: u64, kind: EventKind) -> Event {
        Event {
            id: format!("evnt_{seq}"),
            run_id: "wrun_1".into(),
            seq,
            timestamp: 1000 + seq as i64,
            version: EVENT_FORMAT_VERSION,
            kind,
        }
    }

    /// The first event of run `wrun_1`.
    pub(super) fn queued() -> Event {
        ev(
            0,
            EventKind::WorkflowQueued(Box::new(QueuedRun::new("w", "wf", Payload::null()))),
        )
    }
}
