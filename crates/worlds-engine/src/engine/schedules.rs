//! The schedule service: making and changing schedules, and the loop that fires them.
//!
//! The loop runs while the world is started. It sleeps on the world's clock until the earliest
//! next firing among the schedules this process can fire (a real deadline: a test clock that
//! jumps from deadline to deadline stops at each firing), or until a schedule is changed here.
//! On a store shared with other processes it also wakes every `shared_poll_interval` (a
//! background tick) to see schedules the others made or changed. Each firing goes through three
//! steps, so that a crash at any point neither loses it nor starts it twice:
//!
//! 1. **claim** — under the store's lock, the due firings are added to the record's
//!    `pending_firings` and `next_execution` moves on; only one process claims a firing;
//! 2. **start** — the run is created with the workflow id `sched:{id}:{time}`; a conflict means
//!    it exists already (another process, or an attempt before a crash, started it);
//! 3. **settle** — under the lock again, the firing leaves `pending_firings` and is counted.
//!
//! Pending firings are started again by any process that can, at its next tick.
//!
//! [`Schedules`] owns the schedule side of the store and this process's input functions. It
//! starts runs through the function the engine hands to its loop, so it depends on the journal,
//! the timers' clock and the registry, never on the engine as a whole.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::clock::{Clock, Millis};
use crate::error::{ErrorKind, WorldError};
use crate::ids::IdGenerator;
use crate::model::{ResolveData, WorkflowOptions};
use crate::payload::Payload;
use crate::store::{LeaseStore, ScheduleChange, ScheduleStore, Store};

use super::journal::Journal;
use super::registry::Registry;
use crate::schedule::plan::{self, Outcome};
use crate::schedule::{
    check_id, firing_workflow_id, CronExpr, Firing, InputFn, InputSource, Schedule, ScheduleConfig,
    Timing,
};

/// The run a firing started: its run id.
type Started<'e> = BoxFuture<'e, Result<String, WorldError>>;

/// Starts a run of a workflow (by name) for a firing.
pub(crate) type StartRun<'e> =
    dyn Fn(String, Payload, WorkflowOptions) -> Started<'e> + Send + Sync + 'e;

/// The world's schedules: the stored ones, the input functions given to this process, and the
/// loop's wake-up.
pub(crate) struct Schedules {
    /// The stored schedules.
    schedules: Arc<dyn ScheduleStore>,
    /// The runs firings start.
    runs: Arc<dyn LeaseStore>,
    clock: Arc<dyn Clock>,
    ids: Arc<IdGenerator>,
    /// Checks the size of a schedule's input.
    journal: Arc<Journal>,
    /// The workflows this process can start.
    registry: Arc<Registry>,
    /// The world takes work: a shutting-down world claims no firing.
    accepting: Arc<AtomicBool>,
    /// How often a world on a shared store looks for schedules other processes changed.
    shared_poll_ms: i64,
    inputs: Mutex<HashMap<String, InputFn>>,
    wake: Notify,
}

impl Schedules {
    pub(crate) fn new(
        store: &Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        ids: Arc<IdGenerator>,
        journal: Arc<Journal>,
        registry: Arc<Registry>,
        accepting: Arc<AtomicBool>,
        shared_poll_ms: i64,
    ) -> Self {
        Schedules {
            schedules: store.clone(),
            runs: store.clone(),
            clock,
            ids,
            journal,
            registry,
            accepting,
            shared_poll_ms,
            inputs: Mutex::default(),
            wake: Notify::new(),
        }
    }

    /// Wakes the schedule loop to look at the schedules again (one was changed, or a workflow
    /// registered that a stored schedule starts).
    pub(crate) fn changed(&self) {
        self.wake.notify_one();
    }
}

/// What one pass of the loop leaves to wait for.
#[derive(Debug, Default)]
struct Outlook {
    /// The earliest next firing this process can make.
    next: Option<Millis>,
    /// Something failed and should be tried again soon.
    retry: bool,
}

