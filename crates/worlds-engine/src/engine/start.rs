//! Accepting new runs: one at a time, many in one store call, and at most once per
//! idempotency key within the key's time to live.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::error::WorldError;
use crate::model::{Event, EventKind, OnConflict, QueuedRun, ResolveData, WorkflowOptions};
use crate::payload::Payload;
use crate::store::{Timer, TimerKind};
use crate::telemetry::logs::world_log;

use super::authoring::definitions::WorkflowDef;
use super::idempotency::{Claim, KeyedRun};
use super::runs::Route;
use super::{Engine, DEFAULT_MAX_RETRIES};

/// The run a start refers to: `(run id, workflow id)`.
pub(crate) type Started = (String, String);

/// A run checked and ready to be created: its first event and how its tasks are routed.
struct NewRun {
    name: Arc<str>,
    first: Event,
    route: Route,
    timeout_ms: Option<u64>,
    key: Option<String>,
    on_conflict: OnConflict,
    /// Its first workflow task runs in the start call (see [`Engine::eager_start`]).
    eager: bool,
}

impl NewRun {
    fn started(&self) -> Started {
        (self.first.run_id.clone(), self.route.workflow_id.clone())
    }
}

impl Engine {
    fn check_accepting(&self) -> Result<(), WorldError> {
        if self.accepting.load(Ordering::Acquire) {
            Ok(())
        } else {
            Err(WorldError::Unavailable(
                "the world is shutting down and accepts no new runs".into(),
            ))
        }
    }

    fn workflow_def(&self, name: &str) -> Result<WorkflowDef, WorldError> {
        self.registry
            .workflow(name)
            .ok_or_else(|| WorldError::UnknownWorkflow { name: name.into() })
    }

    /// Accepts a new run: validates it, records `workflow_queued`, queues its first task.
    ///
    /// A start with an idempotency key seen within `idempotency_ttl` returns the run that key
    /// started; one whose workflow id is taken returns that id's run if its options say
    /// [`OnConflict::UseExisting`]. Child runs (`parent` set) do neither: their ids come from
    /// their parent's history.
    pub(crate) async fn create_run(
        &self,
        name: &str,
        input: Payload,
        options: WorkflowOptions,
        parent: Option<(String, u32)>,
        run_id: Option<String>,
    ) -> Result<Started, WorldError> {
        self.check_accepting()?;
        let def = self.workflow_def(name)?;
        let new = self.prepare(&def, input, options, parent, run_id)?;
        self.create_prepared(new).await
    }

    /// Starts a run from outside a workflow, like [`create_run`](Self::create_run), and says
    /// whether this call created it (`false`: an existing run was returned, for its
    /// idempotency key or by [`OnConflict::UseExisting`]).
    pub(crate) async fn start_run(
        &self,
        name: &str,
        input: Payload,
        options: WorkflowOptions,
    ) -> Result<(Started, bool), WorldError> {
        self.check_accepting()?;
        let def = self.workflow_def(name)?;
        let mut new = self.prepare(&def, input, options, None, None)?;
        // Not with an idempotency key: between the creation and the answer, its path reads
        // the store again and may fail, with the run's slot claimed.
        new.eager = new.key.is_none() && self.eager_start(&new.route);
        let eager = new.eager;
        let prepared = new.first.run_id.clone();
        let started = self.create_prepared(new).await?;
        let created = started.0 == prepared;
        if eager && created {
            // Created and claimed (`admit_claimed`) with nothing awaited since: if the caller
            // drops this call before the task ends, the run goes to the workers, which resume
            // it from its history.
            let run_id: Arc<str> = Arc::from(started.0.as_str());
            let mut claimed = Claimed {
                engine: self,
                run_id: &run_id,
                done: false,
            };
            self.workflow_task(&run_id, None).await;
            claimed.done = true;
        }
        Ok((started, created))
    }

