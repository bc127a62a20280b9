//! Deterministic simulation: your workflows, run again and again on virtual time while the
//! process crashes, the store fails writes, workers freeze, the clock jumps and hook payloads
//! arrive early, late and twice — with the engine's promises checked after every schedule.
//!
//! A [`Simulation`] is given what a program gives its world (a function that registers the
//! workflows), the runs to start and the hook payloads to deliver. It first runs them without
//! faults: that is the reference. Then, for each seed, it runs them again under faults drawn
//! from that seed, restarting the "process" (a new [`World`] over the same records) after
//! every crash, until every run is finished. The schedule passes if:
//!
//! - every run finished as in the reference (status, output, error, compensations) — or
//!   failed because crashes took every attempt one of its steps was allowed, which the
//!   engine records as such (`WORKER_LOST`; see [`RunOutcome::same_ending`]);
//! - no step whose completion was recorded started again;
//! - no start that was acknowledged was lost;
//! - every compensation the reference ran was run exactly once.
//!
//! A failure names the seed; [`Simulation::run_seed`] with it replays the same schedule.
//!
//! ```
//! use worlds_engine::prelude::*;
//! use worlds_engine::testing::simulation::{Faults, Simulation};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let simulation = Simulation::new(|world| {
//!     let double = activity("double", |_ctx: ActivityContext, n: u64| async move {
//!         Ok::<_, StepError>(n * 2)
//!     });
//!     let step = double.clone();
//!     let order = workflow("order", move |ctx: WorkflowContext, n: u64| {
//!         let double = step.clone();
//!         async move {
//!             let twice = ctx.run(&double, n).await?;
//!             ctx.sleep("1h").await?;
//!             Ok::<_, WorkflowError>(twice + 1)
//!         }
//!     });
//!     world.register(&double)?.register(&order)?;
//!     Ok(())
//! })
//! .start("order", 20)
//! .faults(Faults::default());
//! let report = simulation.run(0..20).await.unwrap();
//! assert_eq!(report.seeds, 20);
//! # });
//! ```
//!
//! **What it models.** Each simulated process has its own timers and memory; the records it
//! writes go to a store that keeps every acknowledged write (crashes of the real file, hybrid
//! and PostgreSQL stores, including writes lost before a sync, are tested by killing real
//! processes). Scheduling is a single thread whose task order the seed perturbs. A seed
//! reproduces its schedule with the same build of the engine and the same workflow code.
//!
//! **Workflows it suits.** Results must not depend on when things happen: a workflow that
//! returns `ctx.now()`, or whose step fails on purpose until its last allowed attempt (a crash
//! during an attempt counts as one), can finish differently under faults without any promise
//! being broken. Turn off the faults that matter for such a workflow ([`Faults`]).

mod faults;
mod outcome;
mod store;

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::Value;

use super::{TestWorld, TestWorldOptions, DEFAULT_START};
use crate::clock::Millis;
use crate::config::WorldConfig;
use crate::duration::{Dur, IntoDuration};
use crate::error::WorldError;
use crate::model::{OnConflict, ResolveData, WorkflowOptions};
use crate::store::{EventStore, RunStore};
use crate::world::World;

pub use faults::Faults;
use outcome::describe;
pub use outcome::{RunOutcome, SeedReport, SimulationFailure, SimulationReport};
use store::{Disk, ProcessStore, WritePlan};

/// Registers a program's workflows and activities on a world, as the program does at start.
type Setup = dyn Fn(&World) -> Result<(), WorldError> + Send + Sync;

/// A start the simulation makes.
#[derive(Debug, Clone)]
struct Start {
    workflow: String,
    input: Value,
}

/// A hook payload the simulation delivers.
#[derive(Debug, Clone)]
struct Delivery {
    token: String,
    payload: Value,
}

/// Your workflows under injected faults; see the [module documentation](self).
#[derive(Clone)]
pub struct Simulation {
    setup: Arc<Setup>,
    config: WorldConfig,
    starts: Vec<Start>,
    deliveries: Vec<Delivery>,
    faults: Faults,
    horizon: Dur,
}

