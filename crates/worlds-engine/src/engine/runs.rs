//! Runs in motion in this process: their scheduling slots, the cache of live runs, the tasks
//! queued for them, and who waits on them.
//!
//! A run has a slot here from the moment this process drives it (created, adopted by recovery,
//! taken over on a shared store) until it reaches a terminal status. The slot says how the
//! run's tasks are routed and whether a workflow task for it is queued or executing, so a run
//! is never advanced by two workers at once: something that happens while it executes marks it
//! *dirty*, and it is queued again when its worker is done. Between tasks the slot may keep the
//! run's live machine (the cache), so that the next task does not replay its history; the
//! least recently used are evicted beyond `max_cached_runs`.
//!
//! Nothing here is durable: every slot is rebuilt from history by recovery.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use tokio::sync::oneshot;

use crate::clock::Clock;
use crate::queue::{QueueEntry, TaskQueue};

use super::executor::{LiveRun, TaskEnd};
use super::machine::RunCore;
use crate::model::WorkflowState;

/// A finished run's final state, as told to those waiting for it (`None`: read it back).
pub(crate) type Ended = Option<Arc<WorkflowState>>;
use super::run_steps::{RunSteps, StartPermit};
use super::{ActivityTask, Progress, Task};

/// How a run's tasks are queued.
#[derive(Clone, Default)]
pub(crate) struct Route {
    pub(crate) priority: i32,
    pub(crate) task_queue: Option<Arc<str>>,
    pub(crate) workflow_id: String,
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
    cached: Option<Box<LiveRun>>,
    /// The live run's core, also while a worker holds the run (for cancellation).
    core: Option<Arc<RunCore>>,
    /// When the run was last cached, on `Runs::use_clock`: eviction takes the oldest first.
    last_used: u64,
    /// The run was let go while a worker held it: the slot lives until the worker is done,
    /// but nobody may wait on it any more.
    let_go: bool,
}

impl RunSlot {
    /// Routes the tasks of run `run_id` as `route` says.
    fn set_route(&mut self, run_id: &str, route: &Route) {
        self.priority = route.priority;
        self.task_queue = route.task_queue.clone();
        self.workflow_id = (route.workflow_id != run_id).then(|| Arc::from(&*route.workflow_id));
    }
}

/// The cache policy, from the world's configuration.
#[derive(Clone, Copy)]
pub(crate) struct CachePolicy {
    /// Live runs kept between tasks, at most.
    pub(crate) max_cached: usize,
    /// Keep none (every task replays its run's history).
    pub(crate) evict_after_every_task: bool,
}

/// The runs this process drives.
pub(crate) struct Runs {
    clock: Arc<dyn Clock>,
    /// Where tasks wait for a worker; workers take them from the same queue.
    queue: Arc<TaskQueue<Task>>,
    /// The pending-task count and the "something changed" signal.
    progress: Arc<Progress>,
    cache: CachePolicy,
    slots: Mutex<FxHashMap<Arc<str>, RunSlot>>,
    cached: AtomicUsize,
    /// A counter that orders cache uses.
    use_clock: AtomicU64,
    /// Who waits for a run to reach a terminal status; told its final state when this process
    /// recorded it.
    waiters: Mutex<FxHashMap<String, Vec<oneshot::Sender<Ended>>>>,
    /// Each run's steps: the token they share, their starts in flight.
    steps: Mutex<FxHashMap<String, Arc<RunSteps>>>,
}

impl Runs {
    pub(crate) fn new(
        clock: Arc<dyn Clock>,
        queue: Arc<TaskQueue<Task>>,
        progress: Arc<Progress>,
        cache: CachePolicy,
    ) -> Self {
        Runs {
            clock,
            queue,
            progress,
            cache,
            slots: Mutex::new(FxHashMap::default()),
            cached: AtomicUsize::new(0),
            use_clock: AtomicU64::new(0),
            waiters: Mutex::new(FxHashMap::default()),
            steps: Mutex::new(FxHashMap::default()),
        }
    }

    /// Gives a run a scheduling slot routed as `route` says (or re-routes its slot).
    pub(crate) fn adopt(&self, run_id: &str, route: &Route) {
        let mut slots = self.slots.lock();
        let slot = slots.entry(Arc::from(run_id)).or_default();
        slot.set_route(run_id, route);
    }