impl Schedules {
    /// Makes a schedule, or updates the one with the same id.
    ///
    /// An update replaces what the schedule starts and when, and keeps its state: paused or
    /// not, counts, pending firings, and its next time if the expression and zone are the same.
    pub(crate) async fn add(&self, schedule: Schedule) -> Result<ScheduleConfig, WorldError> {
        let Schedule {
            id,
            workflow_name,
            input,
            timing,
            time_zone,
            catch_up,
        } = schedule;
        let id = id.unwrap_or_else(|| self.ids.next("sched_"));
        check_id(&id)?;
        catch_up.validate()?;
        let def =
            self.registry
                .workflow(&workflow_name)
                .ok_or_else(|| WorldError::UnknownWorkflow {
                    name: workflow_name.clone(),
                })?;
        let (input, input_fn) = match input {
            InputSource::Value(Ok(payload)) => {
                self.journal
                    .check_payload(|| format!("input of schedule '{id}'"), &payload)?;
                (def.validate)(&payload).map_err(|e| {
                    WorldError::invalid(
                        "input",
                        format!("does not match the input type of workflow '{workflow_name}': {e}"),
                    )
                })?;
                (Some(payload), None)
            }
            InputSource::Value(Err(e)) => {
                return Err(Arc::try_unwrap(e)
                    .unwrap_or_else(|shared| WorldError::invalid("input", shared.to_string())))
            }
            InputSource::Function(f) => (None, Some(f)),
        };
        let now = self.clock.now_ms();
        let (cron_expression, next) = match timing {
            Timing::Cron(expression) => {
                let cron = CronExpr::parse(&expression, time_zone.as_deref())?;
                let next = cron.next_after(now)?;
                (Some(cron.expression().to_owned()), next)
            }
            Timing::Once(_) if time_zone.is_some() => {
                return Err(WorldError::invalid(
                    "time_zone",
                    "a one-time schedule fires at an instant and takes no time zone",
                ))
            }
            Timing::Once(at) => (None, at),
        };
        let fresh = ScheduleConfig {
            id: id.clone(),
            workflow_name,
            input,
            input_fn: input_fn.is_some(),
            cron_expression,
            time_zone,
            paused: false,
            total_executions: 0,
            last_execution: None,
            next_execution: Some(next),
            catch_up,
            created_at: now,
            last_run_id: None,
            removed_last_run_id: None,
            last_error: None,
            pending_firings: Vec::new(),
        };
        {
            let mut inputs = self.inputs.lock();
            match input_fn {
                Some(f) => inputs.insert(id.clone(), f),
                None => inputs.remove(&id),
            };
        }
        let stored = self
            .schedules
            .update_schedule(&id, &mut |current| {
                Ok(ScheduleChange::Put(match current {
                    None => fresh.clone(),
                    Some(old) => {
                        self.journal.check_schedule_opens(&old)?;
                        merge(old, fresh.clone())
                    }
                }))
            })
            .await?;
        self.changed();
        stored.ok_or_else(|| WorldError::Internal(format!("schedule '{id}' was not stored")))
    }

    /// Pauses a schedule: it does not fire until resumed (404 if there is none).
    pub(crate) async fn pause(&self, id: &str) -> Result<ScheduleConfig, WorldError> {
        self.change(id, |mut s, _| {
            s.paused = true;
            Ok(s)
        })
        .await
    }

    /// Resumes a schedule from the next time after now; the times it was paused through are
    /// not made up for. A one-time schedule keeps its time (fired at once if it is past).
    pub(crate) async fn resume(&self, id: &str) -> Result<ScheduleConfig, WorldError> {
        self.change(id, |mut s, now| {
            if !s.paused {
                return Ok(s);
            }
            s.paused = false;
            if let Some(expression) = &s.cron_expression {
                let cron = CronExpr::parse(expression, s.time_zone.as_deref())?;
                s.next_execution = Some(cron.next_after(now)?);
            }
            Ok(s)
        })
        .await
    }