impl std::fmt::Debug for Simulation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Simulation")
            .field("starts", &self.starts)
            .field("deliveries", &self.deliveries)
            .field("faults", &self.faults)
            .field("horizon", &self.horizon)
            .finish()
    }
}

/// Seconds of virtual time a schedule may pass with nothing due and nothing written before
/// its unfinished runs count as stuck.
const IDLE_SECONDS: u32 = 600;

/// The reference run is reported under this seed.
const REFERENCE: u64 = u64::MAX;

/// Restarts a schedule may take beyond its planned crashes (each failed start of a world
/// counts) before it is judged unable to finish.
const SPARE_RESTARTS: u32 = 50;

impl Simulation {
    /// A simulation of the program whose workflows `setup` registers. `setup` runs once per
    /// simulated process, on a fresh world, as a program's start does.
    pub fn new(
        setup: impl Fn(&World) -> Result<(), WorldError> + Send + Sync + 'static,
    ) -> Simulation {
        Simulation {
            setup: Arc::new(setup),
            config: WorldConfig::memory(),
            starts: Vec::new(),
            deliveries: Vec::new(),
            faults: Faults::default(),
            horizon: Dur::from_millis(365 * 86_400_000),
        }
    }

    /// The world configuration of every simulated process (persistence is memory).
    pub fn config(mut self, config: WorldConfig) -> Self {
        self.config = config;
        self
    }

    /// Starts a run of `workflow` with `input` at the beginning of every schedule. Its workflow
    /// id is `sim-<n>`, `n` counting starts from 0; a start that fails (a crash, a write error)
    /// is made again, as a client would, until it is acknowledged.
    pub fn start(mut self, workflow: &str, input: impl serde::Serialize) -> Self {
        self.starts.push(Start {
            workflow: workflow.to_owned(),
            input: serde_json::to_value(input).expect("a start's input converts to JSON"),
        });
        self
    }

    /// Delivers `payload` to the hook holding `token`, resending until a hook accepts it.
    pub fn deliver(mut self, token: &str, payload: impl serde::Serialize) -> Self {
        self.deliveries.push(Delivery {
            token: token.to_owned(),
            payload: serde_json::to_value(payload).expect("a payload converts to JSON"),
        });
        self
    }

    /// The faults schedules draw from. Default [`Faults::default`].
    pub fn faults(mut self, faults: Faults) -> Self {
        self.faults = faults;
        self
    }

    /// The most virtual time a schedule may take before its unfinished runs count as stuck.
    /// Default 365 days.
    pub fn horizon(mut self, horizon: impl IntoDuration) -> Self {
        self.horizon = Dur(horizon
            .into_duration()
            .expect("the horizon is a valid duration"));
        self
    }

    /// How every run finishes without faults.
    pub async fn reference(&self) -> Result<Vec<RunOutcome>, SimulationFailure> {
        Ok(self.reference_run().await?.0)
    }

    async fn reference_run(&self) -> Result<(Vec<RunOutcome>, SeedReport), SimulationFailure> {
        self.schedule(REFERENCE, &Faults::none(), 0).await
    }

    /// Runs the schedule of every seed in `seeds`, stopping at the first that fails.
    pub async fn run(
        &self,
        seeds: impl IntoIterator<Item = u64>,
    ) -> Result<SimulationReport, SimulationFailure> {
        let reference = self.reference_run().await?;
        let mut report = SimulationReport::default();
        for seed in seeds {
            let seed_report = self.check_seed(seed, &reference).await?;
            report.seeds += 1;
            report.crashes += u64::from(seed_report.crashes);
            report.writes += seed_report.writes;
            report.lost_attempt_endings += seed_report.lost_attempt_endings;
        }
        Ok(report)
    }

    /// Runs the schedule of one seed and checks it against the reference.
    pub async fn run_seed(&self, seed: u64) -> Result<SeedReport, SimulationFailure> {
        let reference = self.reference_run().await?;
        self.check_seed(seed, &reference).await
    }

