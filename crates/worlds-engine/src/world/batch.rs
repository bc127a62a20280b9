//! Starting many runs of one workflow in one call.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::engine::definitions::Workflow;
use crate::error::WorldError;
use crate::model::WorkflowOptions;
use crate::payload::Payload;

use super::{WorkflowHandle, World};

impl World {
    /// Starts a run for each `(input, options)` item, much faster than one
    /// [`execute`](Self::execute) per item: the store creates the runs in one call (one index
    /// lock in memory, one directory sync on files, one group commit in hybrid mode) and their
    /// first tasks are queued together.
    ///
    /// The outer error is for the whole call: the workflow is not registered (404) or the world
    /// is shutting down (503). Otherwise result `i` belongs to item `i`, and a refused item
    /// (input over the payload limit, a taken workflow id…) does not stop the others. Items
    /// with an idempotency key or [`OnConflict::UseExisting`](crate::OnConflict) are started
    /// one by one after the rest, with the same semantics as `execute`.
    ///
    /// ```
    /// use worlds_engine::prelude::*;
    ///
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let greet = workflow("greet", |_ctx: WorkflowContext, name: String| async move {
    ///     Ok::<_, WorkflowError>(format!("hello {name}"))
    /// });
    /// let world = World::new(WorldConfig::memory())?;
    /// world.register(&greet)?;
    /// world.start().await?;
    ///
    /// let items = ["ada", "alan", "grace"]
    ///     .map(|name| (name.to_string(), WorkflowOptions::new().workflow_id(format!("greet-{name}"))));
    /// let mut handles = Vec::new();
    /// for started in world.execute_batch(&greet, items).await? {
    ///     handles.push(started?);
    /// }
    /// assert_eq!(handles[1].workflow_id, "greet-alan");
    /// assert_eq!(handles[2].result().await?, "hello grace");
    /// # Ok::<(), WorldError>(())
    /// # }).unwrap();
    /// ```
    pub async fn execute_batch<I, O>(
        &self,
        workflow: &Workflow<I, O>,
        items: impl IntoIterator<Item = (I, WorkflowOptions)>,
    ) -> Result<Vec<Result<WorkflowHandle<O>, WorldError>>, WorldError>
    where
        I: Serialize,
        O: DeserializeOwned,
    {
        let name = workflow.name();
        let items = items
            .into_iter()
            .map(|(input, options)| {
                Payload::encode(&input)
                    .map(|input| (input, options))
                    .map_err(|e| WorldError::serde(format!("input of workflow '{name}'"), e))
            })
            .collect();
        let started = self.engine.create_runs(name, items).await?;
        Ok(started
            .into_iter()
            .map(|started| {
                started.map(|(run_id, workflow_id)| {
                    WorkflowHandle::new(&self.engine, run_id, workflow_id)
                })
            })
            .collect())
    }
}
