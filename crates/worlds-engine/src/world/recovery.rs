//! Recovering failed runs by hand: retry, reset, resume.

use crate::error::WorldError;
use crate::model::{ReopenRequest, Reopened};

use super::World;

impl World {
    /// Reopens a failed or quarantined run so it goes on, keeping what it recorded:
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
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let world = World::new(WorldConfig::memory())?;
    /// world.register(workflow("hello", |_ctx, name: String| async move {
    ///     Ok(format!("hello, {name}"))
    /// }))?;
    /// world.start().await?;
    /// let run = world.execute("hello", "ada").await?;
    /// run.result::<String>().await?;
    /// // A completed run cannot be retried.
    /// let refused = world.reopen(run.run_id(), ReopenRequest::retry().by("ops")).await;
    /// assert!(refused.is_err());
    /// # world.stop().await;
    /// # Ok::<_, WorldError>(()) }).unwrap();
    /// ```
    pub async fn reopen(
        &self,
        run_id: &str,
        request: ReopenRequest,
    ) -> Result<Reopened, WorldError> {
        self.engine.reopen(run_id, request).await
    }
}
