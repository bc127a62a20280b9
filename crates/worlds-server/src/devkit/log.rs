//! The records of a run made by a DevKit runtime of spec version 2 or later (the event-sourced
//! World: `@workflow/world` 5.x), read off the engine run.
//!
//! Each DevKit event is one engine event, so the run's event log is its engine history read in
//! order, with the engine event's position (`seq`) as the stable cursor and its id
//! (`evnt_<ULID>`, the ULID's time the time the event was recorded) as the event id:
//!
//! | DevKit event | engine event |
//! |---|---|
//! | `run_created` / `run_started` / `run_completed` / `run_failed` / `run_cancelled` | `workflow_queued` / `workflow_started` / `workflow_completed` / `workflow_failed` / `workflow_cancelled` |
//! | `attr_set` | `attributes_set` |
//! | `step_created` / `step_started` / `step_completed` / `step_failed` | `activity_scheduled` / `activity_started` / `activity_completed` / `activity_failed` (final) |
//! | `step_retrying` | `activity_failed` (retrying), with the `activity_retry` written with it |
//! | `hook_created` / `hook_conflict` / `hook_received` / `hook_disposed` | `hook_created` / `hook_conflict` / `hook_received` / `hook_disposed` |
//! | `wait_created` / `wait_completed` | `timer_scheduled` (its `timer_id` the wait id) / `timer_fired` |
//!
//! The engine's own markers (`run_resumed`, `activity_retry`) are not DevKit events. Payloads
//! are stored as the runtime sent them (bytes in the `$bytes` form) and given back as stored.
//! Times are RFC 3339 strings.

use std::collections::HashMap;

use serde::Serialize;
use serde_json::{json, Map, Value};
use worlds_engine::model::{ActivityState, ActivityStatus, HookState, HookStatus};
use worlds_engine::{Event, EventKind, Payload, RunStatus, StructuredError, WorkflowState};

/// Whether the DevKit sees this hook: a hook that lost its token (`hook_conflict`) was never
/// one, and a disposed hook is gone, as the DevKit's own Worlds delete it at disposal. The
/// engine keeps both in the run's history, and the dashboard shows them.
pub(crate) fn is_devkit_hook(hook: &HookState) -> bool {
    !matches!(hook.status, HookStatus::Conflict | HookStatus::Disposed)
}

/// The spec version this server speaks.
pub(crate) const SPEC_VERSION: u32 = 5;

/// The owner, project and environment of a DevKit hook, which a self-hosted world has no use
/// for.
const HOOK_SCOPE: &str = "worlds";

/// The deployment id of a run whose app named none.
pub(crate) const DEFAULT_DEPLOYMENT: &str = "worlds";

/// A run's status as the DevKit names it.
pub(crate) fn run_status(status: RunStatus) -> &'static str {
    match status {
        RunStatus::Pending => "pending",
        RunStatus::Running | RunStatus::Compensating => "running",
        RunStatus::Completed => "completed",
        RunStatus::Failed | RunStatus::Compensated => "failed",
        RunStatus::Cancelled => "cancelled",
    }
}

/// A step's status as the DevKit names it: a step waiting for its next attempt is `pending`.
pub(crate) fn step_status(status: ActivityStatus) -> &'static str {
    match status {
        ActivityStatus::Scheduled | ActivityStatus::Retrying => "pending",
        ActivityStatus::Running => "running",
        ActivityStatus::Completed => "completed",
        ActivityStatus::Failed => "failed",
    }
}

/// The id of a wait recorded without one: its position.
pub(crate) fn wait_id_at(position: u32) -> String {
    format!("wait_{position}")
}

fn spec_version(state: &WorkflowState) -> Option<u32> {
    state.runtime.as_ref().and_then(|r| r.spec_version)
}

/// `ms` as an RFC 3339 time.
pub(crate) fn time(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// A time the runtime sent: an RFC 3339 string or ms since the epoch.
pub(crate) fn parse_time(value: &Value) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_f64().map(|f| f as i64),
        Value::String(s) => s
            .parse::<jiff::Timestamp>()
            .ok()
            .map(|t| t.as_millisecond()),
        _ => None,
    }
}

