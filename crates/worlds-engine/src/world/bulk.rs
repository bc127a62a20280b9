//! Bulk operations over the runs a filter matches: submitted as a durable run, read back as
//! progress.

use crate::engine::bulk::{BulkInput, BulkPage, BULK_WORKFLOW};
use crate::error::WorldError;
use crate::model::{ActivityStatus, OnConflict, ResolveData, WorkflowOptions};
use crate::{BulkProgress, BulkRequest};

use super::World;

impl World {
    /// Starts a bulk operation — cancel, retry or resume every run `request.filter` matches —
    /// and returns its id. The operation is itself a durable run (of the built-in workflow
    /// `worlds.bulk`): it survives crashes and restarts, acts on each run once (the run's own
    /// history records which operation reopened it), and only on runs created before it was
    /// submitted. Follow it with [`bulk_progress`](Self::bulk_progress).
    ///
    /// ```
    /// use worlds_engine::prelude::*;
    /// use worlds_engine::{BulkAction, BulkRequest, RunStatus, WorkflowQueryFilter};
    ///
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let world = World::new(WorldConfig::memory())?;
    /// world.start().await?;
    /// let failed = WorkflowQueryFilter::new().status(RunStatus::Failed);
    /// let id = world
    ///     .bulk(BulkRequest::new(BulkAction::Retry, failed).by("ops"))
    ///     .await?;
    /// let progress = world.bulk_progress_when_done(&id).await?;
    /// assert_eq!(progress.matched, 0);
    /// world.shutdown().await?;
    /// # Ok::<(), WorldError>(())
    /// # }).unwrap();
    /// ```
    pub async fn bulk(&self, request: BulkRequest) -> Result<String, WorldError> {
        let mut options = WorkflowOptions::default();
        if let Some(name) = &request.name {
            options = options
                .workflow_id(name.clone())
                .on_conflict(OnConflict::UseExisting);
        }
        let input = BulkInput {
            before: self.clock().now_ms(),
            request,
        };
        let handle = self
            .execute_by_name::<BulkInput, BulkProgress>(BULK_WORKFLOW, input, options)
            .await?;
        Ok(handle.id)
    }

    /// How far bulk operation `id` got: runs matched, acted on, skipped and refused (with the
    /// first refusals), and whether it is done.
    pub async fn bulk_progress(&self, id: &str) -> Result<BulkProgress, WorldError> {
        let state = self.get_run(id, ResolveData::All).await?;
        if state.name != BULK_WORKFLOW {
            return Err(WorldError::InvalidInput {
                field: "id".into(),
                message: format!(
                    "run {} is a run of '{}', not a bulk operation",
                    state.id, state.name
                ),
            });
        }
        let mut progress = BulkProgress {
            id: state.id.clone(),
            status: Some(state.status),
            ..BulkProgress::default()
        };
        for step in &state.activities {
            if step.status != ActivityStatus::Completed {
                continue;
            }
            if let Some(Ok(page)) = step.output.as_ref().map(|o| o.decode::<BulkPage>()) {
                progress.add(&page);
            }
        }
        progress.done = state.status.is_terminal();
        Ok(progress)
    }

    /// Waits for bulk operation `id` to end, then answers its progress.
    pub async fn bulk_progress_when_done(&self, id: &str) -> Result<BulkProgress, WorldError> {
        let handle = self.handle::<BulkProgress>(id).await?;
        match handle.result().await {
            // A failed operation still says how far it got.
            Ok(_) | Err(WorldError::RunFailed { .. } | WorldError::RunCancelled { .. }) => {
                self.bulk_progress(id).await
            }
            Err(e) => Err(e),
        }
    }
}
