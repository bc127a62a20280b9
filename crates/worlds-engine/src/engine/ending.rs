//! How a run ends: the workflow function's result recorded, or its failure strategy applied
//! (ignore, quarantine, retry from the start, compensate, cascade to the parent), and the
//! terminal follow-ups of the final event.

use std::sync::Arc;

use crate::error::{codes, StructuredError, WorldError};
use crate::model::{EventKind, FailureStrategy};
use crate::payload::Payload;
use crate::store::{Timer, TimerKind};
use crate::telemetry::logs::world_log;

use super::authoring::errors::WorkflowError;
use super::executor::{Next, Phase};
use super::machine::RunCore;
use super::Engine;

impl Engine {
    /// The workflow function returned: record the result, or apply the failure strategy.
    pub(super) async fn finish(
        &self,
        core: &Arc<RunCore>,
        result: Result<Payload, WorkflowError>,
    ) -> Result<Next, WorldError> {
        if core.compensation_recorded() {
            // Replaying a run that had already begun compensating: the history past this point
            // belongs to the compensations, which run next.
            return Ok(Next::Compensate);
        }
        if let Err(divergence) = core.check_finished() {
            self.fail_nondeterministic(core, Phase::Main, divergence.to_structured())
                .await?;
            return Ok(Next::Done);
        }
        let run_id = &core.info.run_id;
        let error = match result {
            Ok(output) => {
                match self
                    .journal
                    .check_payload(|| format!("output of workflow run {run_id}"), &output)
                {
                    Ok(()) => {
                        self.finish_with(run_id, vec![EventKind::WorkflowCompleted { output }])
                            .await?;
                        return Ok(Next::Done);
                    }
                    Err(e) => {
                        StructuredError::new(e.to_string()).with_code(codes::PAYLOAD_TOO_LARGE)
                    }
                }
            }
            Err(error) => match error.downcast_ref::<super::authoring::errors::ContextError>() {
                Some(e) => e.to_structured(),
                None => error.to_structured(),
            },
        };
        self.apply_failure_strategy(core, error).await
    }

    /// A workflow attempt failed: do what its failure strategy says.
    async fn apply_failure_strategy(
        &self,
        core: &Arc<RunCore>,
        error: StructuredError,
    ) -> Result<Next, WorldError> {
        let run_id = &core.info.run_id;
        let failed = EventKind::WorkflowFailed {
            error: error.clone(),
        };
        match core.info.failure_strategy {
            FailureStrategy::Ignore => {
                self.finish_with(run_id, vec![failed]).await?;
            }
            FailureStrategy::Quarantine => {
                let reason = format!("failed: {error}");
                self.finish_with(
                    run_id,
                    vec![failed, EventKind::WorkflowQuarantined { reason }],
                )
                .await?;
            }
            FailureStrategy::Compensate if core.has_compensations() => {
                match self
                    .journal
                    .append(run_id, vec![failed, EventKind::WorkflowCompensating {}])
                    .await
                {
                    Ok(_) => {
                        world_log!(
                            self.logs,
                            WARN,
                            Workflow,
                            "run failed; running its compensations",
                            run_id = run_id,
                            workflow = core.info.name,
                            error = error.to_string(),
                        );
                        return Ok(Next::Compensate);
                    }
                    Err(
                        WorldError::Conflict { .. }
                        | WorldError::InvalidTransition { .. }
                        | WorldError::LeaseLost { .. },
                    ) => {}
                    Err(e) => return Err(e),
                }
            }
            FailureStrategy::Compensate => {
                self.finish_with(run_id, vec![failed]).await?;
            }
            FailureStrategy::Retry if core.info.attempt <= core.info.max_retries => {
                self.schedule_workflow_retry(core, error).await?;
                return Ok(Next::Dormant);
            }
            FailureStrategy::Retry => {
                let mut error = error;
                error.message = format!(
                    "{} (after {} attempts; the retry strategy allows {} restarts)",
                    error.message, core.info.attempt, core.info.max_retries
                );
                self.finish_with(run_id, vec![EventKind::WorkflowFailed { error }])
                    .await?;
            }
            FailureStrategy::Cascade => {
                self.cascade_failure(core, error).await?;
            }
        }
        Ok(Next::Done)
    }

    /// The `retry` strategy: record the restart and arm its timer. The failed attempt's
    /// queued and running steps are abandoned.
    async fn schedule_workflow_retry(
        &self,
        core: &RunCore,
        error: StructuredError,
    ) -> Result<(), WorldError> {
        let run_id = core.info.run_id.as_str();
        let failed_attempt = core.info.attempt;
        let delay = self.config.workflow_retry.delay(failed_attempt);
        let delay_ms = crate::clock::duration_ms(delay).max(0) as u64;
        let attempt = failed_attempt + 1;
        world_log!(
            self.logs,
            INFO,
            Workflow,
            "workflow failed; restarting it after a delay",
            run_id = run_id,
            workflow = core.info.name,
            attempt = attempt,
            delay_ms = delay_ms,
            error = error.to_string(),
        );
        let retry = EventKind::WorkflowRetry {
            attempt,
            delay_ms,
            next_position: core.next_position(),
            error,
        };
        match self.journal.append(run_id, vec![retry]).await {
            Ok(_) => {}
            Err(
                WorldError::Conflict { .. }
                | WorldError::InvalidTransition { .. }
                | WorldError::LeaseLost { .. },
            ) => return Ok(()),
            Err(e) => return Err(e),
        }
        self.runs.abandon_attempt(run_id);
        self.timers
            .add(Timer {
                fire_at: self.clock.now_ms().saturating_add(delay_ms as i64),
                run_id: run_id.to_owned(),
                kind: TimerKind::WorkflowRetry { attempt },
            })
            .await
    }

