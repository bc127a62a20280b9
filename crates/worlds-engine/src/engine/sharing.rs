//! Working beside other processes on one shared store (the file store in a directory several
//! processes open).
//!
//! Each run is driven by one process at a time (see `store::FileStore`). Every
//! [`shared_poll_interval`](crate::WorldConfig::shared_poll_interval) a world on a shared store
//! reads back the runs it drives that another process wrote to, and takes over the runs whose
//! process has exited, resuming them from their history like a restart does. A store that can
//! tell when another process changed something ([`LeaseStore::changes`]) makes it poll at once.
//!
//! [`LeaseStore::changes`]: crate::store::LeaseStore::changes

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::error::WorldError;
use crate::model::ResolveData;

use super::Engine;

impl Engine {
    /// Polls the shared store until `stop` is cancelled.
    pub(crate) async fn share_loop(self: Arc<Self>, stop: CancellationToken) {
        // Another process's hint that something changed: poll now rather than at the tick.
        let changes = self.store.changes();
        loop {
            let every = self.config.shared_poll_interval.0.as_millis() as i64;
            let tick = self
                .clock
                .sleep_until_background(self.clock.now_ms().saturating_add(every));
            let hinted = async {
                match &changes {
                    Some(changes) => changes.notified().await,
                    None => futures::future::pending().await,
                }
            };
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick => {}
                _ = hinted => {}
            }
            if let Err(e) = self.share_tick().await {
                tracing::warn!(error = %e, "could not poll the shared store");
            }
        }
    }

    /// One poll: runs this process lost first, then external changes, then takeovers.
    pub(crate) async fn share_tick(&self) -> Result<(), WorldError> {
        for run_id in self.journal.take_lost() {
            self.drop_lost(&run_id).await;
        }
        for run_id in self.recovery.external_changes().await? {
            self.on_external_change(&run_id).await;
        }
        if self.accepting.load(Ordering::Acquire) {
            self.recover().await?;
            self.reconcile_owned().await?;
        }
        Ok(())
    }

    /// Another process took over a run this one drove (its lease had expired): forget the run
    /// here without recording anything; the other process drives it from its history.
    async fn drop_lost(&self, run_id: &str) {
        // Its timers stay in the store: they are the other process's now.
        self.local_steps.forget_run(run_id);
        self.runs.let_go(run_id, false, None);
    }

    /// Another process wrote to a run this one drives.
    async fn on_external_change(&self, run_id: &str) {
        match self.store.get_run(run_id, ResolveData::All).await {
            // Finished elsewhere (cancelled from another process): the writer of the final
            // event told the parent; here only this process's hold on the run goes.
            Ok(state) if state.status.is_terminal() => self.let_go(&Arc::new(state)).await,
            Ok(_) => {
                self.progress.epoch.fetch_add(1, Ordering::Relaxed);
                self.runs.schedule(run_id);
            }
            Err(e) => {
                tracing::warn!(run_id, error = %e, "could not read a run another process changed")
            }
        }
    }
}
