//! Which fields of the stored records hold user data, and sealing or opening them in place.
//!
//! Sealed: inputs, outputs, recorded values, hook payloads and metadata, error messages and
//! stacks, step heartbeat messages (and the copies of all these in a run's state). Left
//! readable, so that stores can index and list, and operators can see what happened: ids,
//! names, statuses, times, positions, attempts, error codes, options, hook token digests,
//! cancellation and quarantine reasons (written by operators and the engine, not by workflow
//! code).

use bytes::Bytes;

use crate::error::StructuredError;
use crate::model::schedule::ScheduleConfig;
use crate::model::{ActivityState, Event, EventKind, HookState, WorkflowState};
use crate::payload::Payload;
use crate::WorldError;

use super::cipher::{is_sealed_bytes, is_sealed_payload, is_sealed_text, Cipher};

/// What is done to each field.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Way {
    /// Sealed with the cipher.
    Seal,
    /// Opened with the cipher; a value that does not open is an error.
    Open,
    /// For people: opened where the cipher (if any) can, [`SHOWN_SEALED`] where not.
    Show,
}

/// What a person is shown of a sealed value that cannot be opened.
pub(crate) const SHOWN_SEALED: &str = "(encrypted)";

/// The fields of one scope (a run or a schedule), sealed, opened or shown.
pub(crate) struct Fields<'a> {
    pub(crate) cipher: Option<&'a Cipher>,
    pub(crate) scope: String,
    pub(crate) way: Way,
}

