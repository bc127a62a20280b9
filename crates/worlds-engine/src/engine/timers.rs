//! Durable timers: kept in the store, fired when the world's clock reaches them.
//!
//! [`Timers`] owns the timer side of the store and the wake-up of the loop that fires them: a
//! timer added (or removed) earlier than the one the loop sleeps until must wake it. What a
//! fired timer does (a sleep ends, a retry starts, a hook expires, a run times out) is the
//! engine's: it passes [`Engine::fire`] to the loop.

use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::clock::{Clock, Millis};
use crate::error::{codes, StructuredError, WorldError};
use crate::model::EventKind;
use crate::store::{Timer, TimerKind, TimerStore};

use super::Engine;

/// Timers fired per store round trip.
const BATCH: usize = 512;

/// The loop is awake: every new timer must wake it again, as it may have read the timers
/// before that one was added.
const AWAKE: Millis = Millis::MAX;

/// The loop sleeps with no timer to wait for: any new timer wakes it.
const NO_TIMER: Millis = Millis::MAX - 1;

/// The world's durable timers.
pub(crate) struct Timers {
    store: Arc<dyn TimerStore>,
    clock: Arc<dyn Clock>,
    /// Wakes the firing loop: the earliest timer may have changed.
    wake: Notify,
    /// The time the firing loop sleeps until, [`NO_TIMER`], or [`AWAKE`]. Only a timer due
    /// before it needs to wake the loop; the others it finds when it wakes anyway.
    sleeps_until: AtomicI64,
}

impl Timers {
    pub(crate) fn new(store: Arc<dyn TimerStore>, clock: Arc<dyn Clock>) -> Self {
        Timers {
            store,
            clock,
            wake: Notify::new(),
            sleeps_until: AtomicI64::new(AWAKE),
        }
    }

    /// Adds a timer (adding one that exists does nothing) and wakes the firing loop if the
    /// timer is due before the loop would wake by itself.
    pub(crate) async fn add(&self, timer: Timer) -> Result<(), WorldError> {
        let fire_at = timer.fire_at;
        self.store.add_timer(timer).await?;
        // Added before this read: a loop that read the timers before the addition either
        // still shows `AWAKE` here or sleeps until a time this compares with.
        if fire_at < self.sleeps_until.load(Ordering::SeqCst) {
            self.wake();
        }
        Ok(())
    }

    /// Adds a timer without waking the firing loop: for many at once, followed by one
    /// [`wake`](Self::wake).
    pub(crate) async fn rearm(&self, timer: Timer) -> Result<(), WorldError> {
        self.store.add_timer(timer).await
    }

    /// Wakes the firing loop to look at the timers again.
    pub(crate) fn wake(&self) {
        self.wake.notify_one();
    }

    /// Wakes the firing loop if the timer it sleeps until is due at `now`. Its own sleep ends
    /// by the runtime's timer, which a runtime busy with tasks checks only now and then (with
    /// tokio, every 61 tasks a thread runs): a burst of work would let due timers wait a
    /// millisecond or more. Called by the workers between tasks, it costs an atomic load, and
    /// a clock read only while a timer is pending.
    pub(crate) fn wake_if_due(&self, now: impl FnOnce() -> Millis) {
        let until = self.sleeps_until.load(Ordering::SeqCst);
        if until < NO_TIMER && now() >= until {
            self.wake();
        }
    }

    /// Removes every timer of a finished run.
    pub(crate) async fn forget_run(&self, run_id: &str) {
        // The loop may be asleep until one of the removed timers; left so, it would wake for
        // nothing, and a test clock would see a deadline nothing waits for. A run with no timer
        // left (most, at their end) does not wake it.
        if !matches!(self.store.remove_run_timers(run_id).await, Ok(false)) {
            self.wake();
        }
    }

    /// When the earliest timer is due, if there is one.
    pub(crate) async fn next_at(&self) -> Option<Millis> {
        self.store.next_timer_at().await.ok().flatten()
    }

