//! The engine: starts runs, drives workflow code by replay, runs activities, fires timers.
//!
//! Data flow, for one step of a run:
//!
//! 1. A *workflow task* for the run is taken by a worker. The executor ([`executor`]) polls
//!    the workflow future; the code calls `ctx.run(...)`, which issues a command.
//! 2. The executor records the command (`activity_scheduled`) and enqueues an *activity task*.
//!    The run now waits, holding no worker.
//! 3. A worker takes the activity task ([`activity`]), records `activity_started`, runs the
//!    activity, and records `activity_completed` (or a failure and a durable retry timer).
//! 4. Recording a result schedules a new workflow task; the executor reads the new events,
//!    delivers the result to the waiting command and polls again.
//!
//! Timers ([`timers`]) live in the store and fire through the world's clock.
//!
//! The engine is a composition of parts that own their state: the [`journal`] (the only writer
//! of history), [`timers`], [`streams`], [`runs`] (slots, cache, queueing, waiters), [`hooks`],
//! [`recovery`] and the schedules (`schedule::service`). Code outside `engine/` asks through
//! the methods in `api.rs`. docs/ARCHITECTURE.md ("Engine parts") gives the layers and which
//! part may use which.

mod activity;
pub(crate) mod ambient;
mod api;
pub(crate) mod authoring;
mod beats;
pub(crate) mod bulk;
mod ending;
mod executor;
pub(crate) mod external;
pub(crate) mod flow;
pub(crate) mod handoff;
mod hooks;
pub(crate) mod prune;
#[cfg(feature = "http")]
pub(crate) use hooks::Opened;
mod idempotency;
pub(crate) mod journal;
mod lost;
pub(crate) mod machine;
mod reconcile;
mod recovery;
mod registry;
mod reopen;
mod resync;
mod run_driver;
mod run_steps;
mod runs;
mod schedules;
mod sharing;
mod start;
pub(crate) mod steps;
pub(crate) mod streams;
mod timers;
pub(crate) mod verify;

// The authoring side's modules, at the paths the rest of the crate names them by
// (`crate::engine::context::WorkflowContext`).
pub(crate) use authoring::{context, definitions, errors, hook_handles};

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::config::WorldConfig;
use crate::error::{codes, StructuredError, WorldError};
use crate::ids::IdGenerator;
use crate::model::{
    ActivityOptions, ActivityState, EventKind, ResolveData, RunStatus, WorkflowState,
};
use crate::payload::Payload;
use crate::queue::TaskQueue;
use crate::store::Store;

use hooks::Hooks;
use journal::Journal;
use recovery::Recovery;
use registry::Registry;
use runs::{CachePolicy, Route, Runs};
use schedules::Schedules;
use streams::Streams;
use timers::Timers;

/// Restarts the `retry` failure strategy allows unless a workflow says otherwise.
pub(crate) const DEFAULT_MAX_RETRIES: u32 = 3;

/// A unit of work for a worker.
pub(crate) enum Task {
    /// Advance a run's workflow code.
    Workflow { run_id: Arc<str> },
    /// Run one attempt of an activity.
    Activity(ActivityTask),
}

/// One attempt of an activity, as queued.
pub(crate) struct ActivityTask {
    pub(crate) run_id: Arc<str>,
    pub(crate) workflow_id: String,
    pub(crate) activity_id: String,
    pub(crate) position: u32,
    pub(crate) name: Arc<str>,
    pub(crate) input: Payload,
    pub(crate) attempt: u32,
    pub(crate) options: Option<Box<ActivityOptions>>,
}

impl ActivityTask {
    /// Attempt `attempt` of the step `state` describes, in run `run_id`.
    pub(crate) fn from_state(
        run_id: Arc<str>,
        workflow_id: String,
        state: &ActivityState,
        attempt: u32,
    ) -> Self {
        ActivityTask {
            run_id,
            workflow_id,
            activity_id: state.id.clone(),
            position: state.position,
            name: state.name.as_str().into(),
            input: state.input.clone().unwrap_or_else(Payload::null),
            attempt,
            options: state.options.clone(),
        }
    }
}

/// Counters the test harness and metrics read.
#[derive(Default)]
pub(crate) struct Progress {
    /// Tasks queued or executing (workflow and activity).
    pub(crate) pending_tasks: AtomicUsize,
    /// Activity attempts executing now.
    pub(crate) running_activities: AtomicUsize,
    /// Bumped on every recorded event; lets a waiter see that something happened.
    pub(crate) epoch: AtomicU64,
}

