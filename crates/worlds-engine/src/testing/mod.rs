//! A test harness: an in-memory world on virtual time.
//!
//! [`TestWorld`] runs real workers on the memory store, but its clock only moves when the test
//! says so — or, in [`TestWorld::run_until_complete`], when every piece of work is waiting on
//! time, in which case it jumps straight to the next timer. A workflow that sleeps thirty days
//! completes in milliseconds.
//!
//! Use it from `#[tokio::test]` (the current-thread runtime): "nothing left to do but wait" is
//! judged by letting every other task run first.
//!
//! Periodic housekeeping (worker heartbeats, the autoscaler, the liveness monitor) sleeps on
//! background ticks ([`Clock::sleep_until_background`]): moving time wakes it, but time never
//! stops at its ticks, so a long jump runs each loop once, at the end of the jump.

pub mod conformance;
mod fixtures;
pub mod simulation;

pub use fixtures::{read_history_fixture, replay_history, write_history_fixture};

use std::ops::Deref;
use std::sync::Arc;

use crate::clock::{Clock, Millis, VirtualClock};
use crate::config::WorldConfig;
use crate::duration::IntoDuration;
use crate::error::WorldError;
use crate::model::{ResolveData, WorkflowState};
use crate::store::Store;
use crate::world::World;

/// The start of virtual time unless configured: 2026-01-01T00:00:00Z.
pub const DEFAULT_START: Millis = 1_767_225_600_000;

/// How many times the harness yields to other tasks before it decides nothing else is runnable.
const SETTLE_YIELDS: usize = 32;

/// Options for a [`TestWorld`].
#[derive(Clone)]
pub struct TestWorldOptions {
    /// Virtual time at start. Default [`DEFAULT_START`].
    pub initial_time: Millis,
    /// Let `run_until_complete` move time forward on its own when all work waits on timers.
    /// Default true.
    pub auto_progress: bool,
    /// The world configuration; persistence is forced to memory.
    pub config: WorldConfig,
    /// A store to use instead of a fresh memory store: share one between two test worlds to
    /// simulate a restart.
    pub store: Option<Arc<dyn Store>>,
    /// Start the world at once (default). Turn it off to register definitions first, as a
    /// program would, when the store already holds runs to resume: then call `start()`.
    pub autostart: bool,
}

impl std::fmt::Debug for TestWorldOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestWorldOptions")
            .field("initial_time", &self.initial_time)
            .field("auto_progress", &self.auto_progress)
            .field("config", &self.config)
            .field("shared_store", &self.store.is_some())
            .finish()
    }
}

impl Default for TestWorldOptions {
    fn default() -> Self {
        Self {
            initial_time: DEFAULT_START,
            auto_progress: true,
            config: WorldConfig::memory(),
            store: None,
            autostart: true,
        }
    }
}

/// An in-memory world on a virtual clock, started and ready.
///
/// ```
/// use worlds_engine::prelude::*;
/// use worlds_engine::testing::TestWorld;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let nap = workflow("nap", |ctx: WorkflowContext, _: ()| async move {
///     ctx.sleep("720h").await?;          // thirty days
///     Ok::<_, WorkflowError>("rested".to_string())
/// });
/// let test = TestWorld::new().await;
/// test.register(&nap).unwrap();
/// let run = test.execute(&nap, (), WorkflowOptions::default()).await.unwrap();
/// test.run_until_complete(&run.id, "1000h").await.unwrap();
/// assert_eq!(run.result().await.unwrap(), "rested");
/// # });
/// ```
pub struct TestWorld {
    world: World,
    clock: VirtualClock,
    auto_progress: bool,
}

impl Deref for TestWorld {
    type Target = World;

    fn deref(&self) -> &World {
        &self.world
    }
}

impl TestWorld {
    /// A started test world with default options.
    pub async fn new() -> TestWorld {
        Self::with_options(TestWorldOptions::default()).await
    }

    /// A started test world whose world config is `config` (persistence forced to memory).
    pub async fn with_config(config: WorldConfig) -> TestWorld {
        Self::with_options(TestWorldOptions {
            config,
            ..TestWorldOptions::default()
        })
        .await
    }

    /// A started test world.
    pub async fn with_options(options: TestWorldOptions) -> TestWorld {
        let clock = VirtualClock::new(options.initial_time);
        let mut config = options.config;
        config.persistence = crate::config::Persistence::Memory;
        if let Err(e) = config.validate() {
            panic!("test world configuration is invalid: {e}");
        }
        let store = options
            .store
            .unwrap_or_else(|| Arc::new(crate::store::MemoryStore::new()));
        let world = World::with_store(config, Arc::new(clock.clone()), store);
        if options.autostart {
            world
                .start()
                .await
                .unwrap_or_else(|e| panic!("test world did not start: {e}"));
        }
        TestWorld {
            world,
            clock,
            auto_progress: options.auto_progress,
        }
    }

