//! Materialized run state, derived from history by [`WorkflowState::apply`].

use serde::{Deserialize, Serialize};

use crate::clock::Millis;
use crate::error::{StructuredError, WorldError};
use crate::payload::Payload;

use super::hook::check_hook_change;
use super::runtime::{apply_attribute_changes, check_attribute_changes, RuntimeInfo};
use super::{
    ActivityOptions, Event, EventKind, FailureStrategy, HookState, HookStatus, QueuedRun,
    ResolveData, RunStatus,
};

/// Where an activity (step) is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActivityStatus {
    /// Waiting in the queue for a worker.
    Scheduled,
    /// An attempt is executing.
    Running,
    /// An attempt failed; the next waits for its retry delay.
    Retrying,
    /// Finished with a result.
    Completed,
    /// Finished with an error, no more attempts.
    Failed,
}

/// One activity (step) of a run, as the debugging view shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActivityState {
    /// Step id (`step_…`).
    pub id: String,
    /// Activity (or step) name.
    pub name: String,
    /// Command position in the workflow.
    pub position: u32,
    /// Current status.
    pub status: ActivityStatus,
    /// Current or last attempt, from 1 (0 before the first start).
    pub attempt: u32,
    /// Input (left out when queried with `ResolveData::None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Payload>,
    /// Options the workflow set for this call, over the activity's defaults.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::stored_options::activity"
    )]
    pub options: Option<Box<ActivityOptions>>,
    /// A named step (`ctx.step`), whose code lives in the workflow.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inline: bool,
    /// Result, once completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Payload>,
    /// Last error, if an attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<StructuredError>,
    /// When it was scheduled.
    pub scheduled_at: Millis,
    /// When the current or last attempt started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Millis>,
    /// When it finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Millis>,
    /// Last heartbeat time of the current attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat: Option<Millis>,
    /// Last heartbeat message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_message: Option<String>,
}

/// A restart of a failed workflow that waits for its delay (the `retry` strategy), or for a
/// worker after the run was reopened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingRetry {
    /// The attempt that will start.
    pub attempt: u32,
    /// When it is due (ms since the Unix epoch).
    pub due_at: Millis,
    /// Where its command positions start.
    pub first_position: u32,
}

/// A run's timers not yet fired, as `(position, fire time)` sorted by position: a run waits on
/// one timer or a few at a time, so a vector sized to them is smaller than a map (this state is
/// kept in memory for every run, sleeping ones included).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
struct PendingTimers(Box<[(u32, Millis)]>);

impl PendingTimers {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn find(&self, position: u32) -> Result<usize, usize> {
        self.0.binary_search_by_key(&position, |(p, _)| *p)
    }

    fn contains(&self, position: u32) -> bool {
        self.find(position).is_ok()
    }

    /// Adds a timer (or moves it). A run holds few timers at a time: the slice is rebuilt
    /// exactly to size, which keeps the state of a sleeping run small.
    fn insert(&mut self, position: u32, fire_at: Millis) {
        match self.find(position) {
            Ok(i) => self.0[i].1 = fire_at,
            Err(i) => {
                let mut timers = std::mem::take(&mut self.0).into_vec();
                timers.insert(i, (position, fire_at));
                self.0 = timers.into_boxed_slice();
            }
        }
    }

    fn remove(&mut self, position: u32) {
        if let Ok(i) = self.find(position) {
            let mut timers = std::mem::take(&mut self.0).into_vec();
            timers.remove(i);
            self.0 = timers.into_boxed_slice();
        }
    }

    /// Forgets every timer.
    fn clear(&mut self) {
        self.0 = Box::default();
    }
}

impl ActivityState {
    /// This step as a list shows it: with its input and output under [`ResolveData::All`],
    /// without them under [`ResolveData::None`].
    pub fn view(&self, resolve: ResolveData) -> ActivityState {
        let mut copy = self.clone();
        if resolve == ResolveData::None {
            copy.input = None;
            copy.output = None;
        }
        copy
    }
}