/// The composition of the engine's parts (see "Engine parts" in docs/ARCHITECTURE.md).
///
/// The parts own their state and get handles to the parts below them, never to the engine:
/// shared services (configuration, clock, ids, store, logs, registry), then the [`Journal`],
/// then [`Timers`], [`Streams`], [`Runs`] and [`Recovery`], then [`Hooks`] and [`Schedules`].
/// What the engine itself does (starting runs, the executor, steps, acting on a recovery plan,
/// sharing) orchestrates them.
///
/// Its fields are private to the engine: everything outside goes through the methods of
/// `api.rs`.
pub(crate) struct Engine {
    // Shared services.
    config: WorldConfig,
    clock: Arc<dyn Clock>,
    ids: Arc<IdGenerator>,
    store: Arc<dyn Store>,
    /// The world's logging: its span, its log layer's files.
    logs: Arc<crate::telemetry::logs::Logs>,
    registry: Arc<Registry>,
    /// Application state for steps (`world.provide`, `ctx.resource`).
    resources: Arc<crate::resources::Resources>,
    /// The hook token key, payload validators and webhook base URL.
    hook_kit: Arc<crate::hooks::HookKit>,
    /// Tasks waiting for a worker: filled by `runs`, emptied by the workers.
    queue: Arc<TaskQueue<Task>>,
    progress: Arc<Progress>,
    /// The world takes new runs and hook payloads (it is started).
    accepting: Arc<AtomicBool>,
    /// Cancelled when the world is dropped: handles and webhook servers that outlive it stop
    /// waiting on it and refuse what they are asked.
    closed: CancellationToken,

    // The parts.
    /// The only writer of history.
    journal: Arc<Journal>,
    /// Durable timers and the wake-up of the loop that fires them.
    timers: Arc<Timers>,
    /// The runs' streams.
    streams: Arc<Streams>,
    /// Runs in motion in this process: slots, cache, queued tasks, waiters.
    runs: Runs,
    /// Hooks: recorded, resumed, expired, disposed.
    hooks: Hooks,
    /// Stored schedules, their input functions and their loop.
    schedules: Schedules,
    /// Reads unfinished runs back for recovery and takeover.
    recovery: Recovery,
    /// Idempotency keys being started, and recently started, by this process.
    keys: idempotency::IdempotencyKeys,
    /// Closures of named steps (`ctx.step`) waiting to run or running.
    local_steps: Arc<steps::LocalSteps>,
    /// Runs to resume from their history after a passing store failure.
    resyncs: resync::Resyncs,
    /// Which runs the store leases to this process, as last compared with those it drives.
    owned: reconcile::Owned,
    /// Runs known to be driven from outside (a run never stops being one).
    external: external::KnownExternal,
    /// The pauses in force and the work they hold here.
    pauses: flow::Pauses,
}

impl Engine {
    pub(crate) fn new(
        config: WorldConfig,
        clock: Arc<dyn Clock>,
        store: Arc<dyn Store>,
        hook_kit: crate::hooks::HookKit,
        log_store: Option<Arc<dyn crate::telemetry::logs::LogStore>>,
    ) -> Self {
        let hook_kit = Arc::new(hook_kit);
        let logs = crate::telemetry::logs::Logs::new(
            &config,
            clock.clone(),
            ambient::log_category,
            log_store,
        );
        let ids = Arc::new(IdGenerator::new(clock.clone()));
        let registry = Arc::new(Registry::default());
        let progress = Arc::new(Progress::default());
        let queue = Arc::new(TaskQueue::new());
        let accepting = Arc::new(AtomicBool::new(true));
        let closed = CancellationToken::new();

        let journal = Arc::new(Journal::new(
            store.clone(),
            store.clone(),
            clock.clone(),
            ids.clone(),
            progress.clone(),
            config.max_payload_bytes,
            config.encryption_keys.is_some(),
        ));
        let timers = Arc::new(Timers::new(store.clone(), clock.clone()));
        let streams = Arc::new(Streams::new(
            store.clone(),
            store.clone(),
            clock.clone(),
            ids.clone(),
            journal.clone(),
        ));
        let runs = Runs::new(
            clock.clone(),
            queue.clone(),
            progress.clone(),
            CachePolicy {
                max_cached: config.max_cached_runs,
                evict_after_every_task: config.evict_after_every_task,
            },
        );
        let hooks = Hooks::new(
            journal.clone(),
            &store,
            clock.clone(),
            timers.clone(),
            hook_kit.clone(),
            accepting.clone(),
            closed.clone(),
        );
        let schedules = Schedules::new(
            &store,
            clock.clone(),
            ids.clone(),
            journal.clone(),
            registry.clone(),
            accepting.clone(),
            config.shared_poll_interval.as_millis() as i64,
        );
        let pinned = config
            .pin_code_version
            .then(|| config.code_version.clone())
            .flatten();
        let recovery = Recovery::new(store.clone(), store.clone(), registry.clone(), pinned);
        Self {
            config,
            clock,
            ids,
            store,
            logs,
            registry,
            resources: Arc::default(),
            hook_kit,
            queue,
            progress,
            accepting,
            closed,
            journal,
            timers,
            streams,
            runs,
            hooks,
            schedules,
            recovery,
            keys: Default::default(),
            local_steps: Arc::default(),
            resyncs: Default::default(),
            owned: Default::default(),
            external: Default::default(),
            pauses: Default::default(),
        }
    }

