//! An event as a DevKit runtime sends it to `events.create` (`{runId, event, params}`), with
//! its payloads and errors read into the engine's, and the errors a write is refused with.

use serde::Deserialize;
use serde_json::{Map, Value};
use worlds_engine::model::{check_attribute_changes, AttributeChange, RuntimeInfo};
use worlds_engine::{NewExternalRun, Payload, StructuredError, WorkflowState, WorldError};

use crate::error::ApiError;

use super::log::{self, SPEC_VERSION};

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
    /// An event the server makes itself, of `event_type` with `data`.
    pub(crate) fn new(event_type: &str, data: Map<String, Value>) -> Self {
        NewEvent {
            event_type: event_type.to_owned(),
            correlation_id: None,
            spec_version: None,
            event_data: Some(data),
        }
    }

    pub(crate) fn data(&self) -> &Map<String, Value> {
        static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
        self.event_data
            .as_ref()
            .unwrap_or_else(|| EMPTY.get_or_init(Map::new))
    }

    pub(crate) fn field(&self, name: &str) -> Option<&Value> {
        self.data().get(name).filter(|v| !v.is_null())
    }

    pub(crate) fn text(&self, name: &str) -> Option<String> {
        self.field(name).and_then(Value::as_str).map(str::to_owned)
    }

    pub(crate) fn payload(&self, name: &str) -> Result<Option<Payload>, WorldError> {
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
    pub(crate) fn creates_step(&self) -> bool {
        self.event_type == "step_started"
            && self.field("stepName").is_some()
            && self.data().contains_key("input")
    }
}

/// A JSON value the runtime sent as a payload (bytes in the `$bytes` form, checked).
pub(crate) fn payload(value: &Value) -> Result<Payload, WorldError> {
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
pub(crate) fn error(
    value: Option<&Value>,
    code: Option<String>,
) -> Result<StructuredError, WorldError> {
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

pub(crate) fn invalid(field: &str, message: impl Into<String>) -> WorldError {
    WorldError::InvalidInput {
        field: field.to_owned(),
        message: message.into(),
    }
}

pub(crate) fn conflict(message: String) -> WorldError {
    WorldError::Conflict { message }
}

pub(crate) fn gone(state: &WorkflowState) -> WorldError {
    WorldError::Gone(format!(
        "run {} has ended ({}); it takes no more of this event",
        state.id, state.status
    ))
}

pub(crate) fn ended(state: &WorkflowState, what: &str) -> WorldError {
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
