//! Checking a deploy before it breaks runs: the histories of the runs in flight replayed
//! against the workflow code registered now, without running anything.

use std::collections::BTreeMap;
use std::fmt;

use futures::StreamExt;
use serde::{Deserialize, Serialize};

pub use crate::engine::verify::HistoryVerdict;
use crate::error::WorldError;
use crate::model::Event;

use super::World;

/// What [`World::verify`] looks at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyOptions {
    /// Replay at most this many runs, spread evenly over the runs in flight (by run id);
    /// `None` replays them all.
    pub sample: Option<usize>,
    /// Also replay quarantined runs: after a fix, they should replay cleanly before they are
    /// resumed. Default true.
    pub quarantined: bool,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        Self {
            sample: None,
            quarantined: true,
        }
    }
}

/// Where one run's history and the code registered now part.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Divergence {
    /// The run.
    pub run_id: String,
    /// The command position (0-based, in program order) where they differ.
    pub position: u32,
    /// What history holds there.
    pub recorded: String,
    /// What the code issues there now ("nothing …" if it issues none).
    pub issued: String,
}

/// One workflow's runs in a [`VerifyReport`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkflowVerified {
    /// Runs whose history the current code replays to its end.
    pub clean: usize,
    /// Runs it does not, each with where and how.
    pub diverged: Vec<Divergence>,
    /// Runs of a workflow no longer registered: they would fail with `NOT_REGISTERED`.
    pub not_registered: Vec<String>,
}

/// What [`World::verify`] found, per workflow name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyReport {
    /// By workflow name.
    pub workflows: BTreeMap<String, WorkflowVerified>,
    /// Runs that ended while they were being checked (nothing to say about them).
    pub skipped: usize,
}

impl VerifyReport {
    /// True when every run replayed cleanly: the code can be deployed under these runs.
    pub fn is_clean(&self) -> bool {
        self.workflows
            .values()
            .all(|w| w.diverged.is_empty() && w.not_registered.is_empty())
    }

    /// Runs replayed.
    pub fn runs(&self) -> usize {
        self.workflows
            .values()
            .map(|w| w.clean + w.diverged.len() + w.not_registered.len())
            .sum()
    }
}

impl fmt::Display for VerifyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (name, w) in &self.workflows {
            writeln!(
                f,
                "{name}: {} clean, {} diverged, {} not registered",
                w.clean,
                w.diverged.len(),
                w.not_registered.len()
            )?;
            for d in &w.diverged {
                writeln!(
                    f,
                    "  {} at command #{}: history holds {}, the code now issues {}",
                    d.run_id, d.position, d.recorded, d.issued
                )?;
            }
            for run_id in &w.not_registered {
                writeln!(f, "  {run_id}: workflow '{name}' is not registered")?;
            }
        }
        match self.is_clean() {
            true => writeln!(f, "{} run(s) replay cleanly", self.runs()),
            false => writeln!(f, "the code registered now breaks the runs above"),
        }
    }
}

/// Histories `verify` reads at once.
const VERIFY_READS_IN_FLIGHT: usize = 16;

impl World {
    /// Replays the history of every run in flight (and every quarantined run) against the
    /// workflow code registered in this world, without running any step or recording
    /// anything, and reports per workflow how many replay cleanly and, for each that does
    /// not, where and how code and history part. Run it in a deploy check with the new code
    /// registered: a report that is not [`clean`](VerifyReport::is_clean) means the deploy
    /// would fail those runs with `NONDETERMINISM`.
    ///
    /// ```
    /// use worlds_engine::prelude::*;
    /// use worlds_engine::VerifyOptions;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let world = World::new(WorldConfig::memory())?;
    /// // … register the workflows of the build about to be deployed …
    /// let report = world.verify(VerifyOptions::default()).await?;
    /// assert!(report.is_clean(), "{report}");
    /// # Ok::<_, WorldError>(()) }).unwrap();
    /// ```
    pub async fn verify(&self, options: VerifyOptions) -> Result<VerifyReport, WorldError> {
        let mut ids = self.engine.runs_to_verify(options.quarantined).await?;
        if let Some(sample) = options.sample {
            let every = ids.len().div_ceil(sample.max(1)).max(1);
            ids = ids.into_iter().step_by(every).collect();
        }
        let mut report = VerifyReport::default();
        // Histories are read a few at a time: on a database each read is a round trip.
        let engine = &self.engine;
        let mut replays = futures::stream::iter(ids)
            .map(|run_id| async move {
                let found = engine.verify_run(&run_id).await;
                (run_id, found)
            })
            .buffered(VERIFY_READS_IN_FLIGHT);
        while let Some((run_id, found)) = replays.next().await {
            let (name, replayed) = match found {
                Ok(found) => found,
                Err(WorldError::NotFound { .. }) => {
                    report.skipped += 1;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let entry = report.workflows.entry(name).or_default();
            match replayed {
                HistoryVerdict::Clean => entry.clean += 1,
                HistoryVerdict::Diverged {
                    position,
                    recorded,
                    issued,
                } => entry.diverged.push(Divergence {
                    run_id,
                    position,
                    recorded,
                    issued,
                }),
                HistoryVerdict::NotRegistered { .. } => entry.not_registered.push(run_id),
            }
        }
        Ok(report)
    }

    /// Replays one history (a run's events from its first, as
    /// [`events`](World::events) lists them or a fixture file holds them) against the
    /// workflow code registered in this world, without running anything. For unit tests of
    /// old histories: see [`testing::replay_history`](crate::testing::replay_history).
    pub fn verify_history(&self, history: &[Event]) -> Result<HistoryVerdict, WorldError> {
        self.engine.replay_check(history)
    }
}
