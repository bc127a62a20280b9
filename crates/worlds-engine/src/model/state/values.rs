//! What replay must see again: [`EventKind::ValueRecorded`] (a value read from the outside
//! world: `ctx.now()`, `ctx.random()`, `ctx.uuid()`) and [`EventKind::PatchRecorded`] (a patch,
//! or version marker, the run's code took). Written while the run's code runs; they live in the
//! history only.

use crate::error::WorldError;

use super::{EventKind, WorkflowState};

/// Whether a recorded value or patch may be appended to `state` now.
pub(super) fn check(state: &WorkflowState, kind: &EventKind) -> Result<(), WorldError> {
    match kind {
        EventKind::ValueRecorded { .. } | EventKind::PatchRecorded { .. } => {
            state.takes_step_events()
        }
        _ => unreachable!("{} is not a recorded value or patch", kind.type_name()),
    }
}

/// What a recorded value or patch changes: nothing in the state.
pub(super) fn apply(_state: &mut WorkflowState, kind: &EventKind) {
    match kind {
        EventKind::ValueRecorded { .. } | EventKind::PatchRecorded { .. } => {}
        _ => unreachable!("{} is not a recorded value or patch", kind.type_name()),
    }
}
