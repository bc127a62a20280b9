//! The timer service: fires durable timers when the world's clock reaches them.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::error::{codes, StructuredError, WorldError};
use crate::model::EventKind;
use crate::store::{Timer, TimerKind};

use super::Engine;

/// Timers fired per store round trip.
const BATCH: usize = 512;

impl Engine {
    /// Fires every timer that is due now. Returns how many fired.
    pub(crate) async fn fire_due_timers(&self) -> Result<usize, WorldError> {
        let mut fired = 0;
        loop {
            let due = self
                .store
                .take_due_timers(self.clock.now_ms(), BATCH)
                .await?;
            if due.is_empty() {
                return Ok(fired);
            }
            fired += due.len();
            // Runs fire concurrently, so that on a durable store their records share syncs
            // instead of waiting for one each; a run's own timers fire in order.
            let mut by_run: Vec<Vec<Timer>> = Vec::new();
            let mut index: rustc_hash::FxHashMap<String, usize> = Default::default();
            for timer in due {
                match index.get(&timer.run_id) {
                    Some(&i) => by_run[i].push(timer),
                    None => {
                        index.insert(timer.run_id.clone(), by_run.len());
                        by_run.push(vec![timer]);
                    }
                }
            }
            futures::future::join_all(by_run.into_iter().map(|timers| async move {
                for timer in timers {
                    self.fire(timer).await;
                }
            }))
            .await;
        }
    }

    async fn fire(&self, timer: Timer) {
        let run_id = timer.run_id.as_str();
        let result = match timer.kind {
            TimerKind::Sleep { position } => self
                .journal
                .append(run_id, vec![EventKind::TimerFired { position }])
                .await
                .map(|_| self.runs.schedule(run_id)),
            TimerKind::ActivityRetry { position, attempt } => {
                self.retry_activity(run_id, position, attempt).await
            }
            TimerKind::WorkflowRetry { attempt } => {
                self.start_workflow_retry(run_id, attempt).await
            }
            TimerKind::HookExpiry { position } => self.expire_hook(run_id, position).await,
            TimerKind::RunTimeout => {
                let error =
                    StructuredError::new(format!("run {run_id} did not finish within its timeout"))
                        .with_code(codes::TIMEOUT);
                self.finish_with(run_id, vec![EventKind::WorkflowFailed { error }])
                    .await
            }
        };
        if let Err(e) = result {
            // Typically the run finished or was cancelled before its timer: nothing to do.
            tracing::debug!(run_id, error = %e, "timer fired for a run that no longer needs it");
        }
    }

    /// Fires timers as the clock reaches them, until `stop` is cancelled.
    pub(crate) async fn timer_loop(self: Arc<Self>, stop: CancellationToken) {
        loop {
            if let Err(e) = self.fire_due_timers().await {
                tracing::error!(error = %e, "could not fire timers");
            }
            let next = self.store.next_timer_at().await.ok().flatten();
            let sleep = async {
                match next {
                    Some(at) => self.clock.sleep_until(at).await,
                    None => futures::future::pending().await,
                }
            };
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = self.timer_wake.notified() => {}
                _ = sleep => {}
            }
        }
    }
}
