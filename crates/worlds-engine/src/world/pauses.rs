//! Pausing a workflow or a task queue: new work held, running work going on (see
//! `engine/flow.rs` for exactly what is held).

use crate::error::WorldError;
use crate::model::{Pause, PauseTarget};

use super::World;

impl World {
    /// Pauses `target`: its runs not started yet stay pending and its steps not started yet
    /// stay queued until [`resume`](Self::resume); runs already started go on and step
    /// attempts already executing finish. Stored, so it outlives this process and reaches
    /// every process sharing the store (within 2 s). `by` and `reason` are recorded with it
    /// and shown wherever a run waits on it. Pausing a paused target replaces its record.
    ///
    /// ```
    /// # async fn demo(world: &worlds_engine::World) -> Result<(), worlds_engine::WorldError> {
    /// use worlds_engine::model::PauseTarget;
    /// let checkout = PauseTarget::Workflow("checkout".into());
    /// world.pause(checkout.clone(), "ops", "payment provider incident").await?;
    /// // … new checkouts are accepted and wait …
    /// world.resume(&checkout, "ops").await?;
    /// # Ok(()) }
    /// ```
    pub async fn pause(
        &self,
        target: PauseTarget,
        by: &str,
        reason: &str,
    ) -> Result<Pause, WorldError> {
        self.engine.pause(target, by, reason).await
    }

    /// Lifts the pause on `target` (`by` is logged): what it held starts. Returns the pause
    /// lifted, or `None` if `target` was not paused.
    pub async fn resume(
        &self,
        target: &PauseTarget,
        by: &str,
    ) -> Result<Option<Pause>, WorldError> {
        self.engine.resume(target, by).await
    }

    /// The pauses in force, as the store holds them.
    pub async fn pauses(&self) -> Result<Vec<Pause>, WorldError> {
        self.engine.list_pauses().await
    }
}
