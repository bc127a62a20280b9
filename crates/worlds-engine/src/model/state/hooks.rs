//! Hooks and webhooks: [`EventKind::HookCreated`], [`EventKind::HookReceived`],
//! [`EventKind::HookConflict`], [`EventKind::HookExpired`] and [`EventKind::HookDisposed`].
//! Which status a hook may move to is the hooks' own rule ([`check_hook_change`]).

use crate::clock::Millis;
use crate::error::WorldError;
use crate::model::hook::check_hook_change;
use crate::model::HookStatus;

use super::{EventKind, HookState, WorkflowState};

impl WorkflowState {
    /// The hook created at command `position`, if any.
    pub fn hook(&self, position: u32) -> Option<&HookState> {
        self.hooks.iter().find(|h| h.position == position)
    }

    fn hook_mut(&mut self, position: u32) -> Option<&mut HookState> {
        self.hooks.iter_mut().find(|h| h.position == position)
    }
}

/// Whether a hook event may be appended to `state` now.
pub(super) fn check(state: &WorkflowState, kind: &EventKind) -> Result<(), WorldError> {
    match kind {
        EventKind::HookConflict { .. } => state.takes_step_events(),
        EventKind::HookCreated {
            position, hook_id, ..
        } => {
            state.takes_step_events()?;
            if state.hook(*position).is_some() {
                Err(WorldError::conflict(format!(
                    "run {} already has a hook at position {position}",
                    state.id
                )))
            } else if state.hooks.iter().any(|h| h.id == *hook_id) {
                Err(WorldError::conflict(format!(
                    "run {} already has a hook {hook_id}",
                    state.id
                )))
            } else {
                Ok(())
            }
        }
        EventKind::HookReceived { position, .. } => {
            state.takes_step_events()?;
            check_hook_change(
                &state.id,
                *position,
                state.hook(*position),
                HookStatus::Received,
            )
        }
        EventKind::HookExpired { position, .. } => {
            state.takes_step_events()?;
            check_hook_change(
                &state.id,
                *position,
                state.hook(*position),
                HookStatus::Expired,
            )
        }
        // Written once the run has finished, to release the token.
        EventKind::HookDisposed { position, .. } => check_hook_change(
            &state.id,
            *position,
            state.hook(*position),
            HookStatus::Disposed,
        ),
        _ => unreachable!("{} is not a hook event", kind.type_name()),
    }
}

/// What a hook event accepted by [`check`] changes, at time `at`.
pub(super) fn apply(state: &mut WorkflowState, kind: &EventKind, at: Millis) {
    match kind {
        EventKind::HookCreated {
            position,
            hook_id,
            token_digest,
            expires_at,
            webhook,
            methods,
            hook_type,
            signature,
            metadata,
        } => state.hooks.push(HookState {
            id: hook_id.clone(),
            position: *position,
            token_digest: token_digest.clone(),
            status: HookStatus::Waiting,
            webhook: *webhook,
            methods: methods.clone(),
            hook_type: hook_type.clone(),
            signature: signature.clone(),
            metadata: metadata.clone(),
            created_at: at,
            expires_at: *expires_at,
            received_at: None,
        }),
        EventKind::HookConflict {
            position,
            hook_id,
            token_digest,
        } => state.hooks.push(HookState {
            id: hook_id.clone(),
            position: *position,
            token_digest: token_digest.clone(),
            status: HookStatus::Conflict,
            webhook: false,
            methods: Vec::new(),
            hook_type: None,
            signature: None,
            metadata: None,
            created_at: at,
            expires_at: None,
            received_at: None,
        }),
        EventKind::HookReceived { position, .. } => {
            let iterated = state.external;
            if let Some(h) = state.hook_mut(*position) {
                // A run driven from outside iterates its hooks (the DevKit's `for await`
                // over a hook): each keeps waiting for the next payload, and holds its
                // token, until it is disposed.
                if !iterated {
                    h.status = HookStatus::Received;
                }
                h.received_at = Some(at);
            }
        }
        EventKind::HookExpired { position, .. } => {
            if let Some(h) = state.hook_mut(*position) {
                h.status = HookStatus::Expired;
            }
        }
        EventKind::HookDisposed { position, .. } => {
            if let Some(h) = state.hook_mut(*position) {
                h.status = HookStatus::Disposed;
            }
        }
        _ => unreachable!("{} is not a hook event", kind.type_name()),
    }
}
