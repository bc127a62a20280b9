//! The DevKit's records — runs, steps, hooks and events — read off an engine run.
//!
//! The engine keeps one history per run; the DevKit asks for four kinds of record. Each is a
//! projection of the run's state and history, computed when asked:
//!
//! | DevKit | engine |
//! |---|---|
//! | run | the run: `deploymentId` is its code version, statuses map one to one (a run that is compensating reads `running`, a compensated one `failed`) |
//! | step | an activity: `pending` while scheduled or waiting to retry; `startedAt` is the first attempt's start; `retryAfter` the due time of the last retry |
//! | hook | a hook, its metadata as recorded; the token is never stored, so a hook read by id shows an empty token |
//! | event | `activity_started` → `step_started`, `activity_completed` → `step_completed {result}`, `activity_failed` → `step_failed {error, stack, fatal}`, `hook_created`/`hook_received {payload}`/`hook_disposed` as they are, `timer_scheduled` → `wait_created {resumeAt}`, `timer_fired` → `wait_completed`; the rest (the run's own status changes, step scheduling, retries) are not DevKit events |
//!
//! Times are integers of milliseconds since the Unix epoch; a field without a value is left
//! out, never `null`.

use serde::Serialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use worlds_engine::model::{ActivityStatus, HookState};
use worlds_engine::{Event, EventKind, Payload, RunStatus, StructuredError, WorkflowState};

/// What a DevKit run's `deploymentId` reads when the run was created without one.
pub(crate) const DEFAULT_DEPLOYMENT: &str = "worlds";

/// The owner, project and environment fields of a DevKit hook, which a self-hosted world has
/// no use for.
const HOOK_SCOPE: &str = "worlds";

/// A DevKit run.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DevkitRun {
    pub(crate) run_id: String,
    pub(crate) deployment_id: String,
    pub(crate) workflow_name: String,
    pub(crate) status: &'static str,
    pub(crate) input: Payload,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) output: Option<Payload>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<StructuredError>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) started_at: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) completed_at: Option<i64>,
    pub(crate) created_at: i64,
    pub(crate) updated_at: i64,
}

/// The DevKit's name for a run status.
pub(crate) fn run_status(status: RunStatus) -> &'static str {
    match status {
        RunStatus::Pending => "pending",
        RunStatus::Running | RunStatus::Compensating => "running",
        RunStatus::Completed => "completed",
        RunStatus::Failed | RunStatus::Compensated => "failed",
        RunStatus::Cancelled => "cancelled",
    }
}

impl DevkitRun {
    /// The run as the DevKit sees it.
    pub(crate) fn of(state: &WorkflowState) -> Self {
        let completed = state.status == RunStatus::Completed;
        let failed = matches!(state.status, RunStatus::Failed | RunStatus::Compensated);
        DevkitRun {
            run_id: state.id.clone(),
            deployment_id: state
                .code_version
                .clone()
                .unwrap_or_else(|| DEFAULT_DEPLOYMENT.to_owned()),
            workflow_name: state.name.clone(),
            status: run_status(state.status),
            input: state
                .input
                .clone()
                .unwrap_or_else(|| Payload::from_json("[]").expect("an empty array is JSON")),
            output: completed.then(|| state.output.clone().unwrap_or_else(Payload::null)),
            error: failed.then(|| {
                state
                    .error
                    .as_deref()
                    .cloned()
                    .unwrap_or_else(|| StructuredError::new("the run failed"))
            }),
            started_at: state.started_at,
            completed_at: state
                .status
                .is_terminal()
                .then_some(state.completed_at)
                .flatten(),
            created_at: state.created_at,
            updated_at: state.updated_at,
        }
    }
}

/// A DevKit step.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DevkitStep {
    pub(crate) run_id: String,
    pub(crate) step_id: String,
    pub(crate) step_name: String,
    pub(crate) status: &'static str,
    pub(crate) input: Payload,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) output: Option<Payload>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<StructuredError>,
    pub(crate) attempt: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) started_at: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) completed_at: Option<i64>,
    pub(crate) created_at: i64,
    pub(crate) updated_at: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) retry_after: Option<i64>,
}

/// The DevKit's name for a step status.
pub(crate) fn step_status(status: ActivityStatus) -> &'static str {
    match status {
        ActivityStatus::Scheduled | ActivityStatus::Retrying => "pending",
        ActivityStatus::Running => "running",
        ActivityStatus::Completed => "completed",
        ActivityStatus::Failed => "failed",
    }
}

/// What the history adds to a step beyond its state: first start, last change, retry time.
#[derive(Debug, Default, Clone, Copy)]
struct StepTimes {
    first_started: Option<i64>,
    updated: i64,
    retry_after: Option<i64>,
}

/// Every step of the run, in the order they were scheduled.
pub(crate) fn steps(state: &WorkflowState) -> Vec<DevkitStep> {
    let mut times: HashMap<u32, StepTimes> = HashMap::new();
    for event in &state.history {
        let (position, retry) = match &event.kind {
            EventKind::ActivityScheduled { position, .. }
            | EventKind::ActivityCompleted { position, .. }
            | EventKind::ActivityFailed { position, .. }
            | EventKind::ActivityHeartbeat { position, .. } => (*position, None),
            EventKind::ActivityStarted { position, .. } => {
                let t = times.entry(*position).or_default();
                t.first_started.get_or_insert(event.timestamp);
                (*position, None)
            }
            EventKind::ActivityRetry {
                position, delay_ms, ..
            } => (
                *position,
                Some(
                    event
                        .timestamp
                        .saturating_add(i64::try_from(*delay_ms).unwrap_or(i64::MAX)),
                ),
            ),
            _ => continue,
        };
        let t = times.entry(position).or_default();
        t.updated = event.timestamp;
        if retry.is_some() {
            t.retry_after = retry;
        }
    }
    state
        .activities
        .iter()
        .map(|a| {
            let t = times.get(&a.position).copied().unwrap_or_default();
            DevkitStep {
                run_id: state.id.clone(),
                step_id: a.id.clone(),
                step_name: a.name.clone(),
                status: step_status(a.status),
                input: a.input.clone().unwrap_or_else(Payload::null),
                output: (a.status == ActivityStatus::Completed)
                    .then(|| a.output.clone().unwrap_or_else(Payload::null)),
                error: a.error.clone(),
                attempt: a.attempt,
                started_at: t.first_started,
                completed_at: a.completed_at,
                created_at: a.scheduled_at,
                updated_at: t.updated.max(a.scheduled_at),
                retry_after: t.retry_after,
            }
        })
        .collect()
}