    /// The retry delay is over: start the next attempt.
    pub(crate) async fn start_workflow_retry(
        &self,
        run_id: &str,
        attempt: u32,
    ) -> Result<(), WorldError> {
        let state = self
            .store
            .get_run(run_id, crate::model::ResolveData::None)
            .await?;
        let Some(pending) = state.retry_pending().filter(|p| p.attempt == attempt) else {
            return Ok(());
        };
        self.journal
            .append(
                run_id,
                vec![EventKind::WorkflowStarted {
                    attempt,
                    first_position: pending.first_position,
                }],
            )
            .await?;
        self.runs.schedule(run_id);
        Ok(())
    }

    /// The `cascade` strategy: the run is cancelled, and so are its parent and children.
    async fn cascade_failure(
        &self,
        core: &RunCore,
        error: StructuredError,
    ) -> Result<(), WorldError> {
        let run_id = &core.info.run_id;
        let reason = format!("{error} (failure strategy: cascade)");
        self.finish_with(
            run_id,
            vec![EventKind::WorkflowCancelled {
                reason: Some(reason.clone()),
            }],
        )
        .await?;
        let state = self
            .store
            .get_run(run_id, crate::model::ResolveData::None)
            .await?;
        for child in &state.children {
            let _ = self
                .cancel_run(child, Some(format!("cascade from run {run_id}: {reason}")))
                .await;
        }
        if let Some(parent) = &state.parent_id {
            let _ = self
                .cancel_run(
                    parent,
                    Some(format!("cascade from child run {run_id}: {reason}")),
                )
                .await;
        }
        Ok(())
    }

    /// Every compensation has run.
    pub(super) async fn finish_compensation(&self, core: &RunCore) -> Result<(), WorldError> {
        if let Err(divergence) = core.check_finished() {
            return self
                .fail_nondeterministic(core, Phase::Compensating, divergence.to_structured())
                .await;
        }
        self.finish_with(&core.info.run_id, vec![EventKind::WorkflowCompensated {}])
            .await
    }

    /// Replay diverged from history. Retrying the same code cannot help and compensating from a
    /// diverged history is unsafe, so the run is quarantined whatever its strategy.
    pub(super) async fn fail_nondeterministic(
        &self,
        core: &RunCore,
        phase: Phase,
        error: StructuredError,
    ) -> Result<(), WorldError> {
        tracing::error!(run_id = %core.info.run_id, error = %error, "run diverged from its history; quarantining it");
        let reason = error.message.clone();
        let end = match phase {
            Phase::Main => EventKind::WorkflowFailed { error },
            Phase::Compensating => EventKind::WorkflowCompensated {},
        };
        self.finish_with(
            &core.info.run_id,
            vec![end, EventKind::WorkflowQuarantined { reason }],
        )
        .await
    }

    /// The workflow is pending, but on nothing the engine can resume: it awaited a future that
    /// is not a workflow command. Waiting forever would hide the bug, so the run fails.
    pub(super) async fn fail_stuck(&self, core: &RunCore, phase: Phase) -> Result<(), WorldError> {
        let error = StructuredError::new(
            "the workflow is waiting on something that is not a workflow command (such as \
             tokio::time::sleep, a channel or a direct network call), which the engine can \
             neither record nor resume; await ctx.sleep, a step or a child workflow instead",
        )
        .with_code(codes::NOT_A_COMMAND);
        tracing::error!(run_id = %core.info.run_id, "workflow awaits a non-durable future");
        let end = match phase {
            Phase::Main => EventKind::WorkflowFailed { error },
            Phase::Compensating => EventKind::WorkflowCompensated {},
        };
        self.finish_with(&core.info.run_id, vec![end]).await
    }

    /// Records the events that end a run and runs the terminal follow-ups.
    pub(crate) async fn finish_with(
        &self,
        run_id: &str,
        kinds: Vec<EventKind>,
    ) -> Result<(), WorldError> {
        let failed = kinds.iter().find_map(|kind| match kind {
            EventKind::WorkflowFailed { error } => Some(error.to_string()),
            _ => None,
        });
        let quarantined = kinds.iter().find_map(|kind| match kind {
            EventKind::WorkflowQuarantined { reason } => Some(reason.clone()),
            _ => None,
        });
        match self.journal.append(run_id, kinds).await {
            Ok(appended) => {
                let state = match appended.ended {
                    Some(state) => state,
                    None => Arc::new(
                        self.store
                            .get_run(run_id, crate::model::ResolveData::All)
                            .await?,
                    ),
                };
                if let Some(error) = failed {
                    world_log!(
                        self.logs,
                        WARN,
                        Workflow,
                        "run failed",
                        run_id = run_id,
                        workflow = state.name,
                        error = error
                    );
                }
                if let Some(reason) = quarantined {
                    world_log!(
                        self.logs,
                        ERROR,
                        Workflow,
                        "run quarantined: it is kept as it is for inspection",
                        run_id = run_id,
                        workflow = state.name,
                        reason = reason
                    );
                }
                self.on_terminal(&state).await;
                Ok(())
            }
            // Cancelled (or otherwise finished) while the code ran: that outcome stands.
            Err(
                WorldError::Conflict { .. }
                | WorldError::InvalidTransition { .. }
                | WorldError::LeaseLost { .. },
            ) => Ok(()),
            Err(e) => Err(e),
        }
    }
}
