//! A memory store wrapped for tests: it counts history reads, and can refuse appends or hold
//! them until the test lets them through.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use worlds_engine::clock::Millis;
use worlds_engine::model::keys::ApiKeyRecord;
use worlds_engine::model::{ActivityState, ListQuery, Page};
use worlds_engine::schedule::ScheduleConfig;
use worlds_engine::store::{
    Appended, EventStore, HookRecord, HookStore, IdempotencyStore, KeyStore, LeaseStore,
    MemoryStore, NewChunk, RunStore, ScheduleStore, ScheduleUpdate, StepRecord, StepStore,
    StreamSignal, StreamStore, Timer, TimerStore,
};
use worlds_engine::streams::{StreamChunk, StreamInfo};
use worlds_engine::{Event, ResolveData, WorkflowQueryFilter, WorkflowState, WorldError};

/// A memory store that counts how the engine reads history, and can be told to fail appends
/// as a store that cannot be reached does.
#[derive(Default)]
pub struct WrappedStore {
    pub inner: MemoryStore,
    /// Calls of `history(run, 0)`: reads of a whole history.
    pub full_reads: AtomicU64,
    /// Events returned by every `history` call together.
    pub events_read: AtomicU64,
    /// Appends it chooses answer `Unavailable` without writing anything.
    pub refuse: Mutex<Option<Refusal>>,
    /// Appends it holds until the test lets them through.
    pub hold: Mutex<Option<Hold>>,
    /// Timer additions it holds until the test lets them through (its `matches` is unused).
    pub timer_hold: Mutex<Option<Hold>>,
    /// How long each `remove_runs` call takes at least (a slow store).
    pub removal_delay: Mutex<std::time::Duration>,
    /// When each `remove_runs` call started and ended, in real time.
    pub removal_calls: Mutex<Vec<(std::time::Instant, std::time::Instant)>>,
    /// Runs removed so far.
    pub removals: AtomicU64,
    /// A record the first listing of schedules after a run's removal stores once it has read
    /// them (and answers with what it read): a change another process makes between a
    /// sweep's reading of the schedules and its writing.
    pub put_after_removal: Mutex<Option<ScheduleConfig>>,
}

/// Which appends a [`WrappedStore`] holds, and the gate they wait at.
#[derive(Clone)]
pub struct Hold {
    pub matches: fn(&[Event]) -> bool,
    /// One permit lets one held append through, the first to arrive first.
    pub gate: Arc<tokio::sync::Semaphore>,
    /// Appends that reached the gate so far.
    pub arrived: Arc<AtomicU64>,
}

impl Hold {
    fn new(matches: fn(&[Event]) -> bool) -> Hold {
        Hold {
            matches,
            gate: Arc::new(tokio::sync::Semaphore::new(0)),
            arrived: Arc::default(),
        }
    }

    /// Counts an arrival and waits for a permit.
    async fn wait(&self) {
        self.arrived.fetch_add(1, Ordering::SeqCst);
        self.gate
            .acquire()
            .await
            .expect("the gate is never closed")
            .forget();
    }

    /// Lets the longest-waiting held append (or the next to arrive) through.
    pub fn let_one_through(&self) {
        self.gate.add_permits(1);
    }

    /// Lets every held call through, now and from now on.
    pub fn open(&self) {
        self.gate
            .add_permits(tokio::sync::Semaphore::MAX_PERMITS / 2);
    }

    /// Polls `call` (on this, the test's only thread) until it waits at the gate, then drops
    /// it, as a caller that gives up on the call does. Panics if the call ends first or never
    /// reaches the gate.
    pub async fn drop_at_gate<F: std::future::Future>(&self, call: F) {
        let mut call = std::pin::pin!(call);
        for _ in 0..10_000 {
            if self.arrived.load(Ordering::SeqCst) > 0 {
                return;
            }
            assert!(
                futures::poll!(call.as_mut()).is_pending(),
                "the call ended before reaching the gate"
            );
            tokio::task::yield_now().await;
        }
        panic!("the call never reached the gate");
    }
}

/// Which appends a [`WrappedStore`] refuses, and how many more times.
pub struct Refusal {
    pub matches: fn(&[Event]) -> bool,
    pub times: usize,
    /// The write lands before the error is returned, as when a connection is cut after the
    /// commit.
    pub lands: bool,
}

impl WrappedStore {
    /// Refuses the next `times` appends that `matches`, as an unreachable store would.
    pub fn refuse(&self, times: usize, matches: fn(&[Event]) -> bool) {
        *self.refuse.lock().unwrap() = Some(Refusal {
            matches,
            times,
            lands: false,
        });
    }

    /// Lets the next `times` writes that `matches` land, then answers `Unavailable` all the
    /// same, as a store whose connection was cut after the commit does.
    pub fn fail_after_writing(&self, times: usize, matches: fn(&[Event]) -> bool) {
        *self.refuse.lock().unwrap() = Some(Refusal {
            matches,
            times,
            lands: true,
        });
    }

