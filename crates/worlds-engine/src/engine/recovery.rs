//! Resuming a store's unfinished runs when a world starts (and, on a shared store, the runs of
//! processes that stopped).
//!
//! Nothing about a run lives only in memory: on start, the engine reads every unfinished run
//! back from the store and puts its work in motion again. Queued tasks are rebuilt from
//! history, timers re-armed (adding a timer is idempotent), and a step that was running when
//! the previous process stopped is recorded as a lost attempt and retried under its policy.
//!
//! [`Recovery`] reads runs back and says what each needs ([`Plan`]): it decides nothing about
//! this process's state and writes nothing. The engine acts on the plan through its parts, in
//! the order the plan gives.

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::WorldError;
use crate::model::{
    ActivityStatus, Event, EventKind, ResolveData, RunStatus, WorkflowOptions, WorkflowState,
};
use crate::payload::Payload;
use crate::store::{EventStore, LeaseStore, Timer, TimerKind};
use crate::telemetry::logs::world_log;

use super::lost::Loss;
use super::registry::Registry;
use super::{ActivityTask, Engine};

/// What recovery found and restarted.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Recovered {
    pub(crate) runs: usize,
    pub(crate) steps_requeued: usize,
    pub(crate) attempts_lost: usize,
    pub(crate) timers_rearmed: usize,
    pub(crate) children_created: usize,
}

/// Reads unfinished runs back from the store.
pub(crate) struct Recovery {
    /// Which runs to drive, and their state.
    leases: Arc<dyn LeaseStore>,
    /// Their histories.
    events: Arc<dyn EventStore>,
    /// Which workflows this process can run.
    registry: Arc<Registry>,
    /// The code version this world is pinned to, if it is: it drives only runs of that
    /// version ([`WorldConfig::pin_code_version`](crate::WorldConfig::pin_code_version)).
    pinned: Option<String>,
}

/// An unfinished run as read back.
pub(crate) struct Unfinished {
    pub(crate) state: WorkflowState,
    history: Vec<Arc<Event>>,
}

/// What a step of a run read back needs, in the order of its steps.
pub(crate) enum StepAction {
    /// Scheduled but not started: queue its attempt again.
    Requeue(ActivityTask),
    /// Waiting for a retry: re-arm its retry timer.
    Rearm(Timer),
    /// Started by a process that stopped: the attempt is lost.
    Lost(ActivityTask),
}

/// A child its parent recorded but the process stopped before creating.
pub(crate) struct MissingChild {
    pub(crate) position: u32,
    pub(crate) child_id: String,
    pub(crate) name: String,
    pub(crate) input: Payload,
    pub(crate) options: WorkflowOptions,
}

/// What one unfinished run needs to be in motion again.
pub(crate) struct Plan {
    /// Sleeps not yet fired and a workflow retry not yet started.
    pub(crate) timers: Vec<Timer>,
    /// The run's timeout.
    pub(crate) timeout: Option<Timer>,
    pub(crate) steps: Vec<StepAction>,
}

impl Recovery {
    pub(crate) fn new(
        leases: Arc<dyn LeaseStore>,
        events: Arc<dyn EventStore>,
        registry: Arc<Registry>,
        pinned: Option<String>,
    ) -> Self {
        Recovery {
            leases,
            events,
            registry,
            pinned,
        }
    }

    /// True if this world drives runs of code version `version` (and workflow `name`): any,
    /// unless it is pinned to its own; bulk operations run anywhere.
    fn drives_version(&self, name: &str, version: Option<&str>) -> bool {
        match &self.pinned {
            Some(mine) => {
                name == super::bulk::BULK_WORKFLOW
                    || name == super::prune::PRUNE_WORKFLOW
                    || version == Some(mine.as_str())
            }
            None => true,
        }
    }

    /// The unfinished runs this world should drive: all of them (of its code version, if it
    /// is pinned to it), or on a store shared by several processes, those no live process
    /// drives (now claimed by this one).
    pub(crate) async fn claim(&self) -> Result<Vec<String>, WorldError> {
        let registry = &self.registry;
        let can_run = |name: &str, version: Option<&str>| {
            registry.workflow(name).is_some() && self.drives_version(name, version)
        };
        let claimed = self.leases.claim_runs(&can_run).await?;
        if self.pinned.is_none() || self.leases.is_shared() {
            return Ok(claimed);
        }
        // A store of one process hands out every run: leave the other versions' runs (and
        // their unregistered workflows) to a world of their version.
        let mut mine = Vec::with_capacity(claimed.len());
        for run_id in claimed {
            let state = self.leases.get_run(&run_id, ResolveData::None).await?;
            if self.drives_version(&state.name, state.code_version.as_deref()) {
                mine.push(run_id);
            }
        }
        Ok(mine)
    }

