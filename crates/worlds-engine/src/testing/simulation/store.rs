//! The store a simulated process sees: the shared "disk" (a memory store that outlives every
//! process), behind a view that injects the schedule's faults and watches what is written.
//!
//! A process dies by [`crash`](ProcessStore::crash): from then on every call of its view fails,
//! so whatever the dead process still had in flight can change nothing, as after a `kill -9`.
//! Timers are the process's own (a real store keeps them in memory and the engine re-arms
//! them from history on start), so they die with it.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::clock::Millis;
use crate::error::{codes, WorldError};
use crate::model::keys::ApiKeyRecord;
use crate::model::{ActivityState, Event, EventKind, ListQuery, Page, ResolveData};
use crate::model::{WorkflowQueryFilter, WorkflowState};
use crate::schedule::ScheduleConfig;
use crate::store::{
    Appended, EventStore, HookRecord, HookRef, HookStore, IdempotencyStore, KeyStore, LeaseStore,
    MemoryStore, NewChunk, RunStore, ScheduleStore, ScheduleUpdate, StepRecord, StepStore,
    StreamSignal, StreamStore, Timer, TimerStore,
};
use crate::streams::{StreamChunk, StreamInfo};

/// What outlives every process of one schedule: the records, and what the watcher saw.
#[derive(Default)]
pub(super) struct Disk {
    pub(super) records: MemoryStore,
    /// Writes that reached the disk, over every process.
    pub(super) writes: AtomicU64,
    watch: Mutex<Watch>,
}

/// What the invariants need from the stream of writes.
#[derive(Default)]
struct Watch {
    /// `(run, position)` of every step whose completion is on the disk.
    completed: HashSet<(String, u32)>,
    /// `(run, compensation id)` of every compensation recorded as run.
    compensated: HashSet<(String, String)>,
    /// Runs with a compensation that failed because faults took its step's attempts.
    compensation_lost: HashSet<String>,
    /// Broken invariants, as sentences.
    violations: Vec<String>,
}

impl Disk {
    /// Notes what `events`, just written for `run_id`, mean for the invariants.
    fn observe(&self, run_id: &str, events: &[Arc<Event>]) {
        let mut watch = self.watch.lock();
        for event in events {
            match &event.kind {
                EventKind::ActivityStarted { position, attempt }
                    if watch.completed.contains(&(run_id.to_owned(), *position)) =>
                {
                    watch.violations.push(format!(
                        "run {run_id}: step #{position} started again (attempt {attempt}) after its completion was recorded"
                    ));
                }
                EventKind::ActivityCompleted { position, .. } => {
                    watch.completed.insert((run_id.to_owned(), *position));
                }
                EventKind::CompensationExecuted {
                    compensation_id, ..
                } if !watch
                    .compensated
                    .insert((run_id.to_owned(), compensation_id.clone())) =>
                {
                    watch.violations.push(format!(
                        "run {run_id}: compensation {compensation_id} recorded as run twice"
                    ));
                }
                EventKind::CompensationFailed { error, .. }
                    if matches!(
                        error.code.as_deref(),
                        Some(codes::WORKER_LOST | codes::HEARTBEAT_TIMEOUT)
                    ) =>
                {
                    watch.compensation_lost.insert(run_id.to_owned());
                }
                _ => {}
            }
        }
    }

    /// The invariants broken so far.
    pub(super) fn violations(&self) -> Vec<String> {
        self.watch.lock().violations.clone()
    }

    /// True if a compensation of the run failed because faults took its step's attempts.
    pub(super) fn compensation_lost(&self, run_id: &str) -> bool {
        self.watch.lock().compensation_lost.contains(run_id)
    }

    /// Compensations recorded as run, per run id.
    pub(super) fn compensations_of(&self, run_id: &str) -> usize {
        self.watch
            .lock()
            .compensated
            .iter()
            .filter(|(run, _)| run == run_id)
            .count()
    }
}