    /// Deletes a schedule (404 if there is none). Runs it started are not affected.
    pub(crate) async fn delete(&self, id: &str) -> Result<(), WorldError> {
        check_id(id)?;
        let mut found = false;
        self.schedules
            .update_schedule(id, &mut |current| {
                if let Some(stored) = &current {
                    self.journal.check_schedule_opens(stored)?;
                }
                found = current.is_some();
                Ok(ScheduleChange::Delete)
            })
            .await?;
        self.inputs.lock().remove(id);
        self.changed();
        if found {
            Ok(())
        } else {
            Err(WorldError::not_found("schedule", id))
        }
    }

    /// A schedule by id (404 if there is none).
    pub(crate) async fn get(&self, id: &str) -> Result<ScheduleConfig, WorldError> {
        check_id(id)?;
        let schedule = self
            .schedules
            .get_schedule(id)
            .await?
            .ok_or_else(|| WorldError::not_found("schedule", id))?;
        self.journal.check_schedule_opens(&schedule)?;
        Ok(schedule)
    }

    /// Every schedule, ordered by id.
    pub(crate) async fn list(&self) -> Result<Vec<ScheduleConfig>, WorldError> {
        let schedules = self.schedules.list_schedules().await?;
        for schedule in &schedules {
            self.journal.check_schedule_opens(schedule)?;
        }
        Ok(schedules)
    }

    async fn change(
        &self,
        id: &str,
        change: impl Fn(ScheduleConfig, Millis) -> Result<ScheduleConfig, WorldError> + Send + Sync,
    ) -> Result<ScheduleConfig, WorldError> {
        check_id(id)?;
        let now = self.clock.now_ms();
        let stored = self
            .schedules
            .update_schedule(id, &mut |current| match current {
                None => Err(WorldError::not_found("schedule", id)),
                Some(s) => {
                    self.journal.check_schedule_opens(&s)?;
                    change(s, now).map(ScheduleChange::Put)
                }
            })
            .await?;
        self.changed();
        stored.ok_or_else(|| WorldError::not_found("schedule", id))
    }

    /// After a retention sweep tried to remove `run_ids`: a schedule whose last run is one of
    /// them, and gone, stops naming it as its last run (its id moves to `removed_last_run_id`;
    /// nothing else changes). A run the store kept stays linked. One pass over the schedules,
    /// however many runs; each change is a compare-and-set on the run id, so a newer firing
    /// settled meanwhile keeps its run. A schedule that cannot be changed is logged and the
    /// others are still looked at. Returns how many schedules were changed.
    pub(crate) async fn unlink_removed_runs(&self, run_ids: &[String]) -> Result<u64, WorldError> {
        if run_ids.is_empty() {
            return Ok(0);
        }
        let tried: HashSet<&str> = run_ids.iter().map(String::as_str).collect();
        let mut unlinked = 0;
        for schedule in self.schedules.list_schedules().await? {
            let Some(run_id) = schedule.last_run_id.as_deref() else {
                continue;
            };
            if !tried.contains(run_id) {
                continue;
            }
            match self.unlink(&schedule.id, run_id).await {
                Ok(true) => unlinked += 1,
                Ok(false) => {}
                Err(e) => tracing::warn!(
                    schedule = %schedule.id, run_id, error = %e,
                    "could not unlink a removed run from its schedule"
                ),
            }
        }
        Ok(unlinked)
    }

