//! Handles to runs.

use std::marker::PhantomData;
use std::sync::{Arc, Weak};

use serde::de::DeserializeOwned;

use crate::engine::Engine;
use crate::error::WorldError;
use crate::model::{RunStatus, WorkflowState};

/// A handle to one run: wait for its result, inspect it, cancel it.
///
/// It does not keep its world alive: once the world is dropped, its methods fail with
/// [`Unavailable`](crate::ErrorKind::Unavailable) (a [`result`](Self::result) in progress
/// too), and the world's store (a locked hybrid directory, a file store's runs) is free for the
/// next world, where `world.handle(id)` gives a new handle.
pub struct WorkflowHandle<O> {
    /// The run id (`wrun_…`).
    pub id: String,
    /// The workflow id.
    pub workflow_id: String,
    /// This handle's call created the run (see [`is_new`](Self::is_new)).
    created: bool,
    engine: Weak<Engine>,
    _output: PhantomData<fn() -> O>,
}

impl<O> Clone for WorkflowHandle<O> {
    fn clone(&self) -> Self {
        Self {
            id: self.id.clone(),
            workflow_id: self.workflow_id.clone(),
            created: self.created,
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
    pub(crate) fn new(engine: &Arc<Engine>, id: String, workflow_id: String) -> Self {
        Self {
            id,
            workflow_id,
            created: false,
            engine: Arc::downgrade(engine),
            _output: PhantomData,
        }
    }

    /// Marks whether the call that made this handle created its run.
    pub(crate) fn created(mut self, created: bool) -> Self {
        self.created = created;
        self
    }

    /// True if the start that returned this handle created the run; false if it returned a
    /// run that already existed (one started earlier with the same idempotency key, or holding
    /// the workflow id under [`OnConflict::UseExisting`](crate::OnConflict::UseExisting)), and
    /// for handles looked up by id.
    ///
    /// ```
    /// # async fn demo(world: &worlds_engine::World, flow: &worlds_engine::Workflow<(), ()>) -> Result<(), worlds_engine::WorldError> {
    /// use worlds_engine::WorkflowOptions;
    /// let options = WorkflowOptions::new().idempotency_key("order-42");
    /// let first = world.execute(flow, (), options.clone()).await?;
    /// let again = world.execute(flow, (), options).await?;
    /// assert!(first.is_new() && !again.is_new());
    /// assert_eq!(first.id, again.id);
    /// # Ok(()) }
    /// ```
    pub fn is_new(&self) -> bool {
        self.created
    }

    /// The engine of the world, while that world exists.
    fn engine(&self) -> Result<Arc<Engine>, WorldError> {
        self.engine
            .upgrade()
            .filter(|engine| !engine.is_closed())
            .ok_or_else(|| {
                WorldError::Unavailable(format!(
                    "the world of run {} has been dropped; open a world on its store and call world.handle(\"{}\") to follow the run",
                    self.id, self.id
                ))
            })
    }

    /// Waits for the run to finish and returns its result, or why there is none. Fails with
    /// `Unavailable` if the world is dropped first.
    pub async fn result(&self) -> Result<O, WorldError> {
        let engine = self.engine()?;
        let closed = engine.closed();
        let state = tokio::select! {
            state = engine.wait_terminal(&self.id) => state?,
            () = closed.cancelled() => return Err(WorldError::Unavailable(format!(
                "the world of run {} was dropped before the run finished; open a world on its store and call world.handle(\"{}\") to follow the run",
                self.id, self.id
            ))),
        };
        if engine.config().encryption_keys.is_none() {
            refuse_sealed_outcome(&state)?;
        }
        outcome(&state)
    }

    /// The run's current state, with its history.
    pub async fn query(&self) -> Result<WorkflowState, WorldError> {
        let engine = self.engine()?;
        crate::world::query_with_history(&engine, &self.id).await
    }

    /// Cancels the run (and its unfinished children). Cancelling a cancelled run is a no-op;
    /// cancelling a finished one is a conflict.
    pub async fn cancel(&self) -> Result<(), WorldError> {
        self.engine()?.cancel_run(&self.id, None).await
    }
}

/// Refuses ([`WorldError::Encrypted`]) the output or error of a run stored encrypted, for a
/// world without keys: rather than a decoding error on the sealed form, or that form handed
/// out as the run's error.
fn refuse_sealed_outcome(state: &WorkflowState) -> Result<(), WorldError> {
    let scope = || format!("run:{}", state.id);
    if let Some(output) = &state.output {
        crate::store::refuse_sealed(scope, output.as_json().as_bytes())?;
    }
    if let Some(error) = &state.error {
        crate::store::refuse_sealed(scope, error.message.as_bytes())?;
    }
    Ok(())
}

/// The result of a finished run.
///
/// Takes the state by reference: a run this process drove hands its final state to every
/// waiter at once, shared, and only the output is decoded from it.
pub(crate) fn outcome<O: DeserializeOwned>(state: &WorkflowState) -> Result<O, WorldError> {
    match state.status {
        RunStatus::Completed => match &state.output {
            Some(output) => output.decode(),
            None => crate::Payload::null().decode(),
        }
        .map_err(|e| WorldError::serde(format!("result of run {}", state.id), e)),
        RunStatus::Cancelled => Err(WorldError::RunCancelled {
            run_id: state.id.clone(),
        }),
        _ => {
            Err(WorldError::RunFailed {
                error: state.error.as_deref().cloned().unwrap_or_else(|| {
                    crate::StructuredError::new(format!("run {}", state.status))
                }),
                run_id: state.id.clone(),
            })
        }
    }
}