    /// The world under test.
    pub fn world(&self) -> &World {
        &self.world
    }

    /// The virtual clock.
    pub fn clock(&self) -> &VirtualClock {
        &self.clock
    }

    /// Current virtual time.
    pub fn now(&self) -> Millis {
        self.clock.now_ms()
    }

    /// Stops a worker's heartbeats from now on, as if its thread were stuck, so tests can
    /// exercise the liveness monitor: once virtual time passes `heartbeat_timeout` the worker
    /// is declared dead, its task is handed to another worker and a replacement is started.
    /// The worker itself keeps executing whatever it holds until the monitor aborts it.
    /// Returns false if no listed worker has this id.
    pub fn freeze_worker_heartbeat(&self, worker_id: &str) -> bool {
        self.world.worker_pool().freeze_heartbeat(worker_id)
    }

    /// Waits until no task is executing (running activities aside), no queued task can be
    /// taken by an idle worker, and every other runnable task has had its turn.
    ///
    /// Tasks left in the queue because every worker that could take them is busy (for example
    /// with activities the test holds) do not keep it waiting.
    pub async fn settle(&self) {
        let engine = self.world.engine();
        loop {
            let before = engine.work_in_flight();
            for _ in 0..SETTLE_YIELDS {
                tokio::task::yield_now().await;
            }
            let now = engine.work_in_flight();
            let busy = now.executing > now.running_activities
                || (now.queued > 0 && self.world.worker_pool().idle_worker_can_take(engine));
            if !busy && now.epoch == before.epoch {
                return;
            }
        }
    }

    /// Moves virtual time forward by `by`, firing every timer on the way in order and letting
    /// the world react to each before going on.
    pub async fn advance(&self, by: impl IntoDuration) {
        let by = by
            .into_duration()
            .unwrap_or_else(|e| panic!("advance: {e}"));
        let target = self.now().saturating_add(crate::clock::duration_ms(by));
        self.advance_to(target).await;
    }

    /// Moves virtual time forward to `target` (ms since the Unix epoch), as [`advance`](Self::advance).
    pub async fn advance_to(&self, target: Millis) {
        self.settle().await;
        while let Some(next) = self.next_deadline().await {
            if next > target {
                break;
            }
            self.step_to(next).await;
        }
        self.step_to(target).await;
    }

    async fn step_to(&self, at: Millis) {
        self.clock.set(at);
        let _ = self.world.engine().fire_due_timers().await;
        self.settle().await;
    }

    /// The earliest moment anything waits for: a durable timer, or a sleeper on the clock
    /// (activity timeouts, heartbeat watches).
    async fn next_deadline(&self) -> Option<Millis> {
        let timer = self.world.engine().next_timer_at().await;
        match (timer, self.clock.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Drives the run (by run id or workflow id) to a terminal status and returns its final
    /// state. With auto-progress, time jumps to the next deadline whenever all work is waiting
    /// on one. Fails with a timeout if the run is not done once `timeout` of virtual time has
    /// passed, or at once if it waits on nothing that time can bring.
    pub async fn run_until_complete(
        &self,
        id: &str,
        timeout: impl IntoDuration,
    ) -> Result<WorkflowState, WorldError> {
        let timeout = timeout
            .into_duration()
            .map_err(|e| WorldError::invalid("timeout", e.to_string()))?;
        let start = self.now();
        let deadline = start.saturating_add(crate::clock::duration_ms(timeout));
        loop {
            self.settle().await;
            let state = self.world.engine().get_run(id, ResolveData::All).await?;
            if state.status.is_terminal() {
                return crate::world::query_with_history(self.world.engine(), &state.id).await;
            }
            let next = self.next_deadline().await;
            match next {
                Some(at) if self.auto_progress && at <= deadline => self.step_to(at).await,
                Some(_) if self.auto_progress => {
                    self.step_to(deadline).await;
                    let state = self.world.engine().get_run(id, ResolveData::None).await?;
                    if state.status.is_terminal() {
                        continue;
                    }
                    return Err(WorldError::Timeout {
                        what: format!("run {id} to finish"),
                        waited_ms: deadline - start,
                    });
                }
                _ => {
                    return Err(WorldError::Timeout {
                        what: format!(
                        "run {id} to finish (it is {} and waits on nothing that time can bring)",
                        state.status
                    ),
                        waited_ms: self.now() - start,
                    })
                }
            }
        }
    }
}
