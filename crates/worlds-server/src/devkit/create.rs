//! `events.create` of the event-sourced DevKit World (spec version 2 and later): one DevKit
//! event is one atomic write to the engine run, answered with the event and the entity it
//! changed (see `log.rs` for which engine event each DevKit event is).
//!
//! The rules a write is checked against, beyond the engine's own:
//!
//! | event | refused with |
//! |---|---|
//! | `run_created` with a run id that exists | 409 |
//! | `run_started` on a run that has ended | 410 (a missing run is first created from the event's data) |
//! | `run_completed` / `run_failed` / `run_cancelled` on a run that has ended | 409 (`run_cancelled` on a cancelled run is answered as it stands) |
//! | `attr_set` on an ended run, with a reserved key, or repeating a workflow's correlation id | 409 / 400 / 409 |
//! | `step_created` for a step that exists, or on an ended run | 409 |
//! | `step_started` of a step that ended; before its `retryAfter`; carrying creation data for a step that exists | 409; 425; 409 |
//! | `step_completed` / `step_failed` / `step_retrying` of a step that ended | 409 |
//! | `hook_created` with an id that exists | 409 (a token another live hook holds is answered with `hook_conflict`) |
//! | `hook_received` / `hook_disposed` of a hook that does not exist or was disposed | 404 |
//! | `wait_created` with an id that exists; `wait_completed` of a completed wait | 409 |

use serde::Deserialize;
use serde_json::{json, Map, Value};
use worlds_engine::model::{
    check_attribute_changes, ActivityStatus, AttributeChange, HookStatus, RuntimeInfo,
};
use worlds_engine::{
    EventKind, NewExternalRun, Payload, RunStatus, StructuredError, WorkflowState, WorldError,
};

use crate::error::ApiError;

use super::log::{self, parse_time, LogEvent, LogReader, SPEC_VERSION};
use super::writes::next_position;

/// The body of `POST /v1/devkit/events`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CreateEvent {
    /// The run, or `null` for a `run_created` whose id the server makes.
    #[serde(default)]
    pub(crate) run_id: Option<String>,
    /// The event.
    pub(crate) event: NewEvent,
    /// How to answer.
    #[serde(default)]
    pub(crate) params: Params,
}

/// The event of an `events.create`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NewEvent {
    pub(crate) event_type: String,
    #[serde(default)]
    pub(crate) correlation_id: Option<String>,
    #[serde(default)]
    pub(crate) spec_version: Option<u32>,
    #[serde(default)]
    pub(crate) event_data: Option<Map<String, Value>>,
}

/// `CreateEventParams` the server reads.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Params {
    /// `none` leaves the payloads out of the answer.
    #[serde(default)]
    pub(crate) resolve_data: Option<String>,
    /// On `run_started`: the run's events are not wanted in the answer.
    #[serde(default)]
    pub(crate) skip_preload: Option<bool>,
    /// On a step's end: the events after this cursor are wanted in the answer.
    #[serde(default)]
    pub(crate) since_cursor: Option<String>,
}

impl Params {
    pub(crate) fn resolve(&self) -> bool {
        self.resolve_data.as_deref() != Some("none")
    }
}

impl NewEvent {
    fn data(&self) -> &Map<String, Value> {
        static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
        self.event_data
            .as_ref()
            .unwrap_or_else(|| EMPTY.get_or_init(Map::new))
    }

    fn field(&self, name: &str) -> Option<&Value> {
        self.data().get(name).filter(|v| !v.is_null())
    }

    fn text(&self, name: &str) -> Option<String> {
        self.field(name).and_then(Value::as_str).map(str::to_owned)
    }

    fn payload(&self, name: &str) -> Result<Option<Payload>, WorldError> {
        self.field(name).map(payload).transpose()
    }

    /// The correlation id this event must name.
    pub(crate) fn correlation(&self) -> Result<&str, WorldError> {
        self.correlation_id
            .as_deref()
            .filter(|id| !id.is_empty())
            .ok_or_else(|| {
                invalid(
                    "correlationId",
                    format!(
                        "a {} event names its step, hook or wait in correlationId",
                        self.event_type
                    ),
                )
            })
    }

