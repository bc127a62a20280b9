//! Handles to runs.

use std::marker::PhantomData;
use std::sync::Arc;

use serde::de::DeserializeOwned;

use crate::engine::Engine;
use crate::error::WorldError;
use crate::model::{RunStatus, WorkflowState};

/// A handle to one run: wait for its result, inspect it, cancel it.
pub struct WorkflowHandle<O> {
    /// The run id (`wrun_…`).
    pub id: String,
    /// The workflow id.
    pub workflow_id: String,
    engine: Arc<Engine>,
    _output: PhantomData<fn() -> O>,
}

impl<O> Clone for WorkflowHandle<O> {
    fn clone(&self) -> Self {
        Self {
            id: self.id.clone(),
            workflow_id: self.workflow_id.clone(),
            engine: self.engine.clone(),
            _output: PhantomData,
        }
    }
}

impl<O> std::fmt::Debug for WorkflowHandle<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkflowHandle")
            .field("id", &self.id)
            .field("workflow_id", &self.workflow_id)
            .finish()
    }
}

impl<O: DeserializeOwned> WorkflowHandle<O> {
    pub(crate) fn new(engine: Arc<Engine>, id: String, workflow_id: String) -> Self {
        Self {
            id,
            workflow_id,
            engine,
            _output: PhantomData,
        }
    }

    /// Waits for the run to finish and returns its result, or why there is none.
    pub async fn result(&self) -> Result<O, WorldError> {
        let state = self.engine.wait_terminal(&self.id).await?;
        outcome(state)
    }

    /// The run's current state, with its history.
    pub async fn query(&self) -> Result<WorkflowState, WorldError> {
        crate::world::query_with_history(&self.engine, &self.id).await
    }

    /// Cancels the run (and its unfinished children). Cancelling a cancelled run is a no-op;
    /// cancelling a finished one is a conflict.
    pub async fn cancel(&self) -> Result<(), WorldError> {
        self.engine.cancel_run(&self.id, None).await
    }
}

/// The result of a finished run.
pub(crate) fn outcome<O: DeserializeOwned>(state: WorkflowState) -> Result<O, WorldError> {
    match state.status {
        RunStatus::Completed => {
            let output = state.output.unwrap_or_else(crate::Payload::null);
            output
                .decode()
                .map_err(|e| WorldError::serde(format!("result of run {}", state.id), e))
        }
        RunStatus::Cancelled => Err(WorldError::RunCancelled { run_id: state.id }),
        _ => Err(WorldError::RunFailed {
            error: state.error.map_or_else(
                || crate::StructuredError::new(format!("run {}", state.status)),
                |error| *error,
            ),
            run_id: state.id,
        }),
    }
}
