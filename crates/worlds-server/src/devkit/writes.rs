//! What each DevKit write records in the engine run: pure functions from the run's state (with
//! its history) and the request to the engine events to append.
//!
//! The DevKit runtime often says one thing twice — `events.create(step_started)` then
//! `steps.update({status: 'running'})`, `steps.update({status: 'completed'})` then
//! `events.create(step_completed)` — so a write whose effect is already recorded appends
//! nothing (an empty plan) and is answered from what is there. A write the run cannot take
//! is refused the way the DevKit expects: 409 for a record that exists or clashes, 410 for a
//! run that has finished.
//!
//! | write | records |
//! |---|---|
//! | run `running` | `workflow_started` (once) |
//! | run `completed` / `failed` / `cancelled` | `workflow_completed {output}` / `workflow_failed {error}` / `workflow_cancelled` |
//! | step created | `activity_scheduled` (409 if the step id exists) |
//! | step `running`, `step_started` | `activity_started` of the next attempt |
//! | step `completed`, `step_completed` | `activity_completed` (409 from the update if already completed) |
//! | step `failed`, `step_failed` | `activity_failed` (final when `fatal`, retrying otherwise) |
//! | step `pending` with `retryAfter` | `activity_retry` with the delay |
//! | hook created | `hook_created` (through the engine's hook rules: see `routes`) |
//! | `hook_received`, `hook_disposed` | `hook_received {payload}`, `hook_disposed` |
//! | `wait_created`, `wait_completed` | `timer_scheduled` with the wait's id, `timer_fired` |

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use worlds_engine::model::{ActivityState, ActivityStatus, HookStatus};
use worlds_engine::{EventKind, Payload, RunStatus, StructuredError, WorkflowState, WorldError};

use super::records::wait_id_at;

/// A change to a run (`runs.update`).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunUpdate {
    #[serde(default)]
    pub(crate) status: Option<String>,
    #[serde(default)]
    pub(crate) output: Option<Box<RawValue>>,
    #[serde(default)]
    pub(crate) error: Option<Value>,
}

/// A change to a step (`steps.update`).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StepUpdate {
    #[serde(default)]
    pub(crate) status: Option<String>,
    #[serde(default)]
    pub(crate) output: Option<Box<RawValue>>,
    #[serde(default)]
    pub(crate) error: Option<Value>,
    /// When the next attempt may start (ms since the epoch).
    #[serde(default)]
    pub(crate) retry_after: Option<i64>,
}

/// A DevKit event to record (`events.create`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NewEvent {
    pub(crate) event_type: String,
    #[serde(default)]
    pub(crate) correlation_id: Option<String>,
    #[serde(default)]
    pub(crate) event_data: Option<EventData>,
}

/// The fields an event's data may carry.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EventData {
    #[serde(default)]
    pub(crate) result: Option<Box<RawValue>>,
    #[serde(default)]
    pub(crate) payload: Option<Box<RawValue>>,
    #[serde(default)]
    pub(crate) error: Option<Value>,
    #[serde(default)]
    pub(crate) stack: Option<String>,
    #[serde(default)]
    pub(crate) fatal: Option<bool>,
    /// When a wait ends (ms since the epoch).
    #[serde(default)]
    pub(crate) resume_at: Option<i64>,
}

/// The payload a request carried, or JSON `null`.
pub(crate) fn payload(raw: Option<&RawValue>) -> Result<Payload, WorldError> {
    match raw {
        Some(raw) => Payload::from_json(raw.get()).map_err(|e| invalid("payload", e.to_string())),
        None => Ok(Payload::null()),
    }
}