/// An error as the run's runtime gave it: its serialized bytes when it sent them, else the
/// engine's structured error.
fn error_value(error: &StructuredError) -> Value {
    match &error.data {
        Some(data) => data.to_value(),
        None => json!({ "message": error.message, "stack": error.stack, "code": error.code }),
    }
}

fn put(map: &mut Map<String, Value>, key: &str, value: Option<Value>) {
    if let Some(value) = value {
        map.insert(key.to_owned(), value);
    }
}

/// The run, as a `WorkflowRun` of the event-sourced World.
pub(crate) fn run(state: &WorkflowState, resolve: bool) -> Value {
    let mut run = Map::new();
    run.insert("runId".into(), json!(state.id));
    run.insert("status".into(), json!(run_status(state.status)));
    run.insert(
        "deploymentId".into(),
        json!(state.code_version.as_deref().unwrap_or(DEFAULT_DEPLOYMENT)),
    );
    run.insert("workflowName".into(), json!(state.name));
    let runtime = state.runtime.as_deref();
    put(
        &mut run,
        "specVersion",
        spec_version(state).map(|v| json!(v)),
    );
    put(
        &mut run,
        "executionContext",
        runtime
            .and_then(|r| r.execution_context.as_ref())
            .map(Payload::to_value),
    );
    run.insert(
        "attributes".into(),
        json!(runtime.map(|r| r.attributes.clone()).unwrap_or_default()),
    );
    if resolve {
        put(
            &mut run,
            "input",
            state.input.as_ref().map(Payload::to_value),
        );
        if state.status == RunStatus::Completed {
            put(
                &mut run,
                "output",
                Some(state.output.as_ref().map_or(Value::Null, Payload::to_value)),
            );
        }
    }
    if matches!(state.status, RunStatus::Failed | RunStatus::Compensated) {
        if let Some(error) = state.error.as_deref() {
            if resolve {
                run.insert("error".into(), error_value(error));
            }
            put(&mut run, "errorCode", error.code.clone().map(Value::String));
        }
    }
    put(
        &mut run,
        "startedAt",
        state.started_at.map(|t| json!(time(t))),
    );
    if state.status.is_terminal() {
        put(
            &mut run,
            "completedAt",
            state.completed_at.map(|t| json!(time(t))),
        );
    }
    run.insert("createdAt".into(), json!(time(state.created_at)));
    run.insert("updatedAt".into(), json!(time(state.updated_at)));
    Value::Object(run)
}

/// What the history adds to a step: first start, last change, when its next attempt may start.
#[derive(Debug, Default, Clone, Copy)]
struct StepTimes {
    first_started: Option<i64>,
    updated: i64,
    retry_after: Option<i64>,
}

fn step_times(history: &[Event]) -> HashMap<u32, StepTimes> {
    let mut times: HashMap<u32, StepTimes> = HashMap::new();
    for event in history {
        let position = match &event.kind {
            EventKind::ActivityScheduled { position, .. }
            | EventKind::ActivityCompleted { position, .. }
            | EventKind::ActivityFailed { position, .. } => *position,
            EventKind::ActivityStarted { position, .. } => {
                let t = times.entry(*position).or_default();
                t.first_started.get_or_insert(event.timestamp);
                t.retry_after = None;
                *position
            }
            EventKind::ActivityRetry {
                position, delay_ms, ..
            } => {
                let t = times.entry(*position).or_default();
                t.retry_after = Some(
                    event
                        .timestamp
                        .saturating_add(i64::try_from(*delay_ms).unwrap_or(i64::MAX)),
                );
                *position
            }
            _ => continue,
        };
        times.entry(position).or_default().updated = event.timestamp;
    }
    times
}

/// Every step of the run (its history read for the times), in the order they were created.
pub(crate) fn steps(state: &WorkflowState, resolve: bool) -> Vec<Value> {
    let times = step_times(&state.history);
    state
        .activities
        .iter()
        .map(|a| step_of(state, a, times.get(&a.position).copied(), resolve))
        .collect()
}