    /// The runs another process wrote to since the last call (on a shared store).
    pub(crate) async fn external_changes(&self) -> Result<Vec<String>, WorldError> {
        self.leases.external_changes().await
    }

    /// Reads a run back: its state and its history.
    pub(crate) async fn read(&self, run_id: &str) -> Result<Unfinished, WorldError> {
        let state = self.leases.get_run(run_id, ResolveData::All).await?;
        let history = self.events.history(run_id, 0).await?;
        Ok(Unfinished { state, history })
    }

    /// The recorded children of a running run that do not exist (and whose workflow this
    /// process has: the others are logged and left).
    pub(crate) async fn missing_children(&self, run: &Unfinished) -> Vec<MissingChild> {
        let mut missing = Vec::new();
        for event in &run.history {
            if let EventKind::ChildWorkflowStarted {
                position,
                child_id,
                name,
                input: Some(input),
                options,
            } = &event.kind
            {
                let absent = matches!(
                    self.leases.get_run(child_id, ResolveData::None).await,
                    Err(WorldError::NotFound { .. })
                );
                let known = self.registry.workflow(name).is_some();
                if absent && !known {
                    tracing::warn!(run_id = %run.state.id, child = %child_id, workflow = %name, "a recorded child of an unknown workflow was not created; register it and start again");
                }
                if absent && known && run.state.status == RunStatus::Running {
                    missing.push(MissingChild {
                        position: *position,
                        child_id: child_id.clone(),
                        name: name.clone(),
                        input: input.clone(),
                        options: options.as_deref().cloned().unwrap_or_default(),
                    });
                }
            }
        }
        missing
    }
}

impl Recovery {
    /// Children of `run` that finished without their result reaching its history (the process
    /// died between the child's end and the parent's record of it), as they ended.
    pub(crate) async fn finished_children(&self, run: &Unfinished) -> Vec<WorkflowState> {
        let reported: std::collections::HashSet<u32> = run
            .history
            .iter()
            .filter_map(|event| match &event.kind {
                EventKind::ChildWorkflowCompleted { position, .. }
                | EventKind::ChildWorkflowFailed { position, .. } => Some(*position),
                _ => None,
            })
            .collect();
        let mut finished = Vec::new();
        for event in &run.history {
            let EventKind::ChildWorkflowStarted {
                position, child_id, ..
            } = &event.kind
            else {
                continue;
            };
            if reported.contains(position) {
                continue;
            }
            if let Ok(child) = self.leases.get_run(child_id, ResolveData::All).await {
                if child.status.is_terminal() {
                    finished.push(child);
                }
            }
        }
        finished
    }
}

impl Plan {
    /// What `run` needs, from its state and history alone.
    pub(crate) fn of(run: &Unfinished) -> Plan {
        let state = &run.state;
        let run_id = &state.id;
        let timer = |fire_at, kind| Timer {
            fire_at,
            run_id: run_id.clone(),
            kind,
        };
        let mut timers: Vec<Timer> = state
            .pending_timers()
            .map(|(position, fire_at)| timer(fire_at, TimerKind::Sleep { position }))
            .collect();
        if let Some(retry) = state.retry_pending() {
            timers.push(timer(
                retry.due_at,
                TimerKind::WorkflowRetry {
                    attempt: retry.attempt,
                },
            ));
        }
        // A reopened run's timeout counts from its reopening.
        let timeout = state.timeout_ms.map(|ms| {
            timer(
                state
                    .reopened_at
                    .unwrap_or(state.created_at)
                    .saturating_add(ms as i64),
                TimerKind::RunTimeout,
            )
        });

        // When each step waiting for a retry is due: its last `activity_retry`.
        let mut retry_at: HashMap<u32, (u32, i64)> = HashMap::new();
        for event in &run.history {
            if let EventKind::ActivityRetry {
                position,
                attempt,
                delay_ms,
            } = &event.kind
            {
                retry_at.insert(
                    *position,
                    (*attempt, event.timestamp.saturating_add(*delay_ms as i64)),
                );
            }
        }
        let task = |activity, attempt| {
            ActivityTask::from_state(
                run_id.as_str().into(),
                state.workflow_id.clone(),
                activity,
                attempt,
            )
        };
        // Steps of attempts that failed are abandoned: only the current attempt's run.
        let base = match state.retry_pending() {
            Some(next) => next.first_position,
            None => crate::model::attempt_view(&run.history).base,
        };
        let steps = state
            .activities
            .iter()
            .filter(|activity| activity.position >= base)
            .filter_map(|activity| match activity.status {
                ActivityStatus::Scheduled => {
                    Some(StepAction::Requeue(task(activity, activity.attempt + 1)))
                }
                ActivityStatus::Retrying => {
                    retry_at.get(&activity.position).map(|&(attempt, fire_at)| {
                        StepAction::Rearm(timer(
                            fire_at,
                            TimerKind::ActivityRetry {
                                position: activity.position,
                                attempt,
                            },
                        ))
                    })
                }
                // The attempt died with the process that ran it.
                ActivityStatus::Running => Some(StepAction::Lost(task(activity, activity.attempt))),
                ActivityStatus::Completed | ActivityStatus::Failed => None,
            })
            .collect();
        Plan {
            timers,
            timeout,
            steps,
        }
    }
}