/// When a process's writes go wrong.
#[derive(Debug, Clone, Copy)]
pub(super) struct WritePlan {
    /// The process dies at its write number `n` (counted over the disk's writes, from 1):
    /// before it lands, or just after if `after` is set.
    pub(super) crash_at: Option<(u64, bool)>,
    /// Chance that a write fails with an I/O error; half of those land anyway (the error came
    /// after the commit, as a cut connection can report).
    pub(super) error_rate: f64,
    /// Most extra scheduler turns one store call waits (a slow disk): reorders tasks.
    pub(super) max_delay_turns: u32,
}

/// The store one simulated process sees.
pub(super) struct ProcessStore {
    disk: Arc<Disk>,
    timers: MemoryStore,
    plan: WritePlan,
    rng: Mutex<StdRng>,
    crashed: AtomicBool,
    /// The crash was the plan's, not [`crash`](ProcessStore::crash) called from outside.
    planned_crash: AtomicBool,
}

/// The error every call of a dead process gets.
fn dead() -> WorldError {
    WorldError::Unavailable("simulated crash: this process is dead".into())
}

/// The error an injected write fault gives: a full disk, a failing disk, or a store that
/// could not be reached.
fn io_fault(which: u8) -> WorldError {
    match which % 3 {
        0 => WorldError::StorageFull("simulated store fault: the disk is full (ENOSPC)".into()),
        1 => WorldError::StorageIo("simulated store fault: the disk failed the write (EIO)".into()),
        _ => {
            WorldError::Unavailable("simulated store fault: the store could not be reached".into())
        }
    }
}

impl ProcessStore {
    pub(super) fn new(disk: Arc<Disk>, plan: WritePlan, seed: u64) -> Self {
        ProcessStore {
            disk,
            timers: MemoryStore::new(),
            plan,
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            crashed: AtomicBool::new(false),
            planned_crash: AtomicBool::new(false),
        }
    }

    /// Kills the process: every later call fails.
    pub(super) fn crash(&self) {
        self.crashed.store(true, Ordering::SeqCst);
    }

    /// True if the process died at the crash its plan set.
    pub(super) fn crashed_by_plan(&self) -> bool {
        self.planned_crash.load(Ordering::SeqCst)
    }

    fn planned_crash(&self) -> WorldError {
        self.planned_crash.store(true, Ordering::SeqCst);
        self.crash();
        dead()
    }

    /// Writes that reached the disk so far, over every process.
    pub(super) fn writes(&self) -> u64 {
        self.disk.writes.load(Ordering::SeqCst)
    }

    /// True once the process died (by plan or by [`crash`](Self::crash)).
    pub(super) fn is_dead(&self) -> bool {
        self.crashed.load(Ordering::SeqCst)
    }

    fn alive(&self) -> Result<(), WorldError> {
        if self.is_dead() {
            Err(dead())
        } else {
            Ok(())
        }
    }

    /// Waits a few scheduler turns, as a slow disk would, then checks the process lives.
    async fn slow(&self) -> Result<(), WorldError> {
        let turns = match self.plan.max_delay_turns {
            0 => 0,
            max => self.rng.lock().random_range(0..=max),
        };
        for _ in 0..turns {
            tokio::task::yield_now().await;
        }
        self.alive()
    }

    /// Performs one write by the plan: it may crash the process (before or after it lands) or
    /// fail with an I/O error (landed or not).
    async fn write<T>(
        &self,
        write: impl std::future::Future<Output = Result<T, WorldError>>,
        observe: impl FnOnce(&T),
    ) -> Result<T, WorldError> {
        self.slow().await?;
        let number = self.disk.writes.load(Ordering::SeqCst) + 1;
        if let Some((at, after)) = self.plan.crash_at {
            if number >= at && !after {
                return Err(self.planned_crash());
            }
        }
        let (fails, lands, which) = {
            let mut rng = self.rng.lock();
            let fails = self.plan.error_rate > 0.0 && rng.random_bool(self.plan.error_rate);
            let lands = !fails || rng.random_bool(0.5);
            (fails, lands, rng.random::<u8>())
        };
        if !lands {
            return Err(io_fault(which));
        }
        let written = write.await?;
        self.disk.writes.fetch_add(1, Ordering::SeqCst);
        observe(&written);
        if let Some((at, true)) = self.plan.crash_at {
            if number >= at {
                return Err(self.planned_crash());
            }
        }
        if fails {
            return Err(io_fault(which));
        }
        Ok(written)
    }
}

