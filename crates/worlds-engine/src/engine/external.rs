//! Runs driven from outside: their workflow code runs in another runtime (a Workflow DevKit
//! app, another language's SDK), which writes their history through the world.
//!
//! The engine keeps such a run like any other — stored on every backend, listed, shown in the
//! dashboard, its events checked by [`WorkflowState::check`] — but never executes it: loading
//! one finds it dormant, recovery passes it over, and no timer of its own is armed for it. The
//! outside runtime is the one that decides what happens next and records it here.

use std::sync::Arc;

use crate::error::WorldError;
use crate::hooks::{token_digest, NewHook};
use crate::model::{
    check_attribute_changes, AttributeChange, Event, EventKind, QueuedRun, ResolveData,
    RuntimeInfo, WorkflowState,
};
use crate::payload::Payload;
use crate::store::{Appended, HookRef};

use super::Engine;

impl Engine {
    /// Creates a run driven from outside, pending until its runtime records a start.
    pub(crate) async fn create_external(
        &self,
        run: NewExternalRun,
    ) -> Result<WorkflowState, WorldError> {
        check_name(&run.name)?;
        let name = run.name.as_str();
        self.journal
            .check_payload(|| format!("input of run of '{name}'"), &run.input)?;
        if let Some(context) = run
            .runtime
            .as_ref()
            .and_then(|r| r.execution_context.as_ref())
        {
            self.journal
                .check_payload(|| format!("execution context of run of '{name}'"), context)?;
        }
        if let Some(runtime) = &run.runtime {
            check_attribute_changes(
                &Default::default(),
                &runtime
                    .attributes
                    .iter()
                    .map(|(key, value)| AttributeChange {
                        key: key.clone(),
                        value: Some(value.clone()),
                    })
                    .collect::<Vec<_>>(),
                true,
            )?;
        }
        let run_id = match run.run_id {
            Some(id) => {
                check_run_id(&id)?;
                id
            }
            None => self.ids.run_id(),
        };
        let mut queued = QueuedRun::new(name, run_id.clone(), run.input);
        queued.code_version = run.code_version;
        queued.external = true;
        queued.runtime = run.runtime.filter(|r| !r.is_empty()).map(Box::new);
        let first = self
            .journal
            .event(&run_id, EventKind::WorkflowQueued(Box::new(queued)));
        let state = WorkflowState::from_first_event(&first)?;
        self.journal.create_run(first).await?;
        Ok(state)
    }

    /// The run, refused unless it is driven from outside (a conflict: the engine drives it).
    pub(crate) async fn external_run(
        &self,
        run_id: &str,
        resolve: ResolveData,
    ) -> Result<WorkflowState, WorldError> {
        let state = self.store.get_run(run_id, resolve).await?;
        if state.external {
            Ok(state)
        } else {
            Err(WorldError::conflict(format!(
                "run {} runs workflow '{}' in this engine; only runs driven from outside take \
                 records through this interface",
                state.id, state.name
            )))
        }
    }

    /// The run with its payloads and its whole history in [`WorkflowState::history`].
    pub(crate) async fn external_run_with_history(
        &self,
        run_id: &str,
    ) -> Result<WorkflowState, WorldError> {
        let mut state = self.external_run(run_id, ResolveData::All).await?;
        if state.history.is_empty() {
            state.history = self
                .store
                .history(&state.id, 0)
                .await?
                .iter()
                .map(|e| (**e).clone())
                .collect();
        }
        Ok(state)
    }

    /// Appends records to a run driven from outside, checked like the engine's own; when one
    /// ends the run, what follows an ending (waiters woken, streams closed, hooks released)
    /// happens as for any run.
    ///
    /// Synced before it returns: the outside runtime reads its own records back at once, and
    /// a store may show readers only what is synced (hybrid publishes a write once it is).
    pub(crate) async fn append_external(
        &self,
        run_id: &str,
        kinds: Vec<EventKind>,
    ) -> Result<Appended, WorldError> {
        self.check_external(run_id).await?;
        for kind in &kinds {
            if let Some(payload) = payload_of(kind) {
                self.journal
                    .check_payload(|| format!("{} of run {run_id}", kind.type_name()), payload)?;
            }
        }
        let appended = self.journal.append(run_id, kinds).await?;
        if appended.status.is_terminal() {
            let ended = match &appended.ended {
                Some(state) => state.clone(),
                None => Arc::new(self.store.get_run(run_id, ResolveData::All).await?),
            };
            self.on_terminal(&ended).await;
        }
        Ok(appended)
    }

    /// Refuses a run the engine drives (409) or that does not exist (404); read once per run.
    async fn check_external(&self, run_id: &str) -> Result<(), WorldError> {
        if !self.external.knows(run_id) {
            self.external_run(run_id, ResolveData::None).await?;
            self.external.remember(run_id);
        }
        Ok(())
    }

    /// Records a hook with a caller-chosen token in a run driven from outside, under the rules
    /// of the engine's own hooks: if a live hook elsewhere holds the token, the hook is recorded
    /// as a conflict. Returns what was recorded, or `None` if the run finished meanwhile.
    pub(crate) async fn create_external_hook(
        &self,
        run_id: &str,
        hook: ExternalHook,
    ) -> Result<Option<Vec<Arc<Event>>>, WorldError> {
        self.check_external(run_id).await?;
        if let Some(metadata) = &hook.metadata {
            self.journal
                .check_payload(|| format!("metadata of hook {}", hook.hook_id), metadata)?;
        }
        let new = NewHook {
            position: hook.position,
            hook_id: hook.hook_id,
            token_digest: token_digest(&hook.token),
            expires_at: None,
            webhook: false,
            methods: Vec::new(),
            hook_type: None,
            signature: None,
            chosen: true,
            metadata: hook.metadata,
        };
        self.hooks.record(run_id, new).await
    }