/// An error as the DevKit sends it: a string, or `{message, stack?, code?}`.
pub(crate) fn error_of(value: Option<&Value>, stack: Option<&str>) -> StructuredError {
    let mut error = match value {
        Some(Value::String(message)) => StructuredError::new(message.clone()),
        Some(Value::Object(fields)) => {
            let text = |name: &str| fields.get(name).and_then(Value::as_str).map(str::to_owned);
            let mut error = StructuredError::new(text("message").unwrap_or_default());
            error.stack = text("stack");
            error.code = text("code");
            error
        }
        Some(other) => StructuredError::new(other.to_string()),
        None => StructuredError::new("the step failed"),
    };
    if error.stack.is_none() {
        error.stack = stack.map(str::to_owned);
    }
    error
}

/// A command position no record of the run uses yet.
pub(crate) fn next_position(state: &WorkflowState) -> u32 {
    u32::try_from(state.event_count).unwrap_or(u32::MAX)
}

/// 410: the run has finished.
pub(crate) fn finished(state: &WorkflowState) -> WorldError {
    WorldError::Gone(format!(
        "run {} has finished ({}); it takes no more records",
        state.id, state.status
    ))
}

fn invalid(field: &str, message: impl Into<String>) -> WorldError {
    WorldError::InvalidInput {
        field: field.to_owned(),
        message: message.into(),
    }
}

fn conflict(message: String) -> WorldError {
    WorldError::Conflict { message }
}

/// `workflow_started` first if the run has not started: the DevKit may record a step of a
/// run it never marked running.
fn start_if_pending(state: &WorkflowState, kinds: &mut Vec<EventKind>) -> Result<(), WorldError> {
    match state.status {
        RunStatus::Pending => {
            kinds.push(EventKind::WorkflowStarted {
                attempt: 1,
                first_position: 0,
            });
            Ok(())
        }
        status if status.is_terminal() => Err(finished(state)),
        _ => Ok(()),
    }
}

/// `runs.update`.
pub(crate) fn run_update(
    state: &WorkflowState,
    update: &RunUpdate,
) -> Result<Vec<EventKind>, WorldError> {
    let Some(status) = update.status.as_deref() else {
        return Ok(Vec::new());
    };
    let ending = match status {
        "running" => {
            return Ok(match state.status {
                RunStatus::Pending => vec![EventKind::WorkflowStarted {
                    attempt: 1,
                    first_position: 0,
                }],
                _ => Vec::new(),
            })
        }
        "completed" => (
            RunStatus::Completed,
            EventKind::WorkflowCompleted {
                output: payload(update.output.as_deref())?,
            },
        ),
        "failed" => (
            RunStatus::Failed,
            EventKind::WorkflowFailed {
                error: error_of(update.error.as_ref(), None),
            },
        ),
        "cancelled" => (RunStatus::Cancelled, EventKind::WorkflowCancelled { reason: None }),
        other => {
            return Err(invalid(
                "status",
                format!(
                    "a run's status can be set to running, completed, failed or cancelled, not {other:?}"
                ),
            ))
        }
    };
    let (to, kind) = ending;
    if state.status == to {
        return Ok(Vec::new());
    }
    if state.status.is_terminal() {
        return Err(conflict(format!(
            "run {} has already finished ({}); it cannot become {status}",
            state.id, state.status
        )));
    }
    let mut kinds = Vec::new();
    if to != RunStatus::Cancelled {
        start_if_pending(state, &mut kinds)?;
    }
    kinds.push(kind);
    Ok(kinds)
}

/// `steps.create`.
pub(crate) fn step_create(
    state: &WorkflowState,
    step_id: &str,
    step_name: &str,
    input: Payload,
) -> Result<Vec<EventKind>, WorldError> {
    if state.status.is_terminal() {
        return Err(finished(state));
    }
    if step_id.is_empty() || step_name.is_empty() {
        return Err(invalid("stepId", "a step needs a stepId and a stepName"));
    }
    if state.activities.iter().any(|a| a.id == step_id) {
        return Err(conflict(format!(
            "run {} already has step {step_id}",
            state.id
        )));
    }
    let mut kinds = Vec::new();
    start_if_pending(state, &mut kinds)?;
    kinds.push(EventKind::ActivityScheduled {
        position: next_position(state),
        activity_id: step_id.to_owned(),
        name: step_name.to_owned(),
        input,
        options: None,
        inline: false,
    });
    Ok(kinds)
}

