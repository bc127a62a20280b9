//! What the rest of the crate (the world, the workers, the test harness, the webhook server)
//! asks of the engine. Code outside `engine/` goes through these methods, never through the
//! fields of the engine or of its parts, so what each part owns can change without them.

use std::sync::Arc;

use crate::error::WorldError;
use crate::model::{ResolveData, WorkflowState};

use super::streams::Streams;
use super::Engine;

impl Engine {
    /// A run, by run id or workflow id, resolved as asked.
    pub(crate) async fn get_run(
        &self,
        id: &str,
        resolve: ResolveData,
    ) -> Result<WorkflowState, WorldError> {
        self.store.get_run(id, resolve).await
    }

    /// The runs' streams: writes from outside, pages, live readers.
    pub(crate) fn streams(&self) -> &Arc<Streams> {
        &self.streams
    }
}
