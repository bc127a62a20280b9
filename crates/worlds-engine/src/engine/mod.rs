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

pub(crate) mod activity;
mod beats;
pub(crate) mod context;
pub(crate) mod definitions;
pub(crate) mod errors;
mod executor;
mod hooks;
mod idempotency;
pub(crate) mod journal;
mod lost;
pub(crate) mod machine;
mod recovery;
mod sharing;
mod start;
pub(crate) mod steps;
mod streams;
mod timers;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use tokio::sync::{oneshot, Notify};
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::error::{codes, StructuredError, WorldError};
use crate::ids::IdGenerator;
use crate::model::{
    ActivityOptions, ActivityState, EventKind, ResolveData, RunStatus, WorkflowState,
};
use crate::payload::Payload;
use crate::queue::{QueueEntry, TaskQueue};
use crate::store::{Store, Timer};
use crate::world::WorldConfig;

use definitions::Registry;
use journal::Journal;
use machine::RunCore;

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

/// How a run's tasks are queued.
#[derive(Clone, Default)]
struct Route {
    priority: i32,
    task_queue: Option<Arc<str>>,
    workflow_id: String,
}

/// Scheduling state of one unfinished run, plus its cached live machine. One is kept per
/// unfinished run, sleeping ones included, so it is kept small.
#[derive(Default)]
struct RunSlot {
    /// Queue priority of its tasks.
    priority: i32,
    /// The task queue of its tasks, if not the default one.
    task_queue: Option<Arc<str>>,
    /// Its workflow id, when that is not its run id.
    workflow_id: Option<Arc<str>>,
    /// A workflow task for it is in the queue.
    queued: bool,
    /// A worker is advancing it now.
    executing: bool,
    /// Something happened while it was executing: advance it again afterwards.
    dirty: bool,
    /// The live run, when cached between tasks.
    cached: Option<Box<executor::LiveRun>>,
    /// The live run's core, also while a worker holds the run (for cancellation).
    core: Option<Arc<RunCore>>,
    /// When the run was last cached, on `Engine::use_clock`: eviction takes the oldest first.
    last_used: u64,
}

impl RunSlot {
    /// Routes the tasks of run `run_id` as `route` says.
    fn set_route(&mut self, run_id: &str, route: &Route) {
        self.priority = route.priority;
        self.task_queue = route.task_queue.clone();
        self.workflow_id = (route.workflow_id != run_id).then(|| Arc::from(&*route.workflow_id));
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
    pub(crate) changed: Notify,
}

pub(crate) struct Engine {
    pub(crate) config: WorldConfig,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) ids: Arc<IdGenerator>,
    pub(crate) store: Arc<dyn Store>,
    /// The only writer of history.
    pub(crate) journal: Arc<Journal>,
    pub(crate) registry: Registry,
    pub(crate) queue: TaskQueue<Task>,
    pub(crate) progress: Arc<Progress>,
    pub(crate) timer_wake: Notify,
    pub(crate) accepting: AtomicBool,
    /// Cancelled when the world is dropped: handles and webhook servers that outlive it stop
    /// waiting on it and refuse what they are asked.
    pub(crate) closed: CancellationToken,
    runs: Mutex<FxHashMap<Arc<str>, RunSlot>>,
    cached_runs: AtomicUsize,
    /// A counter that orders cache uses.
    use_clock: AtomicU64,
    waiters: Mutex<FxHashMap<String, Vec<oneshot::Sender<()>>>>,
    cancels: Mutex<FxHashMap<String, CancellationToken>>,
    /// The hook token key and webhook base URL.
    pub(crate) hook_kit: Arc<crate::hooks::HookKit>,
    /// Idempotency keys being started, and recently started, by this process.
    keys: idempotency::IdempotencyKeys,
    /// Closures of named steps (`ctx.step`) waiting to run or running.
    pub(crate) local_steps: Arc<steps::LocalSteps>,
    /// Application state for steps (`world.provide`, `ctx.resource`).
    pub(crate) resources: Arc<crate::resources::Resources>,
    /// Schedule input functions and the schedule loop's wake-up (see `schedule::service`).
    pub(crate) schedules: crate::schedule::ScheduleKit,
    /// The world's logging: its span, its log layer's files.
    pub(crate) logs: Arc<crate::telemetry::logs::Logs>,
}