    /// Gives new runs a slot each (under one lock) and queues their first workflow tasks
    /// together.
    pub(crate) fn admit<'a>(&self, runs: impl IntoIterator<Item = (Arc<str>, &'a Route)>) {
        let now = self.clock.now_ms();
        let mut entries = Vec::new();
        {
            let mut slots = self.slots.lock();
            for (run, route) in runs {
                let slot = slots.entry(run.clone()).or_default();
                slot.set_route(&run, route);
                if slot.executing {
                    slot.dirty = true;
                    continue;
                }
                if slot.queued {
                    continue;
                }
                slot.queued = true;
                entries.push(QueueEntry {
                    task: Task::Workflow {
                        run_id: run.clone(),
                    },
                    run_id: run,
                    priority: route.priority,
                    scheduled_at: now,
                    task_queue: route.task_queue.clone(),
                });
            }
        }
        self.progress
            .pending_tasks
            .fetch_add(entries.len(), Ordering::AcqRel);
        self.queue.push_many(entries);
    }

    /// Gives a new run a slot held as executing by its caller, who runs its first workflow task
    /// (and ends it with `end_task`, or `release` if it cannot).
    pub(crate) fn admit_claimed(&self, run: Arc<str>, route: &Route) {
        let mut slots = self.slots.lock();
        let slot = slots.entry(run.clone()).or_default();
        slot.set_route(&run, route);
        slot.executing = true;
    }

    /// Makes sure the run will be advanced: queues a workflow task unless one is queued, or
    /// marks it for another pass if a worker is advancing it now.
    pub(crate) fn schedule(&self, run_id: &str) {
        let mut slots = self.slots.lock();
        let Some(key) = slots.get_key_value(run_id).map(|(k, _)| k.clone()) else {
            return;
        };
        let Some(slot) = slots.get_mut(run_id) else {
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
        drop(slots);
        self.push(entry);
    }

    /// Queues a task, unless the worker whose task made it keeps it as its follow-up (see
    /// `handoff.rs`). Either way it is pending from now on.
    fn push(&self, entry: QueueEntry<Task>) {
        self.progress.pending_tasks.fetch_add(1, Ordering::AcqRel);
        if let Some(entry) = super::handoff::offer(entry, &self.queue) {
            self.queue.push(entry);
        }
    }

    /// Queues one attempt of a step: on `task_queue` if the step names one, else on its run's.
    pub(crate) fn enqueue_activity(&self, task: ActivityTask, task_queue: Option<Arc<str>>) {
        let (priority, route_queue) = {
            let slots = self.slots.lock();
            slots
                .get(&*task.run_id)
                .map(|s| (s.priority, s.task_queue.clone()))
                .unwrap_or((0, None))
        };
        let entry = QueueEntry {
            run_id: task.run_id.clone(),
            priority,
            scheduled_at: self.clock.now_ms(),
            task_queue: task_queue.or(route_queue),
            task: Task::Activity(task),
        };
        self.push(entry);
    }

    /// The task queue the run `run_id` is routed to, if it has a slot here and names one.
    pub(crate) fn task_queue_of(&self, run_id: &str) -> Option<Arc<str>> {
        self.slots
            .lock()
            .get(run_id)
            .and_then(|s| s.task_queue.clone())
    }

    /// A task taken from the queue is done (or handed on by a dead worker).
    pub(crate) fn task_done(&self) {
        self.progress.pending_tasks.fetch_sub(1, Ordering::AcqRel);
    }

    /// A worker starts a workflow task of the run: returns its cached live run, if any, or
    /// `None` if the run has no slot (it finished meanwhile).
    pub(crate) fn begin_task(&self, run_id: &str) -> Option<Option<Box<LiveRun>>> {
        let mut slots = self.slots.lock();
        let slot = slots.get_mut(run_id)?;
        slot.queued = false;
        slot.executing = true;
        let cached = slot.cached.take();
        if cached.is_some() {
            self.cached.fetch_sub(1, Ordering::Relaxed);
        }
        Some(cached)
    }

    /// Notes the core of a run just loaded from history, so a cancellation reaches it.
    pub(crate) fn set_core(&self, run_id: &str, core: Arc<RunCore>) {
        if let Some(slot) = self.slots.lock().get_mut(run_id) {
            slot.core = Some(core);
        }
    }

    /// A worker is done with a workflow task of the run: keeps or drops its live machine,
    /// trims the cache, and queues the run again if something happened meanwhile.
    pub(crate) fn end_task(&self, run_id: &str, end: TaskEnd) {
        let again = {
            let mut slots = self.slots.lock();
            let Some(slot) = slots.get_mut(run_id) else {
                return;
            };
            slot.executing = false;
            match end {
                // A run asleep on a timer is not kept unless it wakes soon: a long wait must
                // cost nothing, and it resumes by replay when the timer fires.
                TaskEnd::Waiting(live)
                    if !self.cache.evict_after_every_task
                        && live.worth_keeping(self.clock.now_ms()) =>
                {
                    slot.cached = Some(Box::new(live));
                    slot.last_used = self.use_clock.fetch_add(1, Ordering::Relaxed);
                    self.cached.fetch_add(1, Ordering::Relaxed);
                }
                TaskEnd::Waiting(_) | TaskEnd::Idle => {
                    slot.core = None;
                }
                TaskEnd::Done => {
                    slots.remove(run_id);
                    return;
                }
            }
            std::mem::take(&mut slot.dirty)
        };
        self.trim_cache(run_id);
        if again {
            self.schedule(run_id);
        }
    }

    /// Evicts cached runs beyond the configured bound; they resume by replay when needed.
    ///
    /// The least recently used go first. Eviction brings the cache down to 90 % of the bound,
    /// so the scan it needs happens once per many tasks rather than on every one.
    fn trim_cache(&self, just_ran: &str) {
        let limit = self.cache.max_cached;
        if self.cached.load(Ordering::Relaxed) <= limit {
            return;
        }
        let target = limit - limit / 10;
        let mut slots = self.slots.lock();
        let mut candidates: Vec<(u64, Arc<str>)> = slots
            .iter()
            .filter(|(id, slot)| &***id != just_ran && !slot.executing && slot.cached.is_some())
            .map(|(id, slot)| (slot.last_used, id.clone()))
            .collect();
        candidates.sort_unstable_by_key(|(used, _)| *used);
        let excess = self.cached.load(Ordering::Relaxed).saturating_sub(target);
        for (_, id) in candidates.into_iter().take(excess) {
            if let Some(slot) = slots.get_mut(&id) {
                if slot.cached.take().is_some() {
                    slot.core = None;
                    self.cached.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Frees the slot of a run whose workflow task was abandoned (its worker was declared dead
    /// mid-task) and queues the run again; it resumes from its history.
    pub(crate) fn release(&self, run_id: &str) {
        if let Some(slot) = self.slots.lock().get_mut(run_id) {
            slot.executing = false;
            slot.dirty = false;
            slot.core = None;
            if slot.cached.take().is_some() {
                self.cached.fetch_sub(1, Ordering::Relaxed);
            }
        }
        self.schedule(run_id);
    }

    /// True if this process drives the run.
    pub(crate) fn drives(&self, run_id: &str) -> bool {
        self.slots.lock().contains_key(run_id)
    }

    /// The workflow id of a run this process drives.
    pub(crate) fn workflow_id(&self, run_id: &str) -> Option<String> {
        self.slots
            .lock()
            .get(run_id)
            .map(|s| s.workflow_id.as_deref().unwrap_or(run_id).to_owned())
    }

    /// Tells the run's live machine, if there is one, that the run is cancelled.
    pub(crate) fn mark_cancelled(&self, run_id: &str) {
        if let Some(core) = self.slots.lock().get(run_id).and_then(|s| s.core.clone()) {
            core.mark_cancelled();
        }
    }

    /// Leave for a step attempt of the run to record its start, holding the token its running
    /// steps share; `None` if they were cancelled. See `run_steps.rs`.
    pub(crate) fn start_permit(&self, run_id: &str) -> Option<StartPermit> {
        self.steps
            .lock()
            .entry(run_id.to_owned())
            .or_default()
            .permit()
    }

    /// Drops a failed attempt's work: its queued tasks, and (cooperatively) its running steps.
    pub(crate) fn abandon_attempt(&self, run_id: &str) {
        self.drop_queued(run_id);
        if let Some(slot) = self.slots.lock().get_mut(run_id) {
            slot.queued = false;
        }
        if let Some(steps) = self.steps.lock().remove(run_id) {
            steps.cancel();
        }
    }

    fn drop_queued(&self, run_id: &str) {
        let dropped = self.queue.remove_run(run_id);
        self.progress
            .pending_tasks
            .fetch_sub(dropped.len(), Ordering::AcqRel);
    }

    /// Lets go of a run that reached a terminal status: its queued tasks, its running steps,
    /// its cached machine and its slot (unless a worker holds it), and wakes its waiters,
    /// handing them the run's final state if the caller has it (`None` when this process lets
    /// go for another reason: the run was taken over, or is read back from its history).
    /// Returns the steps let go, for a caller that reads the history next to wait until their
    /// starts in flight are recorded ([`RunSteps::settled`]).
    pub(crate) fn let_go(
        &self,
        run_id: &str,
        cancelled: bool,
        ended: Ended,
    ) -> Option<Arc<RunSteps>> {
        self.drop_queued(run_id);
        let steps = self.steps.lock().remove(run_id);
        if let Some(steps) = &steps {
            steps.cancel();
        }
        let waiters = {
            let mut slots = self.slots.lock();
            if let Some(slot) = slots.get_mut(run_id) {
                if let Some(core) = &slot.core {
                    if cancelled {
                        core.mark_cancelled();
                    }
                }
                if slot.cached.take().is_some() {
                    self.cached.fetch_sub(1, Ordering::Relaxed);
                }
                if slot.executing {
                    slot.let_go = true;
                } else {
                    slots.remove(run_id);
                }
            }
            // Taken under the slots' lock, as `wait_if_driven` registers: a waiter is either
            // taken here or sees the slot gone.
            self.waiters.lock().remove(run_id)
        };
        for tx in waiters.into_iter().flatten() {
            let _ = tx.send(ended.clone());
        }
        steps
    }

    /// Waits for the end of a run this process drives: resolves (or is dropped) when this
    /// process lets go of it. `None` if the run has no slot here (finished, never driven here,
    /// or `run_id` is not a run id), when the caller has to read the store instead.
    pub(crate) fn wait_if_driven(&self, run_id: &str) -> Option<oneshot::Receiver<Ended>> {
        let slots = self.slots.lock();
        if slots.get(run_id).is_none_or(|slot| slot.let_go) {
            return None;
        }
        Some(self.wait_let_go(run_id))
    }

    /// Resolves (or is dropped) when this process lets go of the run.
    pub(crate) fn wait_let_go(&self, run_id: &str) -> oneshot::Receiver<Ended> {
        let (tx, rx) = oneshot::channel();
        self.waiters
            .lock()
            .entry(run_id.to_owned())
            .or_default()
            .push(tx);
        rx
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::VirtualClock;

    fn runs() -> Runs {
        Runs::new(
            Arc::new(VirtualClock::new(0)),
            Arc::new(TaskQueue::new()),
            Arc::new(Progress::default()),
            CachePolicy {
                max_cached: 10,
                evict_after_every_task: false,
            },
        )
    }

    fn route() -> Route {
        Route {
            workflow_id: "wf".into(),
            ..Route::default()
        }
    }

    fn final_state() -> Arc<WorkflowState> {
        let first =
            crate::model::Event {
                id: "evnt_0".into(),
                run_id: "run".into(),
                seq: 0,
                timestamp: 0,
                version: crate::model::EVENT_FORMAT_VERSION,
                kind: crate::model::EventKind::WorkflowQueued(Box::new(
                    crate::model::QueuedRun::new("w", "wf", crate::Payload::null()),
                )),
            };
        Arc::new(WorkflowState::from_first_event(&first).unwrap())
    }

    #[test]
    fn a_driven_run_hands_its_end_to_waiters_without_a_read() {
        let runs = runs();
        assert!(runs.wait_if_driven("run").is_none(), "not driven here yet");
        runs.adopt("run", &route());
        let mut rx = runs.wait_if_driven("run").expect("driven here");
        assert!(rx.try_recv().is_err(), "not ended yet");
        runs.let_go("run", false, Some(final_state()));
        let ended = rx
            .try_recv()
            .expect("told at let go")
            .expect("with its state");
        assert_eq!(ended.id, "run");
        assert!(runs.wait_if_driven("run").is_none(), "slot gone");
    }

    #[test]
    fn a_run_let_go_while_a_worker_holds_it_takes_no_more_waiters() {
        let runs = runs();
        runs.admit([(Arc::from("run"), &route())]);
        assert!(runs.begin_task("run").is_some());
        runs.let_go("run", false, Some(final_state()));
        // The slot lives until the worker is done, but a waiter registered now would never
        // be told: the caller must read the store instead.
        assert!(runs.wait_if_driven("run").is_none());
        runs.end_task("run", TaskEnd::Done);
        assert!(runs.wait_if_driven("run").is_none());
    }
}