/// Why runs are put back in motion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cause {
    /// Claimed from the store: this world started on it, or took over runs no live process
    /// drives. A run this process was not driving is marked where it resumes.
    Claimed,
    /// Read back by the process that drives it (after a passing storage failure, or a
    /// reopening): nothing to mark, the run never stopped being driven here.
    ReadBack,
}

impl Engine {
    /// True if `run`, claimed, comes back from a stop: this process did not drive it (a run
    /// started here before `World::start` is claimed too, and never stopped), it was not just
    /// reopened (its `run_reopened` says where it starts again), and this world can read it
    /// (it leaves an encrypted run alone without its keys).
    fn resumes_here(&self, run: &Unfinished) -> bool {
        !self.runs.drives(&run.state.id)
            && !run
                .history
                .last()
                .is_some_and(|e| matches!(e.kind, EventKind::RunReopened { .. }))
            && self.check_readable(&run.state).is_ok()
    }

    /// Records `run_resumed` before anything else this process records for the run, so the
    /// history shows where (and when) it went on after its process stopped. Not waited for:
    /// a marker lost in a crash is written by the next start. A refusal is logged and
    /// recovery goes on: the marker is for readers, the run needs nothing of it.
    async fn mark_resumed(&self, run_id: &str) {
        if let Err(e) = self
            .journal
            .append_nowait(run_id, vec![EventKind::RunResumed {}])
            .await
        {
            tracing::warn!(run_id, error = %e, "could not mark where the run resumed");
        }
    }

    /// Puts every unfinished run in the store that this world should drive back in motion:
    /// all of them, or on a store shared by several processes, those no live process drives.
    pub(crate) async fn recover(&self) -> Result<Recovered, WorldError> {
        let runs = self.recovery.claim().await?;
        Ok(self.recover_claimed(runs).await)
    }

    /// Puts one claimed run in motion (see `reconcile.rs`).
    pub(crate) async fn recover_claimed_one(&self, run_id: &str) -> Result<Recovered, WorldError> {
        self.recover_runs(vec![run_id.to_owned()], Cause::Claimed)
            .await
    }