/// One step of the run.
pub(crate) fn step(state: &WorkflowState, a: &ActivityState, resolve: bool) -> Value {
    let times = step_times(&state.history);
    step_of(state, a, times.get(&a.position).copied(), resolve)
}

fn step_of(
    state: &WorkflowState,
    a: &ActivityState,
    times: Option<StepTimes>,
    resolve: bool,
) -> Value {
    let t = times.unwrap_or_default();
    let mut step = Map::new();
    step.insert("runId".into(), json!(state.id));
    step.insert("stepId".into(), json!(a.id));
    step.insert("stepName".into(), json!(a.name));
    step.insert("status".into(), json!(step_status(a.status)));
    if resolve {
        put(&mut step, "input", a.input.as_ref().map(Payload::to_value));
        if a.status == ActivityStatus::Completed {
            put(
                &mut step,
                "output",
                Some(a.output.as_ref().map_or(Value::Null, Payload::to_value)),
            );
        }
        put(&mut step, "error", a.error.as_ref().map(error_value));
    }
    step.insert("attempt".into(), json!(a.attempt));
    put(
        &mut step,
        "startedAt",
        t.first_started.map(|t| json!(time(t))),
    );
    put(
        &mut step,
        "completedAt",
        a.completed_at.map(|t| json!(time(t))),
    );
    step.insert("createdAt".into(), json!(time(a.scheduled_at)));
    step.insert(
        "updatedAt".into(),
        json!(time(t.updated.max(a.scheduled_at))),
    );
    if a.status == ActivityStatus::Retrying {
        put(
            &mut step,
            "retryAfter",
            t.retry_after.map(|t| json!(time(t))),
        );
    }
    put(
        &mut step,
        "specVersion",
        spec_version(state).map(|v| json!(v)),
    );
    Value::Object(step)
}

/// When a step's next attempt may start, if it waits for one.
pub(crate) fn retry_after(state: &WorkflowState, a: &ActivityState) -> Option<i64> {
    (a.status == ActivityStatus::Retrying)
        .then(|| {
            step_times(&state.history)
                .get(&a.position)
                .and_then(|t| t.retry_after)
        })
        .flatten()
}

/// A hook of the run; `token` when the caller knows it (only its digest is stored).
pub(crate) fn hook(
    state: &WorkflowState,
    hook: &HookState,
    token: Option<&str>,
    resolve: bool,
) -> Value {
    let mut value = Map::new();
    value.insert("runId".into(), json!(state.id));
    value.insert("hookId".into(), json!(hook.id));
    value.insert("token".into(), json!(token.unwrap_or_default()));
    value.insert("ownerId".into(), json!(HOOK_SCOPE));
    value.insert("projectId".into(), json!(HOOK_SCOPE));
    value.insert("environment".into(), json!(HOOK_SCOPE));
    if resolve {
        put(
            &mut value,
            "metadata",
            hook.metadata.as_ref().map(Payload::to_value),
        );
    }
    value.insert("createdAt".into(), json!(time(hook.created_at)));
    put(
        &mut value,
        "specVersion",
        spec_version(state).map(|v| json!(v)),
    );
    Value::Object(value)
}

/// A wait of the run: `waiting` until it completes.
pub(crate) fn wait(state: &WorkflowState, wait_id: &str) -> Option<Value> {
    let mut found: Option<(u32, i64, i64, Option<i64>)> = None;
    for event in &state.history {
        match &event.kind {
            EventKind::TimerScheduled {
                position,
                fire_at,
                timer_id,
            } if timer_id.clone().unwrap_or_else(|| wait_id_at(*position)) == wait_id => {
                found = Some((*position, *fire_at, event.timestamp, None));
            }
            EventKind::TimerFired { position } => {
                if let Some(f) = found.as_mut().filter(|f| f.0 == *position) {
                    f.3 = Some(event.timestamp);
                }
            }
            _ => {}
        }
    }
    let (_, resume_at, created, completed) = found?;
    let mut value = Map::new();
    value.insert("waitId".into(), json!(wait_id));
    value.insert("runId".into(), json!(state.id));
    value.insert(
        "status".into(),
        json!(if completed.is_some() {
            "completed"
        } else {
            "waiting"
        }),
    );
    value.insert("resumeAt".into(), json!(time(resume_at)));
    put(&mut value, "completedAt", completed.map(|t| json!(time(t))));
    value.insert("createdAt".into(), json!(time(created)));
    value.insert(
        "updatedAt".into(),
        json!(time(completed.unwrap_or(created))),
    );
    put(
        &mut value,
        "specVersion",
        spec_version(state).map(|v| json!(v)),
    );
    Some(Value::Object(value))
}

