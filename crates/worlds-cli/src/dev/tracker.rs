//! The runs a `worlds dev` session follows, and their count.

use std::collections::HashSet;

use tokio::sync::mpsc;
use worlds_demo::DemoRun;
use worlds_engine::clock::Millis;
use worlds_engine::{ResolveData, RunStatus, WorkflowQueryFilter, World, WorldError};

use super::tally::Tally;

/// The runs a session follows: those it found in flight and those it started.
pub(crate) struct Tracker {
    /// Their run ids.
    ids: HashSet<String>,
    /// The creation time of the oldest of them (or the session's start).
    since: Millis,
    /// Runs found in flight.
    pub(crate) resumed: usize,
    /// New runs started so far.
    pub(crate) started: usize,
    /// New runs to start.
    pub(crate) to_start: usize,
    /// The last run started (or resumed), for the `worlds runs show` hint.
    pub(crate) last: Option<String>,
}

impl Tracker {
    /// Follows the runs `world` holds in flight (pending, running, compensating); call before
    /// `world.start()`, which resumes them.
    pub(crate) async fn new(world: &World) -> Result<Tracker, WorldError> {
        let in_flight = world
            .query_workflows(
                WorkflowQueryFilter::new()
                    .status([
                        RunStatus::Pending,
                        RunStatus::Running,
                        RunStatus::Compensating,
                    ])
                    .resolve_data(ResolveData::None),
            )
            .await?;
        let now = world.clock().now_ms();
        Ok(Tracker {
            since: in_flight
                .iter()
                .map(|run| run.created_at)
                .fold(now, Millis::min),
            resumed: in_flight.len(),
            last: in_flight.first().map(|run| run.id.clone()),
            ids: in_flight.into_iter().map(|run| run.id).collect(),
            started: 0,
            to_start: 0,
        })
    }

    /// Takes note of the runs started since the last call; fails with the error of a run that
    /// could not be started.
    pub(crate) fn receive(
        &mut self,
        started: &mut mpsc::UnboundedReceiver<Result<DemoRun, WorldError>>,
    ) -> Result<(), WorldError> {
        while let Ok(run) = started.try_recv() {
            let run = run?;
            self.started += 1;
            self.ids.insert(run.handle.id.clone());
            self.last = Some(run.handle.id);
        }
        Ok(())
    }

    /// Counts the followed runs by status and workflow.
    pub(crate) async fn tally(&self, world: &World) -> Result<Tally, WorldError> {
        let runs = world
            .query_workflows(
                WorkflowQueryFilter::new()
                    .started_after(self.since)
                    .resolve_data(ResolveData::None),
            )
            .await?;
        let mut tally = Tally::new(self.resumed, self.started, self.to_start);
        for run in runs.iter().filter(|run| self.ids.contains(&run.id)) {
            tally.add(&run.name, run.status);
        }
        Ok(tally)
    }
}