#[async_trait]
impl RunStore for ProcessStore {
    async fn create_run(&self, first: Event) -> Result<(), WorldError> {
        let run_id = first.run_id.clone();
        let event = Arc::new(first.clone());
        self.write(self.disk.records.create_run(first), |_| {
            self.disk.observe(&run_id, &[event])
        })
        .await
    }
    async fn get_run(&self, id: &str, resolve: ResolveData) -> Result<WorkflowState, WorldError> {
        self.slow().await?;
        self.disk.records.get_run(id, resolve).await
    }
    async fn list_runs(
        &self,
        filter: &WorkflowQueryFilter,
    ) -> Result<Page<WorkflowState>, WorldError> {
        self.slow().await?;
        self.disk.records.list_runs(filter).await
    }
    async fn unfinished_runs(&self) -> Result<Vec<String>, WorldError> {
        self.alive()?;
        self.disk.records.unfinished_runs().await
    }
}

#[async_trait]
impl IdempotencyStore for ProcessStore {
    async fn find_by_idempotency_key(
        &self,
        key: &str,
        since: Millis,
    ) -> Result<Option<String>, WorldError> {
        self.alive()?;
        self.disk.records.find_by_idempotency_key(key, since).await
    }
}

impl LeaseStore for ProcessStore {}

#[async_trait]
impl EventStore for ProcessStore {
    async fn append(&self, run_id: &str, events: Vec<Event>) -> Result<Appended, WorldError> {
        self.write(self.disk.records.append(run_id, events), |appended| {
            self.disk.observe(run_id, &appended.events)
        })
        .await
    }
    async fn history(&self, run_id: &str, from_seq: u64) -> Result<Vec<Arc<Event>>, WorldError> {
        self.slow().await?;
        self.disk.records.history(run_id, from_seq).await
    }
    async fn list_events(
        &self,
        run_id: &str,
        query: &ListQuery,
    ) -> Result<Page<Arc<Event>>, WorldError> {
        self.alive()?;
        self.disk.records.list_events(run_id, query).await
    }
    async fn list_events_by_correlation_id(
        &self,
        correlation_id: &str,
        query: &ListQuery,
    ) -> Result<Page<Arc<Event>>, WorldError> {
        self.alive()?;
        self.disk
            .records
            .list_events_by_correlation_id(correlation_id, query)
            .await
    }
}

#[async_trait]
impl StepStore for ProcessStore {
    async fn get_activity(&self, run_id: &str, position: u32) -> Result<ActivityState, WorldError> {
        self.slow().await?;
        self.disk.records.get_activity(run_id, position).await
    }
    async fn get_step(
        &self,
        step_id: &str,
        resolve: ResolveData,
    ) -> Result<StepRecord, WorldError> {
        self.alive()?;
        self.disk.records.get_step(step_id, resolve).await
    }
    async fn list_steps(
        &self,
        run_id: &str,
        query: &ListQuery,
    ) -> Result<Page<ActivityState>, WorldError> {
        self.alive()?;
        self.disk.records.list_steps(run_id, query).await
    }
}

#[async_trait]
impl HookStore for ProcessStore {
    async fn find_hook(&self, token_digest: &str) -> Result<Option<HookRef>, WorldError> {
        self.slow().await?;
        self.disk.records.find_hook(token_digest).await
    }
    async fn get_hook(&self, hook_id: &str) -> Result<HookRecord, WorldError> {
        self.alive()?;
        self.disk.records.get_hook(hook_id).await
    }
    async fn list_run_hooks(
        &self,
        run_id: &str,
        query: &ListQuery,
    ) -> Result<Page<HookRecord>, WorldError> {
        self.alive()?;
        self.disk.records.list_run_hooks(run_id, query).await
    }
    async fn list_waiting_hooks(&self, query: &ListQuery) -> Result<Page<HookRecord>, WorldError> {
        self.alive()?;
        self.disk.records.list_waiting_hooks(query).await
    }
}

