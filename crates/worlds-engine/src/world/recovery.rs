//! Recovering failed runs by hand: retry, reset, resume.

use crate::error::WorldError;
use crate::model::{ReopenRequest, Reopened};

use super::World;

impl World {
    /// Reopens a failed or quarantined run (by run id or workflow id) so it goes on, keeping
    /// what it recorded:
    ///
    /// - [`ReopenRequest::retry`] runs the failed part again — every step result recorded
    ///   before the last failure is kept and not run again;
    /// - [`ReopenRequest::reset`] runs again from a chosen command position of the failed
    ///   attempt;
    /// - [`ReopenRequest::resume`] lets a quarantined run (its code had changed under it) go
    ///   on from where it stopped, once the code is fixed.
    ///
    /// The new attempt runs the code registered now. Before anything is recorded, it is
    /// replayed against that code: if what it keeps no longer matches (the run would only be
    /// quarantined again), the reopening is refused with the position and both commands. The
    /// reopening is recorded in the run's history (`run_reopened`) with who asked and why.
    ///
    /// Refused (`CONFLICT`) for a run that did not fail, whose compensations ran, or that is a
    /// child (reopen its parent); resume is for quarantined runs only.
    ///
    /// ```
    /// use worlds_engine::prelude::*;
    /// use worlds_engine::model::ReopenRequest;
    ///
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let flow = workflow("hello", |_ctx: WorkflowContext, name: String| async move {
    ///     Ok::<_, WorkflowError>(format!("hello, {name}"))
    /// });
    /// let world = World::new(WorldConfig::memory())?;
    /// world.register(&flow)?;
    /// world.start().await?;
    /// let run = world.execute(&flow, "ada".to_owned(), WorkflowOptions::default()).await?;
    /// run.result().await?;
    /// // Only a failed run can be reopened: this one completed.
    /// let refused = world.reopen(&run.id, ReopenRequest::retry().by("ops")).await;
    /// assert!(refused.unwrap_err().to_string().contains("is completed"));
    /// world.shutdown().await?;
    /// # Ok::<(), WorldError>(())
    /// # }).unwrap();
    /// ```
    pub async fn reopen(&self, id: &str, request: ReopenRequest) -> Result<Reopened, WorldError> {
        let run = self
            .engine
            .get_run(id, crate::model::ResolveData::None)
            .await?;
        self.engine.reopen(&run.id, request).await
    }
}