    async fn check_seed(
        &self,
        seed: u64,
        (reference, made): &(Vec<RunOutcome>, SeedReport),
    ) -> Result<SeedReport, SimulationFailure> {
        let (outcomes, report) = self.schedule(seed, &self.faults, made.writes).await?;
        let problems: Vec<String> = reference
            .iter()
            .zip(&outcomes)
            .filter(|(want, got)| !want.same_ending(got))
            .map(|(want, got)| {
                format!(
                    "{} finished differently: {} under faults, {} without (history under faults: {})",
                    want.workflow_id,
                    describe(got),
                    describe(want),
                    got.timeline.join(" ")
                )
            })
            .collect();
        if problems.is_empty() {
            let lost = outcomes
                .iter()
                .filter(|o| o.ended_by_lost_attempt())
                .count();
            Ok(SeedReport {
                lost_attempt_endings: lost as u64,
                ..report
            })
        } else {
            Err(SimulationFailure { seed, problems })
        }
    }

    /// Runs every start to its end under `faults` drawn from `seed`, restarting after each
    /// crash; fails on a broken invariant or a run that cannot finish.
    /// Crashes are placed among the first `writes` writes (those of the reference run) and a
    /// few beyond.
    async fn schedule(
        &self,
        seed: u64,
        faults: &Faults,
        writes: u64,
    ) -> Result<(Vec<RunOutcome>, SeedReport), SimulationFailure> {
        let fail = |problem: String| SimulationFailure {
            seed,
            problems: vec![problem],
        };
        let mut rng = StdRng::seed_from_u64(seed);
        let disk = Arc::new(Disk::default());
        let crashes = match faults.crashes {
            0 => Vec::new(),
            most => {
                let count = rng.random_range(0..=most);
                // Retries and recovery add writes under faults, so a crash may also come a
                // little after the reference's last write.
                let last = writes + writes / 4 + 1;
                let mut at: Vec<(u64, bool)> = (0..count)
                    .map(|_| (rng.random_range(1..=last), rng.random_bool(0.5)))
                    .collect();
                at.sort_unstable();
                at
            }
        };
        let mut state = Progress {
            acked: vec![None; self.starts.len()],
            delivered: vec![false; self.deliveries.len()],
            deliver_at: self
                .deliveries
                .iter()
                .map(|_| match faults.max_delivery_delay.as_millis() {
                    0 => 0,
                    most => rng.random_range(0..=most) as i64,
                })
                .collect(),
            start: DEFAULT_START,
        };
        let mut time = DEFAULT_START;
        let mut next_crash = crashes.iter().copied();
        let mut planned = next_crash.next();
        let mut restarts = 0;
        let mut crashed = 0;
        loop {
            let plan = WritePlan {
                crash_at: planned,
                error_rate: faults.write_error_rate,
                max_delay_turns: faults.max_delay_turns,
            };
            let view = Arc::new(ProcessStore::new(disk.clone(), plan, rng.random()));
            let test = TestWorld::with_options(TestWorldOptions {
                initial_time: time,
                config: self.config.clone(),
                store: Some(view.clone()),
                autostart: false,
                auto_progress: true,
            })
            .await;
            (self.setup)(test.world())
                .map_err(|e| fail(format!("the setup function failed: {e}")))?;
            let ended = match test.world().start().await {
                Ok(()) => self.drive(&test, &view, &mut state, faults, &mut rng).await,
                Err(_) if view.is_dead() => Ended::Crashed,
                // A write error during recovery: the process gives up and is started again.
                Err(_) => Ended::Crashed,
            };
            time = test.now();
            view.crash();
            drop(test);
            match ended {
                Ended::Finished => break,
                Ended::Stuck(why) => return Err(fail(why)),
                Ended::Crashed => {
                    if view.crashed_by_plan() {
                        crashed += 1;
                        planned = next_crash.next();
                    }
                    restarts += 1;
                    if restarts > faults.crashes + SPARE_RESTARTS {
                        return Err(fail(format!(
                            "the runs did not finish after {restarts} restarts"
                        )));
                    }
                }
            }
        }
        let mut problems = disk.violations();
        let mut outcomes = Vec::with_capacity(self.starts.len());
        // The records are read from the simulated disk, under the world: with encryption at
        // rest (configured, or in the environment) they are opened as the world opens them.
        let reveal = crate::store::Reveal::new(self.config.encryption().ok().flatten());
        for (n, acked) in state.acked.iter().enumerate() {
            let workflow_id = format!("sim-{n}");
            let Some(run_id) = acked else {
                problems.push(format!("{workflow_id} was never acknowledged"));
                continue;
            };
            match disk.records.get_run(run_id, ResolveData::All).await {
                Ok(mut run) => {
                    reveal.state(&mut run);
                    outcomes.push(RunOutcome {
                        workflow_id,
                        status: run.status,
                        output: run.output.as_ref().map(|p| p.to_value()),
                        error: run
                            .error
                            .as_ref()
                            .map(|e| (e.code.clone(), e.message.clone())),
                        compensations: disk.compensations_of(run_id),
                        compensation_lost: disk.compensation_lost(run_id),
                        timeline: disk
                            .records
                            .history(run_id, 0)
                            .await
                            .unwrap_or_default()
                            .iter()
                            .map(|e| {
                                let mut e = (**e).clone();
                                reveal.event(&mut e);
                                let mut entry = e.kind.type_name().to_owned();
                                if let Some(p) = e.kind.position() {
                                    entry.push_str(&format!("#{p}"));
                                }
                                if let crate::EventKind::ActivityFailed { error, .. } = &e.kind {
                                    entry.push_str(&format!("({})", error.message));
                                }
                                entry
                            })
                            .collect(),
                    })
                }
                Err(e) => problems.push(format!(
                    "{workflow_id} was acknowledged as run {run_id} but is not in the store: {e}"
                )),
            }
        }
        if !problems.is_empty() {
            return Err(SimulationFailure { seed, problems });
        }
        let report = SeedReport {
            seed,
            crashes: crashed,
            writes: disk.writes.load(std::sync::atomic::Ordering::SeqCst),
            lost_attempt_endings: 0,
        };
        Ok((outcomes, report))
    }

