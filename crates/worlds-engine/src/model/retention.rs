//! What retention reads and answers: a finished run by its end, a place in that order, and
//! what removing one did (see `store::RetentionStore`).

use serde::{Deserialize, Serialize};

use crate::clock::Millis;
use crate::status::RunStatus;

/// A finished run as a retention sweep sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndedRun {
    /// Run id (`wrun_…`).
    pub run_id: String,
    /// Registered workflow name: a policy may keep some workflows longer.
    pub name: String,
    /// Its final status (completed, failed, cancelled or compensated).
    pub status: RunStatus,
    /// True if it was quarantined (its status is then failed or compensated).
    pub quarantined: bool,
    /// When it was created (ms since the Unix epoch): an idempotency key counts from here.
    pub created_at: Millis,
    /// When it ended (ms since the Unix epoch).
    pub ended_at: Millis,
    /// True if it was started with an idempotency key.
    pub has_idempotency_key: bool,
}

impl EndedRun {
    /// Where a listing of ended runs goes on after this one.
    pub fn cursor(&self) -> EndedCursor {
        EndedCursor {
            ended_at: self.ended_at,
            run_id: self.run_id.clone(),
        }
    }
}

/// A position in the order of [`RetentionStore::ended_runs`](crate::store::RetentionStore::ended_runs): `(ended_at, run_id)`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EndedCursor {
    /// The end time of the last run listed.
    pub ended_at: Millis,
    /// Its run id.
    pub run_id: String,
}

/// A run a sweep asks the store to remove: see
/// [`RetentionStore::remove_runs`](crate::store::RetentionStore::remove_runs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoveRun {
    /// Run id (`wrun_…`), not a workflow id.
    pub run_id: String,
    /// The run goes only if it ended strictly before this time (ms since the Unix epoch).
    pub ended_before: Millis,
}

impl RemoveRun {
    /// A request to remove `run_id` if it ended before `ended_before`.
    pub fn new(run_id: impl Into<String>, ended_before: Millis) -> Self {
        Self {
            run_id: run_id.into(),
            ended_before,
        }
    }
}

/// Why a store kept a run it was asked to remove.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Kept {
    /// The run has not finished (or was reopened since it was listed).
    Unfinished,
    /// It ended after the bound the caller gave.
    EndedLater {
        /// When it ended.
        ended_at: Millis,
    },
    /// One of its child runs has not finished: the child still reports to it.
    ChildRunning {
        /// The child's run id.
        child_id: String,
    },
    /// Its parent run has not finished: the parent may still look at it.
    ParentRunning {
        /// The parent's run id.
        parent_id: String,
    },
}

impl std::fmt::Display for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Kept::Unfinished => f.write_str("it has not finished"),
            Kept::EndedLater { ended_at } => write!(f, "it ended later ({ended_at})"),
            Kept::ChildRunning { child_id } => write!(f, "its child {child_id} is still running"),
            Kept::ParentRunning { parent_id } => {
                write!(f, "its parent {parent_id} is still running")
            }
        }
    }
}

/// What [`RetentionStore::remove_runs`](crate::store::RetentionStore::remove_runs) did to one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Removal {
    /// The run and everything that belonged to it are gone.
    Removed {
        /// Events of its history removed.
        events: u64,
    },
    /// No such run: removed before (a sweep that went over it again), or never there.
    Gone,
    /// The run may not go now; nothing was removed.
    Kept(Kept),
}