    /// Fires every timer that is due now with `fire`. Returns how many fired.
    pub(crate) async fn fire_due<F, Fut>(&self, fire: F) -> Result<usize, WorldError>
    where
        F: Fn(Timer) -> Fut,
        Fut: Future<Output = ()>,
    {
        let fire = &fire;
        let mut fired = 0;
        loop {
            let due = self
                .store
                .take_due_timers(self.clock.now_ms(), BATCH)
                .await?;
            if due.is_empty() {
                return Ok(fired);
            }
            fired += due.len();
            // Runs fire concurrently, so that on a durable store their records share syncs
            // instead of waiting for one each; a run's own timers fire in order.
            let runs: Vec<usize> = {
                let mut index: rustc_hash::FxHashMap<&str, usize> = Default::default();
                due.iter()
                    .map(|timer| {
                        let next = index.len();
                        *index.entry(timer.run_id.as_str()).or_insert(next)
                    })
                    .collect()
            };
            let mut by_run: Vec<Vec<Timer>> = Vec::new();
            for (timer, run) in due.into_iter().zip(runs) {
                match by_run.get_mut(run) {
                    Some(timers) => timers.push(timer),
                    None => by_run.push(vec![timer]),
                }
            }
            futures::future::join_all(by_run.into_iter().map(|timers| async move {
                for timer in timers {
                    fire(timer).await;
                }
            }))
            .await;
        }
    }

    /// Fires timers with `fire` as the clock reaches them, until `stop` is cancelled.
    pub(crate) async fn run<F, Fut>(&self, stop: &CancellationToken, fire: F)
    where
        F: Fn(Timer) -> Fut,
        Fut: Future<Output = ()>,
    {
        loop {
            self.sleeps_until.store(AWAKE, Ordering::SeqCst);
            if let Err(e) = self.fire_due(&fire).await {
                tracing::error!(error = %e, "could not fire timers");
            }
            let next = self.next_at().await;
            // A timer added after the read above finds this (or `AWAKE`) and wakes the loop
            // if it is due sooner.
            self.sleeps_until
                .store(next.unwrap_or(NO_TIMER), Ordering::SeqCst);
            let sleep = async {
                match next {
                    Some(at) => self.clock.sleep_until(at).await,
                    None => futures::future::pending().await,
                }
            };
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = self.wake.notified() => {}
                _ = sleep => {}
            }
        }
    }
}

impl Engine {
    /// Fires every timer that is due now. Returns how many fired. (The timer loop fires timers
    /// as they come due; the test harness fires them at once after moving its clock.)
    #[cfg(feature = "test-util")]
    pub(crate) async fn fire_due_timers(&self) -> Result<usize, WorldError> {
        self.timers.fire_due(|timer| self.fire(timer)).await
    }

    /// Fires timers as the clock reaches them, until `stop` is cancelled.
    pub(crate) async fn timer_loop(self: Arc<Self>, stop: CancellationToken) {
        let engine: &Engine = &self;
        engine.timers.run(&stop, |timer| engine.fire(timer)).await;
    }

    /// A run's timeout passed: it fails, unless the timer was armed before the run was
    /// reopened (its timeout counts again from the reopening).
    async fn run_timed_out(&self, run_id: &str, fire_at: Millis) -> Result<(), WorldError> {
        let state = self
            .store
            .get_run(run_id, crate::model::ResolveData::None)
            .await?;
        if let (Some(reopened_at), Some(ms)) = (state.reopened_at, state.timeout_ms) {
            if fire_at < reopened_at.saturating_add(ms as i64) {
                return Ok(());
            }
        }
        let error = StructuredError::new(format!("run {run_id} did not finish within its timeout"))
            .with_code(codes::TIMEOUT);
        self.finish_with(run_id, vec![EventKind::WorkflowFailed { error }])
            .await
    }

