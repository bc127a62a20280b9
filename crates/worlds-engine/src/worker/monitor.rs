//! The liveness monitor: finds workers that stopped beating, and the heartbeat view.
//!
//! Every `heartbeat_interval` (a background tick of the world's clock) the monitor compares
//! each worker's `last_heartbeat` with the time. A worker is **dead** when its silence exceeds
//! `heartbeat_timeout` *and* it has not beaten since the monitor's previous check. The second
//! condition guards against time that jumps (a test harness skipping hours, a laptop waking
//! from sleep): after a jump every worker looks silent until it has had its turn to beat, so
//! the monitor only convicts a worker that had a whole check interval after the jump to beat
//! and did not. A worker whose thread is really stuck misses every check and is convicted at
//! the first check past its timeout.
//!
//! A dead worker is marked `stopped`, its tokio task is aborted, it is moved from the pool's
//! list to the dead list (`World::workers().dead()`), and its task is handed on:
//!
//! * a **workflow task**: the run's executor slot is freed and the run is queued again; it
//!   resumes from its history.
//! * an **activity attempt** that had started (history says it is running): the attempt is
//!   recorded as lost (`WORKER_LOST`) and retried at once under its retry policy — the same
//!   path (`engine::lost`) as an attempt lost with a crashed process. A new attempt number is
//!   needed because the history already holds the lost attempt's start. Activities are
//!   at-least-once: the stuck attempt may still be running its code.
//! * an activity attempt that had not started yet: queued again as it was.
//!
//! Then a replacement worker is started on the same task queue, so the pool keeps its size
//! (unless the dead worker was already being retired by the autoscaler, or the world is
//! stopping).

use std::sync::{Arc, Weak};

use tokio_util::sync::CancellationToken;

use crate::clock::{duration_ms, Millis};
use crate::engine::Engine;
use crate::model::ActivityStatus;
use crate::telemetry::{HeartbeatEntry, HeartbeatKind};

use super::{heartbeat_every, PoolInner, TaskRef, WorkerInfo, WorkerPool, WorkerStatus, DEAD_KEPT};

/// Checks the workers' heartbeats every `heartbeat_interval` until `stop`.
pub(super) async fn run(pool: Weak<PoolInner>, engine: Arc<Engine>, stop: CancellationToken) {
    let every = heartbeat_every(&engine);
    loop {
        let tick = engine
            .clock()
            .sleep_until_background(engine.now_ms().saturating_add(every));
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick => {}
        }
        let Some(pool) = pool.upgrade() else {
            return;
        };
        pool.check_liveness(&engine).await;
    }
}

/// A worker the monitor has declared dead.
struct Dead {
    info: WorkerInfo,
    task: Option<TaskRef>,
    retiring: bool,
}

impl PoolInner {
    /// One check: declares silent workers dead, hands their tasks on, replaces them.
    pub(super) async fn check_liveness(self: &Arc<Self>, engine: &Arc<Engine>) {
        let now = engine.now_ms();
        let timeout = duration_ms(engine.config().heartbeat_timeout.0);
        let mut dead = Vec::new();
        {
            let mut workers = self.workers.lock();
            let mut i = 0;
            while i < workers.list.len() {
                let shared = workers.list[i].shared.clone();
                let verdict = {
                    let mut state = shared.state.lock();
                    let last = state.info.last_heartbeat;
                    let silent_since_last_check = state.seen_by_monitor == Some(last);
                    state.seen_by_monitor = Some(last);
                    if state.info.status != WorkerStatus::Stopped
                        && silent_since_last_check
                        && now.saturating_sub(last) > timeout
                    {
                        state.info.status = WorkerStatus::Stopped;
                        let mut info = state.info.clone();
                        info.current_task = state.current.as_ref().map(TaskRef::describe);
                        Some(Dead {
                            info,
                            task: state.current.take(),
                            retiring: shared.stop.is_cancelled(),
                        })
                    } else {
                        None
                    }
                };
                match verdict {
                    Some(d) => {
                        let slot = workers.list.remove(i);
                        if let Some(join) = &slot.join {
                            join.abort();
                        }
                        // Its follow-up, if it kept one, goes to the other workers; closed
                        // first, so that its task, still running until the abort lands,
                        // keeps nothing more.
                        if let Some(entry) = shared.follow_up.close() {
                            engine.give_back(entry);
                        }
                        dead.push(d);
                    }
                    None => i += 1,
                }
            }
        }
        for d in dead {
            tracing::warn!(
                worker = %d.info.id,
                last_heartbeat = d.info.last_heartbeat,
                silent_ms = now.saturating_sub(d.info.last_heartbeat),
                task = d.info.current_task.as_deref().unwrap_or("none"),
                "worker sent no heartbeat within the heartbeat timeout; declared dead"
            );
            if let Some(task) = d.task {
                hand_off(engine, task).await;
            }
            let task_queue = d.info.task_queue.clone();
            {
                let mut kept = self.dead.lock();
                if kept.len() == DEAD_KEPT {
                    kept.pop_front();
                }
                kept.push_back(d.info);
            }
            if !d.retiring {
                self.spawn(engine, task_queue);
            }
        }
    }
}