    /// Accepts many runs of one workflow. The outer error is for the whole batch (the world is
    /// shutting down, the workflow is not registered); result `i` is that of `items[i]`, and a
    /// refused item does not stop the others.
    ///
    /// Items without an idempotency key or the [`OnConflict::UseExisting`] policy are created
    /// with one [`RunStore::create_runs`](crate::store::RunStore::create_runs) call and queued
    /// together; the others go one by one afterwards, so they see the batch's own runs.
    pub(crate) async fn create_runs(
        &self,
        name: &str,
        items: Vec<Result<(Payload, WorkflowOptions), WorldError>>,
    ) -> Result<Vec<Result<Started, WorldError>>, WorldError> {
        self.check_accepting()?;
        let def = self.workflow_def(name)?;
        let mut results: Vec<Option<Result<Started, WorldError>>> = Vec::new();
        let mut bulk = Vec::new();
        let mut single = Vec::new();
        for (i, item) in items.into_iter().enumerate() {
            let new =
                item.and_then(|(input, options)| self.prepare(&def, input, options, None, None));
            match new {
                Ok(new) if new.key.is_none() && new.on_conflict == OnConflict::Fail => {
                    bulk.push((i, new));
                    results.push(None);
                }
                Ok(new) => {
                    single.push((i, new));
                    results.push(None);
                }
                Err(refused) => results.push(Some(Err(refused))),
            }
        }
        let firsts = bulk.iter().map(|(_, new)| new.first.clone()).collect();
        let mut creating =
            Creating::new(self, bulk.iter().map(|(_, new)| new.first.run_id.clone()));
        let created = self.journal.create_runs(firsts).await;
        let mut admitted = Vec::with_capacity(bulk.len());
        for ((i, new), outcome) in bulk.into_iter().zip(created) {
            if let Err(refused) = &outcome {
                self.resync_if_passing(&new.first.run_id, refused);
            }
            results[i] = Some(outcome.map(|()| new.started()));
            if results[i].as_ref().is_some_and(Result::is_ok) {
                admitted.push(new);
            }
        }
        self.admit_many(&admitted).await;
        creating.done();
        for (i, new) in single {
            results[i] = Some(self.create_prepared(new).await);
        }
        Ok(results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(WorldError::Internal("batch item lost".into()))))
            .collect())
    }

    /// Checks a start and builds its `workflow_queued` event.
    fn prepare(
        &self,
        def: &WorkflowDef,
        input: Payload,
        options: WorkflowOptions,
        parent: Option<(String, u32)>,
        run_id: Option<String>,
    ) -> Result<NewRun, WorldError> {
        let name = &*def.name;
        let mut options = options.or(&def.options);
        self.journal
            .check_payload(|| format!("input of workflow '{name}'"), &input)?;
        (def.validate)(&input).map_err(|e| {
            WorldError::invalid(
                "input",
                format!("does not match the input type of workflow '{name}': {e}"),
            )
        })?;
        if let Some(id) = &options.workflow_id {
            if id.is_empty() {
                return Err(WorldError::invalid("workflow_id", "must not be empty"));
            }
        }
        if let Some(key) = &options.idempotency_key {
            if key.is_empty() {
                return Err(WorldError::invalid("idempotency_key", "must not be empty"));
            }
        }
        if parent.is_some() {
            options.idempotency_key = None;
            options.on_conflict = None;
        }
        let run_id = run_id.unwrap_or_else(|| self.ids.run_id());
        let workflow_id = options
            .workflow_id
            .clone()
            .unwrap_or_else(|| run_id.clone());
        let priority = options.priority.unwrap_or(0);
        let timeout_ms = options.timeout.map(|d| d.as_millis());
        let (parent_id, parent_position) = match parent {
            Some((id, position)) => (Some(id), Some(position)),
            None => (None, None),
        };
        let first = self.journal.event(
            &run_id,
            EventKind::WorkflowQueued(Box::new(QueuedRun {
                name: name.to_owned(),
                workflow_id: workflow_id.clone(),
                input,
                parent_id,
                parent_position,
                task_queue: options.task_queue.clone(),
                priority,
                timeout_ms,
                failure_strategy: Some(
                    options
                        .failure_strategy
                        .unwrap_or(self.config.failure_strategy),
                ),
                max_retries: Some(options.max_retries.unwrap_or(DEFAULT_MAX_RETRIES)),
                idempotency_key: options.idempotency_key.clone(),
                code_version: self.config.code_version.clone(),
                external: false,
                runtime: None,
            })),
        );
        Ok(NewRun {
            name: def.name.clone(),
            first,
            route: Route {
                priority,
                task_queue: options.task_queue.as_deref().map(Arc::from),
                workflow_id,
            },
            timeout_ms,
            key: options.idempotency_key,
            on_conflict: options.on_conflict.unwrap_or_default(),
            eager: false,
        })
    }

    /// Creates one prepared run, honouring its idempotency key and conflict policy.
    async fn create_prepared(&self, new: NewRun) -> Result<Started, WorldError> {
        let Some(key) = new.key.clone() else {
            return self.create_checked(new, None).await;
        };
        let name = new.name.clone();
        let ttl_ms = self.config.idempotency_ttl.as_millis() as i64;
        loop {
            let now = self.clock.now_ms();
            match self.keys.claim(&key, now, ttl_ms) {
                Claim::Started(run) => return same_workflow(&key, &name, run),
                Claim::Wait(mut done) => {
                    let _ = done.changed().await;
                }
                Claim::Mine(guard) => {
                    let since = now.saturating_sub(ttl_ms).saturating_add(1);
                    let at = new.first.timestamp;
                    let started = self.create_checked(new, Some(since)).await?;
                    let state = self.store.get_run(&started.0, ResolveData::None).await?;
                    let run = KeyedRun {
                        run_id: state.id,
                        workflow_id: state.workflow_id,
                        name: state.name,
                        at: if state.idempotency_key.as_deref() == Some(&key) {
                            state.created_at
                        } else {
                            at
                        },
                    };
                    guard.finish(run.clone());
                    return same_workflow(&key, &name, run);
                }
            }
        }
    }

    /// Creates the run in the store (once per key since `since`, if given), and either admits
    /// it or, for a run found instead, returns that one.
    async fn create_checked(
        &self,
        new: NewRun,
        since: Option<crate::clock::Millis>,
    ) -> Result<Started, WorldError> {
        let mut creating = Creating::new(self, [new.first.run_id.clone()]);
        let created = match since {
            Some(since) => self.journal.create_run_once(new.first.clone(), since).await,
            None => self
                .journal
                .create_run(new.first.clone())
                .await
                .map(|()| None),
        };
        if !matches!(created, Ok(None)) {
            // Not created by this call: nothing of ours to admit (a failure that may have
            // landed is resumed below, as a passing one).
            creating.done();
        }
        match created {
            Ok(None) if new.eager => {
                self.admit_eager(&new).await;
                creating.done();
                Ok(new.started())
            }
            Ok(None) => {
                self.admit_many(std::slice::from_ref(&new)).await;
                creating.done();
                Ok(new.started())
            }
            Ok(Some(existing)) => {
                let state = self.store.get_run(&existing, ResolveData::None).await?;
                Ok((state.id, state.workflow_id))
            }
            Err(WorldError::Conflict { message }) if new.on_conflict == OnConflict::UseExisting => {
                let name = &*new.name;
                let holder = self
                    .store
                    .get_run(&new.route.workflow_id, ResolveData::None)
                    .await;
                match holder {
                    Ok(state)
                        if state.workflow_id == new.route.workflow_id && state.name == name =>
                    {
                        Ok((state.id, state.workflow_id))
                    }
                    Ok(state) if state.workflow_id == new.route.workflow_id => {
                        Err(WorldError::conflict(format!(
                            "workflow id '{}' is used by run {} of workflow '{}', not '{name}'",
                            state.workflow_id, state.id, state.name
                        )))
                    }
                    _ => Err(WorldError::Conflict { message }),
                }
            }
            Err(refused) => {
                // Not reached, or reached but not confirmed (a connection cut after the
                // commit): if the run was created after all, it is picked up from the store.
                self.resync_if_passing(&new.first.run_id, &refused);
                Err(refused)
            }
        }
    }

    /// Puts created runs in motion: metrics, their run timeouts, a scheduling slot each (under
    /// one lock) and their first workflow tasks (queued together).
    async fn admit_many(&self, runs: &[NewRun]) {
        if runs.is_empty() {
            return;
        }
        let ids = self.note_created(runs).await;
        self.runs
            .admit(ids.into_iter().zip(runs.iter().map(|new| &new.route)));
    }

    /// Puts a created run in motion with a slot claimed for its caller, who runs its first
    /// workflow task (`start_run`).
    async fn admit_eager(&self, new: &NewRun) {
        for id in self.note_created(std::slice::from_ref(new)).await {
            self.runs.admit_claimed(id, &new.route);
        }
    }

    /// Counts and logs created runs and arms their run timeouts; returns a shared copy of
    /// each run id.
    async fn note_created(&self, runs: &[NewRun]) -> Vec<Arc<str>> {
        // One shared copy of each run id, for the metrics and the scheduling slot.
        let ids: Vec<Arc<str>> = runs
            .iter()
            .map(|new| Arc::from(new.first.run_id.as_str()))
            .collect();
        for (new, id) in runs.iter().zip(&ids) {
            let created_at = new.first.timestamp;
            self.journal.metrics().run_created(id, created_at);
            world_log!(
                self.logs,
                INFO,
                Workflow,
                "run created",
                run_id = new.first.run_id,
                workflow = *new.name,
                workflow_id = new.route.workflow_id,
            );
            if let Some(ms) = new.timeout_ms {
                let timer = Timer {
                    fire_at: created_at.saturating_add(ms as i64),
                    run_id: new.first.run_id.clone(),
                    kind: TimerKind::RunTimeout,
                };
                if let Err(e) = self.timers.add(timer).await {
                    // Re-armed from history by the next start; the run itself is created.
                    tracing::warn!(run_id = %new.first.run_id, error = %e, "could not arm the run timeout");
                }
            }
        }
        ids
    }
}