/// A DevKit hook.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DevkitHook {
    pub(crate) run_id: String,
    pub(crate) hook_id: String,
    pub(crate) token: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) metadata: Option<Payload>,
    pub(crate) owner_id: &'static str,
    pub(crate) project_id: &'static str,
    pub(crate) environment: &'static str,
    pub(crate) created_at: i64,
}

impl DevkitHook {
    /// The hook of `run_id`; `token` when the caller knows it (only its digest is stored).
    pub(crate) fn of(run_id: &str, hook: &HookState, token: Option<&str>) -> Self {
        DevkitHook {
            run_id: run_id.to_owned(),
            hook_id: hook.id.clone(),
            token: token.unwrap_or_default().to_owned(),
            metadata: hook.metadata.clone(),
            owner_id: HOOK_SCOPE,
            project_id: HOOK_SCOPE,
            environment: HOOK_SCOPE,
            created_at: hook.created_at,
        }
    }
}

/// A DevKit event, with the `seq` of the engine event it was read from (the page cursor).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DevkitEvent {
    pub(crate) run_id: String,
    pub(crate) event_id: String,
    pub(crate) event_type: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) correlation_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) event_data: Option<Value>,
    pub(crate) created_at: i64,
    #[serde(skip)]
    pub(crate) seq: u64,
}

/// Reads DevKit events off a history, in order: it remembers which step and wait each
/// position holds as it goes.
#[derive(Debug, Default)]
pub(crate) struct EventReader {
    steps: HashMap<u32, String>,
    waits: HashMap<u32, String>,
}

/// The correlation id of a wait recorded without one: its position.
pub(crate) fn wait_id_at(position: u32) -> String {
    format!("wait_{position}")
}

impl EventReader {
    /// The DevKit event an engine event is, if it is one.
    pub(crate) fn read(&mut self, event: &Event) -> Option<DevkitEvent> {
        let (event_type, correlation_id, data) = match &event.kind {
            EventKind::ActivityScheduled {
                position,
                activity_id,
                ..
            } => {
                self.steps.insert(*position, activity_id.clone());
                return None;
            }
            EventKind::ActivityStarted { position, .. } => {
                ("step_started", self.steps.get(position).cloned(), None)
            }
            EventKind::ActivityCompleted {
                position, output, ..
            } => (
                "step_completed",
                self.steps.get(position).cloned(),
                Some(json!({ "result": output.to_value() })),
            ),
            EventKind::ActivityFailed {
                position,
                error,
                retrying,
                ..
            } => {
                let mut data = json!({ "error": error.message });
                if let Some(stack) = &error.stack {
                    data["stack"] = Value::String(stack.clone());
                }
                if !retrying {
                    data["fatal"] = Value::Bool(true);
                }
                ("step_failed", self.steps.get(position).cloned(), Some(data))
            }
            EventKind::HookCreated { hook_id, .. } => ("hook_created", Some(hook_id.clone()), None),
            EventKind::HookReceived {
                hook_id, payload, ..
            } => (
                "hook_received",
                Some(hook_id.clone()),
                Some(json!({ "payload": payload.to_value() })),
            ),
            EventKind::HookDisposed { hook_id, .. } => {
                ("hook_disposed", Some(hook_id.clone()), None)
            }
            EventKind::TimerScheduled {
                position,
                fire_at,
                timer_id,
            } => {
                let id = timer_id.clone().unwrap_or_else(|| wait_id_at(*position));
                self.waits.insert(*position, id.clone());
                (
                    "wait_created",
                    Some(id),
                    Some(json!({ "resumeAt": fire_at })),
                )
            }
            EventKind::TimerFired { position } => (
                "wait_completed",
                Some(
                    self.waits
                        .get(position)
                        .cloned()
                        .unwrap_or_else(|| wait_id_at(*position)),
                ),
                None,
            ),
            _ => return None,
        };
        Some(DevkitEvent {
            run_id: event.run_id.clone(),
            event_id: event.id.clone(),
            event_type,
            correlation_id,
            event_data: data,
            created_at: event.timestamp,
            seq: event.seq,
        })
    }
}

/// Every DevKit event of a history, in order.
pub(crate) fn events(history: &[Event]) -> Vec<DevkitEvent> {
    let mut reader = EventReader::default();
    history.iter().filter_map(|e| reader.read(e)).collect()
}

/// The DevKit event read off the last engine event of `history` that yields one with this
/// type and correlation id: what an idempotent repeat of a write answers.
pub(crate) fn last_event(
    history: &[Event],
    event_type: &str,
    correlation_id: &str,
) -> Option<DevkitEvent> {
    events(history)
        .into_iter()
        .rev()
        .find(|e| e.event_type == event_type && e.correlation_id.as_deref() == Some(correlation_id))
}