    /// The run a `run_created` (or a `run_started` of a run not created yet) describes.
    pub(crate) fn new_run(&self, run_id: Option<String>) -> Result<NewExternalRun, WorldError> {
        let name = self
            .text("workflowName")
            .ok_or_else(|| invalid("eventData.workflowName", "a new run needs its workflowName"))?;
        let input = self.payload("input")?.unwrap_or_else(Payload::null);
        let attributes: Vec<AttributeChange> = match self.field("attributes") {
            None => Vec::new(),
            Some(Value::Object(map)) => map
                .iter()
                .map(|(key, value)| match value {
                    Value::String(v) => Ok(AttributeChange {
                        key: key.clone(),
                        value: Some(v.clone()),
                    }),
                    _ => Err(invalid(
                        "eventData.attributes",
                        format!("attribute {key:?} must be a string"),
                    )),
                })
                .collect::<Result<_, _>>()?,
            Some(_) => {
                return Err(invalid(
                    "eventData.attributes",
                    "attributes are an object of strings",
                ))
            }
        };
        check_attribute_changes(
            &Default::default(),
            &attributes,
            self.field("allowReservedAttributes") == Some(&Value::Bool(true)),
        )?;
        let runtime = RuntimeInfo {
            spec_version: Some(self.spec_version.unwrap_or(SPEC_VERSION)),
            execution_context: self.payload("executionContext")?,
            attributes: attributes
                .into_iter()
                .filter_map(|c| c.value.map(|v| (c.key, v)))
                .collect(),
        };
        Ok(NewExternalRun {
            run_id,
            name,
            input,
            code_version: self.text("deploymentId"),
            runtime: Some(runtime),
        })
    }

    /// True for a `run_started` that carries what creates its run.
    pub(crate) fn can_create_run(&self) -> bool {
        self.event_type == "run_started"
            && self.field("workflowName").is_some()
            && self.field("deploymentId").is_some()
    }

    /// True for a `step_started` that carries what creates its step.
    fn creates_step(&self) -> bool {
        self.event_type == "step_started"
            && self.field("stepName").is_some()
            && self.data().contains_key("input")
    }
}

/// A JSON value the runtime sent as a payload (bytes in the `$bytes` form, checked).
fn payload(value: &Value) -> Result<Payload, WorldError> {
    let payload = Payload::encode(value).map_err(|e| invalid("eventData", e.to_string()))?;
    if let Value::Object(map) = value {
        if map.contains_key(worlds_engine::BYTES_KEY) && payload.binary().is_none() {
            return Err(invalid(
                "eventData",
                "a {\"$bytes\": …} value holds standard base64 and nothing else",
            ));
        }
    }
    Ok(payload)
}

/// An error the runtime sent (its serialized bytes, or a structured error), with a code.
fn error(value: Option<&Value>, code: Option<String>) -> Result<StructuredError, WorldError> {
    let mut error = match value {
        Some(Value::String(message)) => StructuredError::new(message.clone()),
        Some(Value::Object(fields)) if !fields.contains_key(worlds_engine::BYTES_KEY) => {
            let text = |name: &str| fields.get(name).and_then(Value::as_str).map(str::to_owned);
            let mut error = StructuredError::new(text("message").unwrap_or_default());
            error.stack = text("stack");
            error.code = text("code");
            error
        }
        Some(value) => {
            let data = payload(value)?;
            let mut error = StructuredError::new(readable(&data));
            error.data = Some(Box::new(data));
            error
        }
        None => StructuredError::new("failed without an error"),
    };
    if code.is_some() {
        error.code = code;
    }
    Ok(error)
}