    /// Puts these unfinished runs (now driven by this world) in motion.
    pub(crate) async fn recover_runs(
        &self,
        runs: Vec<String>,
        cause: Cause,
    ) -> Result<Recovered, WorldError> {
        let mut found = Recovered::default();
        for run_id in runs {
            let run = self.recovery.read(&run_id).await?;
            if run.state.external {
                // Driven from outside: nothing of it runs here.
                self.owned.not_driven_here(&run_id);
                continue;
            }
            found.runs += 1;
            if cause == Cause::Claimed && self.resumes_here(&run) {
                self.mark_resumed(&run_id).await;
            }
            let before = found.clone();
            self.adopt(&run.state);
            let plan = Plan::of(&run);

            for timer in plan.timers {
                self.timers.rearm(timer).await?;
                found.timers_rearmed += 1;
            }
            found.timers_rearmed += self.hooks.rearm_timers(&run.state).await?;
            if let Some(timeout) = plan.timeout {
                self.timers.rearm(timeout).await?;
            }
            for child in self.recovery.missing_children(&run).await {
                self.start_child(
                    &run_id,
                    child.position,
                    child.child_id,
                    &child.name,
                    child.input,
                    child.options,
                )
                .await?;
                found.children_created += 1;
            }
            if run.state.status == RunStatus::Running {
                for child in self.recovery.finished_children(&run).await {
                    self.notify_parent(&child).await;
                }
            }
            for step in plan.steps {
                match step {
                    StepAction::Requeue(task) => {
                        self.enqueue_activity(task);
                        found.steps_requeued += 1;
                    }
                    StepAction::Rearm(timer) => {
                        self.timers.rearm(timer).await?;
                        found.timers_rearmed += 1;
                    }
                    StepAction::Lost(task) => {
                        self.record_lost_attempt(&task, Loss::ProcessStopped).await;
                        found.attempts_lost += 1;
                    }
                }
            }
            self.runs.schedule(&run_id);
            let state = &run.state;
            world_log!(
                self.logs,
                INFO,
                Workflow,
                "run resumed from its history",
                run_id = run_id,
                workflow = state.name,
                status = state.status.to_string(),
                events = state.history.len(),
                steps_requeued = found.steps_requeued - before.steps_requeued,
                attempts_lost = found.attempts_lost - before.attempts_lost,
                timers = found.timers_rearmed - before.timers_rearmed,
            );
        }
        self.timers.wake();
        if found.runs > 0 {
            world_log!(
                self.logs,
                INFO,
                World,
                "resumed unfinished runs",
                runs = found.runs,
                steps_requeued = found.steps_requeued,
                attempts_lost = found.attempts_lost,
                timers = found.timers_rearmed,
                children_created = found.children_created,
            );
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::StructuredError;
    use crate::model::{QueuedRun, EVENT_FORMAT_VERSION};

    fn history(kinds: Vec<EventKind>) -> Unfinished {
        let events: Vec<Arc<Event>> = kinds
            .into_iter()
            .enumerate()
            .map(|(seq, kind)| {
                Arc::new(Event {
                    id: format!("evnt_{seq}"),
                    run_id: "wrun_1".into(),
                    seq: seq as u64,
                    timestamp: 1000 + seq as i64,
                    version: EVENT_FORMAT_VERSION,
                    kind,
                })
            })
            .collect();
        let state = WorkflowState::from_history(&events).unwrap();
        Unfinished {
            state,
            history: events,
        }
    }

    fn scheduled(position: u32) -> EventKind {
        EventKind::ActivityScheduled {
            position,
            activity_id: format!("step_{position}"),
            name: "a".into(),
            input: Payload::null(),
            options: None,
            inline: false,
        }
    }

    #[test]
    fn plans_each_step_by_its_status_in_order() {
        let mut queued = QueuedRun::new("w", "wf", Payload::null());
        queued.timeout_ms = Some(60_000);
        let run = history(vec![
            EventKind::WorkflowQueued(Box::new(queued)),
            EventKind::WorkflowStarted {
                attempt: 1,
                first_position: 0,
            },
            // 0: running when the process stopped.
            scheduled(0),
            EventKind::ActivityStarted {
                position: 0,
                attempt: 1,
            },
            // 1: waiting for its second attempt.
            scheduled(1),
            EventKind::ActivityStarted {
                position: 1,
                attempt: 1,
            },
            EventKind::ActivityFailed {
                position: 1,
                attempt: 1,
                error: StructuredError::new("boom"),
                retrying: true,
            },
            EventKind::ActivityRetry {
                position: 1,
                attempt: 2,
                delay_ms: 500,
            },
            // 2: scheduled, never started.
            scheduled(2),
            // 3: a sleep.
            EventKind::TimerScheduled {
                position: 3,
                fire_at: 9_000,
                timer_id: None,
            },
        ]);
        let plan = Plan::of(&run);

        let kinds: Vec<TimerKind> = plan.timers.iter().map(|t| t.kind.clone()).collect();
        assert_eq!(kinds, vec![TimerKind::Sleep { position: 3 }]);
        assert_eq!(plan.timers[0].fire_at, 9_000);
        let timeout = plan.timeout.expect("the run has a timeout");
        assert_eq!(timeout.kind, TimerKind::RunTimeout);
        assert_eq!(timeout.fire_at, 1000 + 60_000);

        assert_eq!(plan.steps.len(), 3);
        match &plan.steps[0] {
            StepAction::Lost(task) => assert_eq!((task.position, task.attempt), (0, 1)),
            _ => panic!("step 0 was running: its attempt is lost"),
        }
        match &plan.steps[1] {
            StepAction::Rearm(timer) => {
                assert_eq!(
                    timer.kind,
                    TimerKind::ActivityRetry {
                        position: 1,
                        attempt: 2
                    }
                );
                // The `activity_retry` event (seq 7) plus its delay.
                assert_eq!(timer.fire_at, 1007 + 500);
            }
            _ => panic!("step 1 waits for a retry: its timer is re-armed"),
        }
        match &plan.steps[2] {
            StepAction::Requeue(task) => assert_eq!((task.position, task.attempt), (2, 1)),
            _ => panic!("step 2 was never started: it is queued again"),
        }
    }
}