    /// If run `run_id` is gone and still schedule `id`'s last run, moves it to
    /// `removed_last_run_id`. True if it did.
    async fn unlink(&self, id: &str, run_id: &str) -> Result<bool, WorldError> {
        match self.runs.get_run(run_id, ResolveData::None).await {
            Ok(_) => return Ok(false),
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let mut changed = false;
        self.schedules
            .update_schedule(id, &mut |current| {
                changed = false;
                Ok(
                    match current.and_then(|s| plan::unlink_removed_run(s, run_id)) {
                        Some(s) => {
                            changed = true;
                            ScheduleChange::Put(s)
                        }
                        None => ScheduleChange::Keep,
                    },
                )
            })
            .await?;
        if changed {
            tracing::debug!(schedule = id, run_id, "the schedule's last run was removed");
        }
        Ok(changed)
    }

    /// Fires schedules as the clock reaches them, starting their runs with `start`, until
    /// `stop` is cancelled.
    pub(crate) async fn run(&self, stop: &CancellationToken, start: &StartRun<'_>) {
        loop {
            let outlook = match self.tick(start).await {
                Ok(outlook) => outlook,
                Err(e) => {
                    tracing::error!(error = %e, "could not read the schedules");
                    Outlook {
                        next: None,
                        retry: true,
                    }
                }
            };
            let due = async {
                match outlook.next {
                    Some(at) => self.clock.sleep_until(at).await,
                    None => futures::future::pending().await,
                }
            };
            let poll = async {
                if outlook.retry || self.runs.is_shared() {
                    let at = self.clock.now_ms().saturating_add(self.shared_poll_ms);
                    self.clock.sleep_until_background(at).await;
                } else {
                    futures::future::pending::<()>().await;
                }
            };
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = self.wake.notified() => {}
                _ = due => {}
                _ = poll => {}
            }
        }
    }

    /// One pass: claims what is due, starts pending firings, and says when to look again.
    async fn tick(&self, start: &StartRun<'_>) -> Result<Outlook, WorldError> {
        let mut outlook = Outlook::default();
        if !self.accepting.load(Ordering::Acquire) {
            // Shutting down: what is due is claimed by the next start, or by another process.
            return Ok(outlook);
        }
        let now = self.clock.now_ms();
        for schedule in self.schedules.list_schedules().await? {
            if !self.can_fire(&schedule) {
                continue;
            }
            let mut schedule = schedule;
            if !schedule.paused && schedule.next_execution.is_some_and(|at| at <= now) {
                match self.claim(&schedule.id, now).await {
                    Ok(Some(claimed)) => schedule = claimed,
                    Ok(None) => continue,
                    Err(e) => {
                        tracing::warn!(schedule = %schedule.id, error = %e, "could not claim the due firings");
                        outlook.retry = true;
                        continue;
                    }
                }
            }
            if !schedule.pending_firings.is_empty() && !self.start_pending(&schedule, start).await {
                outlook.retry = true;
            }
            if let Some(at) = schedule.next_execution.filter(|_| !schedule.paused) {
                outlook.next = Some(outlook.next.map_or(at, |n: Millis| n.min(at)));
            }
        }
        Ok(outlook)
    }

    /// This process can start the schedule's runs: it has the workflow, and the input function
    /// if the input is computed.
    fn can_fire(&self, schedule: &ScheduleConfig) -> bool {
        self.registry.workflow(&schedule.workflow_name).is_some()
            && (!schedule.input_fn || self.inputs.lock().contains_key(&schedule.id))
            && self.journal.check_schedule_opens(schedule).is_ok()
    }

    /// Step 1: claims the due firings of a schedule. Returns the record as it is afterwards.
    async fn claim(&self, id: &str, now: Millis) -> Result<Option<ScheduleConfig>, WorldError> {
        let mut planned = None;
        let stored = self
            .schedules
            .update_schedule(id, &mut |current| {
                Ok(match current.and_then(|s| plan::claim(s, now)) {
                    Some((claimed, plan)) => {
                        planned = Some(plan);
                        ScheduleChange::Put(claimed)
                    }
                    None => ScheduleChange::Keep,
                })
            })
            .await?;
        match planned {
            Some(Ok(plan)) if plan.dropped > 0 => tracing::info!(
                schedule = id,
                dropped = plan.dropped,
                starting = plan.firings.len(),
                "missed firings dropped by the catch-up policy"
            ),
            Some(Err(e)) => {
                tracing::error!(schedule = id, error = %e, "the schedule cannot fire again")
            }
            _ => {}
        }
        Ok(stored)
    }