    /// Gives an existing run (read back from the store) a scheduling slot.
    pub(crate) fn adopt(&self, state: &WorkflowState) {
        self.journal
            .metrics()
            .run_adopted(&state.id, state.status, self.clock.now_ms());
        let route = Route {
            priority: state.priority,
            task_queue: state.task_queue.as_deref().map(Arc::from),
            workflow_id: state.workflow_id.clone(),
        };
        self.runs.adopt(&state.id, &route);
    }

    /// Queues one attempt of an activity.
    pub(crate) fn enqueue_activity(&self, task: ActivityTask) {
        let task_queue = self
            .activity_options(&task.name, task.options.as_deref())
            .task_queue
            .map(Arc::from);
        self.runs.enqueue_activity(task, task_queue);
    }

    /// The options an activity call runs with: the call's own over the definition's.
    pub(crate) fn activity_options(
        &self,
        name: &str,
        call: Option<&ActivityOptions>,
    ) -> ActivityOptions {
        let defaults = self
            .registry
            .activity(name)
            .map(|d| d.options)
            .unwrap_or_default();
        match call {
            Some(call) => call.clone().or(&defaults),
            None => defaults,
        }
    }

    /// True if `payload` is stored encrypted and this world has no keys to open it.
    pub(crate) fn sealed_without_keys(&self, payload: &Payload) -> bool {
        self.config.encryption_keys.is_none() && crate::store::is_sealed_payload(payload)
    }

    /// Refuses to drive a run whose data is stored encrypted when this world has no keys:
    /// its code would fail on inputs it cannot read, and the failure would be recorded. The
    /// error leaves the run as it is, for a process that has the keys.
    pub(crate) fn check_readable(&self, state: &WorkflowState) -> Result<(), WorldError> {
        match &state.input {
            Some(input) if self.config.encryption_keys.is_none() => crate::store::refuse_sealed(
                || format!("run:{}", state.id),
                input.as_json().as_bytes(),
            ),
            _ => Ok(()),
        }
    }

    /// Resolves when the run reaches a terminal status, or at once if it has.
    pub(crate) async fn wait_terminal(&self, id: &str) -> Result<Arc<WorkflowState>, WorldError> {
        // A run this process drives is not read at all: its end is handed over when it is
        // recorded here, and if another process takes the run over, this one lets go of it,
        // which wakes the wait (told by the store's `external_changes` where it reports
        // takeovers; otherwise the wait polls). Other runs' statuses are checked on the light
        // view, and the full state is read once, at the end.
        let mut run_id = id.to_owned();
        loop {
            let (rx, driven) = match self.runs.wait_if_driven(&run_id) {
                Some(rx) => (rx, true),
                None => {
                    let state = self.store.get_run(&run_id, ResolveData::None).await?;
                    if state.status.is_terminal() {
                        return self.final_state(&state.id).await;
                    }
                    let rx = self.runs.wait_let_go(&state.id);
                    // Re-check after registering, so a finish in between is not missed.
                    let state = self.store.get_run(&state.id, ResolveData::None).await?;
                    if state.status.is_terminal() {
                        return self.final_state(&state.id).await;
                    }
                    run_id = state.id;
                    (rx, false)
                }
            };
            let polled = self.store.is_shared() && !(driven && self.store.reports_takeovers());
            let ended = if polled {
                // Another process may drive the run: its finish is seen by reading the store.
                let poll = self.clock.sleep(self.config.shared_poll_interval.0);
                tokio::select! {
                    ended = rx => ended.ok().flatten(),
                    _ = poll => None,
                }
            } else {
                rx.await.ok().flatten()
            };
            if let Some(ended) = ended {
                return Ok(ended);
            }
            // Let go without a final state (taken over, read back), or polling: read.
            let state = self.store.get_run(&run_id, ResolveData::None).await?;
            if state.status.is_terminal() {
                return self.final_state(&state.id).await;
            }
        }
    }