/// The step with this id (404 if the run has none).
pub(crate) fn step<'s>(
    state: &'s WorkflowState,
    step_id: &str,
) -> Result<&'s ActivityState, WorldError> {
    state
        .activities
        .iter()
        .find(|a| a.id == step_id)
        .ok_or_else(|| WorldError::NotFound {
            what: "step",
            id: step_id.to_owned(),
        })
}

/// The records that start the step's next attempt, if it is not running.
fn started(a: &ActivityState) -> Option<EventKind> {
    matches!(
        a.status,
        ActivityStatus::Scheduled | ActivityStatus::Retrying
    )
    .then(|| EventKind::ActivityStarted {
        position: a.position,
        attempt: a.attempt + 1,
    })
}

/// The attempt the step runs now (or would, once started).
fn current_attempt(a: &ActivityState) -> u32 {
    match a.status {
        ActivityStatus::Running => a.attempt,
        _ => a.attempt + 1,
    }
}

/// An attempt's end: `activity_completed`, or `activity_failed` (final or retrying), after the
/// attempt's start if it was never recorded.
fn attempt_end(
    state: &WorkflowState,
    a: &ActivityState,
    end: AttemptEnd,
) -> Result<Vec<EventKind>, WorldError> {
    if state.status.is_terminal() {
        return Err(finished(state));
    }
    let mut kinds: Vec<EventKind> = started(a).into_iter().collect();
    let attempt = current_attempt(a);
    kinds.push(match end {
        AttemptEnd::Completed(output) => EventKind::ActivityCompleted {
            position: a.position,
            attempt,
            output,
        },
        AttemptEnd::Failed { error, retrying } => EventKind::ActivityFailed {
            position: a.position,
            attempt,
            error,
            retrying,
        },
    });
    Ok(kinds)
}

enum AttemptEnd {
    Completed(Payload),
    Failed {
        error: StructuredError,
        retrying: bool,
    },
}

/// `steps.update`.
pub(crate) fn step_update(
    state: &WorkflowState,
    step_id: &str,
    update: &StepUpdate,
    now: i64,
) -> Result<Vec<EventKind>, WorldError> {
    let a = step(state, step_id)?;
    let Some(status) = update.status.as_deref() else {
        return Ok(Vec::new());
    };
    match (status, a.status) {
        ("running", ActivityStatus::Running) => Ok(Vec::new()),
        ("running", ActivityStatus::Completed | ActivityStatus::Failed) => Err(conflict(format!(
            "step {step_id} has finished ({}); it cannot run again",
            step_status_name(a.status)
        ))),
        ("running", _) => {
            if state.status.is_terminal() {
                return Err(finished(state));
            }
            Ok(started(a).into_iter().collect())
        }
        // "If a concurrent execution marked the step as complete, this request should throw."
        ("completed", ActivityStatus::Completed) => {
            Err(conflict(format!("step {step_id} is already completed")))
        }
        ("completed", ActivityStatus::Failed) => Err(conflict(format!(
            "step {step_id} has failed; it cannot complete"
        ))),
        ("completed", _) => attempt_end(
            state,
            a,
            AttemptEnd::Completed(payload(update.output.as_deref())?),
        ),
        ("failed", ActivityStatus::Failed) => Ok(Vec::new()),
        ("failed", ActivityStatus::Completed) => Err(conflict(format!(
            "step {step_id} has completed; it cannot fail"
        ))),
        ("failed", _) => attempt_end(
            state,
            a,
            AttemptEnd::Failed {
                error: error_of(update.error.as_ref(), None),
                retrying: false,
            },
        ),
        ("pending", ActivityStatus::Completed | ActivityStatus::Failed) => Err(conflict(format!(
            "step {step_id} has finished ({}); it cannot wait for another attempt",
            step_status_name(a.status)
        ))),
        ("pending", ActivityStatus::Scheduled) => Ok(Vec::new()),
        ("pending", _) => {
            if state.status.is_terminal() {
                return Err(finished(state));
            }
            let mut kinds = Vec::new();
            if a.status == ActivityStatus::Running {
                // Given up without a recorded failure: the attempt ends here.
                kinds.push(EventKind::ActivityFailed {
                    position: a.position,
                    attempt: a.attempt,
                    error: error_of(update.error.as_ref(), None),
                    retrying: true,
                });
            }
            let delay = update
                .retry_after
                .map_or(0, |at| at.saturating_sub(now).max(0));
            kinds.push(EventKind::ActivityRetry {
                position: a.position,
                attempt: a.attempt + 1,
                delay_ms: u64::try_from(delay).unwrap_or(0),
            });
            Ok(kinds)
        }
        (other, _) => Err(invalid(
            "status",
            format!(
                "a step's status can be set to running, completed, failed or pending, not {other:?}"
            ),
        )),
    }
}

