//! What the rest of the crate (the world, the workers, the test harness, the webhook server)
//! asks of the engine. Code outside `engine/` goes through these methods, never through the
//! fields of the engine or of its parts, so what each part owns can change without them.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::schedules::Schedules;
use crate::clock::{Clock, Millis};
use crate::config::WorldConfig;
use crate::error::WorldError;
use crate::hooks::HookResumed;
use crate::model::{
    ActivityState, Event, HookState, ListQuery, Page, ResolveData, WorkflowOptions,
    WorkflowQueryFilter, WorkflowState,
};
use crate::payload::Payload;
use crate::queue::{QueueEntry, QueueFilter};
use crate::schedule::ScheduleConfig;
use crate::telemetry::logs::Logs;
use crate::telemetry::metrics::MetricsRecorder;

use super::authoring::definitions::Definition;
use super::hooks::Opened;
use super::streams::Streams;
use super::{Engine, Task};

/// Settings and shared services.
impl Engine {
    /// The world's configuration.
    pub(crate) fn config(&self) -> &WorldConfig {
        &self.config
    }

    /// The world's clock.
    pub(crate) fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The time on the world's clock.
    pub(crate) fn now_ms(&self) -> Millis {
        self.clock.now_ms()
    }

    /// The world's logging: its span, its log files.
    pub(crate) fn logs(&self) -> &Arc<Logs> {
        &self.logs
    }

    /// The run counts kept from recorded events.
    pub(crate) fn metrics(&self) -> &MetricsRecorder {
        self.journal.metrics()
    }

    /// True if other processes may drive runs of the same store.
    pub(crate) fn is_shared(&self) -> bool {
        self.store.is_shared()
    }
}

/// Definitions and application state.
impl Engine {
    /// Registers a workflow, an activity or a typed hook. Registering a workflow wakes the
    /// schedule loop: a stored schedule may start runs of it.
    pub(crate) fn register(&self, definition: Definition) -> Result<(), WorldError> {
        if let Definition::Hook { name, validator } = definition {
            self.hook_kit.add_validator(&name, || validator);
            return Ok(());
        }
        let is_workflow = matches!(definition, Definition::Workflow(_));
        self.registry.register(definition)?;
        if is_workflow {
            self.schedules.changed();
        }
        Ok(())
    }

    /// Names of the registered workflows.
    pub(crate) fn workflow_names(&self) -> Vec<String> {
        self.registry.workflow_names()
    }

    /// Gives steps a value of type `T`.
    pub(crate) fn provide<T: Send + Sync + 'static>(&self, value: T) {
        self.resources.provide(value);
    }
}

/// The world's lifecycle: whether it takes work, and whether it is gone.
impl Engine {
    /// Takes new runs and hook payloads (the world started).
    pub(crate) fn open(&self) {
        self.accepting.store(true, Ordering::Release);
    }

    /// Whether a start from outside runs its run's first workflow task itself, in the start
    /// call, instead of queueing it: when the configuration allows it and more workers that
    /// would take the task are idle than tasks are queued. The task would run at once anyway;
    /// run here, it skips the hand-over to another thread. A world whose workers are not
    /// running (not started, shut down, or none for the run's task queue) queues it.
    pub(crate) fn eager_start(&self, route: &super::runs::Route) -> bool {
        self.config.eager_start && self.queue.idle_taker(route.task_queue.as_deref())
    }

    /// Refuses new runs and hook payloads (the world is shutting down).
    pub(crate) fn stop_accepting(&self) {
        self.accepting.store(false, Ordering::Release);
    }

    /// The world is dropped: handles and webhook servers that outlive it stop waiting on it.
    pub(crate) fn close(&self) {
        self.stop_accepting();
        self.closed.cancel();
    }

    /// True once the world is dropped.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    /// A token cancelled when the world is dropped.
    pub(crate) fn closed(&self) -> CancellationToken {
        self.closed.clone()
    }

    /// The base URL of webhook URLs (`WorldConfig::webhook_base_url`).
    #[cfg(feature = "http")]
    pub(crate) fn webhook_base_url(&self) -> &str {
        &self.hook_kit.webhook_base_url
    }
}

/// A moment's view of the work in flight, for the test harness's `settle`.
#[cfg(feature = "test-util")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WorkInFlight {
    /// Bumped whenever a task ends or is queued: equal before and after a wait means nothing
    /// moved.
    pub(crate) epoch: u64,
    /// Tasks waiting in the queue.
    pub(crate) queued: usize,
    /// Tasks taken by a worker and not finished.
    pub(crate) executing: usize,
    /// Of those, step attempts running (whose end the harness does not wait for).
    pub(crate) running_activities: usize,
}