impl Fields<'_> {
    /// The scope of a run's data.
    pub(crate) fn run_scope(run_id: &str) -> String {
        format!("run:{run_id}")
    }

    /// The scope of a schedule's data.
    pub(crate) fn schedule_scope(schedule_id: &str) -> String {
        format!("schedule:{schedule_id}")
    }

    fn cipher(&self) -> Result<&Cipher, WorldError> {
        self.cipher
            .ok_or_else(|| WorldError::Internal("sealing without a cipher".into()))
    }

    fn payload(&self, payload: &mut Payload) -> Result<(), WorldError> {
        *payload = match self.way {
            Way::Seal => self.cipher()?.seal_payload(&self.scope, payload)?,
            Way::Open => self.cipher()?.open_payload(&self.scope, payload)?,
            Way::Show if !is_sealed_payload(payload) => return Ok(()),
            Way::Show => self
                .cipher
                .and_then(|c| c.open_payload(&self.scope, payload).ok())
                .unwrap_or_else(|| Payload::from(serde_json::Value::from(SHOWN_SEALED))),
        };
        Ok(())
    }

    fn maybe_payload(&self, payload: &mut Option<Payload>) -> Result<(), WorldError> {
        match payload {
            Some(p) => self.payload(p),
            None => Ok(()),
        }
    }

    fn text(&self, text: &mut String) -> Result<(), WorldError> {
        *text = match self.way {
            Way::Seal => self.cipher()?.seal_text(&self.scope, text)?,
            Way::Open => self.cipher()?.open_text(&self.scope, text)?,
            Way::Show if !is_sealed_text(text) => return Ok(()),
            Way::Show => self
                .cipher
                .and_then(|c| c.open_text(&self.scope, text).ok())
                .unwrap_or_else(|| SHOWN_SEALED.to_owned()),
        };
        Ok(())
    }

    fn maybe_text(&self, text: &mut Option<String>) -> Result<(), WorldError> {
        match text {
            Some(t) => self.text(t),
            None => Ok(()),
        }
    }

    /// Bytes (a stream chunk).
    pub(crate) fn bytes(&self, data: &mut Bytes) -> Result<(), WorldError> {
        *data = Bytes::from(match self.way {
            Way::Seal => self.cipher()?.seal_bytes(&self.scope, data)?,
            Way::Open => self.cipher()?.open_bytes(&self.scope, data)?,
            Way::Show if !is_sealed_bytes(data) => return Ok(()),
            Way::Show => self
                .cipher
                .and_then(|c| c.open_bytes(&self.scope, data).ok())
                .unwrap_or_else(|| SHOWN_SEALED.as_bytes().to_vec()),
        });
        Ok(())
    }

    /// The user data of a schedule (its input).
    pub(crate) fn schedule(&self, config: &mut ScheduleConfig) -> Result<(), WorldError> {
        self.maybe_payload(&mut config.input)
    }

    pub(crate) fn error(&self, error: &mut StructuredError) -> Result<(), WorldError> {
        self.text(&mut error.message)?;
        if let Some(data) = &mut error.data {
            self.payload(data)?;
        }
        self.maybe_text(&mut error.stack)
    }

    /// The user data of an event.
    pub(crate) fn event_kind(&self, kind: &mut EventKind) -> Result<(), WorldError> {
        match kind {
            EventKind::WorkflowQueued(run) => {
                self.payload(&mut run.input)?;
                match &mut run.runtime {
                    Some(runtime) => self.maybe_payload(&mut runtime.execution_context),
                    None => Ok(()),
                }
            }
            EventKind::WorkflowCompleted { output }
            | EventKind::ActivityCompleted { output, .. }
            | EventKind::ChildWorkflowCompleted { output, .. } => self.payload(output),
            EventKind::ActivityScheduled { input, .. } => self.payload(input),
            EventKind::ChildWorkflowStarted { input, .. } => self.maybe_payload(input),
            EventKind::ValueRecorded { value, .. } => self.payload(value),
            EventKind::HookReceived { payload, .. } => self.payload(payload),
            EventKind::HookCreated { metadata, .. } => self.maybe_payload(metadata),
            EventKind::WorkflowRetry { error, .. }
            | EventKind::CompensationFailed { error, .. }
            | EventKind::WorkflowFailed { error }
            | EventKind::ActivityFailed { error, .. }
            | EventKind::ChildWorkflowFailed { error, .. } => self.error(error),
            EventKind::ActivityHeartbeat { message, .. } => self.maybe_text(message),
            EventKind::AttributesSet { writer, .. } => self.maybe_payload(writer),
            // Listed one by one, so that a new kind is a compile error here until someone
            // decides whether it holds user data.
            EventKind::WorkflowStarted { .. }
            | EventKind::WorkflowCompensating {}
            | EventKind::WorkflowCompensated {}
            | EventKind::WorkflowQuarantined { .. }
            | EventKind::RunReopened { .. }
            | EventKind::RunResumed {}
            | EventKind::CompensationAdded { .. }
            | EventKind::CompensationExecuted { .. }
            | EventKind::WorkflowCancelled { .. }
            | EventKind::ActivityStarted { .. }
            | EventKind::ActivityRetry { .. }
            | EventKind::TimerScheduled { .. }
            | EventKind::TimerFired { .. }
            | EventKind::PatchRecorded { .. }
            | EventKind::HookConflict { .. }
            | EventKind::HookExpired { .. }
            | EventKind::HookDisposed { .. } => Ok(()),
        }
    }

    /// The user data of a step's state.
    pub(crate) fn activity(&self, activity: &mut ActivityState) -> Result<(), WorldError> {
        self.maybe_payload(&mut activity.input)?;
        self.maybe_payload(&mut activity.output)?;
        if let Some(error) = &mut activity.error {
            self.error(error)?;
        }
        self.maybe_text(&mut activity.heartbeat_message)
    }

    /// The user data of a hook's state.
    pub(crate) fn hook(&self, hook: &mut HookState) -> Result<(), WorldError> {
        self.maybe_payload(&mut hook.metadata)
    }

    /// The user data of a run's state, its steps, hooks and history included.
    pub(crate) fn state(&self, state: &mut WorkflowState) -> Result<(), WorldError> {
        self.maybe_payload(&mut state.input)?;
        if let Some(runtime) = &mut state.runtime {
            self.maybe_payload(&mut runtime.execution_context)?;
        }
        self.maybe_payload(&mut state.output)?;
        if let Some(error) = &mut state.error {
            self.error(error)?;
        }
        for activity in &mut state.activities {
            self.activity(activity)?;
        }
        for compensation in &mut state.compensations {
            self.maybe_text(&mut compensation.error)?;
        }
        for hook in &mut state.hooks {
            self.hook(hook)?;
        }
        for event in &mut state.history {
            self.event_kind(&mut event.kind)?;
        }
        Ok(())
    }

    /// True if the event kind has a field of user data that is sealed: an event without one
    /// is read as it is, without a copy.
    pub(crate) fn has_sealed(kind: &EventKind) -> bool {
        let payload = |p: &Payload| is_sealed_payload(p);
        let error = |e: &StructuredError| {
            is_sealed_text(&e.message)
                || e.stack.as_deref().is_some_and(is_sealed_text)
                || e.data.as_deref().is_some_and(is_sealed_payload)
        };
        match kind {
            EventKind::WorkflowQueued(run) => {
                payload(&run.input)
                    || run
                        .runtime
                        .as_ref()
                        .and_then(|r| r.execution_context.as_ref())
                        .is_some_and(payload)
            }
            EventKind::WorkflowCompleted { output }
            | EventKind::ActivityCompleted { output, .. }
            | EventKind::ChildWorkflowCompleted { output, .. } => payload(output),
            EventKind::ActivityScheduled { input, .. } => payload(input),
            EventKind::ChildWorkflowStarted { input, .. }
            | EventKind::HookCreated {
                metadata: input, ..
            } => input.as_ref().is_some_and(payload),
            EventKind::ValueRecorded { value, .. } => payload(value),
            EventKind::HookReceived { payload: p, .. } => payload(p),
            EventKind::WorkflowRetry { error: e, .. }
            | EventKind::CompensationFailed { error: e, .. }
            | EventKind::WorkflowFailed { error: e }
            | EventKind::ActivityFailed { error: e, .. }
            | EventKind::ChildWorkflowFailed { error: e, .. } => error(e),
            EventKind::ActivityHeartbeat { message, .. } => {
                message.as_deref().is_some_and(is_sealed_text)
            }
            EventKind::AttributesSet { writer, .. } => writer.as_ref().is_some_and(payload),
            // Listed one by one, as in `event_kind`: a new kind must say whether it holds user
            // data here too, or its sealed fields would be handed out unopened.
            EventKind::WorkflowStarted { .. }
            | EventKind::WorkflowCompensating {}
            | EventKind::WorkflowCompensated {}
            | EventKind::WorkflowQuarantined { .. }
            | EventKind::RunReopened { .. }
            | EventKind::RunResumed {}
            | EventKind::CompensationAdded { .. }
            | EventKind::CompensationExecuted { .. }
            | EventKind::WorkflowCancelled { .. }
            | EventKind::ActivityStarted { .. }
            | EventKind::ActivityRetry { .. }
            | EventKind::TimerScheduled { .. }
            | EventKind::TimerFired { .. }
            | EventKind::PatchRecorded { .. }
            | EventKind::HookConflict { .. }
            | EventKind::HookExpired { .. }
            | EventKind::HookDisposed { .. } => false,
        }
    }

    /// An event, sealed or opened, as a new event.
    pub(crate) fn event(&self, event: &Event) -> Result<Event, WorldError> {
        let mut event = event.clone();
        self.event_kind(&mut event.kind)?;
        Ok(event)
    }
}
