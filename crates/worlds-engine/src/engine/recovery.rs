//! Resuming a store's unfinished runs when a world starts.
//!
//! Nothing about a run lives only in memory: on start, the engine reads every unfinished run
//! back from the store and puts its work in motion again. Queued tasks are rebuilt from
//! history, timers re-armed (adding a timer is idempotent), and a step that was running when
//! the previous process stopped is recorded as a lost attempt and retried under its policy.

use std::collections::HashMap;

use crate::error::WorldError;
use crate::model::{ActivityStatus, EventKind, ResolveData};
use crate::store::{Timer, TimerKind};
use crate::telemetry::logs::world_log;

use super::lost::Loss;
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

impl Engine {
    /// Puts every unfinished run in the store that this world should drive back in motion:
    /// all of them, or on a store shared by several processes, those no live process drives.
    pub(crate) async fn recover(&self) -> Result<Recovered, WorldError> {
        let registry = &self.registry;
        let can_run = |name: &str| registry.workflow(name).is_some();
        let runs = self.store.claim_runs(&can_run).await?;
        self.recover_runs(runs).await
    }

    /// Puts these unfinished runs (now driven by this world) in motion.
    pub(crate) async fn recover_runs(&self, runs: Vec<String>) -> Result<Recovered, WorldError> {
        let mut found = Recovered::default();
        for run_id in runs {
            let state = self.store.get_run(&run_id, ResolveData::All).await?;
            found.runs += 1;
            let before = found.clone();
            self.adopt(&state);

            // Timers: re-arm every sleep not yet fired and every retry not yet started.
            let history = self.store.history(&run_id, 0).await?;
            let mut retry_at: HashMap<u32, (u32, i64)> = HashMap::new();
            for event in &history {
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
            for (position, fire_at) in state.pending_timers() {
                self.timers
                    .rearm(Timer {
                        fire_at,
                        run_id: run_id.clone(),
                        kind: TimerKind::Sleep { position },
                    })
                    .await?;
                found.timers_rearmed += 1;
            }
            found.timers_rearmed += self.hooks.rearm_timers(&state).await?;
            if let Some(retry) = state.retry_pending() {
                self.timers
                    .rearm(Timer {
                        fire_at: retry.due_at,
                        run_id: run_id.clone(),
                        kind: TimerKind::WorkflowRetry {
                            attempt: retry.attempt,
                        },
                    })
                    .await?;
                found.timers_rearmed += 1;
            }
            if let Some(ms) = state.timeout_ms {
                self.timers
                    .rearm(Timer {
                        fire_at: state.created_at.saturating_add(ms as i64),
                        run_id: run_id.clone(),
                        kind: TimerKind::RunTimeout,
                    })
                    .await?;
            }

            // A child recorded by its parent but never created (the process stopped in between).
            for event in &history {
                if let EventKind::ChildWorkflowStarted {
                    position,
                    child_id,
                    name,
                    input: Some(input),
                    options,
                } = &event.kind
                {
                    let missing = matches!(
                        self.store.get_run(child_id, ResolveData::None).await,
                        Err(crate::error::WorldError::NotFound { .. })
                    );
                    let known = self.registry.workflow(name).is_some();
                    if missing && !known {
                        tracing::warn!(run_id = %run_id, child = %child_id, workflow = %name, "a recorded child of an unknown workflow was not created; register it and start again");
                    }
                    if missing && known && state.status == crate::model::RunStatus::Running {
                        self.start_child(
                            &run_id,
                            *position,
                            child_id.clone(),
                            name,
                            input.clone(),
                            options.as_deref().cloned().unwrap_or_default(),
                        )
                        .await?;
                        found.children_created += 1;
                    }
                }
            }

            for activity in &state.activities {
                match activity.status {
                    ActivityStatus::Scheduled => {
                        self.enqueue_activity(ActivityTask::from_state(
                            run_id.as_str().into(),
                            state.workflow_id.clone(),
                            activity,
                            activity.attempt + 1,
                        ));
                        found.steps_requeued += 1;
                    }
                    ActivityStatus::Retrying => {
                        if let Some((attempt, fire_at)) = retry_at.get(&activity.position) {
                            self.timers
                                .rearm(Timer {
                                    fire_at: *fire_at,
                                    run_id: run_id.clone(),
                                    kind: TimerKind::ActivityRetry {
                                        position: activity.position,
                                        attempt: *attempt,
                                    },
                                })
                                .await?;
                            found.timers_rearmed += 1;
                        }
                    }
                    ActivityStatus::Running => {
                        // The attempt died with the process that ran it.
                        let task = ActivityTask::from_state(
                            run_id.as_str().into(),
                            state.workflow_id.clone(),
                            activity,
                            activity.attempt,
                        );
                        self.record_lost_attempt(&task, Loss::ProcessStopped).await;
                        found.attempts_lost += 1;
                    }
                    ActivityStatus::Completed | ActivityStatus::Failed => {}
                }
            }
            self.runs.schedule(&run_id);
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