/// What can be read of an error the runtime serialized: its text when it is text, else its
/// size.
fn readable(data: &Payload) -> String {
    let Some(bytes) = data.binary() else {
        return data.as_json().chars().take(2_000).collect();
    };
    match std::str::from_utf8(&bytes) {
        Ok(text) if !text.contains('\0') => text.chars().take(2_000).collect(),
        _ => format!("{} bytes serialized by the run's runtime", bytes.len()),
    }
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

fn gone(state: &WorkflowState) -> WorldError {
    WorldError::Gone(format!(
        "run {} has ended ({}); it takes no more of this event",
        state.id, state.status
    ))
}

fn ended(state: &WorkflowState, what: &str) -> WorldError {
    conflict(format!(
        "run {} has ended ({}); {what}",
        state.id, state.status
    ))
}

/// 425: the step's next attempt may not start before `at`.
pub(crate) fn too_early(step_id: &str, at: i64, now: i64) -> ApiError {
    ApiError::too_early(
        format!(
            "step {step_id} may start its next attempt at {}, not before",
            log::time(at)
        ),
        u64::try_from((at - now).max(0)).unwrap_or(0).div_ceil(1000),
    )
}

/// What a write does to a run, planned on its state and history.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    /// The engine events to append, in one write.
    pub(crate) kinds: Vec<EventKind>,
    /// A hook to create (through the engine's token rules) instead of appending.
    pub(crate) hook: Option<NewHook>,
    /// True when the write creates the step it starts.
    pub(crate) step_created: bool,
}

/// A hook to create.
#[derive(Debug)]
pub(crate) struct NewHook {
    pub(crate) position: u32,
    pub(crate) hook_id: String,
    pub(crate) token: String,
    pub(crate) metadata: Option<Payload>,
}

/// `workflow_started` first if the run has not started.
fn start_if_pending(state: &WorkflowState, kinds: &mut Vec<EventKind>) {
    if state.status == RunStatus::Pending {
        kinds.push(EventKind::WorkflowStarted {
            attempt: 1,
            first_position: 0,
        });
    }
}

fn find_step<'s>(
    state: &'s WorkflowState,
    step_id: &str,
) -> Option<&'s worlds_engine::model::ActivityState> {
    state.activities.iter().find(|a| a.id == step_id)
}

fn step_ended(a: &worlds_engine::model::ActivityState) -> bool {
    matches!(a.status, ActivityStatus::Completed | ActivityStatus::Failed)
}