/// A DevKit event, with the position of the engine event it was read from (its cursor).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct LogEvent {
    /// The event as the DevKit reads it.
    pub(crate) value: Value,
    /// Its correlation id, if it has one.
    #[serde(skip)]
    pub(crate) correlation_id: Option<String>,
    /// Its type.
    #[serde(skip)]
    pub(crate) event_type: &'static str,
    /// The engine event's position in the run's history.
    #[serde(skip)]
    pub(crate) seq: u64,
}

/// Reads the DevKit events off a history in order, remembering which step and wait each
/// position holds.
#[derive(Debug, Default)]
pub(crate) struct LogReader {
    steps: HashMap<u32, (String, String)>,
    waits: HashMap<u32, String>,
    spec: Option<u32>,
}

impl LogReader {
    /// The DevKit events of `history`, in order; `resolve` leaves payloads in.
    pub(crate) fn events(history: &[Event], resolve: bool) -> Vec<LogEvent> {
        Self::events_from(history, 0, resolve)
    }

    /// The DevKit events of `history[from..]`, in order; the events before `from` are read
    /// only for the steps and waits they name (no payloads copied), which makes reading the
    /// tail of a long run cheap.
    pub(crate) fn events_from(history: &[Event], from: usize, resolve: bool) -> Vec<LogEvent> {
        let mut reader = LogReader::default();
        let mut out = Vec::new();
        for (i, event) in history.iter().enumerate() {
            let wanted = i >= from;
            if let Some(e) = reader.read(event, history.get(i + 1), resolve && wanted) {
                if wanted {
                    out.push(e);
                }
            }
        }
        out
    }

    /// The DevKit event with this event id, if the history has it and it is one.
    pub(crate) fn find(history: &[Event], event_id: &str, resolve: bool) -> Option<LogEvent> {
        let at = history.iter().position(|e| e.id == event_id)?;
        Self::events_from(&history[..history.len().min(at + 2)], at, resolve)
            .into_iter()
            .next()
            .filter(|e| e.seq == history[at].seq)
    }

