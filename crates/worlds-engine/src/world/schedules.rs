//! The world's schedule API: cron and one-time schedules (see [`crate::schedule`]).

use serde::Serialize;

use crate::clock::Millis;
use crate::error::WorldError;
use crate::schedule::{Schedule, ScheduleConfig};

use super::World;

/// The world's schedules, from [`World::schedules`]: make, change, pause, list.
///
/// ```
/// use worlds_engine::prelude::*;
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let world = World::new(WorldConfig::memory())?;
/// world.register(&workflow("report", |_ctx: WorkflowContext, _: ()| async {
///     Ok::<_, WorkflowError>(())
/// }))?;
/// world.schedules().cron("nightly", "report", (), "0 2 * * *").await?;
/// world.schedules().pause("nightly").await?;
/// assert!(world.schedules().get("nightly").await?.paused);
/// # Ok::<(), WorldError>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone, Copy)]
pub struct WorldSchedules<'w> {
    world: &'w World,
}

impl World {
    /// Cron and one-time schedules that start runs (see [`crate::schedule`]).
    pub fn schedules(&self) -> WorldSchedules<'_> {
        WorldSchedules { world: self }
    }
}

impl WorldSchedules<'_> {
    /// Starts a run of `workflow_name` with `input` at every time of a five-field cron
    /// expression (`minute hour day-of-month month day-of-week`), in UTC. Returns the schedule
    /// as stored.
    ///
    /// Calling it again with the same id updates the schedule and keeps its state (paused or
    /// not, counts, and its next time when the expression is unchanged), so a program can
    /// declare its schedules at every start. For a time zone, an input computed at each firing
    /// or another catch-up policy, use [`add_schedule`](Self::add).
    ///
    /// Errors: the workflow is not registered (404); the id, the expression (naming the field
    /// at fault, or a date that never exists such as `0 0 31 2 *`) or the input is invalid (400).
    pub async fn cron<I: Serialize>(
        &self,
        id: &str,
        workflow_name: &str,
        input: I,
        cron: &str,
    ) -> Result<ScheduleConfig, WorldError> {
        self.add(Schedule::cron(id, workflow_name, cron).input(input))
            .await
    }

    /// Starts one run of `workflow_name` with `input` at `at` (ms since the Unix epoch; a time
    /// already past fires as soon as the world runs) and returns the new schedule's id. The
    /// schedule is deleted once its run is started.
    pub async fn once<I: Serialize>(
        &self,
        workflow_name: &str,
        input: I,
        at: Millis,
    ) -> Result<String, WorldError> {
        let stored = self
            .add(Schedule::once(workflow_name, at).input(input))
            .await?;
        Ok(stored.id)
    }

    /// Makes a schedule described by a [`Schedule`], or updates the one with its id (see
    /// [`schedule`](Self::cron) for what an update keeps).
    pub async fn add(&self, schedule: Schedule) -> Result<ScheduleConfig, WorldError> {
        self.world.engine.schedules().add(schedule).await
    }

    /// Pauses a schedule: it does not fire until resumed. 404 if there is no such schedule.
    pub async fn pause(&self, id: &str) -> Result<ScheduleConfig, WorldError> {
        self.world.engine.schedules().pause(id).await
    }

    /// Resumes a paused schedule from its next time after now; the firings it was paused
    /// through are not made up for. 404 if there is no such schedule.
    pub async fn resume(&self, id: &str) -> Result<ScheduleConfig, WorldError> {
        self.world.engine.schedules().resume(id).await
    }

    /// Deletes a schedule; the runs it started are not affected. 404 if there is none.
    pub async fn delete(&self, id: &str) -> Result<(), WorldError> {
        self.world.engine.schedules().delete(id).await
    }

    /// Every schedule, ordered by id.
    pub async fn list(&self) -> Result<Vec<ScheduleConfig>, WorldError> {
        self.world.engine.list_schedules().await
    }

    /// One schedule by id (404 if there is none).
    pub async fn get(&self, id: &str) -> Result<ScheduleConfig, WorldError> {
        self.world.engine.schedules().get(id).await
    }
}