/// Plans `event` on the run (with its history); `now` for retry times.
pub(crate) fn plan(state: &WorkflowState, event: &NewEvent, now: i64) -> Result<Plan, WorldError> {
    let mut plan = Plan::default();
    let terminal = state.status.is_terminal();
    match event.event_type.as_str() {
        "run_started" => {
            if terminal {
                return Err(gone(state));
            }
            start_if_pending(state, &mut plan.kinds);
        }
        "run_completed" => {
            if terminal {
                return Err(ended(state, "it cannot complete"));
            }
            start_if_pending(state, &mut plan.kinds);
            plan.kinds.push(EventKind::WorkflowCompleted {
                output: event.payload("output")?.unwrap_or_else(Payload::null),
            });
        }
        "run_failed" => {
            if terminal {
                return Err(ended(state, "it cannot fail"));
            }
            start_if_pending(state, &mut plan.kinds);
            plan.kinds.push(EventKind::WorkflowFailed {
                error: error(event.field("error"), event.text("errorCode"))?,
            });
        }
        "run_cancelled" => {
            if state.status == RunStatus::Cancelled {
                return Ok(plan);
            }
            if terminal {
                return Err(ended(state, "it cannot be cancelled"));
            }
            plan.kinds.push(EventKind::WorkflowCancelled {
                reason: event.text("cancelReason"),
            });
        }
        "attr_set" => {
            if terminal {
                return Err(ended(state, "its attributes can no longer change"));
            }
            let changes: Vec<AttributeChange> = match event.field("changes") {
                Some(value) => serde_json::from_value(value.clone()).map_err(|e| {
                    invalid(
                        "eventData.changes",
                        format!("changes are [{{key, value: string | null}}]: {e}"),
                    )
                })?,
                None => return Err(invalid("eventData.changes", "attr_set needs its changes")),
            };
            let current = state
                .runtime
                .as_ref()
                .map(|r| r.attributes.clone())
                .unwrap_or_default();
            check_attribute_changes(
                &current,
                &changes,
                event.field("allowReservedAttributes") == Some(&Value::Bool(true)),
            )?;
            let writer = event.field("writer");
            let by_workflow =
                writer.and_then(|w| w.get("type")).and_then(Value::as_str) == Some("workflow");
            if let (Some(id), true) = (event.correlation_id.as_deref(), by_workflow) {
                let seen = state.history.iter().any(|e| {
                    matches!(&e.kind, EventKind::AttributesSet { correlation_id: Some(c), .. } if c == id)
                });
                if seen {
                    return Err(conflict(format!(
                        "attribute change {id} of run {} is already recorded",
                        state.id
                    )));
                }
            }
            plan.kinds.push(EventKind::AttributesSet {
                changes,
                correlation_id: event.correlation_id.clone(),
                writer: writer.map(payload).transpose()?,
            });
        }
        "step_created" => {
            let step_id = event.correlation()?;
            if terminal {
                return Err(ended(state, "it takes no new steps"));
            }
            if find_step(state, step_id).is_some() {
                return Err(conflict(format!("step {step_id} already exists")));
            }
            start_if_pending(state, &mut plan.kinds);
            plan.kinds.push(EventKind::ActivityScheduled {
                position: next_position(state),
                activity_id: step_id.to_owned(),
                name: event
                    .text("stepName")
                    .ok_or_else(|| invalid("eventData.stepName", "a step needs its stepName"))?,
                input: event.payload("input")?.unwrap_or_else(Payload::null),
                options: None,
                inline: false,
            });
        }
        "step_started" => {
            let step_id = event.correlation()?;
            match find_step(state, step_id) {
                Some(_) if event.creates_step() => {
                    return Err(conflict(format!("step {step_id} already exists")))
                }
                Some(a) => {
                    if step_ended(a) {
                        return Err(conflict(format!(
                            "step {step_id} has ended; it cannot start again"
                        )));
                    }
                    if terminal && a.status != ActivityStatus::Running {
                        return Err(gone(state));
                    }
                    if a.status == ActivityStatus::Running {
                        // Started again (a redelivery after a crash): the attempt that
                        // was running is given up, and the next starts now.
                        plan.kinds.push(EventKind::ActivityFailed {
                            position: a.position,
                            attempt: a.attempt,
                            error: StructuredError::new(
                                "the attempt was started again before it ended",
                            ),
                            retrying: true,
                        });
                        plan.kinds.push(EventKind::ActivityRetry {
                            position: a.position,
                            attempt: a.attempt + 1,
                            delay_ms: 0,
                        });
                    }
                    plan.kinds.push(EventKind::ActivityStarted {
                        position: a.position,
                        attempt: a.attempt + 1,
                    });
                }
                None if event.creates_step() => {
                    if terminal {
                        return Err(ended(state, "it takes no new steps"));
                    }
                    start_if_pending(state, &mut plan.kinds);
                    let position = next_position(state);
                    plan.kinds.push(EventKind::ActivityScheduled {
                        position,
                        activity_id: step_id.to_owned(),
                        name: event.text("stepName").unwrap_or_default(),
                        input: event.payload("input")?.unwrap_or_else(Payload::null),
                        options: None,
                        inline: false,
                    });
                    plan.kinds.push(EventKind::ActivityStarted {
                        position,
                        attempt: 1,
                    });
                    plan.step_created = true;
                }
                None => {
                    return Err(WorldError::NotFound {
                        what: "step",
                        id: step_id.to_owned(),
                    })
                }
            }
        }
        "step_completed" | "step_failed" | "step_retrying" => {
            let step_id = event.correlation()?;
            let a = find_step(state, step_id).ok_or_else(|| WorldError::NotFound {
                what: "step",
                id: step_id.to_owned(),
            })?;
            if step_ended(a) {
                return Err(conflict(format!("step {step_id} has already ended")));
            }
            if a.status != ActivityStatus::Running {
                if terminal {
                    return Err(gone(state));
                }
                plan.kinds.push(EventKind::ActivityStarted {
                    position: a.position,
                    attempt: a.attempt + 1,
                });
            }
            let attempt = if a.status == ActivityStatus::Running {
                a.attempt
            } else {
                a.attempt + 1
            };
            match event.event_type.as_str() {
                "step_completed" => plan.kinds.push(EventKind::ActivityCompleted {
                    position: a.position,
                    attempt,
                    output: event.payload("result")?.unwrap_or_else(Payload::null),
                }),
                "step_failed" => plan.kinds.push(EventKind::ActivityFailed {
                    position: a.position,
                    attempt,
                    error: error(event.field("error"), None)?,
                    retrying: false,
                }),
                _ => {
                    plan.kinds.push(EventKind::ActivityFailed {
                        position: a.position,
                        attempt,
                        error: error(event.field("error"), None)?,
                        retrying: true,
                    });
                    let delay = event
                        .field("retryAfter")
                        .and_then(parse_time)
                        .map_or(0, |at| (at - now).max(0));
                    plan.kinds.push(EventKind::ActivityRetry {
                        position: a.position,
                        attempt: attempt + 1,
                        delay_ms: u64::try_from(delay).unwrap_or(0),
                    });
                }
            }
        }
        "hook_created" => {
            let hook_id = event.correlation()?;
            if terminal {
                return Err(ended(state, "it takes no new hooks"));
            }
            if state.hooks.iter().any(|h| h.id == hook_id) {
                return Err(conflict(format!("hook {hook_id} already exists")));
            }
            let token = event
                .text("token")
                .filter(|t| !t.is_empty())
                .ok_or_else(|| invalid("eventData.token", "a hook needs its token"))?;
            start_if_pending(state, &mut plan.kinds);
            plan.hook = Some(NewHook {
                position: next_position(state) + u32::from(!plan.kinds.is_empty()),
                hook_id: hook_id.to_owned(),
                token,
                metadata: event.payload("metadata")?,
            });
        }
        "hook_received" | "hook_disposed" => {
            let hook_id = event.correlation()?;
            let hook = state
                .hooks
                .iter()
                .find(|h| {
                    h.id == hook_id
                        && !matches!(h.status, HookStatus::Conflict | HookStatus::Disposed)
                })
                .ok_or_else(|| WorldError::NotFound {
                    what: "hook",
                    id: hook_id.to_owned(),
                })?;
            if event.event_type == "hook_received" {
                if terminal {
                    return Err(WorldError::NotFound {
                        what: "hook",
                        id: hook_id.to_owned(),
                    });
                }
                plan.kinds.push(EventKind::HookReceived {
                    position: hook.position,
                    hook_id: hook.id.clone(),
                    payload: event.payload("payload")?.unwrap_or_else(Payload::null),
                });
            } else {
                plan.kinds.push(EventKind::HookDisposed {
                    position: hook.position,
                    hook_id: hook.id.clone(),
                });
            }
        }
        "wait_created" => {
            let wait_id = event.correlation()?;
            if terminal {
                return Err(ended(state, "it takes no new waits"));
            }
            if log::wait(state, wait_id).is_some() {
                return Err(conflict(format!("wait {wait_id} already exists")));
            }
            let fire_at = event
                .field("resumeAt")
                .and_then(parse_time)
                .ok_or_else(|| {
                    invalid(
                        "eventData.resumeAt",
                        "a wait needs resumeAt (an RFC 3339 time)",
                    )
                })?;
            start_if_pending(state, &mut plan.kinds);
            plan.kinds.push(EventKind::TimerScheduled {
                position: next_position(state) + u32::from(!plan.kinds.is_empty()),
                fire_at,
                timer_id: Some(wait_id.to_owned()),
            });
        }
        "wait_completed" => {
            let wait_id = event.correlation()?;
            let mut found = None;
            for e in &state.history {
                match &e.kind {
                    EventKind::TimerScheduled {
                        position,
                        timer_id: Some(id),
                        ..
                    } if id == wait_id => found = Some((*position, true)),
                    EventKind::TimerFired { position } => {
                        if let Some(f) = found.as_mut().filter(|f| f.0 == *position) {
                            f.1 = false;
                        }
                    }
                    _ => {}
                }
            }
            match found {
                None => {
                    return Err(WorldError::NotFound {
                        what: "wait",
                        id: wait_id.to_owned(),
                    })
                }
                Some((_, false)) => {
                    return Err(conflict(format!("wait {wait_id} has already completed")))
                }
                Some(_) if terminal => return Err(gone(state)),
                Some((position, true)) => plan.kinds.push(EventKind::TimerFired { position }),
            }
        }
        "run_created" => {
            return Err(conflict(format!("run {} already exists", state.id)));
        }
        "hook_conflict" => {
            return Err(invalid(
                "eventType",
                "hook_conflict is answered by the world, never created by a runtime",
            ))
        }
        other => {
            return Err(invalid(
                "eventType",
                format!("{other:?} is not an event type of the DevKit World"),
            ))
        }
    }
    Ok(plan)
}