/// For the test harness.
#[cfg(feature = "test-util")]
impl Engine {
    /// The work in flight now.
    pub(crate) fn work_in_flight(&self) -> WorkInFlight {
        let queued = self.queue.len();
        WorkInFlight {
            epoch: self
                .progress
                .epoch
                .load(std::sync::atomic::Ordering::Acquire),
            queued,
            executing: self
                .progress
                .pending_tasks
                .load(std::sync::atomic::Ordering::Acquire)
                .saturating_sub(queued),
            running_activities: self
                .progress
                .running_activities
                .load(std::sync::atomic::Ordering::Acquire),
        }
    }

    /// Tasks queued for `task_queue` (`None`: any queue).
    pub(crate) fn queued_tasks(&self, task_queue: Option<&str>) -> usize {
        match task_queue {
            None => self.queue.len(),
            Some(q) => self.queue.len_of(Some(q)),
        }
    }

    /// When the next durable timer is due, if any.
    pub(crate) async fn next_timer_at(&self) -> Option<Millis> {
        self.store.next_timer_at().await.ok().flatten()
    }
}

/// Reads, for queries and the liveness view.
impl Engine {
    /// A run, by run id or workflow id, resolved as asked.
    pub(crate) async fn get_run(
        &self,
        id: &str,
        resolve: ResolveData,
    ) -> Result<WorkflowState, WorldError> {
        self.store.get_run(id, resolve).await
    }

    /// A run's whole history.
    pub(crate) async fn history(&self, run_id: &str) -> Result<Vec<Arc<Event>>, WorldError> {
        self.store.history(run_id, 0).await
    }

    /// Every API key record.
    pub(crate) async fn list_keys(
        &self,
    ) -> Result<Vec<crate::model::keys::ApiKeyRecord>, WorldError> {
        self.store.list_keys().await
    }

    /// Saves an API key record.
    pub(crate) async fn save_key(
        &self,
        record: &crate::model::keys::ApiKeyRecord,
    ) -> Result<(), WorldError> {
        self.store.save_key(record).await
    }

    /// A hook by its id.
    /// Delivers a payload to a hook by its id (for callers trusted with every run, such as an
    /// operator in the dashboard): as [`resume_hook`](Self::resume_hook) does with a token.
    pub(crate) async fn resume_hook_by_id(
        &self,
        hook_id: &str,
        payload: Payload,
    ) -> Result<HookResumed, WorldError> {
        let record = self.store.get_hook(hook_id).await?;
        let digest = record.hook.token_digest;
        let resumed = self
            .hooks
            .resume_digest(digest.clone(), None, |_| Ok(Opened::payload(payload)))
            .await;
        self.after_delivery(&digest, resumed).await
    }

    /// Checks `payload` against the hook's type without delivering it.
    pub(crate) async fn check_hook_payload(
        &self,
        hook_id: &str,
        payload: Payload,
    ) -> Result<(), WorldError> {
        let record = self.store.get_hook(hook_id).await?;
        if !record.hook.is_live() {
            return Err(WorldError::Conflict {
                message: format!(
                    "hook {hook_id} is not waiting for a payload (it is {:?}); reload the run to see why",
                    record.hook.status
                ),
            });
        }
        self.hooks.check_payload(&record.hook, &payload)
    }

    pub(crate) async fn get_hook(
        &self,
        hook_id: &str,
    ) -> Result<crate::store::HookRecord, WorldError> {
        self.store.get_hook(hook_id).await
    }

    /// One page of a run's hooks, by position.
    pub(crate) async fn list_run_hooks(
        &self,
        run_id: &str,
        query: &ListQuery,
    ) -> Result<Page<crate::store::HookRecord>, WorldError> {
        self.store.list_run_hooks(run_id, query).await
    }

    /// One page of the hooks waiting now, in every run.
    pub(crate) async fn list_waiting_hooks(
        &self,
        query: &ListQuery,
    ) -> Result<Page<crate::store::HookRecord>, WorldError> {
        self.store.list_waiting_hooks(query).await
    }

    /// One page of a run's events, by `seq`.
    pub(crate) async fn list_events(
        &self,
        run_id: &str,
        query: &ListQuery,
    ) -> Result<Page<Arc<Event>>, WorldError> {
        self.store.list_events(run_id, query).await
    }