    /// A finished run's whole state, read from the store.
    async fn final_state(&self, run_id: &str) -> Result<Arc<WorkflowState>, WorldError> {
        self.store
            .get_run(run_id, ResolveData::All)
            .await
            .map(Arc::new)
    }

    /// Everything that follows a run reaching a terminal status: this process lets go of it,
    /// and its parent hears of the result.
    pub(crate) async fn on_terminal(&self, state: &Arc<WorkflowState>) {
        self.let_go(state).await;
        self.streams.close_run(&state.id).await;
        self.hooks.dispose(state).await;
        self.notify_parent(state).await;
    }

    /// Drops everything this process holds for a finished run (timers, queued tasks, running
    /// steps, the cached machine) and wakes whoever waits on it.
    pub(crate) async fn let_go(&self, state: &Arc<WorkflowState>) {
        let run_id = state.id.as_str();
        self.local_steps.forget_run(run_id);
        // Waiters first: the result is recorded, and the store's clean-up is not theirs to
        // wait for.
        self.runs.let_go(
            run_id,
            state.status == RunStatus::Cancelled,
            Some(state.clone()),
        );
        self.timers.forget_run(run_id).await;
    }

    /// Records a finished child's result in its parent's history and wakes the parent.
    async fn notify_parent(&self, state: &WorkflowState) {
        if let (Some(parent), Some(position)) = (&state.parent_id, state.parent_position) {
            let kind = match state.status {
                RunStatus::Completed => EventKind::ChildWorkflowCompleted {
                    position,
                    child_id: state.id.clone(),
                    output: state.output.clone().unwrap_or_else(Payload::null),
                },
                status => EventKind::ChildWorkflowFailed {
                    position,
                    child_id: state.id.clone(),
                    error: state
                        .error
                        .as_deref()
                        .cloned()
                        .unwrap_or_else(|| StructuredError::new(format!("child run {status}")))
                        .with_code(if status == RunStatus::Cancelled {
                            codes::CANCELLED
                        } else {
                            codes::CHILD_FAILED
                        }),
                },
            };
            match self.journal.append(parent, vec![kind]).await {
                Ok(_) => self.runs.schedule(parent),
                // The store could not take it: the parent is read back from its history, where
                // its own recovery finds the finished child.
                Err(e) => {
                    self.resync_if_passing(parent, &e);
                }
            }
        }
    }

    /// Cancels a run and, recursively, its unfinished children.
    pub(crate) async fn cancel_run(
        &self,
        id: &str,
        reason: Option<String>,
    ) -> Result<(), WorldError> {
        let state = self.store.get_run(id, ResolveData::None).await?;
        match state.status {
            RunStatus::Cancelled => return Ok(()),
            s if s.is_terminal() || s == RunStatus::Compensating => {
                return Err(WorldError::conflict(format!(
                    "run {} has already finished ({s}) and cannot be cancelled",
                    state.id
                )))
            }
            _ => {}
        }
        self.runs.mark_cancelled(&state.id);
        let appended = self
            .journal
            .append(&state.id, vec![EventKind::WorkflowCancelled { reason }])
            .await;
        let ended = match appended {
            Ok(appended) => appended.ended,
            // It finished in the meantime: report what it is now.
            Err(WorldError::InvalidTransition { .. }) => {
                let now = self.store.get_run(&state.id, ResolveData::None).await?;
                if now.status == RunStatus::Cancelled {
                    return Ok(());
                }
                return Err(WorldError::conflict(format!(
                    "run {} has already finished ({}) and cannot be cancelled",
                    now.id, now.status
                )));
            }
            Err(e) => return Err(e),
        };
        let state = match ended {
            Some(state) => state,
            None => Arc::new(self.store.get_run(&state.id, ResolveData::All).await?),
        };
        self.on_terminal(&state).await;
        for child in &state.children {
            let child_state = self.store.get_run(child, ResolveData::None).await?;
            if !child_state.status.is_terminal() {
                Box::pin(self.cancel_run(
                    child,
                    Some(format!("parent run {} was cancelled", state.id)),
                ))
                .await
                .ok();
            }
        }
        Ok(())
    }

    /// A task taken from the queue is done (or handed on by a dead worker).
    pub(crate) fn task_done(&self) {
        self.runs.task_done();
    }

    /// Frees the scheduling slot of a run whose workflow task was abandoned (its worker was
    /// declared dead mid-task) and queues the run again; it resumes from its history.
    pub(crate) fn release_run(&self, run_id: &str) {
        self.runs.release(run_id);
    }
}