/// The DevKit event of type `event_type` among the events just appended (the last one), read
/// with the whole history before it.
pub(crate) fn recorded(state: &WorkflowState, event_type: &str, resolve: bool) -> Option<LogEvent> {
    LogReader::events(&state.history, resolve)
        .into_iter()
        .rev()
        .find(|e| e.event_type == event_type)
}

/// The `EventResult` of a write: the event and the entity it touched.
pub(crate) fn result(
    state: &WorkflowState,
    event: &NewEvent,
    recorded: Option<LogEvent>,
    resolve: bool,
) -> Map<String, Value> {
    let mut out = Map::new();
    if let Some(e) = recorded {
        out.insert("event".into(), e.value);
    }
    let kind = event.event_type.as_str();
    if kind.starts_with("run_") || kind == "attr_set" {
        out.insert("run".into(), log::run(state, resolve));
    } else if kind.starts_with("step_") {
        if let Some(id) = event.correlation_id.as_deref() {
            if let Some(a) = find_step(state, id) {
                out.insert("step".into(), log::step(state, a, resolve));
            }
        }
    } else if kind == "hook_created" {
        if let Some(h) = state
            .hooks
            .iter()
            .find(|h| Some(h.id.as_str()) == event.correlation_id.as_deref())
            .filter(|h| h.status != HookStatus::Conflict)
        {
            out.insert(
                "hook".into(),
                log::hook(state, h, event.text("token").as_deref(), resolve),
            );
        }
    } else if kind.starts_with("wait_") {
        if let Some(w) = event
            .correlation_id
            .as_deref()
            .and_then(|id| log::wait(state, id))
        {
            out.insert("wait".into(), w);
        }
    }
    out
}

