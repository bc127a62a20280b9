//! Retention sweeps: removing the finished runs the policy lets go
//! ([`WorldConfig::retention`](crate::WorldConfig::retention)), now or as a preview.

use serde::{Deserialize, Serialize};

use crate::clock::{duration_ms, Millis};
use crate::engine::prune::{PruneInput, PrunePage, PRUNE_WORKFLOW};
use crate::error::WorldError;
use crate::model::{ActivityStatus, ResolveData, WorkflowOptions, WorkflowQueryFilter};
use crate::{PruneReport, RetentionConfig};

/// The world's retention at a glance ([`World::retention`]): its policy, when it next sweeps,
/// and what the last sweep did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetentionStatus {
    /// The policy this world judges by.
    pub policy: RetentionConfig,
    /// True if the policy removes anything (some duration is not zero).
    pub enabled: bool,
    /// When this world starts its next sweep by itself (ms since the Unix epoch); `None`
    /// when the policy keeps everything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_sweep_at: Option<Millis>,
    /// The newest sweep's report, if any sweep ran on this store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sweep: Option<PruneReport>,
}

use super::World;

impl World {
    /// Starts a retention sweep now and returns its id: the finished runs the world's policy
    /// lets go are removed with everything of theirs (history, steps, hooks, streams, keys).
    /// The sweep is itself a durable run (of the built-in workflow `worlds.prune`): killed
    /// halfway, it goes on where it stopped, and removes each run once. A started world also
    /// sweeps by itself every [`sweep_interval`](crate::RetentionConfig::sweep_interval) while
    /// its policy removes anything. Follow it with [`prune_report`](Self::prune_report).
    ///
    /// ```
    /// use std::time::Duration;
    /// use worlds_engine::prelude::*;
    ///
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let mut config = WorldConfig::memory();
    /// config.retention.completed = Duration::from_secs(7 * 86_400).into();
    /// let world = World::new(config)?;
    /// world.start().await?;
    /// let id = world.prune().await?;
    /// let report = world.prune_report_when_done(&id).await?;
    /// assert_eq!(report.removed, 0); // nothing has been finished for a week yet
    /// world.shutdown().await?;
    /// # Ok::<(), WorldError>(())
    /// # }).unwrap();
    /// ```
    pub async fn prune(&self) -> Result<String, WorldError> {
        self.prune_by(None).await
    }

    /// Like [`prune`](Self::prune), judging by `policy` instead of the world's (when `Some`):
    /// for a tool that opens the store without the program's configuration. The policy is
    /// recorded in the sweep's input, so whichever process drives the sweep judges by it.
    pub async fn prune_by(&self, policy: Option<RetentionConfig>) -> Result<String, WorldError> {
        if let Some(policy) = &policy {
            policy.validate()?;
        }
        let input = self.engine.prune_input(policy);
        let handle = self
            .execute_by_name::<PruneInput, PruneReport>(
                PRUNE_WORKFLOW,
                input,
                WorkflowOptions::default(),
            )
            .await?;
        Ok(handle.id)
    }

    /// What a sweep would remove now, without removing anything: the runs, their events and
    /// the bytes those take, and what the policy keeps. Reads every history it would remove.
    pub async fn prune_preview(&self) -> Result<PruneReport, WorldError> {
        self.prune_preview_by(None).await
    }

    /// Like [`prune_preview`](Self::prune_preview), judging by `policy` instead of the
    /// world's (when `Some`).
    pub async fn prune_preview_by(
        &self,
        policy: Option<RetentionConfig>,
    ) -> Result<PruneReport, WorldError> {
        if let Some(policy) = &policy {
            policy.validate()?;
        }
        let input = self.engine.prune_input(policy);
        let mut report = PruneReport {
            dry_run: true,
            at: input.now,
            bytes: Some(0),
            ..PruneReport::default()
        };
        let mut cursor = None;
        loop {
            let page = self.engine.prune_page(&input, cursor, true).await?;
            report.add(&page);
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        report.done = true;
        Ok(report)
    }

    /// How far sweep `id` got: runs looked at, removed and kept (by policy, in use, for an
    /// open bulk operation), and whether it is done.
    pub async fn prune_report(&self, id: &str) -> Result<PruneReport, WorldError> {
        let state = self.get_run(id, ResolveData::All).await?;
        if state.name != PRUNE_WORKFLOW {
            return Err(WorldError::invalid(
                "id",
                format!(
                    "run {} is a run of '{}', not a retention sweep",
                    state.id, state.name
                ),
            ));
        }
        let at = state
            .input
            .as_ref()
            .and_then(|input| input.decode::<PruneInput>().ok())
            .map_or(state.created_at, |input| input.now);
        let mut report = PruneReport {
            id: Some(state.id.clone()),
            status: Some(state.status),
            at,
            ..PruneReport::default()
        };
        for step in &state.activities {
            if step.status != ActivityStatus::Completed {
                continue;
            }
            if let Some(Ok(page)) = step.output.as_ref().map(|o| o.decode::<PrunePage>()) {
                report.add(&page);
            }
        }
        report.done = state.status.is_terminal();
        Ok(report)
    }

    /// The policy, the next sweep this world starts by itself, and the newest sweep's report.
    pub async fn retention(&self) -> Result<RetentionStatus, WorldError> {
        let policy = self.engine.config().retention.clone();
        let enabled = policy.is_enabled();
        let next_sweep_at = enabled.then(|| {
            let interval = duration_ms(policy.sweep_interval.0).max(1);
            (self.clock().now_ms() / interval + 1).saturating_mul(interval)
        });
        let newest = self
            .list_runs(
                WorkflowQueryFilter::new()
                    .workflow_name(PRUNE_WORKFLOW)
                    .limit(1),
            )
            .await?;
        let last_sweep = match newest.data.first() {
            Some(run) => Some(self.prune_report(&run.id).await?),
            None => None,
        };
        Ok(RetentionStatus {
            policy,
            enabled,
            next_sweep_at,
            last_sweep,
        })
    }

    /// Writes runs read from a retention archive
    /// ([`store::archive::read_archive`](crate::store::archive::read_archive)) back into this
    /// world, each from its own history (ids and times kept), for an investigation. Returns
    /// `(imported, already there)`: a run whose id (or workflow id) is taken is left as it is.
    /// An imported run is as it was when archived (finished), so nothing runs; a policy will
    /// sweep it again once it is old enough.
    pub async fn import_runs(
        &self,
        runs: Vec<crate::WorkflowState>,
    ) -> Result<(u64, u64), WorldError> {
        let (mut imported, mut existing) = (0, 0);
        for run in runs {
            if !run.status.is_terminal() {
                return Err(WorldError::invalid(
                    "run",
                    format!(
                        "run {} is {} in the archive: only finished runs are imported",
                        run.id, run.status
                    ),
                ));
            }
            match self.engine.import_run(run.history).await {
                Ok(()) => imported += 1,
                Err(WorldError::Conflict { .. }) => existing += 1,
                Err(e) => return Err(e),
            }
        }
        Ok((imported, existing))
    }

    /// Waits for sweep `id` to end, then answers its report.
    pub async fn prune_report_when_done(&self, id: &str) -> Result<PruneReport, WorldError> {
        let handle = self.handle::<PruneReport>(id).await?;
        match handle.result().await {
            Ok(_) | Err(WorldError::RunFailed { .. } | WorldError::RunCancelled { .. }) => {
                self.prune_report(id).await
            }
            Err(e) => Err(e),
        }
    }
}
