//! What the rest of the crate (the world, the workers, the test harness, the webhook server)
//! asks of the engine. Code outside `engine/` goes through these methods, never through the
//! fields of the engine or of its parts, so what each part owns can change without them.

use std::sync::Arc;

use crate::error::WorldError;
use crate::hooks::HookResumed;
use crate::model::{ResolveData, WorkflowState};
use crate::payload::Payload;

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

    /// Refuses hook payloads while the world is shut down or dropped.
    pub(crate) fn check_resumable(&self) -> Result<(), WorldError> {
        self.hooks.check_resumable()
    }

    /// Delivers a payload to the hook holding `token` and queues its run. With `method` (a
    /// request to a webhook), the hook must accept that HTTP method.
    pub(crate) async fn resume_hook(
        &self,
        token: &str,
        payload: Payload,
        method: Option<&str>,
    ) -> Result<HookResumed, WorldError> {
        let resumed = self.hooks.resume(token, payload, method).await?;
        self.runs.schedule(&resumed.run_id);
        Ok(resumed)
    }

    /// The runs' streams: writes from outside, pages, live readers.
    pub(crate) fn streams(&self) -> &Arc<Streams> {
        &self.streams
    }
}