/// The events of the run after `cursor` (one page), for an answer that carries them.
pub(crate) fn events_after(
    state: &WorkflowState,
    cursor: Option<u64>,
    resolve: bool,
    out: &mut Map<String, Value>,
) {
    const PAGE: usize = 1_000;
    let mut events: Vec<LogEvent> = LogReader::events(&state.history, resolve)
        .into_iter()
        .filter(|e| cursor.is_none_or(|c| e.seq > c))
        .collect();
    let has_more = events.len() > PAGE;
    events.truncate(PAGE);
    let last = events.last().map(|e| e.seq.to_string());
    out.insert(
        "events".into(),
        Value::Array(events.into_iter().map(|e| e.value).collect()),
    );
    out.insert(
        "cursor".into(),
        json!(last.or_else(|| cursor.map(|c| c.to_string()))),
    );
    out.insert("hasMore".into(), json!(has_more));
}

/// `events.create`: records one DevKit event atomically and answers with it and the entity it
/// changed (`EventResult`). See the module docs for what is refused.
#[utoipa::path(post, path = "/v1/devkit/events", tag = "devkit", request_body = crate::openapi::DevkitBody,
    security(("api_key" = [])),
    responses((status = 200, description = "The event and the entity it changed"), (status = 400, body = crate::openapi::ErrorDoc), (status = 404, body = crate::openapi::ErrorDoc), (status = 409, body = crate::openapi::ErrorDoc), (status = 410, body = crate::openapi::ErrorDoc), (status = 425, body = crate::openapi::ErrorDoc)))]