    /// Drives one process until every run finished, the process died, or nothing can move.
    async fn drive(
        &self,
        test: &TestWorld,
        view: &ProcessStore,
        state: &mut Progress,
        faults: &Faults,
        rng: &mut StdRng,
    ) -> Ended {
        let deadline = state.start.saturating_add(self.horizon.as_millis() as i64);
        let (mut seen_writes, mut idle_seconds) = (view.writes(), 0);
        loop {
            for (n, start) in self.starts.iter().enumerate() {
                if state.acked[n].is_some() {
                    continue;
                }
                let options = WorkflowOptions::new()
                    .workflow_id(format!("sim-{n}"))
                    .on_conflict(OnConflict::UseExisting);
                let started = test
                    .world()
                    .execute_by_name::<Value, Value>(&start.workflow, start.input.clone(), options)
                    .await;
                match started {
                    Ok(handle) => state.acked[n] = Some(handle.id.clone()),
                    Err(_) if view.is_dead() => return Ended::Crashed,
                    // Refused for a passing reason: the client tries again.
                    Err(_) => {}
                }
            }
            test.settle().await;
            if view.is_dead() {
                return Ended::Crashed;
            }
            let now = test.now();
            for (n, delivery) in self.deliveries.iter().enumerate() {
                if state.delivered[n] || state.start + state.deliver_at[n] > now {
                    continue;
                }
                if test
                    .world()
                    .resume_hook(&delivery.token, &delivery.payload)
                    .await
                    .is_ok()
                {
                    state.delivered[n] = true;
                    if faults.duplicate_deliveries {
                        let _ = test
                            .world()
                            .resume_hook(&delivery.token, &delivery.payload)
                            .await;
                    }
                }
            }
            test.settle().await;
            if view.is_dead() {
                return Ended::Crashed;
            }
            if self.all_finished(test, state).await {
                return Ended::Finished;
            }
            if faults.freeze_worker_rate > 0.0 && rng.random_bool(faults.freeze_worker_rate) {
                let workers = test.world().workers().list();
                if !workers.is_empty() {
                    let pick = rng.random_range(0..workers.len());
                    test.freeze_worker_heartbeat(&workers[pick].id);
                }
            }
            if faults.clock_jump_rate > 0.0 && rng.random_bool(faults.clock_jump_rate) {
                let most = faults.max_clock_jump.as_millis().max(1);
                test.advance(rng.random_range(1..=most)).await;
                continue;
            }
            // Time moves to whatever comes next: a timer, or a delivery's first try. A due
            // delivery that no hook took yet is tried again at every stop on the way.
            let waiting_delivery = self
                .deliveries
                .iter()
                .enumerate()
                .filter(|(n, _)| !state.delivered[*n])
                .map(|(n, _)| state.start + state.deliver_at[n])
                .filter(|at| *at > now)
                .min();
            let next = match (test.next_deadline().await, waiting_delivery) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let writes = view.writes();
            if writes != seen_writes {
                (seen_writes, idle_seconds) = (writes, 0);
            }
            match next {
                Some(at) if at <= deadline => test.step_to(at.max(now)).await,
                _ if idle_seconds < IDLE_SECONDS => {
                    // Nothing is due, but housekeeping that sleeps on background ticks may
                    // still move a run (a run resumed from its history after a failed write),
                    // and refused starts are made again: let time pass a second at a time.
                    idle_seconds += 1;
                    test.step_to(now + 1_000).await;
                }
                _ => {
                    let unfinished = self.unfinished(test, state).await;
                    return Ended::Stuck(format!(
                        "{} never finished: {}",
                        unfinished.join(", "),
                        if next.is_some() {
                            "the horizon passed"
                        } else {
                            "they wait on nothing that time or a delivery can bring"
                        }
                    ));
                }
            }
            if view.is_dead() {
                return Ended::Crashed;
            }
        }
    }