    /// Holds every append that `matches` until [`Hold::let_one_through`] lets it go.
    pub fn hold(&self, matches: fn(&[Event]) -> bool) -> Hold {
        let hold = Hold::new(matches);
        *self.hold.lock().unwrap() = Some(hold.clone());
        hold
    }

    /// Holds every timer addition until [`Hold::let_one_through`] lets it go.
    pub fn hold_timers(&self) -> Hold {
        let hold = Hold::new(|_| true);
        *self.timer_hold.lock().unwrap() = Some(hold.clone());
        hold
    }

    /// Stops refusing.
    pub fn heal(&self) {
        *self.refuse.lock().unwrap() = None;
    }

    /// `Some(lands)` if this write is to fail.
    fn refused(&self, events: &[Event]) -> Option<bool> {
        let mut refuse = self.refuse.lock().unwrap();
        match refuse.as_mut() {
            Some(r) if r.times > 0 && (r.matches)(events) => {
                r.times -= 1;
                Some(r.lands)
            }
            _ => None,
        }
    }

    /// Performs a write as the current refusal says.
    async fn write<T>(
        &self,
        events: &[Event],
        write: impl std::future::Future<Output = Result<T, WorldError>>,
    ) -> Result<T, WorldError> {
        let unavailable = || {
            WorldError::Unavailable(
                "the test store refuses this write, as an unreachable store would".into(),
            )
        };
        let hold = self.hold.lock().unwrap().clone();
        if let Some(hold) = hold.filter(|h| (h.matches)(events)) {
            hold.wait().await;
        }
        match self.refused(events) {
            None => write.await,
            Some(false) => Err(unavailable()),
            Some(true) => {
                write.await?;
                Err(unavailable())
            }
        }
    }
}

#[async_trait]
impl RunStore for WrappedStore {
    async fn create_run(&self, first: Event) -> Result<(), WorldError> {
        let events = [first.clone()];
        self.write(&events, self.inner.create_run(first)).await
    }
    async fn get_run(&self, id: &str, resolve: ResolveData) -> Result<WorkflowState, WorldError> {
        self.inner.get_run(id, resolve).await
    }
    async fn list_runs(
        &self,
        filter: &WorkflowQueryFilter,
    ) -> Result<Page<WorkflowState>, WorldError> {
        self.inner.list_runs(filter).await
    }
    async fn unfinished_runs(&self) -> Result<Vec<String>, WorldError> {
        self.inner.unfinished_runs().await
    }
}

impl IdempotencyStore for WrappedStore {}

impl LeaseStore for WrappedStore {}

#[async_trait]
impl EventStore for WrappedStore {
    async fn append(&self, run_id: &str, events: Vec<Event>) -> Result<Appended, WorldError> {
        let copy = events.clone();
        self.write(&copy, self.inner.append(run_id, events)).await
    }
    async fn history(&self, run_id: &str, from_seq: u64) -> Result<Vec<Arc<Event>>, WorldError> {
        if from_seq == 0 {
            self.full_reads.fetch_add(1, Ordering::SeqCst);
        }
        let events = self.inner.history(run_id, from_seq).await?;
        self.events_read
            .fetch_add(events.len() as u64, Ordering::SeqCst);
        Ok(events)
    }
    async fn list_events(
        &self,
        run_id: &str,
        query: &ListQuery,
    ) -> Result<Page<Arc<Event>>, WorldError> {
        self.inner.list_events(run_id, query).await
    }
    async fn list_events_by_correlation_id(
        &self,
        correlation_id: &str,
        query: &ListQuery,
    ) -> Result<Page<Arc<Event>>, WorldError> {
        self.inner
            .list_events_by_correlation_id(correlation_id, query)
            .await
    }
}

#[async_trait]
impl StepStore for WrappedStore {
    async fn get_activity(&self, run_id: &str, position: u32) -> Result<ActivityState, WorldError> {
        self.inner.get_activity(run_id, position).await
    }
    async fn get_step(
        &self,
        step_id: &str,
        resolve: ResolveData,
    ) -> Result<StepRecord, WorldError> {
        self.inner.get_step(step_id, resolve).await
    }
    async fn list_steps(
        &self,
        run_id: &str,
        query: &ListQuery,
    ) -> Result<Page<ActivityState>, WorldError> {
        self.inner.list_steps(run_id, query).await
    }
}

#[async_trait]
impl HookStore for WrappedStore {
    async fn find_hook(
        &self,
        token_digest: &str,
    ) -> Result<Option<worlds_engine::store::HookRef>, WorldError> {
        self.inner.find_hook(token_digest).await
    }
    async fn get_hook(&self, hook_id: &str) -> Result<HookRecord, WorldError> {
        self.inner.get_hook(hook_id).await
    }
    async fn list_run_hooks(
        &self,
        run_id: &str,
        query: &ListQuery,
    ) -> Result<Page<HookRecord>, WorldError> {
        self.inner.list_run_hooks(run_id, query).await
    }
    async fn list_waiting_hooks(&self, query: &ListQuery) -> Result<Page<HookRecord>, WorldError> {
        self.inner.list_waiting_hooks(query).await
    }
}