    /// One page of a run's steps, by position.
    pub(crate) async fn list_steps(
        &self,
        run_id: &str,
        query: &ListQuery,
    ) -> Result<Page<ActivityState>, WorldError> {
        self.store.list_steps(run_id, query).await
    }

    /// One page of runs matching the filter.
    pub(crate) async fn list_runs(
        &self,
        filter: &WorkflowQueryFilter,
    ) -> Result<Page<WorkflowState>, WorldError> {
        self.store.list_runs(filter).await
    }

    /// How many runs match the filter, up to `cap`.
    pub(crate) async fn count_runs(
        &self,
        filter: &WorkflowQueryFilter,
        cap: usize,
    ) -> Result<usize, WorldError> {
        self.store.count_runs(filter, cap).await
    }

    /// The step at `position` of a run.
    pub(crate) async fn get_activity(
        &self,
        run_id: &str,
        position: u32,
    ) -> Result<ActivityState, WorldError> {
        self.store.get_activity(run_id, position).await
    }

    /// Every schedule, ordered by id.
    pub(crate) async fn list_schedules(&self) -> Result<Vec<ScheduleConfig>, WorldError> {
        self.schedules.list().await
    }

    /// The runs' streams: writes from outside, pages, live readers.
    pub(crate) fn streams(&self) -> &Arc<Streams> {
        &self.streams
    }
}

/// Tasks, for the workers.
impl Engine {
    /// Waits for the next task `filter` lets a worker take.
    pub(crate) async fn next_task(&self, filter: QueueFilter<'_>) -> Option<QueueEntry<Task>> {
        self.queue.pop(filter).await
    }

    /// Between two tasks of a worker: wakes the timer loop if its next timer is due (see
    /// `Timers::wake_if_due`).
    pub(crate) fn between_tasks(&self) {
        self.timers.wake_if_due(|| self.clock.now_ms());
    }

    /// Puts back a task a worker took but will not run (it was declared dead meanwhile).
    pub(crate) fn give_back(&self, entry: QueueEntry<Task>) {
        self.queue.push(entry);
    }
}

/// Schedules and background loops, for the world.
impl Engine {
    /// The world's schedules.
    pub(crate) fn schedules(&self) -> &Schedules {
        &self.schedules
    }

    /// Fires schedules as the clock reaches them, until `stop` is cancelled.
    pub(crate) async fn schedule_loop(self: Arc<Self>, stop: CancellationToken) {
        let engine: &Engine = &self;
        let start = move |name: String, input: Payload, options: WorkflowOptions| {
            Box::pin(async move {
                engine
                    .create_run(&name, input, options, None, None)
                    .await
                    .map(|(run_id, _)| run_id)
            }) as BoxFuture<'_, Result<String, WorldError>>
        };
        engine.schedules.run(&stop, &start).await;
    }
}

/// Hooks, for the world and the webhook server.
impl Engine {
    /// Refuses hook payloads while the world is shut down or dropped (the webhook endpoint
    /// asks before it reads a request's body).
    #[cfg(feature = "http")]
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
        self.deliver(token, method, |_| Ok(Opened::payload(payload)))
            .await
    }

    /// Delivers a request to the webhook holding `token`: `open` checks it against the hook
    /// (its signature) and returns its payload, before anything is recorded.
    pub(crate) async fn deliver(
        &self,
        token: &str,
        method: Option<&str>,
        open: impl FnOnce(&HookState) -> Result<Opened, WorldError>,
    ) -> Result<HookResumed, WorldError> {
        let resumed = self.hooks.resume(token, method, open).await;
        self.after_delivery(&crate::hooks::token_digest(token), resumed)
            .await
    }

    /// Wakes the run a delivery resumed. If the store failed, the payload may have landed all
    /// the same (a cut connection after the commit): the hook's run is resumed from its
    /// history, which reads it, and the sender is told to try again (a repeat is refused, or
    /// answered as before for a signed webhook request).
    async fn after_delivery(
        &self,
        digest: &str,
        resumed: Result<HookResumed, WorldError>,
    ) -> Result<HookResumed, WorldError> {
        match resumed {
            Ok(resumed) => {
                self.runs.schedule(&resumed.run_id);
                Ok(resumed)
            }
            Err(e) => {
                if super::resync::is_passing(&e) {
                    if let Ok(Some(found)) = self.store.find_hook(digest).await {
                        self.resync_if_passing(&found.run_id, &e);
                    }
                }
                Err(e)
            }
        }
    }
}
