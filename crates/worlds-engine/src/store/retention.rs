//! The [`RetentionStore`] contract: finding finished runs by when they ended, and removing them
//! with everything that belongs to it.
//!
//! The engine decides which runs its policy lets go (`engine/prune.rs`); a store only lists
//! candidates and removes runs, each re-checked under its own lock (or in its own
//! transaction) that the run may go: finished, ended no later than the caller's bound, no
//! child still running, no parent still running. So a run reopened by hand, or a parent whose
//! child was started since the candidates were listed, is kept however the sweep raced it.

use async_trait::async_trait;

use crate::clock::Millis;
use crate::error::WorldError;
pub use crate::model::{EndedCursor, EndedRun, Kept, Removal, RemoveRun};

/// Finished runs by end time, and removing them.
#[async_trait]
pub trait RetentionStore: Send + Sync {
    /// Up to `limit` finished runs (completed, failed, cancelled, compensated) that ended
    /// strictly before `before`, in `(ended_at, run_id)` order, strictly after `after` when
    /// given.
    async fn ended_runs(
        &self,
        before: Millis,
        after: Option<&EndedCursor>,
        limit: usize,
    ) -> Result<Vec<EndedRun>, WorldError>;

    /// Removes each run asked for (a run id, not a workflow id) and what belongs to it: its
    /// history and state, steps, hooks (their tokens free again), timers, stream chunks, its
    /// idempotency key and its workflow id (free again) — but only if, checked atomically with
    /// its removal, it has finished, ended before its `ended_before`, none of its children is
    /// unfinished and its parent, if still there, has finished. Removing a run that is gone is
    /// [`Removal::Gone`], so a sweep that goes over a run twice removes it once.
    ///
    /// One answer per request, in the requests' order. A store does the batch in as few
    /// writes as it can (one transaction on PostgreSQL, one synced write on the hybrid store);
    /// on an error, some of the batch may have been removed and a second call answers those
    /// [`Removal::Gone`].
    async fn remove_runs(&self, runs: &[RemoveRun]) -> Result<Vec<Removal>, WorldError>;

    /// [`remove_runs`](Self::remove_runs) of one run.
    async fn remove_run(&self, run_id: &str, ended_before: Millis) -> Result<Removal, WorldError> {
        let mut answers = self
            .remove_runs(&[RemoveRun::new(run_id, ended_before)])
            .await?;
        answers.pop().ok_or_else(|| {
            WorldError::Internal(format!("the store gave no answer to removing {run_id}"))
        })
    }
}