/// Runs a start call is creating, from the creation's store call until they are admitted
/// (queued, or claimed for the caller). Should the caller drop the call in between — while
/// the creation is written, or a run timeout armed — a run whose creation landed would have
/// no slot: nothing would drive it until the next restart. Dropped early, the guard has each
/// run resumed from the store shortly (a run that was never created is passed over).
struct Creating<'a> {
    engine: &'a Engine,
    run_ids: Vec<String>,
}

impl<'a> Creating<'a> {
    fn new(engine: &'a Engine, run_ids: impl IntoIterator<Item = String>) -> Self {
        Creating {
            engine,
            run_ids: run_ids.into_iter().collect(),
        }
    }

    /// The runs are admitted (or were not created by this call): nothing to do on drop.
    fn done(&mut self) {
        self.run_ids.clear();
    }
}

impl Drop for Creating<'_> {
    fn drop(&mut self) {
        for run_id in &self.run_ids {
            self.engine.resume_from_history(run_id);
        }
    }
}

/// A run whose first workflow task the start call runs; if the call is dropped before the task
/// ends, the run is handed to the workers.
struct Claimed<'a> {
    engine: &'a Engine,
    run_id: &'a Arc<str>,
    done: bool,
}

impl Drop for Claimed<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.engine.runs.release(self.run_id);
        }
    }
}

/// The run a key started, if it is a run of the workflow asked for.
fn same_workflow(key: &str, name: &str, run: KeyedRun) -> Result<Started, WorldError> {
    if run.name == name {
        Ok((run.run_id, run.workflow_id))
    } else {
        Err(WorldError::conflict(format!(
            "idempotency key '{key}' started run {} of workflow '{}', not '{name}'",
            run.run_id, run.name
        )))
    }
}