impl Engine {
    pub(crate) fn new(
        config: WorldConfig,
        clock: Arc<dyn Clock>,
        store: Arc<dyn Store>,
        hook_kit: crate::hooks::HookKit,
    ) -> Self {
        let hook_kit = Arc::new(hook_kit);
        let logs = crate::telemetry::logs::Logs::new(&config, clock.clone());
        let ids = Arc::new(IdGenerator::new(clock.clone()));
        let progress = Arc::new(Progress::default());
        let journal = Arc::new(Journal::new(
            store.clone(),
            clock.clone(),
            ids.clone(),
            progress.clone(),
            config.max_payload_bytes,
        ));
        Self {
            hook_kit,
            logs,
            local_steps: Arc::default(),
            resources: Arc::default(),
            schedules: Default::default(),
            ids,
            journal,
            config,
            clock,
            store,
            registry: Registry::default(),
            queue: TaskQueue::new(),
            progress,
            timer_wake: Notify::new(),
            accepting: AtomicBool::new(true),
            closed: CancellationToken::new(),
            runs: Mutex::new(FxHashMap::default()),
            cached_runs: AtomicUsize::new(0),
            use_clock: AtomicU64::new(0),
            waiters: Mutex::new(FxHashMap::default()),
            cancels: Mutex::new(FxHashMap::default()),
            keys: Default::default(),
        }
    }

    /// Gives an existing run (read back from the store) a scheduling slot.
    pub(crate) fn adopt(&self, state: &WorkflowState) {
        self.journal
            .metrics()
            .run_adopted(&state.id, state.status, self.clock.now_ms());
        let mut runs = self.runs.lock();
        let slot = runs.entry(Arc::from(state.id.as_str())).or_default();
        let route = Route {
            priority: state.priority,
            task_queue: state.task_queue.as_deref().map(Arc::from),
            workflow_id: state.workflow_id.clone(),
        };
        slot.set_route(&state.id, &route);
    }

    /// Makes sure the run will be advanced: queues a workflow task unless one is queued, or
    /// marks it for another pass if a worker is advancing it now.
    pub(crate) fn schedule_workflow(&self, run_id: &str) {
        let mut runs = self.runs.lock();
        let Some(key) = runs.get_key_value(run_id).map(|(k, _)| k.clone()) else {
            return;
        };
        let Some(slot) = runs.get_mut(run_id) else {
            return;
        };
        if slot.executing {
            slot.dirty = true;
            return;
        }
        if slot.queued {
            return;
        }
        slot.queued = true;
        let entry = QueueEntry {
            task: Task::Workflow {
                run_id: key.clone(),
            },
            run_id: key.clone(),
            priority: slot.priority,
            scheduled_at: self.clock.now_ms(),
            task_queue: slot.task_queue.clone(),
        };
        drop(runs);
        self.push(entry);
    }

    pub(crate) fn push(&self, entry: QueueEntry<Task>) {
        self.progress.pending_tasks.fetch_add(1, Ordering::AcqRel);
        self.queue.push(entry);
    }