    /// Every start acknowledged and its run finished, still so once all work settled again
    /// (a failed run may go on to compensate).
    async fn all_finished(&self, test: &TestWorld, state: &Progress) -> bool {
        if state.acked.iter().any(Option::is_none) || !self.unfinished(test, state).await.is_empty()
        {
            return false;
        }
        test.settle().await;
        self.unfinished(test, state).await.is_empty()
    }

    /// Workflow ids of acknowledged runs not finished yet (compensations included).
    async fn unfinished(&self, test: &TestWorld, state: &Progress) -> Vec<String> {
        let mut unfinished = Vec::new();
        for (n, acked) in state.acked.iter().enumerate() {
            let Some(run_id) = acked else { continue };
            let run = test.world().get_run(run_id, ResolveData::None).await;
            match run {
                Ok(run) if run.status.is_terminal() => {}
                Ok(run) => unfinished.push(format!("sim-{n} ({})", explain(test, &run.id).await)),
                Err(e) => unfinished.push(format!("sim-{n} (unreadable: {e})")),
            }
        }
        unfinished
    }
}

/// What a schedule carries from one process to the next.
struct Progress {
    /// The run id each start was acknowledged with.
    acked: Vec<Option<String>>,
    /// Deliveries a hook accepted.
    delivered: Vec<bool>,
    /// When each delivery is first tried, in ms after the schedule's start.
    deliver_at: Vec<Millis>,
    /// Virtual time at the schedule's start.
    start: Millis,
}

/// How one process's drive ended.
enum Ended {
    Finished,
    Crashed,
    Stuck(String),
}

/// A stuck run's status, what it waits on (a child: how that child is doing) and its last
/// events.
async fn explain(test: &TestWorld, run_id: &str) -> String {
    let Ok(run) = test.world().query(run_id).await else {
        return format!("{run_id}: unreadable");
    };
    let waits = test.world().waits(run_id).await.unwrap_or_default();
    let mut on = Vec::new();
    for wait in &waits {
        let mut text = serde_json::to_string(wait).unwrap_or_default();
        if let crate::model::WaitOn::Child { run_id: child } = &wait.on {
            text.push_str(&format!(
                " where the child is {}",
                Box::pin(explain(test, child)).await
            ));
        }
        on.push(text);
    }
    let skip = run.history.len().saturating_sub(5);
    let last: Vec<&str> = run.history[skip..]
        .iter()
        .map(|e| e.kind.type_name())
        .collect();
    format!(
        "{}, waiting on [{}], last events [{}]",
        run.status,
        on.join(", "),
        last.join(", ")
    )
}