/// Gives the task of a dead worker to the other workers. The dead worker's task was counted
/// as pending; this accounts for it.
async fn hand_off(engine: &Arc<Engine>, task: TaskRef) {
    match task {
        TaskRef::Workflow { run_id } => engine.release_run(&run_id),
        TaskRef::Activity {
            run_id,
            position,
            attempt,
            ..
        } => engine.take_back_attempt(&run_id, position, attempt).await,
    }
    engine.task_done();
}

impl WorkerPool {
    /// Heartbeat entries: every worker that has not stopped, the workers declared dead, and
    /// the activity attempts the workers are running.
    pub(crate) async fn heartbeats(&self, engine: &Engine) -> Vec<HeartbeatEntry> {
        let now = engine.now_ms();
        let timeout = duration_ms(engine.config().heartbeat_timeout.0);
        let overdue = |last: Millis, limit: Millis| now.saturating_sub(last) > limit;
        let mut entries = Vec::new();
        let mut activities = Vec::new();
        {
            let workers = self.inner.workers.lock();
            for w in &workers.list {
                let state = w.shared.state.lock();
                if state.info.status == WorkerStatus::Stopped {
                    continue;
                }
                entries.push(HeartbeatEntry {
                    id: state.info.id.clone(),
                    kind: HeartbeatKind::Worker,
                    last_beat: state.info.last_heartbeat,
                    message: state.current.as_ref().map(TaskRef::describe),
                    dead: overdue(state.info.last_heartbeat, timeout),
                });
                if let Some(TaskRef::Activity {
                    run_id,
                    position,
                    attempt,
                    ..
                }) = &state.current
                {
                    activities.push((run_id.clone(), *position, *attempt));
                }
            }
        }
        entries.extend(self.inner.dead.lock().iter().map(|info| HeartbeatEntry {
            id: info.id.clone(),
            kind: HeartbeatKind::Worker,
            last_beat: info.last_heartbeat,
            message: info.current_task.clone(),
            dead: true,
        }));
        for (run_id, position, attempt) in activities {
            let Ok(a) = engine.get_activity(&run_id, position).await else {
                continue;
            };
            if a.status != ActivityStatus::Running || a.attempt != attempt {
                continue;
            }
            let last_beat = a.last_heartbeat.or(a.started_at).unwrap_or(a.scheduled_at);
            let limit = engine
                .activity_options(&a.name, a.options.as_deref())
                .heartbeat_timeout
                .map(|d| duration_ms(d.0));
            entries.push(HeartbeatEntry {
                id: a.id,
                kind: HeartbeatKind::Activity,
                last_beat,
                message: a.heartbeat_message,
                dead: limit.is_some_and(|limit| overdue(last_beat, limit)),
            });
        }
        entries
    }
}