    /// Queues one attempt of an activity.
    pub(crate) fn enqueue_activity(&self, task: ActivityTask) {
        let (priority, route_queue) = {
            let runs = self.runs.lock();
            runs.get(&*task.run_id)
                .map(|s| (s.priority, s.task_queue.clone()))
                .unwrap_or((0, None))
        };
        let task_queue = self
            .activity_options(&task.name, task.options.as_deref())
            .task_queue
            .map(Arc::from)
            .or(route_queue);
        let entry = QueueEntry {
            run_id: task.run_id.clone(),
            priority,
            scheduled_at: self.clock.now_ms(),
            task_queue,
            task: Task::Activity(task),
        };
        self.push(entry);
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

    pub(crate) async fn add_timer(&self, timer: Timer) -> Result<(), WorldError> {
        self.store.add_timer(timer).await?;
        self.timer_wake.notify_one();
        Ok(())
    }

    /// The cancellation token shared by a run's running activities.
    pub(crate) fn run_token(&self, run_id: &str) -> CancellationToken {
        self.cancels
            .lock()
            .entry(run_id.to_owned())
            .or_default()
            .clone()
    }

    /// Resolves when the run reaches a terminal status, or at once if it has.
    pub(crate) async fn wait_terminal(&self, id: &str) -> Result<WorkflowState, WorldError> {
        // Statuses are checked on the light view; the full state is read once, at the end.
        let mut run_id = id.to_owned();
        loop {
            let (tx, rx) = oneshot::channel();
            let state = self.store.get_run(&run_id, ResolveData::None).await?;
            if state.status.is_terminal() {
                return self.store.get_run(&state.id, ResolveData::All).await;
            }
            self.waiters
                .lock()
                .entry(state.id.clone())
                .or_default()
                .push(tx);
            // Re-check after registering, so a finish in between is not missed.
            let state = self.store.get_run(&state.id, ResolveData::None).await?;
            if state.status.is_terminal() {
                return self.store.get_run(&state.id, ResolveData::All).await;
            }
            run_id = state.id;
            if self.store.is_shared() {
                // Another process may drive the run: its finish is seen by reading the store.
                let poll = self.clock.sleep(self.config.shared_poll_interval.0);
                tokio::select! {
                    _ = rx => {}
                    _ = poll => {}
                }
            } else {
                let _ = rx.await;
            }
        }
    }

    /// Drops a failed attempt's work: its queued tasks, and (cooperatively) its running steps.
    pub(crate) fn abandon_attempt(&self, run_id: &str) {
        let dropped = self.queue.remove_run(run_id);
        self.progress
            .pending_tasks
            .fetch_sub(dropped.len(), Ordering::AcqRel);
        if let Some(slot) = self.runs.lock().get_mut(run_id) {
            slot.queued = false;
        }
        if let Some(token) = self.cancels.lock().remove(run_id) {
            token.cancel();
        }
    }

    /// Everything that follows a run reaching a terminal status: this process lets go of it,
    /// and its parent hears of the result.
    pub(crate) async fn on_terminal(&self, state: &WorkflowState) {
        self.let_go(state).await;
        self.close_run_streams(&state.id).await;
        self.dispose_hooks(state).await;
        self.notify_parent(state).await;
    }

    /// Drops everything this process holds for a finished run (timers, queued tasks, running
    /// steps, the cached machine) and wakes whoever waits on it.
    pub(crate) async fn let_go(&self, state: &WorkflowState) {
        let run_id = state.id.as_str();
        self.local_steps.forget_run(run_id);
        let _ = self.store.remove_run_timers(run_id).await;
        // The timer service may be asleep until one of the removed timers.
        self.timer_wake.notify_one();
        let dropped = self.queue.remove_run(run_id);
        self.progress
            .pending_tasks
            .fetch_sub(dropped.len(), Ordering::AcqRel);
        if let Some(token) = self.cancels.lock().remove(run_id) {
            token.cancel();
        }
        {
            let mut runs = self.runs.lock();
            if let Some(slot) = runs.get_mut(run_id) {
                if let Some(core) = &slot.core {
                    if state.status == RunStatus::Cancelled {
                        core.mark_cancelled();
                    }
                }
                if slot.cached.take().is_some() {
                    self.cached_runs.fetch_sub(1, Ordering::Relaxed);
                }
                if !slot.executing {
                    runs.remove(run_id);
                }
            }
        }
        if let Some(waiters) = self.waiters.lock().remove(run_id) {
            for tx in waiters {
                let _ = tx.send(());
            }
        }
        self.progress.changed.notify_waiters();
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
            if self.journal.append(parent, vec![kind]).await.is_ok() {
                self.schedule_workflow(parent);
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
        if let Some(core) = self
            .runs
            .lock()
            .get(state.id.as_str())
            .and_then(|s| s.core.clone())
        {
            core.mark_cancelled();
        }
        let appended = self
            .journal
            .append(&state.id, vec![EventKind::WorkflowCancelled { reason }])
            .await;
        match appended {
            Ok(_) => {}
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
        }
        let state = self.store.get_run(&state.id, ResolveData::All).await?;
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

    pub(crate) fn task_done(&self) {
        let before = self.progress.pending_tasks.fetch_sub(1, Ordering::AcqRel);
        if before == 1 {
            self.progress.changed.notify_waiters();
        }
    }

    /// Frees the scheduling slot of a run whose workflow task was abandoned (its worker was
    /// declared dead mid-task) and queues the run again; it resumes from its history.
    pub(crate) fn release_run(&self, run_id: &str) {
        if let Some(slot) = self.runs.lock().get_mut(run_id) {
            slot.executing = false;
            slot.dirty = false;
            slot.core = None;
            if slot.cached.take().is_some() {
                self.cached_runs.fetch_sub(1, Ordering::Relaxed);
            }
        }
        self.schedule_workflow(run_id);
    }

    pub(crate) fn route_workflow_id(&self, run_id: &str) -> Option<String> {
        self.runs
            .lock()
            .get(run_id)
            .map(|s| s.workflow_id.as_deref().unwrap_or(run_id).to_owned())
    }
}
