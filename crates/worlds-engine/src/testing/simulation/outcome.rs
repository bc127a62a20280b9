//! What a schedule of the simulation is judged on, and what it reports.

use serde_json::Value;

use crate::error::codes;
use crate::RunStatus;

/// How one run finished: what a schedule is compared on.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// The workflow id the simulation gave the run (`sim-<n>`, in the order of the starts).
    pub workflow_id: String,
    /// Its final status.
    pub status: RunStatus,
    /// Its result, if it completed.
    pub output: Option<Value>,
    /// Its error's code and message, if it failed.
    pub error: Option<(Option<String>, String)>,
    /// Compensations recorded as run.
    pub compensations: usize,
    /// A compensation failed because faults took every attempt its step was allowed.
    pub compensation_lost: bool,
    /// Its history, one event type per event (`activity_completed`, …), with the command
    /// position where there is one: shown when a schedule fails, not compared.
    pub timeline: Vec<String>,
}

impl PartialEq for RunOutcome {
    fn eq(&self, other: &Self) -> bool {
        (
            &self.workflow_id,
            self.status,
            &self.output,
            &self.error,
            self.compensations,
        ) == (
            &other.workflow_id,
            other.status,
            &other.output,
            &other.error,
            other.compensations,
        )
    }
}

impl RunOutcome {
    /// True if the run (or one of its compensations) failed because an attempt of a step was
    /// lost (a crash, a frozen worker) when it had no attempt left: faults may take every
    /// attempt a step is allowed, and the engine says so instead of trying forever.
    pub fn ended_by_lost_attempt(&self) -> bool {
        self.compensation_lost
            || self.error.as_ref().is_some_and(|(code, _)| {
                matches!(
                    code.as_deref(),
                    Some(codes::WORKER_LOST | codes::HEARTBEAT_TIMEOUT)
                )
            })
    }

    /// True if `other` (the run under faults) ended as this one (its fault-free reference) did:
    /// the same status, output, error and compensations — or it
    /// [ended by a lost attempt](Self::ended_by_lost_attempt), which a schedule may do.
    pub fn same_ending(&self, other: &RunOutcome) -> bool {
        self.workflow_id == other.workflow_id
            && (other.ended_by_lost_attempt() && !self.ended_by_lost_attempt() || self == other)
    }
}

/// What a passed schedule went through.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeedReport {
    /// The seed.
    pub seed: u64,
    /// Times the process crashed and was restarted.
    pub crashes: u32,
    /// Writes that reached the store.
    pub writes: u64,
    /// Runs that failed because faults took every attempt one of their steps was allowed.
    pub lost_attempt_endings: u64,
}

/// What [`Simulation::run`](super::Simulation::run) went through, over all its seeds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimulationReport {
    /// Schedules run (all passed).
    pub seeds: u64,
    /// Crashes over all schedules.
    pub crashes: u64,
    /// Writes over all schedules.
    pub writes: u64,
    /// Runs, over all schedules, that failed because faults took every attempt one of their
    /// steps was allowed.
    pub lost_attempt_endings: u64,
}

/// A schedule that broke a promise, or a simulation that could not run.
#[derive(Debug, Clone, thiserror::Error)]
#[error("seed {seed}: {}; replay it with Simulation::run_seed({seed})", problems.join("; "))]
pub struct SimulationFailure {
    /// The seed whose schedule failed (`u64::MAX` for the reference run).
    pub seed: u64,
    /// What went wrong, one sentence each.
    pub problems: Vec<String>,
}

pub(super) fn describe(outcome: &RunOutcome) -> String {
    let mut text = outcome.status.to_string();
    if let Some(output) = &outcome.output {
        text.push_str(&format!(" with {output}"));
    }
    if let Some((code, message)) = &outcome.error {
        text.push_str(&format!(
            " ({}{message})",
            code.as_deref()
                .map(|c| format!("{c}: "))
                .unwrap_or_default()
        ));
    }
    text.push_str(&format!(", {} compensations", outcome.compensations));
    text
}
