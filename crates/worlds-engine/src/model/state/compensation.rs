//! The saga: [`EventKind::WorkflowCompensating`] and [`EventKind::WorkflowCompensated`] (the
//! run's status while its compensations run, and after), and each compensation
//! ([`EventKind::CompensationAdded`], [`EventKind::CompensationExecuted`],
//! [`EventKind::CompensationFailed`]).

use serde::{Deserialize, Serialize};

use crate::clock::Millis;
use crate::error::WorldError;

use super::{EventKind, RunStatus, WorkflowState};

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

impl WorkflowState {
    fn compensation_mut(&mut self, id: &str) -> Option<&mut CompensationState> {
        // Searched from the end: compensations run last-added first.
        self.compensations.iter_mut().rev().find(|c| c.id == id)
    }
}

/// Whether a compensation event may be appended to `state` now.
pub(super) fn check(state: &WorkflowState, kind: &EventKind) -> Result<(), WorldError> {
    let status = state.status;
    match kind {
        EventKind::WorkflowCompensating {} => state.may_become(RunStatus::Compensating),
        EventKind::WorkflowCompensated {} => state.may_become(RunStatus::Compensated),
        EventKind::CompensationAdded { .. } => state.takes_step_events(),
        EventKind::CompensationExecuted { .. } | EventKind::CompensationFailed { .. } => {
            if status == RunStatus::Compensating {
                Ok(())
            } else {
                Err(WorldError::conflict(format!(
                    "run {} is {status}, not compensating",
                    state.id
                )))
            }
        }
        _ => unreachable!("{} is not a compensation event", kind.type_name()),
    }
}

/// What a compensation event accepted by [`check`] changes, at time `at`.
pub(super) fn apply(state: &mut WorkflowState, kind: &EventKind, at: Millis) {
    match kind {
        EventKind::WorkflowCompensating {} => {
            state.status = RunStatus::Compensating;
        }
        EventKind::WorkflowCompensated {} => {
            state.finish(RunStatus::Compensated, at);
        }
        EventKind::CompensationAdded {
            compensation_id, ..
        } => {
            state.compensations.push(CompensationState {
                id: compensation_id.clone(),
                executed: false,
                error: None,
            });
        }
        EventKind::CompensationExecuted {
            compensation_id, ..
        } => {
            if let Some(c) = state.compensation_mut(compensation_id) {
                c.executed = true;
            }
        }
        EventKind::CompensationFailed {
            compensation_id,
            error,
            ..
        } => {
            if let Some(c) = state.compensation_mut(compensation_id) {
                c.executed = true;
                c.error = Some(error.message.clone());
            }
        }
        _ => unreachable!("{} is not a compensation event", kind.type_name()),
    }
}
