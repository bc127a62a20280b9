//! Lost attempts: a step attempt whose runner went away before recording its result.
//!
//! An attempt is lost in two ways: the process running it stopped (found by recovery, on the
//! next start or by another process on a shared store), or its worker stopped sending
//! heartbeats (found by the liveness monitor, see `worker::monitor`). Both end the same way: the
//! attempt is recorded as failed with `WORKER_LOST` and retried at once under its retry policy.
//! A new attempt number is needed because the history already holds the lost attempt's start.
//! Steps are at-least-once: the lost attempt may still be running its code somewhere.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{codes, StructuredError};
use crate::model::ActivityStatus;

use super::{ActivityTask, Engine};

/// Why an attempt was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Loss {
    /// The process that ran it stopped.
    ProcessStopped,
    /// Its worker stopped sending heartbeats.
    WorkerSilent,
}

impl Loss {
    fn cause(self) -> &'static str {
        match self {
            Loss::ProcessStopped => "the process running it stopped",
            Loss::WorkerSilent => "its worker stopped sending heartbeats",
        }
    }
}

impl Engine {
    /// Records `task`'s attempt as lost and retries it at once, under its retry policy.
    pub(crate) async fn record_lost_attempt(&self, task: &ActivityTask, loss: Loss) {
        let options = self.activity_options(&task.name, task.options.as_deref());
        let error = StructuredError::new(format!(
            "attempt {} of activity '{}' was lost: {}",
            task.attempt,
            task.name,
            loss.cause()
        ))
        .with_code(codes::WORKER_LOST);
        self.record_attempt_failure(task, &options, error, Some(Some(Duration::ZERO)))
            .await;
    }

    /// Takes back attempt `attempt` of the step at `position` of run `run_id` from a worker
    /// declared dead: a started attempt is lost, one not started yet is queued again, and one
    /// whose result is recorded needs nothing. The worker's task was counted as pending; the
    /// caller accounts for it.
    pub(crate) async fn take_back_attempt(&self, run_id: &Arc<str>, position: u32, attempt: u32) {
        // The attempt's start may not be readable yet (it is recorded without waiting).
        let _ = self.journal.wait_durable(run_id).await;
        let state = self.store.get_activity(run_id, position).await;
        match state {
            Ok(a) if a.status == ActivityStatus::Running && a.attempt == attempt => {
                // The attempt was running: its `running_activities` count was taken and will
                // not be given back by the aborted task.
                let _ = self.progress.running_activities.fetch_update(
                    Ordering::AcqRel,
                    Ordering::Acquire,
                    |n| Some(n.saturating_sub(1)),
                );
                let workflow_id = self.runs.workflow_id(run_id).unwrap_or_default();
                let lost = ActivityTask::from_state(run_id.clone(), workflow_id, &a, attempt);
                self.record_lost_attempt(&lost, Loss::WorkerSilent).await;
            }
            Ok(a)
                if matches!(
                    a.status,
                    ActivityStatus::Scheduled | ActivityStatus::Retrying
                ) && a.attempt + 1 == attempt =>
            {
                if let Err(e) = self.retry_activity(run_id, position, attempt).await {
                    tracing::warn!(run_id = %run_id, position, error = %e, "could not queue the task of a dead worker again");
                }
            }
            // Its result is recorded (or the run is gone): nothing left to do.
            _ => {}
        }
    }
}
