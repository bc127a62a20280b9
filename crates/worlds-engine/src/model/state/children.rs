//! Child workflows: [`EventKind::ChildWorkflowStarted`], [`EventKind::ChildWorkflowCompleted`]
//! and [`EventKind::ChildWorkflowFailed`], written while the parent's code runs. The parent
//! keeps the ids of the children it started.

use crate::error::WorldError;

use super::{EventKind, WorkflowState};

/// Whether a child workflow event may be appended to `state` now.
pub(super) fn check(state: &WorkflowState, kind: &EventKind) -> Result<(), WorldError> {
    match kind {
        EventKind::ChildWorkflowStarted { .. }
        | EventKind::ChildWorkflowCompleted { .. }
        | EventKind::ChildWorkflowFailed { .. } => state.takes_step_events(),
        _ => unreachable!("{} is not a child workflow event", kind.type_name()),
    }
}

/// What a child workflow event accepted by [`check`] changes.
pub(super) fn apply(state: &mut WorkflowState, kind: &EventKind) {
    match kind {
        EventKind::ChildWorkflowStarted { child_id, .. } => {
            state.children.push(child_id.clone());
        }
        // The child's own run holds its result.
        EventKind::ChildWorkflowCompleted { .. } | EventKind::ChildWorkflowFailed { .. } => {}
        _ => unreachable!("{} is not a child workflow event", kind.type_name()),
    }
}