    /// The run that scheduled the step with this id (404 if none).
    pub(crate) async fn step_run(&self, step_id: &str) -> Result<String, WorldError> {
        Ok(self
            .store
            .get_step(step_id, ResolveData::None)
            .await?
            .run_id)
    }

    /// The hook holding this token in a run that has not finished, if any.
    pub(crate) async fn hook_by_token(&self, token: &str) -> Result<Option<HookRef>, WorldError> {
        self.store.find_hook(&token_digest(token)).await
    }
}

/// Runs this process found to be driven from outside, so an append to one needs no read to
/// check it (a run is created one or the other, and stays so). Emptied when it grows past
/// [`KNOWN_EXTERNAL_RUNS`]: a run forgotten is read again once.
#[derive(Default)]
pub(crate) struct KnownExternal {
    runs: parking_lot::RwLock<rustc_hash::FxHashSet<Box<str>>>,
}

/// Runs kept in [`KnownExternal`] before it is emptied.
const KNOWN_EXTERNAL_RUNS: usize = 65_536;

impl KnownExternal {
    fn knows(&self, run_id: &str) -> bool {
        self.runs.read().contains(run_id)
    }

    /// Forgets a run (it was removed: its id may be used again, for any kind of run).
    pub(crate) fn forget(&self, run_id: &str) {
        self.runs.write().remove(run_id);
    }

    fn remember(&self, run_id: &str) {
        let mut runs = self.runs.write();
        if runs.len() >= KNOWN_EXTERNAL_RUNS {
            runs.clear();
        }
        runs.insert(run_id.into());
    }
}

/// A hook an outside runtime creates: its place, its id, its token, its metadata.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ExternalHook {
    /// Command position (unique among the run's hooks).
    pub(crate) position: u32,
    /// Hook id, unique in the run.
    pub(crate) hook_id: String,
    /// The token that resumes it; only its digest is stored.
    pub(crate) token: String,
    /// Data for whoever resumes it.
    pub(crate) metadata: Option<Payload>,
}

/// The payload an event carries, if it is one whose size the world limits.
fn payload_of(kind: &EventKind) -> Option<&Payload> {
    match kind {
        EventKind::ActivityScheduled { input, .. } => Some(input),
        EventKind::ActivityCompleted { output, .. } | EventKind::WorkflowCompleted { output } => {
            Some(output)
        }
        EventKind::HookReceived { payload, .. } => Some(payload),
        _ => None,
    }
}

/// A run that an outside runtime creates ([`ExternalRuns::create_run`](crate::ExternalRuns::create_run)).
#[derive(Debug, Clone, PartialEq)]
pub struct NewExternalRun {
    /// The run id the runtime chose (`wrun_…`), or `None` for a new one.
    pub run_id: Option<String>,
    /// Workflow name.
    pub name: String,
    /// The input.
    pub input: Payload,
    /// The runtime's deployment (the run's code version), if any.
    pub code_version: Option<String>,
    /// What the runtime keeps with the run: protocol version, execution context, attributes.
    pub runtime: Option<RuntimeInfo>,
}

impl NewExternalRun {
    /// A run of workflow `name` with `input`, its id made by the world, nothing else recorded.
    pub fn new(name: impl Into<String>, input: Payload) -> Self {
        NewExternalRun {
            run_id: None,
            name: name.into(),
            input,
            code_version: None,
            runtime: None,
        }
    }
}

/// A run id an outside runtime may choose: 1 to 256 bytes of letters, digits and `_-.:`, and not
/// `.` or `..` (a URL path segment of only dots leads a browser to another page: the dashboard's
/// `/runs/../cancel` is `/cancel`).
fn check_run_id(id: &str) -> Result<(), WorldError> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':');
    let dots = id == "." || id == "..";
    if id.is_empty() || id.len() > 256 || dots || !id.chars().all(allowed) {
        return Err(WorldError::invalid(
            "runId",
            format!(
                "a run id is 1 to 256 characters among letters, digits and _-.: (and not . or ..), not {:?}",
                id.chars().take(64).collect::<String>()
            ),
        ));
    }
    Ok(())
}

/// A workflow name as an outside runtime may give it: not empty, at most 1024 bytes.
fn check_name(name: &str) -> Result<(), WorldError> {
    if name.is_empty() || name.len() > 1024 {
        return Err(WorldError::invalid(
            "workflowName",
            "a workflow name must be 1 to 1024 bytes long",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_run_id;

    #[test]
    fn run_ids_that_are_paths_or_odd_are_refused() {
        for good in ["wrun_01J", "a.b:c-d_e", "...", "x".repeat(256).as_str()] {
            assert!(check_run_id(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "a b",
            "a%2e",
            "a\0b",
            "\u{e9}",
            "x".repeat(257).as_str(),
        ] {
            let error = check_run_id(bad).unwrap_err().to_string();
            assert!(error.contains("runId"), "{bad:?}: {error}");
        }
    }
}
