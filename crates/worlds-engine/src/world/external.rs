//! Runs whose workflow code runs outside the engine, seen from the world: create one, record
//! what its runtime did, read it back.

use std::sync::Arc;

use crate::engine::external::ExternalHook;
pub use crate::engine::external::NewExternalRun;
use crate::error::WorldError;
use crate::model::{Event, EventKind, ResolveData, WorkflowState};
use crate::payload::Payload;
use crate::store::{Appended, HookRef};

use super::World;

/// Runs driven from outside the engine, from [`World::external`].
///
/// An outside runtime — a Workflow DevKit app, a program in another language — runs the
/// workflow code and records what happened here: the run's start, its steps and their attempts,
/// its waits and hooks, its end. The records are the engine's own [`EventKind`]s, checked by the
/// same rules as the engine's (a step completes once, nothing follows the end), so such a run
/// is stored on every backend and shown by the CLI and the dashboard like any other. The engine
/// never executes, recovers or times it.
///
/// ```
/// # use worlds_engine::prelude::*;
/// # async fn demo(world: &World) -> Result<(), WorldError> {
/// use worlds_engine::{EventKind, Payload};
/// let external = world.external();
/// let run = external.create("checkout", Payload::encode(&["cart-7"]).unwrap(), None).await?;
/// external
///     .append(&run.id, vec![EventKind::WorkflowStarted { attempt: 1, first_position: 0 }])
///     .await?;
/// external
///     .append(&run.id, vec![EventKind::WorkflowCompleted { output: Payload::null() }])
///     .await?;
/// assert!(world.query(&run.id).await?.status.is_terminal());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ExternalRuns<'w> {
    world: &'w World,
}

impl World {
    /// Runs driven from outside the engine (see [`ExternalRuns`]).
    pub fn external(&self) -> ExternalRuns<'_> {
        ExternalRuns { world: self }
    }
}

impl ExternalRuns<'_> {
    /// Creates a pending run driven from outside: with the id the runtime chose, or a new one
    /// (`wrun_…`), tagged with the runtime's deployment and what it keeps with the run.
    ///
    /// Errors: an empty or over-long name, a malformed run id or bad attributes (400), a run id
    /// that is taken (409), an input or execution context over the payload limit (413).
    pub async fn create_run(&self, run: NewExternalRun) -> Result<WorkflowState, WorldError> {
        self.world.engine.create_external(run).await
    }

    /// Creates a pending run of workflow `name` with `input`, tagged with the outside
    /// runtime's `code_version` (its deployment) if given, under a new run id (`wrun_…`): a
    /// shorthand of [`create_run`](Self::create_run).
    ///
    /// Errors: an empty or over-long name (400), an input over the payload limit (413).
    pub async fn create(
        &self,
        name: &str,
        input: Payload,
        code_version: Option<String>,
    ) -> Result<WorkflowState, WorldError> {
        self.create_run(NewExternalRun {
            code_version,
            ..NewExternalRun::new(name, input)
        })
        .await
    }

    /// The run (by run id or workflow id), its payloads left out with [`ResolveData::None`],
    /// without its history. Errors: no such run (404), a run the engine drives (409).
    pub async fn get(&self, id: &str, resolve: ResolveData) -> Result<WorkflowState, WorldError> {
        self.world.engine.external_run(id, resolve).await
    }

    /// The run with its payloads and its whole history in [`WorkflowState::history`].
    /// Errors: no such run (404), a run the engine drives (409).
    pub async fn get_with_history(&self, id: &str) -> Result<WorkflowState, WorldError> {
        self.world.engine.external_run_with_history(id).await
    }

    /// Records what the run's runtime did, atomically: all the records are stored or none.
    ///
    /// Errors: no such run (404), a run the engine drives or a record its state does not take
    /// (409: a second completion of a step, anything after the run's end), a payload over the
    /// limit (413).
    pub async fn append(
        &self,
        run_id: &str,
        kinds: Vec<EventKind>,
    ) -> Result<Appended, WorldError> {
        self.world.engine.append_external(run_id, kinds).await
    }

    /// Records a hook with a caller-chosen token at command `position`. If a live hook of
    /// another run holds the token, a `hook_conflict` is recorded instead (as for the engine's
    /// own hooks). Returns the records, or `None` if the run has finished.
    ///
    /// Errors: no such run (404), a run the engine drives (409), metadata over the limit (413).
    pub async fn create_hook(
        &self,
        run_id: &str,
        position: u32,
        hook_id: &str,
        token: &str,
        metadata: Option<Payload>,
    ) -> Result<Option<Vec<Arc<Event>>>, WorldError> {
        let hook = ExternalHook {
            position,
            hook_id: hook_id.to_owned(),
            token: token.to_owned(),
            metadata,
        };
        self.world.engine.create_external_hook(run_id, hook).await
    }

    /// The id of the run that has the step with this id (404 if none).
    pub async fn step_run(&self, step_id: &str) -> Result<String, WorldError> {
        self.world.engine.step_run(step_id).await
    }

    /// The hook that holds this token — waiting, or resumed in a run that has not finished —
    /// if any, as its run and command position.
    pub async fn hook_by_token(&self, token: &str) -> Result<Option<HookRef>, WorldError> {
        self.world.engine.hook_by_token(token).await
    }
}
