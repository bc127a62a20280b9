//! Workers: tasks in the world's runtime that take work from the queue and execute it.
//!
//! Each worker runs one task at a time. A worker assigned to a named task queue only takes tasks
//! routed to it; an unassigned worker takes any task, best first.
//!
//! Alongside the workers, the pool runs two housekeeping loops on background ticks of the
//! world's clock ([`Clock::sleep_until_background`](crate::clock::Clock::sleep_until_background)):
//!
//! * the **autoscaler** ([`autoscale`]), which grows and shrinks the default pool with the
//!   workload;
//! * the **liveness monitor** ([`monitor`]), which declares a worker dead when it has stopped
//!   beating, hands its task to another worker and starts a replacement.
//!
//! A worker beats (stamps `last_heartbeat`) every `heartbeat_interval`, idle or busy, and when it
//! takes or finishes a task. The beat runs in the worker's own tokio task, between polls of the
//! task it executes, so a worker whose thread is blocked (a synchronous activity that never
//! yields) stops beating: that is exactly what the monitor detects.

pub(crate) mod autoscale;
pub(crate) mod monitor;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::clock::{duration_ms, Millis};
use crate::engine::handoff::FollowUp;
use crate::engine::{Engine, Task};
use crate::telemetry::WorkerMetrics;

/// What a worker is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerStatus {
    /// Waiting for a task.
    Idle,
    /// Executing a task.
    Busy,
    /// Asked to stop (by shutdown or by the autoscaler); finishing its current task, if any,
    /// first.
    Stopping,
    /// Stopped: by shutdown, or declared dead by the liveness monitor.
    Stopped,
}

/// A snapshot of one worker, as `world.workers().list()` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerInfo {
    /// Worker id.
    pub id: String,
    /// What it is doing.
    pub status: WorkerStatus,
    /// The task it is executing, if busy. For a worker declared dead, the task it was
    /// executing when it died (which was handed to another worker).
    pub current_task: Option<String>,
    /// When it last beat, ms since the Unix epoch: every `heartbeat_interval` while it is
    /// alive, and when it takes or finishes a task.
    pub last_heartbeat: Millis,
    /// Tasks it has finished.
    pub tasks_completed: u64,
    /// The task queue it is assigned to; `None` takes from every queue.
    pub task_queue: Option<String>,
}

/// How many workers declared dead are remembered for `World::workers().dead()`.
const DEAD_KEPT: usize = 64;

/// Tasks a worker runs before it yields to the runtime once. A task on a memory store may never
/// wait, so without a pause a busy worker would hold its thread for as long as work is queued
/// (in a burst of 500 timers, the timer loop overslept by 2 ms behind one). A yield costs a
/// trip through the runtime's run queue; one every few tasks keeps that small (memory W1: each
/// task yielding cost 3-4 % of steps per second).
///
/// The yield waits for a moment with no follow-up in hand, up to [`YIELD_AT_MOST`] tasks: a
/// yielding worker is put back only after the other tasks on its thread have had their turn,
/// and a follow-up it held would wait with it while no other worker can take it. (Memory W3,
/// 20 alternating rounds: p99 lateness 4.46 ms yielding every 4 tasks, 5.97 ms every 64, 3.67
/// ms never; the longer the turns, the longer a held follow-up waits.)
const YIELD_EVERY: u32 = 4;

/// Tasks a worker runs before it yields even with a follow-up in hand: a run's chain of steps
/// keeps one for up to [`MAX_STREAK`](crate::engine::handoff::MAX_STREAK) tasks in a row.
const YIELD_AT_MOST: u32 = 8;

/// The task a worker holds, enough to hand it to another worker if this one dies.
#[derive(Debug, Clone)]
enum TaskRef {
    Workflow {
        run_id: Arc<str>,
    },
    Activity {
        run_id: Arc<str>,
        name: Arc<str>,
        position: u32,
        attempt: u32,
    },
}

impl TaskRef {
    /// What the task is, for people.
    pub(super) fn describe(&self) -> String {
        match self {
            TaskRef::Workflow { run_id } => format!("workflow {run_id}"),
            TaskRef::Activity {
                run_id,
                name,
                position,
                attempt,
            } => format!("activity '{name}' of {run_id} (#{position}, attempt {attempt})"),
        }
    }

    fn of(task: &Task) -> TaskRef {
        match task {
            Task::Workflow { run_id } => TaskRef::Workflow {
                run_id: run_id.clone(),
            },
            Task::Activity(a) => TaskRef::Activity {
                run_id: a.run_id.clone(),
                name: a.name.clone(),
                position: a.position,
                attempt: a.attempt,
            },
        }
    }
}