#[async_trait]
impl crate::store::RetentionStore for ProcessStore {
    async fn ended_runs(
        &self,
        before: Millis,
        after: Option<&crate::store::EndedCursor>,
        limit: usize,
    ) -> Result<Vec<crate::store::EndedRun>, WorldError> {
        self.alive()?;
        self.disk.records.ended_runs(before, after, limit).await
    }
    async fn remove_runs(
        &self,
        runs: &[crate::store::RemoveRun],
    ) -> Result<Vec<crate::store::Removal>, WorldError> {
        self.alive()?;
        self.disk.records.remove_runs(runs).await
    }
}

#[async_trait]
impl TimerStore for ProcessStore {
    async fn add_timer(&self, timer: Timer) -> Result<(), WorldError> {
        self.alive()?;
        self.timers.add_timer(timer).await
    }
    async fn take_due_timers(&self, now: Millis, limit: usize) -> Result<Vec<Timer>, WorldError> {
        self.alive()?;
        self.timers.take_due_timers(now, limit).await
    }
    async fn next_timer_at(&self) -> Result<Option<Millis>, WorldError> {
        self.alive()?;
        self.timers.next_timer_at().await
    }
    async fn remove_run_timers(&self, run_id: &str) -> Result<bool, WorldError> {
        self.alive()?;
        self.timers.remove_run_timers(run_id).await
    }
}

#[async_trait]
impl StreamStore for ProcessStore {
    async fn write_chunk(
        &self,
        run_id: &str,
        name: &str,
        chunk: NewChunk,
    ) -> Result<StreamChunk, WorldError> {
        self.write(self.disk.records.write_chunk(run_id, name, chunk), |_| {})
            .await
    }
    async fn close_stream(&self, run_id: &str, name: &str) -> Result<(), WorldError> {
        self.write(self.disk.records.close_stream(run_id, name), |_| {})
            .await
    }
    async fn close_run_streams(&self, run_id: &str) -> Result<(), WorldError> {
        self.write(self.disk.records.close_run_streams(run_id), |_| {})
            .await
    }
    async fn stream_chunks(
        &self,
        run_id: &str,
        name: &str,
        from: u64,
        limit: usize,
    ) -> Result<(Vec<StreamChunk>, StreamInfo), WorldError> {
        self.alive()?;
        self.disk
            .records
            .stream_chunks(run_id, name, from, limit)
            .await
    }
    async fn list_streams(&self, run_id: &str) -> Result<Vec<String>, WorldError> {
        self.alive()?;
        self.disk.records.list_streams(run_id).await
    }
    fn watch_streams(&self, run_id: &str) -> StreamSignal {
        self.disk.records.watch_streams(run_id)
    }
}

#[async_trait]
impl ScheduleStore for ProcessStore {
    async fn list_schedules(&self) -> Result<Vec<ScheduleConfig>, WorldError> {
        self.alive()?;
        self.disk.records.list_schedules().await
    }
    async fn get_schedule(&self, id: &str) -> Result<Option<ScheduleConfig>, WorldError> {
        self.alive()?;
        self.disk.records.get_schedule(id).await
    }
    async fn update_schedule(
        &self,
        id: &str,
        change: &mut ScheduleUpdate<'_>,
    ) -> Result<Option<ScheduleConfig>, WorldError> {
        self.alive()?;
        self.disk.records.update_schedule(id, change).await
    }
}

#[async_trait]
impl KeyStore for ProcessStore {
    async fn list_keys(&self) -> Result<Vec<ApiKeyRecord>, WorldError> {
        self.alive()?;
        self.disk.records.list_keys().await
    }
    async fn save_key(&self, record: &ApiKeyRecord) -> Result<(), WorldError> {
        self.alive()?;
        self.disk.records.save_key(record).await
    }
}

#[async_trait]
impl crate::store::PauseStore for ProcessStore {
    async fn list_pauses(&self) -> Result<Vec<crate::model::Pause>, WorldError> {
        self.alive()?;
        self.disk.records.list_pauses().await
    }
    async fn save_pause(&self, pause: &crate::model::Pause) -> Result<(), WorldError> {
        self.alive()?;
        self.disk.records.save_pause(pause).await
    }
    async fn remove_pause(
        &self,
        target: &crate::model::PauseTarget,
    ) -> Result<Option<crate::model::Pause>, WorldError> {
        self.alive()?;
        self.disk.records.remove_pause(target).await
    }
}