    /// The DevKit event an engine event is, if it is one; `next` is the event after it (a
    /// retrying failure takes its retry time from there).
    pub(crate) fn read(
        &mut self,
        event: &Event,
        next: Option<&Event>,
        resolve: bool,
    ) -> Option<LogEvent> {
        let payload = |p: &Payload| resolve.then(|| p.to_value());
        let mut data = Map::new();
        let step =
            |steps: &HashMap<u32, (String, String)>, position: &u32| steps.get(position).cloned();
        let (event_type, correlation_id): (&'static str, Option<String>) = match &event.kind {
            EventKind::WorkflowQueued(run) => {
                self.spec = run.runtime.as_ref().and_then(|r| r.spec_version);
                data.insert(
                    "deploymentId".into(),
                    json!(run.code_version.as_deref().unwrap_or(DEFAULT_DEPLOYMENT)),
                );
                data.insert("workflowName".into(), json!(run.name));
                put(&mut data, "input", payload(&run.input));
                if let Some(runtime) = &run.runtime {
                    put(
                        &mut data,
                        "executionContext",
                        runtime.execution_context.as_ref().map(Payload::to_value),
                    );
                    if !runtime.attributes.is_empty() {
                        data.insert("attributes".into(), json!(runtime.attributes));
                    }
                }
                ("run_created", None)
            }
            EventKind::WorkflowStarted { .. } => ("run_started", None),
            EventKind::WorkflowCompleted { output } => {
                put(&mut data, "output", payload(output));
                ("run_completed", None)
            }
            EventKind::WorkflowFailed { error } => {
                if resolve {
                    data.insert("error".into(), error_value(error));
                }
                put(
                    &mut data,
                    "errorCode",
                    error.code.clone().map(Value::String),
                );
                ("run_failed", None)
            }
            EventKind::WorkflowCancelled { reason } => {
                put(&mut data, "cancelReason", reason.clone().map(Value::String));
                ("run_cancelled", None)
            }
            EventKind::AttributesSet {
                changes,
                correlation_id,
                writer,
            } => {
                data.insert("changes".into(), json!(changes));
                put(&mut data, "writer", writer.as_ref().map(Payload::to_value));
                ("attr_set", correlation_id.clone())
            }
            EventKind::ActivityScheduled {
                position,
                activity_id,
                name,
                input,
                ..
            } => {
                self.steps
                    .insert(*position, (activity_id.clone(), name.clone()));
                data.insert("stepName".into(), json!(name));
                put(&mut data, "input", payload(input));
                ("step_created", Some(activity_id.clone()))
            }
            EventKind::ActivityStarted { position, attempt } => {
                let (id, name) = step(&self.steps, position)?;
                data.insert("stepName".into(), json!(name));
                data.insert("attempt".into(), json!(attempt));
                ("step_started", Some(id))
            }
            EventKind::ActivityCompleted {
                position, output, ..
            } => {
                let (id, name) = step(&self.steps, position)?;
                data.insert("stepName".into(), json!(name));
                put(&mut data, "result", payload(output));
                ("step_completed", Some(id))
            }
            EventKind::ActivityFailed {
                position,
                error,
                retrying,
                ..
            } => {
                let (id, name) = step(&self.steps, position)?;
                data.insert("stepName".into(), json!(name));
                if resolve {
                    data.insert("error".into(), error_value(error));
                }
                if *retrying {
                    if let Some(Event {
                        kind: EventKind::ActivityRetry { delay_ms, .. },
                        timestamp,
                        ..
                    }) = next
                    {
                        let at = timestamp.saturating_add(i64::try_from(*delay_ms).unwrap_or(0));
                        data.insert("retryAfter".into(), json!(time(at)));
                    }
                    ("step_retrying", Some(id))
                } else {
                    ("step_failed", Some(id))
                }
            }
            EventKind::HookCreated {
                hook_id,
                metadata,
                webhook,
                ..
            } => {
                put(&mut data, "metadata", metadata.as_ref().and_then(payload));
                if *webhook {
                    data.insert("isWebhook".into(), json!(true));
                }
                ("hook_created", Some(hook_id.clone()))
            }
            EventKind::HookConflict { hook_id, .. } => ("hook_conflict", Some(hook_id.clone())),
            EventKind::HookReceived {
                hook_id,
                payload: p,
                ..
            } => {
                put(&mut data, "payload", payload(p));
                ("hook_received", Some(hook_id.clone()))
            }
            EventKind::HookDisposed { hook_id, .. } => ("hook_disposed", Some(hook_id.clone())),
            EventKind::TimerScheduled {
                position,
                fire_at,
                timer_id,
            } => {
                let id = timer_id.clone().unwrap_or_else(|| wait_id_at(*position));
                self.waits.insert(*position, id.clone());
                data.insert("resumeAt".into(), json!(time(*fire_at)));
                ("wait_created", Some(id))
            }
            EventKind::TimerFired { position } => (
                "wait_completed",
                Some(
                    self.waits
                        .get(position)
                        .cloned()
                        .unwrap_or_else(|| wait_id_at(*position)),
                ),
            ),
            _ => return None,
        };
        let mut value = Map::new();
        value.insert("runId".into(), json!(event.run_id));
        value.insert("eventId".into(), json!(event.id));
        value.insert("eventType".into(), json!(event_type));
        put(
            &mut value,
            "correlationId",
            correlation_id.clone().map(Value::String),
        );
        if !data.is_empty() {
            value.insert("eventData".into(), Value::Object(data));
        }
        value.insert("createdAt".into(), json!(time(event.timestamp)));
        put(&mut value, "specVersion", self.spec.map(|v| json!(v)));
        Some(LogEvent {
            value: Value::Object(value),
            correlation_id,
            event_type,
            seq: event.seq,
        })
    }
}
