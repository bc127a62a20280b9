//! The run's own life: [`EventKind::WorkflowQueued`], [`EventKind::WorkflowStarted`],
//! [`EventKind::WorkflowRetry`], [`EventKind::RunReopened`], [`EventKind::RunResumed`],
//! [`EventKind::WorkflowQuarantined`], [`EventKind::WorkflowCompleted`],
//! [`EventKind::WorkflowFailed`], [`EventKind::WorkflowCancelled`], and the run's attributes
//! ([`EventKind::AttributesSet`], kept in its [`RuntimeInfo`](super::RuntimeInfo)).
//!
//! The run's first event makes the state ([`WorkflowState::from_first_event`]); a second
//! `workflow_queued` is refused here.

use serde::{Deserialize, Serialize};

use super::{EventKind, RunStatus, WorkflowState};
use crate::clock::Millis;
use crate::error::{StructuredError, WorldError};
use crate::model::runtime::{apply_attribute_changes, check_attribute_changes};

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

impl WorkflowState {
    /// The workflow retry waiting to start, if any.
    pub fn retry_pending(&self) -> Option<PendingRetry> {
        self.retry_pending.as_deref().copied()
    }
}

/// Whether a run event may be appended to `state` now.
pub(super) fn check(state: &WorkflowState, kind: &EventKind) -> Result<(), WorldError> {
    let status = state.status;
    match kind {
        EventKind::WorkflowQueued(_) => Err(WorldError::conflict(format!(
            "run {} already exists",
            state.id
        ))),
        EventKind::WorkflowStarted { attempt, .. } => match state.retry_pending() {
            Some(PendingRetry { attempt: next, .. }) if status == RunStatus::Running => {
                if *attempt == next {
                    Ok(())
                } else {
                    Err(WorldError::conflict(format!(
                        "run {} waits to start attempt {next}, not {attempt}",
                        state.id
                    )))
                }
            }
            _ => state.may_become(RunStatus::Running),
        },
        EventKind::WorkflowRetry { attempt, .. } => {
            if status != RunStatus::Running || state.retry_pending.is_some() {
                return Err(WorldError::conflict(format!(
                    "run {} is {status} and cannot schedule a retry",
                    state.id
                )));
            }
            if *attempt == state.attempt + 1 {
                Ok(())
            } else {
                Err(WorldError::conflict(format!(
                    "run {} is at attempt {}; a retry to attempt {attempt} was refused",
                    state.id, state.attempt
                )))
            }
        }
        EventKind::RunReopened { attempt, .. } => {
            state.may_become(RunStatus::Running)?;
            if *attempt == state.attempt + 1 {
                Ok(())
            } else {
                Err(WorldError::conflict(format!(
                    "run {} is at attempt {}; reopening it as attempt {attempt} was refused",
                    state.id, state.attempt
                )))
            }
        }
        EventKind::RunResumed {} => {
            if status.is_terminal() {
                Err(WorldError::conflict(format!(
                    "run {} is {status}: there is nothing to resume",
                    state.id
                )))
            } else {
                Ok(())
            }
        }
        EventKind::WorkflowQuarantined { .. } => {
            let failed = matches!(status, RunStatus::Failed | RunStatus::Compensated);
            if failed && state.quarantine.is_none() {
                Ok(())
            } else {
                Err(WorldError::conflict(format!(
                    "only a failed run can be quarantined, and once; run {} is {status}",
                    state.id
                )))
            }
        }
        EventKind::WorkflowCompleted { .. } => state.may_become(RunStatus::Completed),
        EventKind::WorkflowFailed { .. } => state.may_become(RunStatus::Failed),
        EventKind::WorkflowCancelled { .. } => state.may_become(RunStatus::Cancelled),
        EventKind::AttributesSet { changes, .. } => {
            if status.is_terminal() {
                return Err(WorldError::conflict(format!(
                    "run {} is {status}: its attributes can no longer change",
                    state.id
                )));
            }
            // Which keys a writer may set is the caller's rule; the shape and the limits
            // hold for every run.
            let current = state
                .runtime
                .as_ref()
                .map(|r| r.attributes.clone())
                .unwrap_or_default();
            check_attribute_changes(&current, changes, true)
        }
        _ => unreachable!("{} is not a run event", kind.type_name()),
    }
}

/// What a run event accepted by [`check`] changes, at time `at`.
pub(super) fn apply(state: &mut WorkflowState, kind: &EventKind, at: Millis) {
    match kind {
        EventKind::WorkflowQueued(_) => {}
        EventKind::WorkflowStarted { attempt, .. } => {
            state.status = RunStatus::Running;
            state.attempt = *attempt;
            state.retry_pending = None;
            state.started_at.get_or_insert(at);
        }
        EventKind::WorkflowRetry {
            attempt,
            delay_ms,
            next_position,
            error,
        } => {
            state.retry_pending = Some(Box::new(PendingRetry {
                attempt: *attempt,
                due_at: at.saturating_add(*delay_ms as i64),
                first_position: *next_position,
            }));
            state.error = Some(Box::new(error.clone()));
            // The failed attempt's timers will never be awaited.
            state.pending_timers.clear();
        }
        EventKind::RunReopened {
            attempt,
            next_position,
            ..
        } => {
            state.status = RunStatus::Running;
            state.completed_at = None;
            state.output = None;
            state.error = None;
            state.quarantine = None;
            state.reopened_at = Some(at);
            state.pending_timers.clear();
            state.retry_pending = Some(Box::new(PendingRetry {
                attempt: *attempt,
                due_at: at,
                first_position: *next_position,
            }));
        }
        // A marker for readers: the run's state does not change.
        EventKind::RunResumed {} => {}
        EventKind::WorkflowQuarantined { reason } => {
            state.quarantine = Some(reason.clone());
        }
        EventKind::WorkflowCompleted { output } => {
            state.finish(RunStatus::Completed, at);
            state.output = Some(output.clone());
        }
        EventKind::WorkflowFailed { error } => {
            state.finish(RunStatus::Failed, at);
            state.error = Some(Box::new(error.clone()));
        }
        EventKind::WorkflowCancelled { reason } => {
            state.finish(RunStatus::Cancelled, at);
            if let Some(reason) = reason {
                state.error = Some(Box::new(
                    StructuredError::new(reason.clone()).with_code(crate::error::codes::CANCELLED),
                ));
            }
        }
        EventKind::AttributesSet { changes, .. } => {
            let runtime = state.runtime.get_or_insert_with(Box::default);
            runtime.attributes =
                apply_attribute_changes(std::mem::take(&mut runtime.attributes), changes);
        }
        _ => unreachable!("{} is not a run event", kind.type_name()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{ev, queued};
    use super::*;

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