pub(crate) async fn create_event(
    axum::extract::State(api): axum::extract::State<crate::routes::Api>,
    body: Result<axum::Json<CreateEvent>, axum::extract::rejection::JsonRejection>,
) -> Result<axum::Json<Value>, ApiError> {
    let axum::Json(body) = body?;
    let CreateEvent {
        run_id,
        event,
        params,
    } = body;
    let resolve = params.resolve();
    if let Some(v) = event.spec_version.filter(|v| *v > SPEC_VERSION) {
        return Err(ApiError::upgrade_required(format!(
            "this event is of DevKit spec version {v}; this server speaks version {SPEC_VERSION}: upgrade the worlds server, or run the app on a DevKit runtime of spec version {SPEC_VERSION}"
        )));
    }
    let external = api.world.external();
    if event.event_type == "run_created" {
        let state = external.create_run(event.new_run(run_id)?).await?;
        let state = external.get_with_history(&state.id).await?;
        let mut out = result(
            &state,
            &event,
            recorded(&state, "run_created", resolve),
            resolve,
        );
        out.remove("event").map(|e| out.insert("event".into(), e));
        return Ok(axum::Json(Value::Object(out)));
    }
    let run_id = run_id
        .filter(|id| !id.is_empty())
        .ok_or_else(|| ApiError::invalid("runId", "every event but run_created names its run"))?;
    let _turn = api.devkit.lock(&run_id).await;
    let mut state = match external.get_with_history(&run_id).await {
        Err(WorldError::NotFound { .. }) if event.can_create_run() => {
            match external
                .create_run(event.new_run(Some(run_id.clone()))?)
                .await
            {
                Ok(_) | Err(WorldError::Conflict { .. }) => {}
                Err(e) => return Err(e.into()),
            }
            external.get_with_history(&run_id).await?
        }
        other => other?,
    };
    if let Some(v) = state
        .runtime
        .as_ref()
        .and_then(|r| r.spec_version)
        .filter(|v| *v > SPEC_VERSION)
    {
        return Err(ApiError::upgrade_required(format!(
            "run {} was made by a DevKit runtime of spec version {v}; this server speaks version {SPEC_VERSION}",
            state.id
        )));
    }
    let now = api.world.clock().now_ms();
    if event.event_type == "step_started" {
        if let Some(a) = event
            .correlation_id
            .as_deref()
            .and_then(|id| find_step(&state, id))
        {
            if let Some(at) = log::retry_after(&state, a).filter(|at| *at > now) {
                return Err(too_early(&a.id, at, now));
            }
        }
    }
    if event.event_type == "run_started" && state.status == RunStatus::Running {
        // Started already (a second delivery): answered as it stands, nothing recorded.
        let mut out = Map::new();
        out.insert("run".into(), log::run(&state, resolve));
        return Ok(axum::Json(Value::Object(out)));
    }
    let plan = plan(&state, &event, now)?;
    let mut conflict_event = None;
    if let Some(hook) = plan.hook {
        if !plan.kinds.is_empty() {
            external.append(&state.id, plan.kinds.clone()).await?;
        }
        let recorded = external
            .create_hook(
                &state.id,
                hook.position,
                &hook.hook_id,
                &hook.token,
                hook.metadata,
            )
            .await?;
        let conflicted = recorded.as_ref().is_some_and(|events| {
            events
                .iter()
                .any(|e| matches!(e.kind, EventKind::HookConflict { .. }))
        });
        if conflicted {
            let holder = external.hook_by_token(&hook.token).await?.map(|h| h.run_id);
            conflict_event = Some((hook.token, holder));
        }
    } else if !plan.kinds.is_empty() {
        external.append(&state.id, plan.kinds.clone()).await?;
    }
    state = external.get_with_history(&state.id).await?;
    let event_type = if conflict_event.is_some() {
        "hook_conflict"
    } else {
        event.event_type.as_str()
    };
    let mut logged = if plan.kinds.is_empty() && event_type == "run_cancelled" {
        None
    } else {
        recorded(&state, event_type, resolve)
    };
    if let (Some(e), Some((token, holder))) = (logged.as_mut(), conflict_event) {
        if let Some(data) = e.value.as_object_mut() {
            let mut fields = Map::new();
            fields.insert("token".into(), json!(token));
            if let Some(holder) = holder {
                fields.insert("conflictingRunId".into(), json!(holder));
            }
            data.insert("eventData".into(), Value::Object(fields));
        }
    }
    let mut out = result(&state, &event, logged, resolve);
    if plan.step_created {
        out.insert("stepCreated".into(), json!(true));
    }
    if event.event_type == "run_started" && params.skip_preload != Some(true) {
        events_after(&state, None, resolve, &mut out);
    }
    if matches!(event.event_type.as_str(), "step_completed" | "step_failed") {
        if let Some(cursor) = params.since_cursor.as_deref().and_then(|c| c.parse().ok()) {
            events_after(&state, Some(cursor), resolve, &mut out);
        }
    }
    Ok(axum::Json(Value::Object(out)))
}
