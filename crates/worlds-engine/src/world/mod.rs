//! The world: the object a program creates, registers definitions on, and starts runs with.

mod batch;
mod bulk;
mod external;
mod handle;
mod hooks;
mod keys;
mod pauses;
mod prune;
mod recovery;
mod schedules;
mod streams;
mod telemetry;
mod verify;
mod workers;

use std::sync::Arc;

use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::clock::{Clock, SystemClock};
use crate::engine::definitions::{Definition, Workflow};
use crate::engine::Engine;
use crate::error::WorldError;
use crate::model::{
    ActivityState, Event, ListQuery, Page, ResolveData, WorkflowOptions, WorkflowQueryFilter,
    WorkflowState,
};
use crate::payload::Payload;
use crate::store::{FileStore, HybridStore, MemoryStore, Store};
use crate::telemetry::logs::world_log;
use crate::worker::WorkerPool;

use crate::config::WorldConfig;
pub use external::{ExternalRuns, NewExternalRun};
pub use handle::WorkflowHandle;
pub use keys::WorldKeys;
pub use prune::RetentionStatus;
pub use schedules::WorldSchedules;
pub use streams::WorldStreams;
pub use telemetry::WorldLogs;
pub use verify::{Divergence, HistoryVerdict, VerifyOptions, VerifyReport, WorkflowVerified};
pub use workers::WorldWorkers;

#[derive(Default)]
struct Lifecycle {
    started: bool,
    stop: Option<CancellationToken>,
    background: Vec<JoinHandle<()>>,
}