/// A worker's state, shared between its tokio task, the pool and the monitor.
struct WorkerShared {
    /// Spawn order, for choosing which workers to stop (newest first).
    seq: u64,
    task_queue: Option<String>,
    state: Mutex<WorkerState>,
    /// Cancelled to ask the worker to stop after its current task.
    stop: CancellationToken,
    /// Stopped by the autoscaler: leaves the pool's list once stopped.
    retire: AtomicBool,
    /// Test hook: beats are suppressed.
    frozen: AtomicBool,
    /// The worker has looked at the queue once (and, finding nothing, waits on it), or has
    /// stopped: see [`WorkerPool::ready`].
    ready: AtomicBool,
    /// The next task of a run that this worker's task made, kept for this worker.
    follow_up: Arc<FollowUp>,
}

struct WorkerState {
    info: WorkerInfo,
    /// The task in hand. Whoever takes it out (the worker when it finishes, or the monitor
    /// when it declares the worker dead) accounts for it.
    current: Option<TaskRef>,
    /// The `last_heartbeat` the monitor saw at its previous check.
    seen_by_monitor: Option<Millis>,
}

impl WorkerShared {
    fn beat(&self, state: &mut WorkerState, now: Millis) {
        if !self.frozen.load(Ordering::Relaxed) {
            state.info.last_heartbeat = now;
        }
    }

    fn status(&self) -> WorkerStatus {
        self.state.lock().info.status
    }
}

struct WorkerSlot {
    shared: Arc<WorkerShared>,
    join: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct Workers {
    list: Vec<WorkerSlot>,
    /// Between `start` and `stop_all`: workers may be spawned.
    open: bool,
    /// Stops the housekeeping loops.
    loops: Option<CancellationToken>,
}

#[derive(Default)]
struct PoolInner {
    workers: Mutex<Workers>,
    dead: Mutex<VecDeque<WorkerInfo>>,
    next_id: AtomicU64,
    /// Woken whenever a worker becomes ready.
    ready: Notify,
}

/// The world's workers, and the loops that scale them and watch their heartbeats.
#[derive(Default)]
pub(crate) struct WorkerPool {
    inner: Arc<PoolInner>,
}

impl WorkerPool {
    /// Opens the pool for a (re)start: forgets workers stopped by a previous shutdown and starts
    /// the autoscaler and the liveness monitor. Returns their join handles; they stop at
    /// [`WorkerPool::stop_all`].
    pub(crate) fn start(&self, engine: &Arc<Engine>) -> Vec<JoinHandle<()>> {
        let stop = CancellationToken::new();
        {
            let mut workers = self.inner.workers.lock();
            workers.open = true;
            workers
                .list
                .retain(|w| w.shared.status() != WorkerStatus::Stopped);
            if let Some(old) = workers.loops.replace(stop.clone()) {
                old.cancel();
            }
        }
        let span = engine.logs().span();
        vec![
            tokio::spawn(
                autoscale::run(Arc::downgrade(&self.inner), engine.clone(), stop.clone())
                    .instrument(span.clone()),
            ),
            tokio::spawn(
                monitor::run(Arc::downgrade(&self.inner), engine.clone(), stop).instrument(span),
            ),
        ]
    }

    /// Starts one worker, unless the pool is stopped.
    pub(crate) fn spawn(&self, engine: &Arc<Engine>, task_queue: Option<String>) {
        self.inner.spawn(engine, task_queue);
    }

    /// Snapshots of every worker: running ones, and after a shutdown the stopped ones. Workers
    /// removed by the autoscaler leave the list once stopped; workers declared dead are in
    /// [`WorkerPool::dead`].
    pub(crate) fn infos(&self) -> Vec<WorkerInfo> {
        self.inner
            .workers
            .lock()
            .list
            .iter()
            .map(|w| {
                let state = w.shared.state.lock();
                let mut info = state.info.clone();
                // Described on demand: formatting it for every task costs more than the task.
                info.current_task = state.current.as_ref().map(TaskRef::describe);
                info
            })
            .collect()
    }

    /// The most recent workers declared dead by the liveness monitor, oldest first.
    pub(crate) fn dead(&self) -> Vec<WorkerInfo> {
        self.inner.dead.lock().iter().cloned().collect()
    }

    /// Counts for the metrics: idle and busy workers (a stopping worker with a task in hand is
    /// busy; stopped ones are not counted).
    pub(crate) fn counts(&self) -> WorkerMetrics {
        let workers = self.inner.workers.lock();
        let mut m = WorkerMetrics::default();
        for w in &workers.list {
            let state = w.shared.state.lock();
            match state.info.status {
                WorkerStatus::Idle => m.idle += 1,
                WorkerStatus::Busy => m.busy += 1,
                WorkerStatus::Stopping if state.current.is_some() => m.busy += 1,
                WorkerStatus::Stopping | WorkerStatus::Stopped => {}
            }
        }
        m.total = m.idle + m.busy;
        m
    }