/// A saga compensation registered by the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompensationState {
    /// Compensation id.
    pub id: String,
    /// True once it has run.
    pub executed: bool,
    /// Its error, if it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

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

    /// The activity at command `position`, if one was scheduled there.
    pub fn activity(&self, position: u32) -> Option<&ActivityState> {
        self.find_activity(position)
            .ok()
            .map(|i| &self.activities[i])
    }

    /// Where the activity at `position` is in `activities` (kept sorted by position), or where
    /// it would go.
    fn find_activity(&self, position: u32) -> Result<usize, usize> {
        self.activities
            .binary_search_by_key(&position, |a| a.position)
    }

    /// Timers scheduled and not yet fired, as (position, fire time).
    pub fn pending_timers(&self) -> impl Iterator<Item = (u32, Millis)> + '_ {
        self.pending_timers.0.iter().copied()
    }

    /// The workflow retry waiting to start, if any.
    pub fn retry_pending(&self) -> Option<PendingRetry> {
        self.retry_pending.as_deref().copied()
    }

    /// Checks that `kind` may be appended to this run now, without changing anything.
    ///
    /// This is where duplicate or late records are refused: a second completion of a step, an
    /// event for a run that has already finished, a status change the machine does not allow.
    pub fn check(&self, kind: &EventKind) -> Result<(), WorldError> {
        let status = self.status;
        let transition = |to: RunStatus| {
            if status.can_become(to) {
                Ok(())
            } else {
                Err(WorldError::InvalidTransition {
                    run_id: self.id.clone(),
                    from: status,
                    to,
                })
            }
        };
        let running = || {
            // Compensations run workflow code too: steps, timers and children.
            if matches!(status, RunStatus::Running | RunStatus::Compensating) {
                Ok(())
            } else {
                Err(WorldError::conflict(format!(
                    "run {} is {status}, so it takes no more step events",
                    self.id
                )))
            }
        };
        let activity = |position: u32| {
            self.activity(position).ok_or_else(|| {
                WorldError::conflict(format!(
                    "run {} has no activity at position {position}",
                    self.id
                ))
            })
        };
        let attempt_running = |position: u32, attempt: u32| {
            running()?;
            let a = activity(position)?;
            if a.status == ActivityStatus::Running && a.attempt == attempt {
                Ok(())
            } else {
                Err(WorldError::conflict(format!(
                    "activity #{position} '{}' of run {} is {:?} at attempt {}; a record for attempt {attempt} was refused",
                    a.name, self.id, a.status, a.attempt
                )))
            }
        };
        match kind {
            EventKind::WorkflowQueued(_) => Err(WorldError::conflict(format!(
                "run {} already exists",
                self.id
            ))),
            EventKind::WorkflowStarted { attempt, .. } => match self.retry_pending() {
                Some(PendingRetry { attempt: next, .. }) if status == RunStatus::Running => {
                    if *attempt == next {
                        Ok(())
                    } else {
                        Err(WorldError::conflict(format!(
                            "run {} waits to start attempt {next}, not {attempt}",
                            self.id
                        )))
                    }
                }
                _ => transition(RunStatus::Running),
            },
            EventKind::WorkflowRetry { attempt, .. } => {
                if status != RunStatus::Running || self.retry_pending.is_some() {
                    return Err(WorldError::conflict(format!(
                        "run {} is {status} and cannot schedule a retry",
                        self.id
                    )));
                }
                if *attempt == self.attempt + 1 {
                    Ok(())
                } else {
                    Err(WorldError::conflict(format!(
                        "run {} is at attempt {}; a retry to attempt {attempt} was refused",
                        self.id, self.attempt
                    )))
                }
            }
            EventKind::RunReopened { attempt, .. } => {
                transition(RunStatus::Running)?;
                if *attempt == self.attempt + 1 {
                    Ok(())
                } else {
                    Err(WorldError::conflict(format!(
                        "run {} is at attempt {}; reopening it as attempt {attempt} was refused",
                        self.id, self.attempt
                    )))
                }
            }
            EventKind::RunResumed {} => {
                if status.is_terminal() {
                    Err(WorldError::conflict(format!(
                        "run {} is {status}: there is nothing to resume",
                        self.id
                    )))
                } else {
                    Ok(())
                }
            }
            EventKind::WorkflowCompensating {} => transition(RunStatus::Compensating),
            EventKind::WorkflowCompensated {} => transition(RunStatus::Compensated),
            EventKind::WorkflowQuarantined { .. } => {
                let failed = matches!(status, RunStatus::Failed | RunStatus::Compensated);
                if failed && self.quarantine.is_none() {
                    Ok(())
                } else {
                    Err(WorldError::conflict(format!(
                        "only a failed run can be quarantined, and once; run {} is {status}",
                        self.id
                    )))
                }
            }
            EventKind::CompensationAdded { .. } => running(),
            EventKind::CompensationExecuted { .. } | EventKind::CompensationFailed { .. } => {
                if status == RunStatus::Compensating {
                    Ok(())
                } else {
                    Err(WorldError::conflict(format!(
                        "run {} is {status}, not compensating",
                        self.id
                    )))
                }
            }
            EventKind::WorkflowCompleted { .. } => transition(RunStatus::Completed),
            EventKind::WorkflowFailed { .. } => transition(RunStatus::Failed),
            EventKind::WorkflowCancelled { .. } => transition(RunStatus::Cancelled),
            EventKind::ActivityScheduled {
                position,
                activity_id,
                ..
            } => {
                running()?;
                if self.find_activity(*position).is_ok() {
                    return Err(WorldError::conflict(format!(
                        "run {} already has an activity at position {position}",
                        self.id
                    )));
                }
                // A step id chosen from outside (a run driven by a DevKit runtime) may repeat
                // one; the engine's own are fresh ids and are not searched for: that search
                // reads every step of the run, and made each step of a long run cost more than
                // the one before.
                if self.external && self.activities.iter().any(|a| a.id == *activity_id) {
                    return Err(WorldError::conflict(format!(
                        "run {} already has a step {activity_id}",
                        self.id
                    )));
                }
                Ok(())
            }
            EventKind::ActivityStarted { position, attempt } => {
                running()?;
                let a = activity(*position)?;
                let expected = a.attempt + 1;
                let startable = matches!(
                    a.status,
                    ActivityStatus::Scheduled | ActivityStatus::Retrying
                );
                if startable && *attempt == expected {
                    Ok(())
                } else {
                    Err(WorldError::conflict(format!(
                        "activity #{position} '{}' of run {} is {:?} at attempt {}; attempt {attempt} cannot start",
                        a.name, self.id, a.status, a.attempt
                    )))
                }
            }
            EventKind::ActivityFailed {
                position,
                attempt: 0,
                retrying: false,
                ..
            } => {
                // Refused before any attempt (not registered, input over the limit).
                running()?;
                let a = activity(*position)?;
                if a.status == ActivityStatus::Scheduled && a.attempt == 0 {
                    Ok(())
                } else {
                    Err(WorldError::conflict(format!(
                        "activity #{position} of run {} has already started",
                        self.id
                    )))
                }
            }
            EventKind::ActivityCompleted {
                position, attempt, ..
            }
            | EventKind::ActivityFailed {
                position, attempt, ..
            }
            | EventKind::ActivityHeartbeat {
                position, attempt, ..
            } => attempt_running(*position, *attempt),
            EventKind::ActivityRetry {
                position, attempt, ..
            } => {
                running()?;
                let a = activity(*position)?;
                // Written in the same append as the failure it follows, so the activity may
                // still read as running here.
                let waiting =
                    matches!(a.status, ActivityStatus::Retrying | ActivityStatus::Running);
                if waiting && *attempt == a.attempt + 1 {
                    Ok(())
                } else {
                    Err(WorldError::conflict(format!(
                        "activity #{position} of run {} is not waiting to retry",
                        self.id
                    )))
                }
            }
            EventKind::TimerScheduled { position, .. } => {
                running()?;
                if self.pending_timers.contains(*position) {
                    Err(WorldError::conflict(format!(
                        "run {} already has a timer at position {position}",
                        self.id
                    )))
                } else {
                    Ok(())
                }
            }
            EventKind::TimerFired { position } => {
                running()?;
                if self.pending_timers.contains(*position) {
                    Ok(())
                } else {
                    Err(WorldError::conflict(format!(
                        "run {} has no pending timer at position {position}",
                        self.id
                    )))
                }
            }
            EventKind::ChildWorkflowStarted { .. }
            | EventKind::ChildWorkflowCompleted { .. }
            | EventKind::ChildWorkflowFailed { .. }
            | EventKind::ValueRecorded { .. }
            | EventKind::PatchRecorded { .. }
            | EventKind::HookConflict { .. } => running(),
            EventKind::HookCreated {
                position, hook_id, ..
            } => {
                running()?;
                if self.hook(*position).is_some() {
                    Err(WorldError::conflict(format!(
                        "run {} already has a hook at position {position}",
                        self.id
                    )))
                } else if self.hooks.iter().any(|h| h.id == *hook_id) {
                    Err(WorldError::conflict(format!(
                        "run {} already has a hook {hook_id}",
                        self.id
                    )))
                } else {
                    Ok(())
                }
            }
            EventKind::HookReceived { position, .. } => {
                running()?;
                check_hook_change(
                    &self.id,
                    *position,
                    self.hook(*position),
                    HookStatus::Received,
                )
            }
            EventKind::HookExpired { position, .. } => {
                running()?;
                check_hook_change(
                    &self.id,
                    *position,
                    self.hook(*position),
                    HookStatus::Expired,
                )
            }
            // Written once the run has finished, to release the token.
            EventKind::HookDisposed { position, .. } => check_hook_change(
                &self.id,
                *position,
                self.hook(*position),
                HookStatus::Disposed,
            ),
            EventKind::AttributesSet { changes, .. } => {
                if status.is_terminal() {
                    return Err(WorldError::conflict(format!(
                        "run {} is {status}: its attributes can no longer change",
                        self.id
                    )));
                }
                // Which keys a writer may set is the caller's rule; the shape and the limits
                // hold for every run.
                let current = self
                    .runtime
                    .as_ref()
                    .map(|r| r.attributes.clone())
                    .unwrap_or_default();
                check_attribute_changes(&current, changes, true)
            }
        }
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

    /// The hook created at command `position`, if any.
    pub fn hook(&self, position: u32) -> Option<&HookState> {
        self.hooks.iter().find(|h| h.position == position)
    }

    fn hook_mut(&mut self, position: u32) -> Option<&mut HookState> {
        self.hooks.iter_mut().find(|h| h.position == position)
    }

    /// Applies an event that [`check`](Self::check) accepted.
    pub fn apply(&mut self, event: &Event) {
        let at = event.timestamp;
        self.updated_at = at;
        self.event_count = event.seq + 1;
        match &event.kind {
            EventKind::WorkflowQueued(_) => {}
            EventKind::WorkflowStarted { attempt, .. } => {
                self.status = RunStatus::Running;
                self.attempt = *attempt;
                self.retry_pending = None;
                self.started_at.get_or_insert(at);
            }
            EventKind::WorkflowRetry {
                attempt,
                delay_ms,
                next_position,
                error,
            } => {
                self.retry_pending = Some(Box::new(PendingRetry {
                    attempt: *attempt,
                    due_at: at.saturating_add(*delay_ms as i64),
                    first_position: *next_position,
                }));
                self.error = Some(Box::new(error.clone()));
                // The failed attempt's timers will never be awaited.
                self.pending_timers.clear();
            }
            EventKind::RunReopened {
                attempt,
                next_position,
                ..
            } => {
                self.status = RunStatus::Running;
                self.completed_at = None;
                self.output = None;
                self.error = None;
                self.quarantine = None;
                self.reopened_at = Some(at);
                self.pending_timers.clear();
                self.retry_pending = Some(Box::new(PendingRetry {
                    attempt: *attempt,
                    due_at: at,
                    first_position: *next_position,
                }));
            }
            // A marker for readers: the run's state does not change.
            EventKind::RunResumed {} => {}
            EventKind::WorkflowCompensating {} => {
                self.status = RunStatus::Compensating;
            }
            EventKind::WorkflowCompensated {} => {
                self.finish(RunStatus::Compensated, at);
            }
            EventKind::WorkflowQuarantined { reason } => {
                self.quarantine = Some(reason.clone());
            }
            EventKind::CompensationAdded {
                compensation_id, ..
            } => {
                self.compensations.push(CompensationState {
                    id: compensation_id.clone(),
                    executed: false,
                    error: None,
                });
            }
            EventKind::CompensationExecuted {
                compensation_id, ..
            } => {
                if let Some(c) = self.compensation_mut(compensation_id) {
                    c.executed = true;
                }
            }
            EventKind::CompensationFailed {
                compensation_id,
                error,
                ..
            } => {
                if let Some(c) = self.compensation_mut(compensation_id) {
                    c.executed = true;
                    c.error = Some(error.message.clone());
                }
            }
            EventKind::WorkflowCompleted { output } => {
                self.finish(RunStatus::Completed, at);
                self.output = Some(output.clone());
            }
            EventKind::WorkflowFailed { error } => {
                self.finish(RunStatus::Failed, at);
                self.error = Some(Box::new(error.clone()));
            }
            EventKind::WorkflowCancelled { reason } => {
                self.finish(RunStatus::Cancelled, at);
                if let Some(reason) = reason {
                    self.error = Some(Box::new(
                        StructuredError::new(reason.clone())
                            .with_code(crate::error::codes::CANCELLED),
                    ));
                }
            }
            EventKind::ActivityScheduled {
                position,
                activity_id,
                name,
                input,
                options,
                inline,
            } => {
                // Positions grow in command order, so this is nearly always the end.
                let index = self.find_activity(*position).unwrap_or_else(|i| i);
                self.activities.insert(
                    index,
                    ActivityState {
                        id: activity_id.clone(),
                        name: name.clone(),
                        position: *position,
                        status: ActivityStatus::Scheduled,
                        attempt: 0,
                        input: Some(input.clone()),
                        options: options.clone(),
                        inline: *inline,
                        output: None,
                        error: None,
                        scheduled_at: at,
                        started_at: None,
                        completed_at: None,
                        last_heartbeat: None,
                        heartbeat_message: None,
                    },
                );
            }
            EventKind::ActivityStarted { position, attempt } => {
                if let Some(a) = self.activity_mut(*position) {
                    a.status = ActivityStatus::Running;
                    a.attempt = *attempt;
                    a.started_at = Some(at);
                    a.last_heartbeat = Some(at);
                }
            }
            EventKind::ActivityCompleted {
                position, output, ..
            } => {
                if let Some(a) = self.activity_mut(*position) {
                    a.status = ActivityStatus::Completed;
                    a.output = Some(output.clone());
                    a.completed_at = Some(at);
                }
            }
            EventKind::ActivityFailed {
                position,
                error,
                retrying,
                ..
            } => {
                if let Some(a) = self.activity_mut(*position) {
                    a.error = Some(error.clone());
                    if *retrying {
                        a.status = ActivityStatus::Retrying;
                    } else {
                        a.status = ActivityStatus::Failed;
                        a.completed_at = Some(at);
                    }
                }
            }
            EventKind::ActivityRetry { .. } => {}
            EventKind::ActivityHeartbeat {
                position, message, ..
            } => {
                if let Some(a) = self.activity_mut(*position) {
                    a.last_heartbeat = Some(at);
                    if message.is_some() {
                        a.heartbeat_message = message.clone();
                    }
                }
            }
            EventKind::TimerScheduled {
                position, fire_at, ..
            } => {
                self.pending_timers.insert(*position, *fire_at);
            }
            EventKind::TimerFired { position } => {
                self.pending_timers.remove(*position);
            }
            EventKind::ChildWorkflowStarted { child_id, .. } => {
                self.children.push(child_id.clone());
            }
            EventKind::ChildWorkflowCompleted { .. }
            | EventKind::ChildWorkflowFailed { .. }
            | EventKind::ValueRecorded { .. }
            | EventKind::PatchRecorded { .. } => {}
            EventKind::HookCreated {
                position,
                hook_id,
                token_digest,
                expires_at,
                webhook,
                methods,
                hook_type,
                signature,
                metadata,
            } => self.hooks.push(HookState {
                id: hook_id.clone(),
                position: *position,
                token_digest: token_digest.clone(),
                status: HookStatus::Waiting,
                webhook: *webhook,
                methods: methods.clone(),
                hook_type: hook_type.clone(),
                signature: signature.clone(),
                metadata: metadata.clone(),
                created_at: at,
                expires_at: *expires_at,
                received_at: None,
            }),
            EventKind::HookConflict {
                position,
                hook_id,
                token_digest,
            } => self.hooks.push(HookState {
                id: hook_id.clone(),
                position: *position,
                token_digest: token_digest.clone(),
                status: HookStatus::Conflict,
                webhook: false,
                methods: Vec::new(),
                hook_type: None,
                signature: None,
                metadata: None,
                created_at: at,
                expires_at: None,
                received_at: None,
            }),
            EventKind::HookReceived { position, .. } => {
                let iterated = self.external;
                if let Some(h) = self.hook_mut(*position) {
                    // A run driven from outside iterates its hooks (the DevKit's `for await`
                    // over a hook): each keeps waiting for the next payload, and holds its
                    // token, until it is disposed.
                    if !iterated {
                        h.status = HookStatus::Received;
                    }
                    h.received_at = Some(at);
                }
            }
            EventKind::HookExpired { position, .. } => {
                if let Some(h) = self.hook_mut(*position) {
                    h.status = HookStatus::Expired;
                }
            }
            EventKind::HookDisposed { position, .. } => {
                if let Some(h) = self.hook_mut(*position) {
                    h.status = HookStatus::Disposed;
                }
            }
            EventKind::AttributesSet { changes, .. } => {
                let runtime = self.runtime.get_or_insert_with(Box::default);
                runtime.attributes =
                    apply_attribute_changes(std::mem::take(&mut runtime.attributes), changes);
            }
        }
    }

    fn finish(&mut self, status: RunStatus, at: Millis) {
        self.status = status;
        self.completed_at = Some(at);
        self.pending_timers.clear();
    }

    fn compensation_mut(&mut self, id: &str) -> Option<&mut CompensationState> {
        // Searched from the end: compensations run last-added first.
        self.compensations.iter_mut().rev().find(|c| c.id == id)
    }

    fn activity_mut(&mut self, position: u32) -> Option<&mut ActivityState> {
        let index = self.find_activity(position).ok()?;
        self.activities.get_mut(index)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::EVENT_FORMAT_VERSION;

    fn ev(seq: u64, kind: EventKind) -> Event {
        Event {
            id: format!("evnt_{seq}"),
            run_id: "wrun_1".into(),
            seq,
            timestamp: 1000 + seq as i64,
            version: EVENT_FORMAT_VERSION,
            kind,
        }
    }

    fn queued() -> Event {
        ev(
            0,
            EventKind::WorkflowQueued(Box::new(QueuedRun::new("w", "wf", Payload::null()))),
        )
    }

    #[test]
    fn materializes_a_step_and_refuses_a_duplicate_completion() {
        let mut s = WorkflowState::from_first_event(&queued()).unwrap();
        let events = [
            EventKind::WorkflowStarted {
                attempt: 1,
                first_position: 0,
            },
            EventKind::ActivityScheduled {
                position: 0,
                activity_id: "step_1".into(),
                name: "a".into(),
                input: Payload::null(),
                options: None,
                inline: false,
            },
            EventKind::ActivityStarted {
                position: 0,
                attempt: 1,
            },
            EventKind::ActivityCompleted {
                position: 0,
                attempt: 1,
                output: Payload::encode(&7).unwrap(),
            },
        ];
        for (i, kind) in events.into_iter().enumerate() {
            s.check(&kind).unwrap();
            s.apply(&ev(i as u64 + 1, kind));
        }
        assert_eq!(s.status, RunStatus::Running);
        assert_eq!(s.started_at, Some(1001));
        let a = s.activity(0).unwrap();
        assert_eq!(a.status, ActivityStatus::Completed);
        let dup = EventKind::ActivityCompleted {
            position: 0,
            attempt: 1,
            output: Payload::null(),
        };
        assert_eq!(s.check(&dup).unwrap_err().http_status(), 409);
    }

    /// Regression (W6: the cost of a step grew with the run's history): checking a new step
    /// searched every earlier step of the run for its id, 10 000 string comparisons for the
    /// 10 000th step. The engine's step ids are fresh, so only a run driven from outside,
    /// whose caller picks them, is searched.
    #[test]
    fn a_new_step_id_is_searched_for_only_in_a_run_driven_from_outside() {
        let mut s = WorkflowState::from_first_event(&queued()).unwrap();
        let scheduled = |position: u32| EventKind::ActivityScheduled {
            position,
            activity_id: "step_1".into(),
            name: "a".into(),
            input: Payload::null(),
            options: None,
            inline: false,
        };
        for (i, kind) in [
            EventKind::WorkflowStarted {
                attempt: 1,
                first_position: 0,
            },
            scheduled(0),
        ]
        .into_iter()
        .enumerate()
        {
            s.check(&kind).unwrap();
            s.apply(&ev(i as u64 + 1, kind));
        }
        // The same id again at a new position: not looked for in the engine's run...
        s.check(&scheduled(1)).unwrap();
        // ...and refused in one driven from outside.
        s.external = true;
        let refused = s.check(&scheduled(1)).unwrap_err();
        assert!(
            refused.to_string().contains("already has a step step_1"),
            "{refused}"
        );
    }

    #[test]
    fn terminal_runs_refuse_more_events() {
        let mut s = WorkflowState::from_first_event(&queued()).unwrap();
        let cancel = EventKind::WorkflowCancelled { reason: None };
        s.check(&cancel).unwrap();
        s.apply(&ev(1, cancel));
        assert_eq!(s.completed_at, Some(1001));
        let err = s
            .check(&EventKind::WorkflowStarted {
                attempt: 1,
                first_position: 0,
            })
            .unwrap_err();
        assert!(matches!(err, WorldError::InvalidTransition { .. }), "{err}");
    }
}
