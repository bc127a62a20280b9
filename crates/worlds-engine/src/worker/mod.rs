//! Workers: tasks in the world's runtime that take work from the queue and execute it.
//!
//! Each worker runs one task at a time. A worker assigned to a named task queue only takes tasks
//! routed to it; an unassigned worker takes any task, best first.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::clock::Millis;
use crate::engine::{Engine, Task};
use crate::queue::QueueFilter;

/// What a worker is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerStatus {
    /// Waiting for a task.
    Idle,
    /// Executing a task.
    Busy,
    /// Finishing its current task before it stops.
    Stopping,
    /// Stopped.
    Stopped,
}

/// A snapshot of one worker, as `world.get_workers()` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerInfo {
    /// Worker id.
    pub id: String,
    /// What it is doing.
    pub status: WorkerStatus,
    /// The task it is executing, if busy.
    pub current_task: Option<String>,
    /// When it last reported in (took or finished a task), ms since the Unix epoch.
    pub last_heartbeat: Millis,
    /// Tasks it has finished.
    pub tasks_completed: u64,
    /// The task queue it is assigned to; `None` takes from every queue.
    pub task_queue: Option<String>,
}

struct Worker {
    info: Arc<Mutex<WorkerInfo>>,
    stop: CancellationToken,
    join: JoinHandle<()>,
}

/// The world's workers.
#[derive(Default)]
pub(crate) struct WorkerPool {
    workers: Mutex<Vec<Worker>>,
    next_id: std::sync::atomic::AtomicU64,
}

impl WorkerPool {
    /// Starts one worker.
    pub(crate) fn spawn(&self, engine: &Arc<Engine>, task_queue: Option<String>) {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let info = Arc::new(Mutex::new(WorkerInfo {
            id: format!("worker-{n}"),
            status: WorkerStatus::Idle,
            current_task: None,
            last_heartbeat: engine.clock.now_ms(),
            tasks_completed: 0,
            task_queue: task_queue.clone(),
        }));
        let stop = CancellationToken::new();
        let join = tokio::spawn(work(engine.clone(), info.clone(), stop.clone(), task_queue));
        self.workers.lock().push(Worker { info, stop, join });
    }

    /// Snapshots of every worker.
    pub(crate) fn infos(&self) -> Vec<WorkerInfo> {
        self.workers
            .lock()
            .iter()
            .map(|w| w.info.lock().clone())
            .collect()
    }

    /// Asks every worker to stop after its current task and waits until they have.
    pub(crate) async fn stop_all(&self) {
        let workers: Vec<Worker> = std::mem::take(&mut *self.workers.lock());
        for w in &workers {
            w.stop.cancel();
            let mut info = w.info.lock();
            if info.status == WorkerStatus::Busy {
                info.status = WorkerStatus::Stopping;
            }
        }
        for w in workers {
            let _ = w.join.await;
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.workers.lock().len()
    }
}

async fn work(
    engine: Arc<Engine>,
    info: Arc<Mutex<WorkerInfo>>,
    stop: CancellationToken,
    task_queue: Option<String>,
) {
    loop {
        let filter = match &task_queue {
            Some(q) => QueueFilter::Only(q),
            None => QueueFilter::Any,
        };
        let entry = tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            entry = engine.queue.pop(filter) => entry,
        };
        let Some(entry) = entry else {
            break;
        };
        {
            let mut info = info.lock();
            info.status = WorkerStatus::Busy;
            info.current_task = Some(entry.task.describe());
            info.last_heartbeat = engine.clock.now_ms();
        }
        match entry.task {
            Task::Workflow { run_id } => engine.process_workflow(&run_id).await,
            Task::Activity(task) => engine.run_activity(task).await,
        }
        engine.task_done();
        let mut info = info.lock();
        info.tasks_completed += 1;
        info.current_task = None;
        info.last_heartbeat = engine.clock.now_ms();
        info.status = if stop.is_cancelled() {
            WorkerStatus::Stopping
        } else {
            WorkerStatus::Idle
        };
    }
    let mut info = info.lock();
    info.status = WorkerStatus::Stopped;
    info.current_task = None;
}