    /// True if an idle worker could take one of the engine's queued tasks now (test harness:
    /// is there work that will start without anything else happening first?).
    #[cfg(feature = "test-util")]
    pub(crate) fn idle_worker_can_take(&self, engine: &Engine) -> bool {
        let workers = self.inner.workers.lock();
        workers.list.iter().any(|w| {
            w.shared.status() == WorkerStatus::Idle
                && !w.shared.stop.is_cancelled()
                && match &w.shared.task_queue {
                    None => engine.queued_tasks(None) > 0,
                    Some(q) => engine.queued_tasks(Some(q)) > 0,
                }
        })
    }

    /// Stops the worker's beats (test hook): to the monitor it looks like a worker whose
    /// thread is stuck. Returns false if there is no such worker.
    #[cfg(feature = "test-util")]
    pub(crate) fn freeze_heartbeat(&self, id: &str) -> bool {
        let workers = self.inner.workers.lock();
        match workers
            .list
            .iter()
            .find(|w| w.shared.state.lock().info.id == id)
        {
            Some(w) => {
                w.shared.frozen.store(true, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    /// Stops the housekeeping loops, asks every worker to stop after its current task, and
    /// waits until they have. The workers stay listed, as stopped.
    pub(crate) async fn stop_all(&self) {
        let joins: Vec<JoinHandle<()>> = {
            let mut workers = self.inner.workers.lock();
            workers.open = false;
            if let Some(loops) = workers.loops.take() {
                loops.cancel();
            }
            workers
                .list
                .iter_mut()
                .filter_map(|w| {
                    w.shared.stop.cancel();
                    let mut state = w.shared.state.lock();
                    if state.info.status == WorkerStatus::Busy {
                        state.info.status = WorkerStatus::Stopping;
                    }
                    w.join.take()
                })
                .collect()
        };
        for join in joins {
            let _ = join.await;
        }
    }

    /// Workers listed (running, stopping, or stopped by a shutdown).
    pub(crate) fn len(&self) -> usize {
        self.inner.workers.lock().list.len()
    }

    /// Waits until every listed worker has looked at the queue once (or stopped).
    ///
    /// A worker is a tokio task: spawned, it does nothing until the runtime first polls it.
    /// A start call made before that finds no idle worker, so it queues its run's first task
    /// instead of running it (eager start); the calls after it see that task queued and queue
    /// theirs too, and a burst of starts right after `World::start` would wait in the queue
    /// behind each other. `World::start` waits for this before it returns.
    pub(crate) async fn ready(&self) {
        loop {
            let notified = self.inner.ready.notified();
            tokio::pin!(notified);
            // Registered before the check, so a worker that becomes ready in between wakes us.
            notified.as_mut().enable();
            let all_ready = self
                .inner
                .workers
                .lock()
                .list
                .iter()
                .all(|w| w.shared.ready.load(Ordering::Acquire));
            if all_ready {
                return;
            }
            notified.await;
        }
    }
}

/// Marks its worker ready when dropped: after the worker's first look at the queue, or when
/// it ends without one.
struct Unready {
    shared: Arc<WorkerShared>,
    pool: Weak<PoolInner>,
}

impl Drop for Unready {
    fn drop(&mut self) {
        self.shared.ready.store(true, Ordering::Release);
        if let Some(pool) = self.pool.upgrade() {
            pool.ready.notify_waiters();
        }
    }
}

impl PoolInner {
    fn spawn(self: &Arc<Self>, engine: &Arc<Engine>, task_queue: Option<String>) -> bool {
        let mut workers = self.workers.lock();
        self.spawn_locked(&mut workers, engine, task_queue)
    }

    fn spawn_locked(
        self: &Arc<Self>,
        workers: &mut Workers,
        engine: &Arc<Engine>,
        task_queue: Option<String>,
    ) -> bool {
        if !workers.open {
            return false;
        }
        let n = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let follow_up = FollowUp::new(task_queue.as_deref());
        let shared = Arc::new(WorkerShared {
            seq: n,
            task_queue: task_queue.clone(),
            state: Mutex::new(WorkerState {
                info: WorkerInfo {
                    id: format!("worker-{n}"),
                    status: WorkerStatus::Idle,
                    current_task: None,
                    last_heartbeat: engine.now_ms(),
                    tasks_completed: 0,
                    task_queue,
                },
                current: None,
                seen_by_monitor: None,
            }),
            stop: CancellationToken::new(),
            retire: AtomicBool::new(false),
            frozen: AtomicBool::new(false),
            ready: AtomicBool::new(false),
            follow_up,
        });
        let join = tokio::spawn(
            work(engine.clone(), shared.clone(), Arc::downgrade(self))
                .instrument(engine.logs().span()),
        );
        workers.list.push(WorkerSlot {
            shared,
            join: Some(join),
        });
        true
    }
}

/// The interval between a worker's beats (and between the monitor's checks), at least 1 ms.
fn heartbeat_every(engine: &Engine) -> Millis {
    duration_ms(engine.config().heartbeat_interval.0).max(1)
}

async fn work(engine: Arc<Engine>, shared: Arc<WorkerShared>, pool: Weak<PoolInner>) {
    let every = heartbeat_every(&engine);
    let next_tick = || {
        engine
            .clock()
            .sleep_until_background(engine.now_ms().saturating_add(every))
    };
    let mut tick = next_tick();
    let filter = shared.follow_up.filter();
    // The follow-up the last task left (see `engine/handoff.rs`).
    let mut follow_up = None;
    // Tasks since the worker last let the runtime run something else.
    let mut done_in_a_row = 0;
    let mut unready = Some(Unready {
        shared: shared.clone(),
        pool: pool.clone(),
    });
    loop {
        let entry = match follow_up.take() {
            Some(entry) if !shared.stop.is_cancelled() => entry,
            kept => {
                if let Some(entry) = kept {
                    // Asked to stop: the follow-up goes to the other workers.
                    engine.give_back(entry);
                }
                // Idle: wait for a task or a stop request, beating on every tick.
                let mut next = std::pin::pin!(engine.next_task(filter));
                let mut pop = std::future::poll_fn(|cx| {
                    let polled = std::future::Future::poll(next.as_mut(), cx);
                    // The first look: the worker took a task, or waits on the queue as a
                    // taker that a start call can see.
                    drop(unready.take());
                    polled
                });
                let entry = loop {
                    tokio::select! {
                        biased;
                        _ = shared.stop.cancelled() => break None,
                        entry = &mut pop => break entry,
                        _ = &mut tick => {
                            shared.beat(&mut shared.state.lock(), engine.now_ms());
                            tick = next_tick();
                        }
                    }
                };
                let Some(entry) = entry else {
                    break;
                };
                shared.follow_up.served_the_queue();
                entry
            }
        };
        {
            let mut state = shared.state.lock();
            if state.info.status == WorkerStatus::Stopped {
                // Declared dead while it was taking this task: give the task back and go.
                drop(state);
                engine.give_back(entry);
                return;
            }
            state.info.status = if shared.stop.is_cancelled() {
                WorkerStatus::Stopping
            } else {
                WorkerStatus::Busy
            };
            state.current = Some(TaskRef::of(&entry.task));
            shared.beat(&mut state, engine.now_ms());
        }
        {
            // Busy: execute the task, beating on every tick between its polls. Boxed: a task's
            // future is large (kilobytes), and kept inline it would make every idle worker as
            // large as a busy one.
            let mut execute = Box::pin(shared.follow_up.scope(async {
                match entry.task {
                    Task::Workflow { run_id } => engine.process_workflow(&run_id).await,
                    Task::Activity(task) => engine.run_activity(task).await,
                }
            }));
            loop {
                tokio::select! {
                    biased;
                    _ = &mut execute => break,
                    _ = &mut tick => {
                        shared.beat(&mut shared.state.lock(), engine.now_ms());
                        tick = next_tick();
                    }
                }
            }
        }
        {
            let mut state = shared.state.lock();
            if state.current.take().is_none() {
                // Declared dead meanwhile: the monitor has handed the task on and accounted
                // for it, and closed the follow-up slot after taking what it held.
                return;
            }
            state.info.tasks_completed += 1;
            state.info.current_task = None;
            shared.beat(&mut state, engine.now_ms());
            state.info.status = if shared.stop.is_cancelled() {
                WorkerStatus::Stopping
            } else {
                WorkerStatus::Idle
            };
        }
        follow_up = shared.follow_up.next();
        engine.task_done();
        engine.between_tasks();
        done_in_a_row += 1;
        if (done_in_a_row >= YIELD_EVERY && follow_up.is_none()) || done_in_a_row >= YIELD_AT_MOST {
            // On a store that never makes it wait, a worker with work queued would otherwise
            // keep its thread without a pause, and the timer loop or the other workers woken
            // onto that thread would wait for the queue to run dry. Preferably not with a
            // follow-up in hand: that run would wait out everyone else's turn (`YIELD_EVERY`).
            done_in_a_row = 0;
            tokio::task::yield_now().await;
        }
    }
    {
        let mut state = shared.state.lock();
        if state.info.status == WorkerStatus::Stopped {
            return;
        }
        state.info.status = WorkerStatus::Stopped;
        state.info.current_task = None;
    }
    if shared.retire.load(Ordering::Acquire) {
        if let Some(pool) = pool.upgrade() {
            pool.workers
                .lock()
                .list
                .retain(|w| !Arc::ptr_eq(&w.shared, &shared));
        }
    }
}
