//! Resuming a run from its history after a store call for it failed with a passing error (the
//! database went away, a connection was cut).
//!
//! Such a failure leaves this process unsure of the run: a write that reported an error may
//! have landed (the connection broke after the commit), and the task that made it stopped
//! halfway (a step scheduled but never queued, a result not recorded, a timer taken but not
//! fired). Retrying the one call cannot settle that; reading the run back can. So the run is
//! queued here, and a loop lets go of what this process holds of it in memory and resumes it
//! from its history, exactly as a restart would (`recover_runs`): steps scheduled but not
//! started are queued again, an attempt that was running counts as lost, timers are re-armed.
//! While the store stays unavailable the run is tried again on the next tick.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::error::{ErrorKind, WorldError};
use crate::model::ResolveData;

use super::Engine;

/// How long the loop waits before resuming the runs queued since its last round, so that a
/// burst of failures (every task of a cut connection) makes one round.
const PAUSE_MS: i64 = 200;

/// At most one warning per this long about failed store calls; the others are counted in it.
const WARN_EVERY_MS: i64 = 10_000;

/// Runs waiting to be resumed from their history.
#[derive(Default)]
pub(crate) struct Resyncs {
    pending: Mutex<Vec<String>>,
    wake: Notify,
    /// When the last warning was logged, and how many failures went unlogged since: a full
    /// disk fails every run's writes each round, which would otherwise flood the log.
    warned: Mutex<(Option<i64>, u64)>,
}

impl Resyncs {
    fn push(&self, run_id: &str) {
        let mut pending = self.pending.lock();
        if !pending.iter().any(|r| r == run_id) {
            pending.push(run_id.to_owned());
        }
        drop(pending);
        self.wake.notify_one();
    }

    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.pending.lock())
    }
}

/// True for an error that says the store could not be reached or could not write (a full or
/// failing disk), not that the call was wrong: trying again later may succeed.
pub(crate) fn is_passing(error: &WorldError) -> bool {
    matches!(
        error.kind(),
        ErrorKind::Unavailable | ErrorKind::StorageFull | ErrorKind::StorageIo
    )
}

/// Whether a failure at `now` is warned about, given when the last warning was and how many
/// failures were not warned about since (`warned`, updated): `Some(n)` to warn, mentioning the
/// `n` failures since the last warning; `None` to stay quiet (the failure is counted).
fn warn_now(warned: &mut (Option<i64>, u64), now: i64) -> Option<u64> {
    match warned.0 {
        Some(at) if now.saturating_sub(at) < WARN_EVERY_MS => {
            warned.1 += 1;
            None
        }
        _ => {
            let quiet = warned.1;
            *warned = (Some(now), 0);
            Some(quiet)
        }
    }
}

impl Engine {
    /// Called where a store call for `run_id` failed: if the failure is a passing one, the run
    /// is resumed from its history shortly. Returns true if it was queued.
    pub(crate) fn resync_if_passing(&self, run_id: &str, error: &WorldError) -> bool {
        if !is_passing(error) {
            return false;
        }
        let now = self.clock.now_ms();
        let quiet = warn_now(&mut self.resyncs.warned.lock(), now);
        match quiet {
            Some(also) => tracing::warn!(
                run_id,
                error = %error,
                also_failed_since_last_warning = also,
                "the store failed for this run; resuming it from its history shortly"
            ),
            None => {
                tracing::debug!(run_id, error = %error, "the store failed for this run; resuming it from its history shortly")
            }
        }
        self.resyncs.push(run_id);
        true
    }

    /// Has the run resumed from its history shortly, whatever this process holds of it: for a
    /// run whose creation may have landed without its start call seeing it through. A run that
    /// does not exist is passed over.
    pub(crate) fn resume_from_history(&self, run_id: &str) {
        self.resyncs.push(run_id);
    }

    /// Resumes queued runs until `stop` is cancelled.
    pub(crate) async fn resync_loop(self: Arc<Self>, stop: CancellationToken) {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = self.resyncs.wake.notified() => {}
            }
            let pause = self
                .clock
                .sleep_until_background(self.clock.now_ms().saturating_add(PAUSE_MS));
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = pause => {}
            }
            for run_id in self.resyncs.take() {
                self.resync(&run_id).await;
            }
        }
    }

    /// Lets go of the run in memory and resumes it from its history. A run whose end landed
    /// although its write reported a failure is finished instead: what its end sets off (its
    /// parent hearing of it, its hooks disposed) happens now.
    async fn resync(&self, run_id: &str) {
        self.local_steps.forget_run(run_id);
        // An attempt admitted before the let-go may still be recording its start: the history
        // read below must hold it, or recovery would queue that attempt again (refused, as it
        // started) while the attempt that started is cancelled, and the run would wait forever.
        if let Some(steps) = self.runs.let_go(run_id, false, None) {
            steps.settled().await;
        }
        // A status read first (payloads left out): recovery reads the run whole anyway.
        match self.store.get_run(run_id, ResolveData::None).await {
            Ok(state) if state.status.is_terminal() => {
                match self.store.get_run(run_id, ResolveData::All).await {
                    Ok(state) => self.on_terminal(&Arc::new(state)).await,
                    Err(e) if is_passing(&e) => self.resyncs.push(run_id),
                    Err(e) => {
                        tracing::warn!(run_id, error = %e, "could not read the run back to finish it")
                    }
                }
                return;
            }
            Ok(_) => {}
            Err(e) if is_passing(&e) => {
                self.resyncs.push(run_id);
                return;
            }
            // Never created (a creation that failed and did not land): nothing to resume.
            Err(WorldError::NotFound { .. }) => return,
            Err(e) => {
                tracing::warn!(run_id, error = %e, "could not read the run back to resume it");
                return;
            }
        }
        match self
            .recover_runs(vec![run_id.to_owned()], super::recovery::Cause::ReadBack)
            .await
        {
            Ok(_) => {}
            Err(e) if is_passing(&e) => self.resyncs.push(run_id),
            // A creation that failed and did not land after all: nothing to resume.
            Err(WorldError::NotFound { .. }) => {}
            Err(e) => {
                tracing::warn!(run_id, error = %e, "could not resume the run from its history")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_warned_about_once_per_period_with_a_count_of_the_others() {
        let mut warned = (None, 0);
        // (time of the failure, what is logged)
        let table = [
            (0, Some(0)),
            (1_000, None),
            (9_999, None),
            (10_000, Some(2)),
            (10_001, None),
            (25_000, Some(1)),
            (40_000, Some(0)),
        ];
        for (now, expected) in table {
            assert_eq!(warn_now(&mut warned, now), expected, "at {now}");
        }
    }
}