fn step_status_name(status: ActivityStatus) -> &'static str {
    super::records::step_status(status)
}

/// The correlation id an event must name.
fn correlation(event: &NewEvent) -> Result<&str, WorldError> {
    event
        .correlation_id
        .as_deref()
        .filter(|id| !id.is_empty())
        .ok_or_else(|| {
            invalid(
                "correlationId",
                format!(
                    "a {} event names its step, hook or wait in correlationId",
                    event.event_type
                ),
            )
        })
}

/// The position of the wait with this id, and whether it is still pending.
fn wait(state: &WorkflowState, wait_id: &str) -> Option<(u32, bool)> {
    let mut found = None;
    for event in &state.history {
        match &event.kind {
            EventKind::TimerScheduled {
                position, timer_id, ..
            } if timer_id.clone().unwrap_or_else(|| wait_id_at(*position)) == wait_id => {
                found = Some((*position, true));
            }
            EventKind::TimerFired { position } if found.is_some_and(|(p, _)| p == *position) => {
                found = Some((*position, false));
            }
            _ => {}
        }
    }
    found
}

/// `events.create`.
pub(crate) fn event_create(
    state: &WorkflowState,
    event: &NewEvent,
) -> Result<Vec<EventKind>, WorldError> {
    let empty = EventData::default();
    let data = event.event_data.as_ref().unwrap_or(&empty);
    match event.event_type.as_str() {
        "workflow_started" => run_update(state, &status_update("running")),
        "workflow_completed" => run_update(
            state,
            &RunUpdate {
                status: Some("completed".into()),
                output: data.result.clone(),
                error: None,
            },
        ),
        "workflow_failed" => run_update(
            state,
            &RunUpdate {
                status: Some("failed".into()),
                output: None,
                error: data.error.clone(),
            },
        ),
        "step_started" => {
            let a = step(state, correlation(event)?)?;
            match a.status {
                ActivityStatus::Running => Ok(Vec::new()),
                ActivityStatus::Completed | ActivityStatus::Failed => Err(conflict(format!(
                    "step {} has finished ({}); it cannot start again",
                    a.id,
                    step_status_name(a.status)
                ))),
                _ if state.status.is_terminal() => Err(finished(state)),
                _ => Ok(started(a).into_iter().collect()),
            }
        }
        "step_completed" => {
            let a = step(state, correlation(event)?)?;
            match a.status {
                ActivityStatus::Completed => Ok(Vec::new()),
                ActivityStatus::Failed => Err(conflict(format!(
                    "step {} has failed; it cannot complete",
                    a.id
                ))),
                _ => attempt_end(
                    state,
                    a,
                    AttemptEnd::Completed(payload(data.result.as_deref())?),
                ),
            }
        }
        "step_failed" => {
            let a = step(state, correlation(event)?)?;
            let fatal = data.fatal.unwrap_or(false);
            match a.status {
                ActivityStatus::Failed => Ok(Vec::new()),
                ActivityStatus::Completed => Err(conflict(format!(
                    "step {} has completed; it cannot fail",
                    a.id
                ))),
                ActivityStatus::Retrying if !fatal => Ok(Vec::new()),
                _ => attempt_end(
                    state,
                    a,
                    AttemptEnd::Failed {
                        error: error_of(data.error.as_ref(), data.stack.as_deref()),
                        retrying: !fatal,
                    },
                ),
            }
        }
        "hook_created" => {
            let hook_id = correlation(event)?;
            if state.hooks.iter().any(|h| h.id == hook_id) {
                Ok(Vec::new())
            } else {
                Err(WorldError::NotFound {
                    what: "hook",
                    id: hook_id.to_owned(),
                })
            }
        }
        "hook_received" => {
            let hook_id = correlation(event)?;
            let hook = hook(state, hook_id)?;
            if state.status.is_terminal() {
                return Err(finished(state));
            }
            Ok(vec![EventKind::HookReceived {
                position: hook.position,
                hook_id: hook.id.clone(),
                payload: payload(data.payload.as_deref())?,
            }])
        }
        "hook_disposed" => hook_dispose(state, correlation(event)?),
        "wait_created" => {
            let wait_id = correlation(event)?;
            if state.status.is_terminal() {
                return Err(finished(state));
            }
            if wait(state, wait_id).is_some() {
                return Err(conflict(format!(
                    "run {} already has wait {wait_id}",
                    state.id
                )));
            }
            let fire_at = data.resume_at.ok_or_else(|| {
                invalid(
                    "eventData.resumeAt",
                    "a wait needs resumeAt (ms since the epoch)",
                )
            })?;
            let mut kinds = Vec::new();
            start_if_pending(state, &mut kinds)?;
            kinds.push(EventKind::TimerScheduled {
                position: next_position(state),
                fire_at,
                timer_id: Some(wait_id.to_owned()),
            });
            Ok(kinds)
        }
        "wait_completed" => {
            let wait_id = correlation(event)?;
            match wait(state, wait_id) {
                None => Err(WorldError::NotFound {
                    what: "wait",
                    id: wait_id.to_owned(),
                }),
                Some((_, false)) => Err(conflict(format!(
                    "wait {wait_id} of run {} has already completed",
                    state.id
                ))),
                Some((_, true)) if state.status.is_terminal() => Err(finished(state)),
                Some((position, true)) => Ok(vec![EventKind::TimerFired { position }]),
            }
        }
        other => Err(invalid(
            "eventType",
            format!("{other:?} is not an event type this world records"),
        )),
    }
}

fn status_update(status: &str) -> RunUpdate {
    RunUpdate {
        status: Some(status.to_owned()),
        ..RunUpdate::default()
    }
}

/// The hook with this id (404 if the run has none).
pub(crate) fn hook<'s>(
    state: &'s WorkflowState,
    hook_id: &str,
) -> Result<&'s worlds_engine::model::HookState, WorldError> {
    state
        .hooks
        .iter()
        .find(|h| h.id == hook_id && h.status != HookStatus::Conflict)
        .ok_or_else(|| WorldError::NotFound {
            what: "hook",
            id: hook_id.to_owned(),
        })
}

/// `hooks.dispose`: releases the hook's token (nothing if it is already released).
pub(crate) fn hook_dispose(
    state: &WorkflowState,
    hook_id: &str,
) -> Result<Vec<EventKind>, WorldError> {
    let hook = hook(state, hook_id)?;
    Ok(match hook.status {
        HookStatus::Waiting | HookStatus::Received | HookStatus::Expired => {
            vec![EventKind::HookDisposed {
                position: hook.position,
                hook_id: hook.id.clone(),
            }]
        }
        _ => Vec::new(),
    })
}