/// A world: registered workflows and activities, a store, a task queue, and workers.
///
/// ```
/// use worlds_engine::prelude::*;
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let double = activity("double", |_ctx: ActivityContext, n: u64| async move {
///     Ok::<_, StepError>(n * 2)
/// });
/// let step = double.clone();
/// let flow = workflow("double-twice", move |ctx: WorkflowContext, n: u64| {
///     let step = step.clone();
///     async move { Ok::<_, WorkflowError>(ctx.run(&step, ctx.run(&step, n).await?).await?) }
/// });
///
/// let world = World::new(WorldConfig::memory())?;
/// world.register(&double)?.register(&flow)?;
/// world.start().await?;
/// let handle = world.execute(&flow, 5, WorkflowOptions::default()).await?;
/// assert_eq!(handle.result().await?, 20);
/// world.shutdown().await?;
/// # Ok::<(), WorldError>(())
/// # }).unwrap();
/// ```
pub struct World {
    engine: Arc<Engine>,
    workers: WorkerPool,
    lifecycle: Mutex<Lifecycle>,
}

/// `config` with its encryption keys resolved (see [`WorldConfig::encryption`]), for the
/// constructors that cannot refuse: keys in the environment that do not read are logged and
/// left out. ([`World::with_clock`] refuses them instead.)
fn keys_or_logged(mut config: WorldConfig) -> WorldConfig {
    config.encryption_keys = config.encryption().unwrap_or_else(|e| {
        tracing::error!(error = %e, "payloads will not be encrypted: the encryption keys do not read");
        None
    });
    config
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("persistence", &self.engine.config().persistence)
            .field("workers", &self.workers.len())
            .finish()
    }
}

impl World {
    /// A world with this configuration, on the system clock.
    ///
    /// `Persistence::Memory`, `Persistence::File` (a [`FileStore`] at `persistence_path`) and
    /// `Persistence::Hybrid` (a [`HybridStore`] there, locked to this world) are available in
    /// this build; an error opening the store (such as another world holding the hybrid
    /// directory) or reading a configured hook key is returned.
    pub fn new(config: WorldConfig) -> Result<World, WorldError> {
        World::with_clock(config, Arc::new(SystemClock))
    }

    /// A world on a given clock (a [`VirtualClock`](crate::clock::VirtualClock) in tests).
    pub fn with_clock(config: WorldConfig, clock: Arc<dyn Clock>) -> Result<World, WorldError> {
        config.validate()?;
        let store: Arc<dyn Store> = match config.persistence {
            crate::Persistence::Memory => Arc::new(MemoryStore::new()),
            crate::Persistence::File => Arc::new(FileStore::open(&config.persistence_path)?),
            crate::Persistence::Hybrid => Arc::new(HybridStore::open(&config.persistence_path)?),
            crate::Persistence::Postgres => {
                return Err(WorldError::Unsupported(
                    "a PostgreSQL world is opened by the worlds-postgres crate: add it to your dependencies and call `worlds_postgres::open(config).await` instead of `World::new`".to_owned(),
                ))
            }
        };
        let hook_kit = crate::hooks::HookKit::for_config(&config)?;
        let mut config = config;
        config.encryption_keys = config.encryption()?;
        Ok(World::assemble(config, clock, store, hook_kit, None))
    }

    /// A world on a given store and clock. A configured hook key that cannot be read is logged
    /// and replaced by a random one (use [`World::with_clock`] to have it refused).
    pub fn with_store(config: WorldConfig, clock: Arc<dyn Clock>, store: Arc<dyn Store>) -> World {
        let hook_kit = crate::hooks::HookKit::for_config_or_random(&config);
        World::assemble(keys_or_logged(config), clock, store, hook_kit, None)
    }

    /// [`with_store`](Self::with_store), with the world's log entries going to `logs` as
    /// well: a store shared by the world's processes (the PostgreSQL world's `logs` table),
    /// so that `world.logs().query(…)` and `worlds logs` see every process's entries.
    pub fn with_store_and_logs(
        config: WorldConfig,
        clock: Arc<dyn Clock>,
        store: Arc<dyn Store>,
        logs: Arc<dyn crate::telemetry::logs::LogStore>,
    ) -> World {
        let hook_kit = crate::hooks::HookKit::for_config_or_random(&config);
        World::assemble(keys_or_logged(config), clock, store, hook_kit, Some(logs))
    }

    /// Builds the world from a configuration whose encryption keys are already resolved
    /// ([`WorldConfig::encryption`]): the store is wrapped to encrypt when there are keys.
    fn assemble(
        config: WorldConfig,
        clock: Arc<dyn Clock>,
        store: Arc<dyn Store>,
        hook_kit: crate::hooks::HookKit,
        log_store: Option<Arc<dyn crate::telemetry::logs::LogStore>>,
    ) -> World {
        let store: Arc<dyn Store> = match &config.encryption_keys {
            Some(keys) => Arc::new(crate::store::SealedStore::new(store, keys.clone())),
            None => store,
        };
        let engine = Arc::new(Engine::new(config, clock, store, hook_kit, log_store));
        // The built-in workflow of bulk operations, in every world so any can drive one.
        let bulk = crate::engine::bulk::bulk_workflow(Arc::downgrade(&engine));
        if let Err(e) = engine.register(bulk.into()) {
            tracing::error!(error = %e, "could not register the bulk operations workflow");
        }
        // And the one of retention sweeps.
        let prune = crate::engine::prune::prune_workflow(Arc::downgrade(&engine));
        if let Err(e) = engine.register(prune.into()) {
            tracing::error!(error = %e, "could not register the retention sweep workflow");
        }
        World {
            engine,
            workers: WorkerPool::default(),
            lifecycle: Mutex::new(Lifecycle::default()),
        }
    }

    /// Registers a workflow or an activity. Names must be unique: registering a second
    /// definition with a taken name is a conflict error.
    ///
    /// On a store shared with other processes, a started world takes over only runs of the
    /// workflows it has registered; registering one after `start` looks for such runs at once.
    pub fn register(&self, definition: impl Into<Definition>) -> Result<&Self, WorldError> {
        let definition = definition.into();
        let is_workflow = matches!(definition, Definition::Workflow(_));
        self.engine.register(definition)?;
        let started = self.lifecycle.lock().started;
        if is_workflow && started && self.engine.is_shared() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let engine = self.engine.clone();
                runtime.spawn(async move {
                    if let Err(e) = engine.recover().await {
                        tracing::warn!(error = %e, "could not look for runs to take over");
                    }
                });
            }
        }
        Ok(self)
    }

    /// Starts the workers, the timer service and the schedules. Runs executed before `start`
    /// wait in the queue. Returns once every worker waits for tasks, so the runs started right
    /// after it run their first workflow task in the start call (see
    /// [`WorldConfig::eager_start`](crate::WorldConfig::eager_start)).
    pub async fn start(&self) -> Result<(), WorldError> {
        self.start_inner().instrument(self.logs().span()).await
    }

    async fn start_inner(&self) -> Result<(), WorldError> {
        // A world shut down and started again is a member of its shared store again before it
        // claims anything.
        self.engine.rejoin_store().await?;
        // Before any worker takes a task: a run of a paused workflow must not start.
        self.engine.refresh_pauses().await?;
        {
            let mut life = self.lifecycle.lock();
            if life.started {
                return Ok(());
            }
            life.started = true;
            self.engine.open();
            let stop = CancellationToken::new();
            let span = self.logs().span();
            life.background.push(tokio::spawn(
                (self.engine.clone().timer_loop(stop.clone())).instrument(span.clone()),
            ));
            if self.engine.is_shared() {
                life.background.push(tokio::spawn(
                    (self.engine.clone().share_loop(stop.clone())).instrument(span.clone()),
                ));
            }
            life.background.push(tokio::spawn(
                (self.engine.clone().resync_loop(stop.clone())).instrument(span.clone()),
            ));
            life.background.push(tokio::spawn(
                (self.engine.clone().schedule_loop(stop.clone())).instrument(span.clone()),
            ));
            life.background.push(tokio::spawn(
                (self.engine.clone().retention_loop(stop.clone())).instrument(span.clone()),
            ));
            life.background.push(tokio::spawn(
                (self.engine.clone().pause_loop(stop.clone())).instrument(span.clone()),
            ));
            life.background.push(tokio::spawn(
                (self.engine.logs().clone().flush_loop(stop.clone())).instrument(span),
            ));
            life.stop = Some(stop);
            life.background.extend(self.workers.start(&self.engine));
            self.engine.metrics().mark_started(self.engine.now_ms());
        }
        for _ in 0..self.engine.config().min_workers {
            self.workers.spawn(&self.engine, None);
        }
        for queue in &self.engine.config().task_queues {
            self.workers.spawn(&self.engine, Some(queue.clone()));
        }
        // Runs started right after this call find idle workers (see `WorkerPool::ready`).
        self.workers.ready().await;
        let resumed = self.engine.recover_at_start().await?.runs;
        let workers = self.workers.len();
        // The directory is logged in full: a relative default depends on the directory the
        // program was started from, and a different one silently means a different world.
        match self.data_dir() {
            Some(dir) => world_log!(
                self.engine.logs(),
                INFO,
                World,
                "world started",
                dir = dir.display().to_string(),
                resumed_runs = resumed,
                workers = workers,
            ),
            None => world_log!(
                self.engine.logs(),
                INFO,
                World,
                "world started",
                resumed_runs = resumed,
                workers = workers,
            ),
        }
        Ok(())
    }

    /// The absolute path of the directory a file or hybrid world keeps its data in (from
    /// [`WorldConfig::persistence_path`], which a relative path resolves against the current
    /// directory); `None` for a memory or PostgreSQL world. Starting logs it, with the number of unfinished
    /// runs resumed from it.
    ///
    /// ```
    /// use worlds_engine::{World, WorldConfig};
    /// let world = World::new(WorldConfig::memory())?;
    /// assert_eq!(world.data_dir(), None);
    /// # Ok::<(), worlds_engine::WorldError>(())
    /// ```
    pub fn data_dir(&self) -> Option<std::path::PathBuf> {
        let config = self.engine.config();
        if !config.persistence.uses_directory() {
            return None;
        }
        let path = &config.persistence_path;
        Some(
            std::fs::canonicalize(path)
                .or_else(|_| std::path::absolute(path))
                .unwrap_or_else(|_| path.clone()),
        )
    }

    /// Stops gracefully: refuses new runs and hook payloads (503), lets every worker finish the
    /// task in hand, then stops the timer service. Queued work stays in the store's runs and
    /// resumes on the next start of a durable world.
    ///
    /// The store stays open until the world is dropped (a shut-down world can start again);
    /// handles and webhook servers of the world do not keep it open after that.
    pub async fn shutdown(&self) -> Result<(), WorldError> {
        self.shutdown_inner().instrument(self.logs().span()).await;
        self.engine.logs().flush_reporting();
        if let Some(store) = self.engine.logs().store() {
            store.flush().await;
        }
        Ok(())
    }

    async fn shutdown_inner(&self) {
        self.engine.stop_accepting();
        let (stop, background) = {
            let mut life = self.lifecycle.lock();
            life.started = false;
            (life.stop.take(), std::mem::take(&mut life.background))
        };
        let grace = self
            .engine
            .clock()
            .sleep(self.engine.config().shutdown_grace.0);
        tokio::select! {
            _ = self.workers.stop_all() => {}
            _ = grace => tracing::warn!("shutdown grace period over; abandoning tasks still running"),
        }
        self.engine.metrics().mark_stopped();
        if let Some(stop) = stop {
            stop.cancel();
        }
        for task in background {
            let _ = task.await;
        }
        // Its runs go to the other processes of a shared store at once, not when its lease
        // expires.
        self.engine.leave_store().await;
        world_log!(self.engine.logs(), INFO, World, "world stopped");
    }

    /// Starts a run of a workflow and returns a handle to it.
    ///
    /// Errors: the workflow is not registered (404), the workflow id is taken (409, unless the
    /// options say [`OnConflict::UseExisting`](crate::OnConflict)), the input is over the
    /// payload limit (413) or does not match the workflow's input type (400).
    ///
    /// With an [`idempotency_key`](WorkflowOptions::idempotency_key) used within the world's
    /// `idempotency_ttl` before, no run starts: the handle is that of the run the key started.
    /// A start waits only while another start with the same key is being created, never while
    /// a run executes.
    ///
    /// **Restarts.** With `WorkflowOptions::default()` every call starts a new run. A program
    /// that starts its runs when it starts would start them again after each restart (and
    /// their steps would run again, in the new runs): derive the workflow id from the business
    /// key and pass [`OnConflict::UseExisting`](crate::OnConflict), so a second call returns the
    /// run already there. [`handle`](Self::handle) finds a run again without starting one.
    ///
    /// ```
    /// use worlds_engine::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), WorldError> {
    /// let ship = workflow("ship", |_ctx: WorkflowContext, order: String| async move {
    ///     Ok::<_, WorkflowError>(format!("shipped {order}"))
    /// });
    /// let world = World::new(WorldConfig::memory())?;
    /// world.register(&ship)?;
    /// world.start().await?;
    /// let once = || {
    ///     WorkflowOptions::new()
    ///         .workflow_id("ship-A-1001")
    ///         .on_conflict(OnConflict::UseExisting)
    /// };
    /// let first = world.execute(&ship, "A-1001".to_owned(), once()).await?;
    /// let again = world.execute(&ship, "A-1001".to_owned(), once()).await?;
    /// assert_eq!(first.id, again.id); // the same run, not a second one
    /// assert_eq!(again.result().await?, "shipped A-1001");
    /// # world.shutdown().await
    /// # }
    /// ```
    pub async fn execute<I, O>(
        &self,
        workflow: &Workflow<I, O>,
        input: I,
        options: WorkflowOptions,
    ) -> Result<WorkflowHandle<O>, WorldError>
    where
        I: Serialize,
        O: DeserializeOwned,
    {
        self.execute_by_name(workflow.name(), input, options).await
    }

    /// Starts a run of a registered workflow by name.
    pub async fn execute_by_name<I, O>(
        &self,
        name: &str,
        input: I,
        options: WorkflowOptions,
    ) -> Result<WorkflowHandle<O>, WorldError>
    where
        I: Serialize,
        O: DeserializeOwned,
    {
        let input = Payload::encode(&input)
            .map_err(|e| WorldError::serde(format!("input of workflow '{name}'"), e))?;
        let ((run_id, workflow_id), created) = self.engine.start_run(name, input, options).await?;
        Ok(WorkflowHandle::new(&self.engine, run_id, workflow_id).created(created))
    }

    /// A handle to an existing run, by run id or workflow id.
    pub async fn handle<O: DeserializeOwned>(
        &self,
        id: &str,
    ) -> Result<WorkflowHandle<O>, WorldError> {
        let state = self.engine.get_run(id, ResolveData::None).await?;
        Ok(WorkflowHandle::new(
            &self.engine,
            state.id,
            state.workflow_id,
        ))
    }

    /// The state of a run (by run id or workflow id), with its full history.
    pub async fn query(&self, id: &str) -> Result<WorkflowState, WorldError> {
        query_with_history(&self.engine, id).await
    }

    /// What an unfinished run (by run id or workflow id) waits on now, since when, and which
    /// of those waits look stuck rather than slow (a timer long overdue, a hook past its
    /// expiry, a step past its timeout, work queued for minutes): see [`crate::model::waits`].
    /// Empty for a finished run.
    pub async fn waits(&self, id: &str) -> Result<Vec<crate::model::Wait>, WorldError> {
        let state = self.query(id).await?;
        let pauses = self.pauses().await?;
        Ok(crate::model::waits_paused(
            &state,
            &state.history,
            self.engine.now_ms(),
            &pauses,
        ))
    }

    /// The state of a run (by run id or workflow id) without its history; with
    /// `ResolveData::None`, without its payloads either (the cheaper read for a status).
    pub async fn get_run(
        &self,
        id: &str,
        resolve: ResolveData,
    ) -> Result<WorkflowState, WorldError> {
        self.engine.get_run(id, resolve).await
    }

    /// Runs matching the filter, newest first, without their histories.
    pub async fn query_workflows(
        &self,
        filter: WorkflowQueryFilter,
    ) -> Result<Vec<WorkflowState>, WorldError> {
        let mut filter = filter;
        if filter.limit.is_none() {
            filter.limit = Some(usize::MAX - 1);
        }
        Ok(self.engine.list_runs(&filter).await?.data)
    }

    /// How many runs match the filter, counting no further than `cap` (so a count over many
    /// runs stays cheap: show "1000+" for a result equal to a cap of 1 000). The filter's
    /// cursor, offset, limit and order do not matter.
    ///
    /// ```
    /// # async fn demo(world: &worlds_engine::World) -> Result<(), worlds_engine::WorldError> {
    /// use worlds_engine::{RunStatus, WorkflowQueryFilter};
    /// let failed = world
    ///     .count_runs(WorkflowQueryFilter::new().status(RunStatus::Failed), 1_000)
    ///     .await?;
    /// println!("{failed}{}", if failed == 1_000 { "+" } else { "" });
    /// # Ok(()) }
    /// ```
    pub async fn count_runs(
        &self,
        filter: WorkflowQueryFilter,
        cap: usize,
    ) -> Result<usize, WorldError> {
        self.engine.count_runs(&filter, cap).await
    }

    /// One page of runs matching the filter; pass the returned cursor back for the next page.
    pub async fn list_runs(
        &self,
        filter: WorkflowQueryFilter,
    ) -> Result<Page<WorkflowState>, WorldError> {
        self.engine.list_runs(&filter).await
    }

    /// One page of a run's history (by run id), oldest first unless `query.order` says
    /// otherwise; pass the returned cursor back for the next page.
    pub async fn events(
        &self,
        run_id: &str,
        query: ListQuery,
    ) -> Result<Page<Arc<Event>>, WorldError> {
        self.engine.list_events(run_id, &query).await
    }

    /// One page of a run's steps (by run id), by position.
    pub async fn steps(
        &self,
        run_id: &str,
        query: ListQuery,
    ) -> Result<Page<ActivityState>, WorldError> {
        self.engine.list_steps(run_id, &query).await
    }

    /// Quarantined runs, newest first, each with its `quarantine` reason: failed runs set aside
    /// for inspection (the `quarantine` strategy, and every non-deterministic run).
    pub async fn quarantined(&self) -> Result<Vec<WorkflowState>, WorldError> {
        self.query_workflows(
            WorkflowQueryFilter::new()
                .status([crate::RunStatus::Failed, crate::RunStatus::Compensated])
                .quarantined(true),
        )
        .await
    }

    /// Cancels a run (by run id or workflow id) and its unfinished children.
    pub async fn cancel(&self, id: &str) -> Result<(), WorldError> {
        self.engine.cancel_run(id, None).await
    }

    /// Gives steps a value of type `T` (a database pool, an HTTP client, a configuration), read
    /// with [`ActivityContext::resource`](crate::ActivityContext::resource); a second value of
    /// the same type replaces the first. Step code so reaches the application's resources
    /// without globals and without capturing them in every closure.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use worlds_engine::prelude::*;
    ///
    /// struct Mailer { from: String }
    ///
    /// let send = activity("send-mail", |ctx: ActivityContext, to: String| async move {
    ///     let mailer: Arc<Mailer> = ctx.resource::<Mailer>()?;
    ///     Ok::<_, StepError>(format!("from {} to {to}", mailer.from))
    /// });
    /// let world = World::new(WorldConfig::memory())?;
    /// world.provide(Mailer { from: "shop@example.com".into() });
    /// world.register(&send)?;
    /// # Ok::<(), WorldError>(())
    /// ```
    pub fn provide<T: Send + Sync + 'static>(&self, value: T) -> &Self {
        self.engine.provide(value);
        self
    }

    /// Resumes the hook holding `token` with a payload; its run continues from `hook.wait()`.
    ///
    /// Errors: no waiting hook has the token (404: it never existed, or its run finished);
    /// the hook was already resumed (409); it expired (410); the payload does not have the
    /// hook's type, when this process knows it (400); the payload is over the size limit (413);
    /// the world is shut down (503).
    /// Works from any process on a shared file directory.
    pub async fn resume_hook<P: Serialize + ?Sized>(
        &self,
        token: &str,
        payload: &P,
    ) -> Result<crate::hooks::HookResumed, WorldError> {
        let payload =
            Payload::encode(payload).map_err(|e| WorldError::serde("payload of the hook", e))?;
        self.engine.resume_hook(token, payload, None).await
    }

    /// Resumes the webhook holding `token` with an HTTP request (what the world's webhook
    /// endpoint does for a real request). Besides the errors of
    /// [`resume_hook`](Self::resume_hook): a method the webhook does not accept (405, see
    /// [`HookOptions::methods`](crate::HookOptions::methods)).
    pub async fn resume_webhook(
        &self,
        token: &str,
        request: &crate::WebhookRequest,
    ) -> Result<crate::hooks::HookResumed, WorldError> {
        let payload =
            Payload::encode(request).map_err(|e| WorldError::serde("webhook request", e))?;
        self.engine
            .resume_hook(token, payload, Some(&request.method))
            .await
    }

    /// An axum [`Router`](axum::Router) that resumes webhooks: a request to
    /// `{path of webhook_base_url}/{token}` with a method the webhook accepts resumes it and is
    /// answered `202`; every refusal is `{"error": message}` with the error's status. Bodies
    /// are limited to `max_payload_bytes` and read within the deadlines of
    /// [`WorldConfig::webhook_server`]. Merge it into your own server (whose connections you
    /// then protect yourself), or use [`serve_webhooks`](Self::serve_webhooks).
    ///
    /// The router does not keep the world alive: once the world is dropped it answers `503`.
    ///
    /// Needs the `http` feature.
    #[cfg(feature = "http")]
    pub fn webhook_router(&self) -> axum::Router {
        crate::http::webhooks_router(&self.engine)
    }

    /// Serves [`webhook_router`](Self::webhook_router) on `addr` until the returned server is
    /// shut down or dropped, or the world is dropped, with the connection limits and timeouts
    /// of [`WorldConfig::webhook_server`]. While the world is shut down it answers `503`.
    ///
    /// ```no_run
    /// # async fn demo(world: &worlds_engine::World) -> Result<(), worlds_engine::WorldError> {
    /// let server = world.serve_webhooks("127.0.0.1:3000").await?;
    /// println!("webhooks at http://{}/webhooks/TOKEN", server.local_addr());
    /// # Ok(()) }
    /// ```
    ///
    /// Needs the `http` feature.
    #[cfg(feature = "http")]
    pub async fn serve_webhooks(
        &self,
        addr: impl tokio::net::ToSocketAddrs,
    ) -> Result<crate::http::WebhookServer, WorldError> {
        crate::http::WebhookServer::start(&self.engine, addr).await
    }

    /// [`cancel`](Self::cancel), recording why in the `workflow_cancelled` event.
    ///
    /// Needs no [`start`](Self::start): on a shared file directory, a world opened only for this
    /// records the cancellation, and the process driving the run stops its steps.
    pub async fn cancel_with_reason(
        &self,
        id: &str,
        reason: impl Into<String>,
    ) -> Result<(), WorldError> {
        self.engine.cancel_run(id, Some(reason.into())).await
    }

    /// Metrics: uptime, worker and run counts, throughput over the last 60 s, workload, and run
    /// latency.
    /// See [`WorldMetrics`](crate::telemetry::WorldMetrics) for what each number counts.
    pub fn get_metrics(&self) -> crate::telemetry::WorldMetrics {
        self.engine
            .metrics()
            .snapshot(self.engine.now_ms(), self.workers.counts())
    }

    /// A counter that moves on whenever a run this process records is created or changes
    /// status (started, completed, failed…): wait on it (`changed().await`) to refresh a view
    /// of runs instead of polling. Changes recorded by other processes sharing a PostgreSQL
    /// store do not move it; a view of those still needs an occasional poll.
    ///
    /// ```
    /// # async fn doc(world: &worlds_engine::World) {
    /// let mut changes = world.status_changes();
    /// // … elsewhere runs start and finish …
    /// if changes.changed().await.is_ok() {
    ///     // re-read the runs on screen
    /// }
    /// # }
    /// ```
    pub fn status_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.engine.metrics().changes()
    }

    /// The configuration.
    pub fn config(&self) -> &WorldConfig {
        self.engine.config()
    }

    /// The world's clock.
    pub fn clock(&self) -> Arc<dyn Clock> {
        self.engine.clock().clone()
    }

    /// Names of the registered workflows.
    pub fn workflow_names(&self) -> Vec<String> {
        self.engine.workflow_names()
    }

    pub(crate) fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// The worker pool, for the test harness ([`crate::testing`]).
    #[cfg(feature = "test-util")]
    pub(crate) fn worker_pool(&self) -> &WorkerPool {
        &self.workers
    }
}

impl Drop for World {
    /// Lets go of the store even where handles, routers or webhook servers of this world live
    /// on: they hold the engine weakly, and what would keep it (the background loops) stops.
    fn drop(&mut self) {
        self.engine.close();
        if let Some(stop) = self.lifecycle.get_mut().stop.take() {
            stop.cancel();
        }
    }
}

pub(crate) async fn query_with_history(
    engine: &Engine,
    id: &str,
) -> Result<WorkflowState, WorldError> {
    let mut state = engine.get_run(id, ResolveData::All).await?;
    state.history = engine
        .history(&state.id)
        .await?
        .into_iter()
        .map(Arc::unwrap_or_clone)
        .collect();
    Ok(state)
}
