//! Hooks as the run state sees them: created by the workflow, resumed from outside with a
//! payload, expired, or disposed when the run ends.

use serde::{Deserialize, Serialize};

use crate::clock::Millis;
use crate::error::WorldError;

/// Where a hook is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookStatus {
    /// Waiting for its payload; its token resumes it.
    Waiting,
    /// Resumed: its payload is recorded.
    Received,
    /// Its expiry passed first.
    Expired,
    /// Never created: another live hook held its token.
    Conflict,
    /// Released when the run finished, before a payload came.
    Disposed,
}

/// A hook of a run, as `world.query(id)` shows it. Its token is not kept, only its digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookState {
    /// Hook id (`hook_…`).
    pub id: String,
    /// Command position.
    pub position: u32,
    /// Hex SHA-256 digest of the token.
    pub token_digest: String,
    /// Where it is in its life.
    pub status: HookStatus,
    /// True for a webhook.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub webhook: bool,
    /// The HTTP methods that resume it (a webhook), upper case; empty means `POST` only. See
    /// [`HookState::allowed_methods`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<String>,
    /// The payload type's name, for hooks of a registered `define_hook` factory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_type: Option<String>,
    /// For a webhook, the named signature its requests must carry
    /// ([`HookOptions::signature`](crate::HookOptions::signature)); `None` means the world's
    /// default, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// Data its creator attached for whoever resumes it (an external runtime's hook
    /// metadata), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<crate::payload::Payload>,
    /// When it was created.
    pub created_at: Millis,
    /// When it stops accepting payloads, if ever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Millis>,
    /// When its payload came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub received_at: Option<Millis>,
}

impl HookState {
    /// True while its token can resume it (and nobody else may take the token).
    pub fn is_live(&self) -> bool {
        self.status == HookStatus::Waiting
    }

    /// The HTTP methods a request to its webhook URL may use: those it was created with
    /// ([`HookOptions::methods`](crate::HookOptions::methods)), else `POST`.
    pub fn allowed_methods(&self) -> Vec<&str> {
        if self.methods.is_empty() {
            vec![DEFAULT_WEBHOOK_METHOD]
        } else {
            self.methods.iter().map(String::as_str).collect()
        }
    }
}

/// The one method a webhook accepts unless it was created with others: link previews, scanners
/// and prefetchers send `GET` and `HEAD`, and must not use a webhook up.
pub(crate) const DEFAULT_WEBHOOK_METHOD: &str = "POST";

/// Checks that a hook at `position` of run `run_id` may move from `hook`'s status to `to`.
pub(crate) fn check_hook_change(
    run_id: &str,
    position: u32,
    hook: Option<&HookState>,
    to: HookStatus,
) -> Result<(), WorldError> {
    let Some(hook) = hook else {
        return Err(WorldError::conflict(format!(
            "run {run_id} has no hook at position {position}"
        )));
    };
    match (hook.status, to) {
        (HookStatus::Waiting, _) => Ok(()),
        (HookStatus::Expired | HookStatus::Received, HookStatus::Disposed) => Ok(()),
        (HookStatus::Received, HookStatus::Received) => Err(WorldError::conflict(format!(
            "hook {} of run {run_id} has already been resumed; a hook takes one payload",
            hook.id
        ))),
        (from, to) => Err(WorldError::conflict(format!(
            "hook {} of run {run_id} is {from:?} and cannot become {to:?}",
            hook.id
        ))),
    }
}