#[async_trait]
impl worlds_engine::store::RetentionStore for WrappedStore {
    async fn ended_runs(
        &self,
        before: Millis,
        after: Option<&worlds_engine::store::EndedCursor>,
        limit: usize,
    ) -> Result<Vec<worlds_engine::store::EndedRun>, WorldError> {
        self.inner.ended_runs(before, after, limit).await
    }
    async fn remove_runs(
        &self,
        runs: &[worlds_engine::store::RemoveRun],
    ) -> Result<Vec<worlds_engine::store::Removal>, WorldError> {
        let started = std::time::Instant::now();
        let delay = *self.removal_delay.lock().unwrap();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let removals = self.inner.remove_runs(runs).await;
        let ended = std::time::Instant::now();
        self.removal_calls.lock().unwrap().push((started, ended));
        let removed = removals
            .iter()
            .flatten()
            .filter(|r| matches!(r, worlds_engine::store::Removal::Removed { .. }));
        self.removals
            .fetch_add(removed.count() as u64, Ordering::SeqCst);
        removals
    }
}

#[async_trait]
impl TimerStore for WrappedStore {
    async fn add_timer(&self, timer: Timer) -> Result<(), WorldError> {
        let hold = self.timer_hold.lock().unwrap().clone();
        if let Some(hold) = hold {
            hold.wait().await;
        }
        self.inner.add_timer(timer).await
    }
    async fn take_due_timers(&self, now: Millis, limit: usize) -> Result<Vec<Timer>, WorldError> {
        self.inner.take_due_timers(now, limit).await
    }
    async fn next_timer_at(&self) -> Result<Option<Millis>, WorldError> {
        self.inner.next_timer_at().await
    }
    async fn remove_run_timers(&self, run_id: &str) -> Result<bool, WorldError> {
        self.inner.remove_run_timers(run_id).await
    }
}

#[async_trait]
impl StreamStore for WrappedStore {
    async fn write_chunk(
        &self,
        run_id: &str,
        name: &str,
        chunk: NewChunk,
    ) -> Result<StreamChunk, WorldError> {
        self.inner.write_chunk(run_id, name, chunk).await
    }
    async fn close_stream(&self, run_id: &str, name: &str) -> Result<(), WorldError> {
        self.inner.close_stream(run_id, name).await
    }
    async fn close_run_streams(&self, run_id: &str) -> Result<(), WorldError> {
        self.inner.close_run_streams(run_id).await
    }
    async fn stream_chunks(
        &self,
        run_id: &str,
        name: &str,
        from: u64,
        limit: usize,
    ) -> Result<(Vec<StreamChunk>, StreamInfo), WorldError> {
        self.inner.stream_chunks(run_id, name, from, limit).await
    }
    async fn list_streams(&self, run_id: &str) -> Result<Vec<String>, WorldError> {
        self.inner.list_streams(run_id).await
    }
    fn watch_streams(&self, run_id: &str) -> StreamSignal {
        self.inner.watch_streams(run_id)
    }
}

#[async_trait]
impl ScheduleStore for WrappedStore {
    async fn list_schedules(&self) -> Result<Vec<ScheduleConfig>, WorldError> {
        let listed = self.inner.list_schedules().await?;
        let put = match self.removals.load(Ordering::SeqCst) {
            0 => None,
            _ => self.put_after_removal.lock().unwrap().take(),
        };
        if let Some(record) = put {
            let id = record.id.clone();
            self.inner
                .update_schedule(&id, &mut |_| {
                    Ok(worlds_engine::store::ScheduleChange::Put(record.clone()))
                })
                .await?;
        }
        Ok(listed)
    }
    async fn get_schedule(&self, id: &str) -> Result<Option<ScheduleConfig>, WorldError> {
        self.inner.get_schedule(id).await
    }
    async fn update_schedule(
        &self,
        id: &str,
        change: &mut ScheduleUpdate<'_>,
    ) -> Result<Option<ScheduleConfig>, WorldError> {
        self.inner.update_schedule(id, change).await
    }
}

#[async_trait]
impl KeyStore for WrappedStore {
    async fn list_keys(&self) -> Result<Vec<ApiKeyRecord>, WorldError> {
        self.inner.list_keys().await
    }
    async fn save_key(&self, record: &ApiKeyRecord) -> Result<(), WorldError> {
        self.inner.save_key(record).await
    }
}

#[async_trait]
impl worlds_engine::store::PauseStore for WrappedStore {
    async fn list_pauses(&self) -> Result<Vec<worlds_engine::model::Pause>, WorldError> {
        self.inner.list_pauses().await
    }
    async fn save_pause(&self, pause: &worlds_engine::model::Pause) -> Result<(), WorldError> {
        self.inner.save_pause(pause).await
    }
    async fn remove_pause(
        &self,
        target: &worlds_engine::model::PauseTarget,
    ) -> Result<Option<worlds_engine::model::Pause>, WorldError> {
        self.inner.remove_pause(target).await
    }
}