    /// What a fired timer does.
    async fn fire(&self, timer: Timer) {
        let run_id = timer.run_id.as_str();
        let result = match timer.kind {
            TimerKind::Sleep { position } => self
                .journal
                .append(run_id, vec![EventKind::TimerFired { position }])
                .await
                .map(|_| self.runs.schedule(run_id)),
            TimerKind::ActivityRetry { position, attempt } => {
                self.retry_activity(run_id, position, attempt).await
            }
            TimerKind::WorkflowRetry { attempt } => {
                self.start_workflow_retry(run_id, attempt).await
            }
            TimerKind::HookExpiry { position } => {
                self.hooks.expire(run_id, position).await.map(|expired| {
                    if expired {
                        self.runs.schedule(run_id);
                    }
                })
            }
            TimerKind::RunTimeout => self.run_timed_out(run_id, timer.fire_at).await,
        };
        if let Err(e) = result {
            // Typically the run finished or was cancelled before its timer: nothing to do.
            // Unless the store could not be reached: the timer was taken, so the run resumes
            // from its history, which arms it again.
            if !self.resync_if_passing(run_id, &e) {
                tracing::debug!(run_id, error = %e, "timer fired for a run that no longer needs it");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::sync::Mutex;

    use async_trait::async_trait;

    use super::*;
    use crate::clock::VirtualClock;
    use crate::store::MemoryStore;

    /// A memory store that counts how often the firing loop looks for its next timer: once per
    /// pass of the loop.
    #[derive(Default)]
    struct Counting {
        inner: MemoryStore,
        passes: AtomicUsize,
    }

    #[async_trait]
    impl TimerStore for Counting {
        async fn add_timer(&self, timer: Timer) -> Result<(), WorldError> {
            self.inner.add_timer(timer).await
        }
        async fn take_due_timers(
            &self,
            now: Millis,
            limit: usize,
        ) -> Result<Vec<Timer>, WorldError> {
            self.inner.take_due_timers(now, limit).await
        }
        async fn next_timer_at(&self) -> Result<Option<Millis>, WorldError> {
            self.passes.fetch_add(1, Ordering::SeqCst);
            self.inner.next_timer_at().await
        }
        async fn remove_run_timers(&self, run_id: &str) -> Result<bool, WorldError> {
            self.inner.remove_run_timers(run_id).await
        }
    }

    fn sleep_of(run: &str, fire_at: Millis) -> Timer {
        Timer {
            fire_at,
            run_id: run.into(),
            kind: TimerKind::Sleep { position: 0 },
        }
    }

    /// Lets the spawned loop run until it waits again.
    async fn settle() {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn the_loop_wakes_only_when_the_timer_it_sleeps_until_may_have_changed() {
        let store = Arc::new(Counting::default());
        let clock = Arc::new(VirtualClock::new(0));
        let timers = Arc::new(Timers::new(store.clone(), clock.clone()));
        let fired = Arc::new(Mutex::new(Vec::new()));
        let stop = CancellationToken::new();
        timers.add(sleep_of("first", 1_000)).await.unwrap();
        let running = tokio::spawn({
            let (timers, fired, stop) = (timers.clone(), fired.clone(), stop.clone());
            async move {
                let fired = &fired;
                timers
                    .run(&stop, |timer| async move {
                        fired.lock().unwrap().push(timer.run_id);
                    })
                    .await;
            }
        })
        .abort_handle();
        let passes = || store.passes.load(Ordering::SeqCst);
        settle().await;
        let asleep = passes();

        // Later timers, and the end of a run without timers, leave the loop asleep until 1 000.
        for i in 0..50 {
            timers
                .add(sleep_of(&format!("later-{i}"), 2_000 + i))
                .await
                .unwrap();
        }
        timers.forget_run("no-timers").await;
        settle().await;
        assert_eq!(passes(), asleep, "woken for nothing");

        // Removing a run's timers wakes it: one of them may be the one it sleeps until.
        timers.forget_run("later-49").await;
        settle().await;
        assert!(passes() > asleep);
        let asleep = passes();

        // An earlier timer wakes it, and fires on time.
        timers.add(sleep_of("sooner", 500)).await.unwrap();
        settle().await;
        assert!(passes() > asleep);
        clock.set(500);
        settle().await;
        assert_eq!(*fired.lock().unwrap(), ["sooner"]);
        clock.set(2_000);
        settle().await;
        assert_eq!(*fired.lock().unwrap(), ["sooner", "first", "later-0"]);
        stop.cancel();
        running.abort();
    }

    #[tokio::test]
    async fn a_worker_between_tasks_wakes_the_loop_once_its_timer_is_due() {
        let store = Arc::new(Counting::default());
        // The loop's own sleep never ends here: the clock stays at 0.
        let clock = Arc::new(VirtualClock::new(0));
        let timers = Arc::new(Timers::new(store.clone(), clock.clone()));
        let stop = CancellationToken::new();
        let running = tokio::spawn({
            let (timers, stop) = (timers.clone(), stop.clone());
            async move { timers.run(&stop, |_| async {}).await }
        })
        .abort_handle();
        let passes = || store.passes.load(Ordering::SeqCst);
        // No timer: nothing to look at, not even the clock.
        settle().await;
        timers.wake_if_due(|| panic!("the clock is read only while a timer is pending"));
        timers.add(sleep_of("first", 1_000)).await.unwrap();
        settle().await;
        let asleep = passes();

        timers.wake_if_due(|| 999);
        settle().await;
        assert_eq!(passes(), asleep, "woken before its timer was due");
        timers.wake_if_due(|| 1_000);
        settle().await;
        assert_eq!(passes(), asleep + 1, "not woken once its timer was due");
        stop.cancel();
        running.abort();
    }
}