    /// Steps 2 and 3 for each pending firing, oldest first. False if one must be tried again.
    async fn start_pending(&self, schedule: &ScheduleConfig, start: &StartRun<'_>) -> bool {
        for &at in &schedule.pending_firings {
            let outcome = match self.start_firing(schedule, at, start).await {
                Ok(started) => started,
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::InvalidInput | ErrorKind::PayloadTooLarge
                    ) =>
                {
                    tracing::error!(schedule = %schedule.id, at, error = %e, "a firing could not start its run");
                    Outcome::Refused {
                        reason: e.to_string(),
                    }
                }
                Err(e) => {
                    tracing::warn!(schedule = %schedule.id, at, error = %e, "a firing will be started again");
                    return false;
                }
            };
            let settled = self
                .schedules
                .update_schedule(&schedule.id, &mut |current| {
                    Ok(match current.and_then(|s| plan::settle(s, at, &outcome)) {
                        Some(Some(s)) => ScheduleChange::Put(s),
                        Some(None) => ScheduleChange::Delete,
                        None => ScheduleChange::Keep,
                    })
                })
                .await;
            if let Err(e) = settled {
                tracing::warn!(schedule = %schedule.id, at, error = %e, "could not record a firing");
                return false;
            }
        }
        true
    }

    /// Step 2: starts the run of the firing at `at`, or finds the one started before.
    async fn start_firing(
        &self,
        schedule: &ScheduleConfig,
        at: Millis,
        start: &StartRun<'_>,
    ) -> Result<Outcome, WorldError> {
        let workflow_id = firing_workflow_id(&schedule.id, at);
        if let Ok(existing) = self.runs.get_run(&workflow_id, ResolveData::None).await {
            return Ok(Outcome::Started {
                run_id: existing.id,
            });
        }
        let input = self.firing_input(schedule, at)?;
        let options = WorkflowOptions::new().workflow_id(workflow_id.clone());
        match start(schedule.workflow_name.clone(), input, options).await {
            Ok(run_id) => {
                tracing::info!(schedule = %schedule.id, at, run_id = %run_id, "schedule fired");
                Ok(Outcome::Started { run_id })
            }
            // Taken: this firing's run was started elsewhere, or by an attempt before a crash.
            Err(WorldError::Conflict { .. }) => {
                let existing = self.runs.get_run(&workflow_id, ResolveData::None).await?;
                Ok(Outcome::Started {
                    run_id: existing.id,
                })
            }
            Err(e) => Err(e),
        }
    }

    fn firing_input(&self, schedule: &ScheduleConfig, at: Millis) -> Result<Payload, WorldError> {
        if !schedule.input_fn {
            return Ok(schedule.input.clone().unwrap_or_else(Payload::null));
        }
        let f = self.inputs.lock().get(&schedule.id).cloned();
        let f = f.ok_or_else(|| {
            WorldError::Unavailable(format!(
                "schedule '{}' computes its input with a function this process was not given",
                schedule.id
            ))
        })?;
        f(&Firing {
            schedule_id: schedule.id.clone(),
            at,
        })
    }
}

/// An existing schedule given a new definition: the definition from `fresh`, the state from
/// `old`. A cron schedule whose expression and zone did not change keeps its next time (so a
/// program that declares its schedules at every start does not skip the firings it missed);
/// a one-time schedule whose time was already claimed is not claimed again.
fn merge(old: ScheduleConfig, fresh: ScheduleConfig) -> ScheduleConfig {
    let next_execution = match (&old.cron_expression, &fresh.cron_expression) {
        (Some(a), Some(b)) if a == b && old.time_zone == fresh.time_zone => {
            old.next_execution.or(fresh.next_execution)
        }
        (None, None)
            if fresh
                .next_execution
                .is_some_and(|at| old.pending_firings.contains(&at)) =>
        {
            None
        }
        _ => fresh.next_execution,
    };
    ScheduleConfig {
        paused: old.paused,
        total_executions: old.total_executions,
        last_execution: old.last_execution,
        next_execution,
        created_at: old.created_at,
        last_run_id: old.last_run_id,
        removed_last_run_id: old.removed_last_run_id,
        last_error: old.last_error,
        pending_firings: old.pending_firings,
        ..fresh
    }
}
