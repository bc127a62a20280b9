//! Flow control records: what an operator paused, by whom, why and since when.
//!
//! A pause holds new work of one workflow or one task queue (see `engine/flow.rs` for what is
//! held and what goes on); it is stored (one record per target) so that it outlives the
//! process that set it and reaches every process sharing the store.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::clock::Millis;
use crate::error::WorldError;

/// The longest target name, in bytes.
pub const MAX_PAUSE_NAME: usize = 1024;
/// The longest `by` or `reason` of a pause, in bytes.
pub const MAX_PAUSE_TEXT: usize = 4096;

/// What a pause holds.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", content = "name", rename_all = "snake_case")]
pub enum PauseTarget {
    /// Runs of this workflow (by registered name) not started yet.
    Workflow(String),
    /// Runs routed to this task queue not started yet, and steps on it not started yet.
    TaskQueue(String),
}

impl PauseTarget {
    /// `"workflow"` or `"task_queue"`: the kind as URLs, files and tables spell it.
    pub fn kind(&self) -> &'static str {
        match self {
            PauseTarget::Workflow(_) => "workflow",
            PauseTarget::TaskQueue(_) => "task_queue",
        }
    }

    /// The workflow or task queue name.
    pub fn name(&self) -> &str {
        match self {
            PauseTarget::Workflow(name) | PauseTarget::TaskQueue(name) => name,
        }
    }

    /// The target of `kind` (as [`kind`](Self::kind) spells it, or `queue`) and `name`,
    /// checked.
    ///
    /// ```
    /// use worlds_engine::model::PauseTarget;
    /// let target = PauseTarget::parse("workflow", "checkout").unwrap();
    /// assert_eq!(target, PauseTarget::Workflow("checkout".into()));
    /// assert!(PauseTarget::parse("queue", "").is_err());
    /// ```
    pub fn parse(kind: &str, name: &str) -> Result<Self, WorldError> {
        let target = match kind {
            "workflow" => PauseTarget::Workflow(name.to_owned()),
            "task_queue" | "queue" => PauseTarget::TaskQueue(name.to_owned()),
            other => {
                return Err(WorldError::invalid(
                    "pause kind",
                    format!(
                        "a pause holds a 'workflow' or a 'task_queue', not {:?}",
                        other.chars().take(64).collect::<String>()
                    ),
                ))
            }
        };
        target.check()?;
        Ok(target)
    }

    /// Checks the name: 1 to [`MAX_PAUSE_NAME`] bytes, no control characters.
    pub fn check(&self) -> Result<(), WorldError> {
        let name = self.name();
        if name.is_empty() || name.len() > MAX_PAUSE_NAME || name.chars().any(char::is_control) {
            return Err(WorldError::invalid(
                "pause name",
                format!(
                    "a {} name to pause is 1 to {MAX_PAUSE_NAME} bytes without control characters",
                    self.kind().replace('_', " ")
                ),
            ));
        }
        Ok(())
    }
}

impl fmt::Display for PauseTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PauseTarget::Workflow(name) => write!(f, "workflow `{name}`"),
            PauseTarget::TaskQueue(name) => write!(f, "task queue `{name}`"),
        }
    }
}

/// A pause in force: its target, who set it, why, and since when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pause {
    /// What it holds.
    pub target: PauseTarget,
    /// Who paused it: an API key's id and name, `cli`, or what the caller of
    /// `World::pause` said.
    pub by: String,
    /// Why, as the one who paused it said (may be empty).
    #[serde(default)]
    pub reason: String,
    /// When (ms since the Unix epoch).
    pub since: Millis,
}

impl Pause {
    /// Checks the target, and that `by` and `reason` are at most [`MAX_PAUSE_TEXT`] bytes
    /// without NUL.
    pub fn check(&self) -> Result<(), WorldError> {
        self.target.check()?;
        for (field, text) in [("pause by", &self.by), ("pause reason", &self.reason)] {
            if text.len() > MAX_PAUSE_TEXT || text.contains('\0') {
                return Err(WorldError::invalid(
                    field,
                    format!("at most {MAX_PAUSE_TEXT} bytes, without NUL"),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_read_and_print_as_operators_write_them() {
        let queue = PauseTarget::parse("queue", "emails").unwrap();
        assert_eq!(queue, PauseTarget::TaskQueue("emails".into()));
        assert_eq!(PauseTarget::parse("task_queue", "emails").unwrap(), queue);
        assert_eq!(queue.to_string(), "task queue `emails`");
        assert_eq!(
            serde_json::to_value(&queue).unwrap(),
            serde_json::json!({"kind": "task_queue", "name": "emails"})
        );
        for (kind, name) in [
            ("run", "x"),
            ("workflow", ""),
            ("workflow", "a\0b"),
            ("workflow", "a\nb"),
        ] {
            assert!(PauseTarget::parse(kind, name).is_err(), "{kind} {name:?}");
        }
        assert!(PauseTarget::parse("workflow", &"x".repeat(MAX_PAUSE_NAME)).is_ok());
        assert!(PauseTarget::parse("workflow", &"x".repeat(MAX_PAUSE_NAME + 1)).is_err());
    }

    #[test]
    fn a_pause_refuses_nul_and_huge_text() {
        let pause = |by: &str, reason: &str| Pause {
            target: PauseTarget::Workflow("checkout".into()),
            by: by.into(),
            reason: reason.into(),
            since: 0,
        };
        assert!(pause("ops", "incident 42").check().is_ok());
        assert!(pause("ops", "").check().is_ok());
        assert!(pause("o\0ps", "").check().is_err());
        assert!(pause("ops", &"r".repeat(MAX_PAUSE_TEXT + 1))
            .check()
            .is_err());
    }
}
