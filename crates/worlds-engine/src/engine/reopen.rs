//! Reopening a failed run by hand — retry, reset, resume — and putting it back in motion.
//!
//! What a reopening keeps is decided by [`plan_reopen`] from the run's history alone. Before
//! anything is recorded, the attempt it would start is replayed against the code registered
//! now ([`Engine::replay_check`]): a reopening the code cannot replay (the run would only be
//! quarantined again) is refused with the position and both commands. Then `run_reopened` is
//! appended, and the run is driven like a run read back on start: its new attempt is due at
//! once.

use std::sync::atomic::Ordering;

use crate::error::WorldError;
use crate::model::{
    plan_reopen, reopened_by, Event, EventKind, ReopenRequest, Reopened, WorkflowState,
    EVENT_FORMAT_VERSION,
};
use crate::telemetry::logs::world_log;

use super::verify::HistoryVerdict;
use super::Engine;

impl Engine {
    /// Reopens failed run `run_id` as `request` asks; see [`crate::World::reopen`].
    pub(crate) async fn reopen(
        &self,
        run_id: &str,
        request: ReopenRequest,
    ) -> Result<Reopened, WorldError> {
        let history = self.store.history(run_id, 0).await?;
        if let Some(operation) = request.operation.as_deref() {
            if reopened_by(&history, operation) {
                return Ok(Reopened::already(run_id, request.action));
            }
        }
        let state = WorkflowState::from_history(&history)?;
        if state.external {
            return Err(WorldError::conflict(format!(
                "run {} is driven from outside the engine (workflow '{}'); only its own runtime can run it again",
                state.id, state.name
            )));
        }
        let reopening = plan_reopen(&state, &history, &request)?;
        let reopened = Reopened::from_event(run_id, &reopening)
            .ok_or_else(|| WorldError::Internal("a reopening that is not run_reopened".into()))?;
        if request.replay_check {
            self.check_replays(&state, &history, &reopening)?;
        }
        self.journal.append(run_id, vec![reopening]).await?;
        world_log!(
            self.logs,
            INFO,
            Workflow,
            "run reopened by hand",
            run_id = run_id,
            workflow = state.name,
            action = request.action.as_str(),
            attempt = reopened.attempt,
            kept_until = reopened.kept_until,
            by = request.by.as_deref().unwrap_or("-"),
            reason = request.reason.as_deref().unwrap_or("-"),
        );
        if self.registry.workflow(&state.name).is_some() {
            self.drive_reopened(run_id, reopened.attempt).await?;
        }
        // Otherwise a process that has its workflow drives it (claims it, or reads it back
        // on start).
        Ok(reopened)
    }

    /// Replays the attempt `reopening` would start; refuses it if the code registered now
    /// cannot replay what it keeps.
    fn check_replays(
        &self,
        state: &WorkflowState,
        history: &[std::sync::Arc<Event>],
        reopening: &EventKind,
    ) -> Result<(), WorldError> {
        let EventKind::RunReopened {
            attempt,
            kept_from,
            kept_until,
            next_position,
            ..
        } = reopening
        else {
            return Err(WorldError::Internal(
                "a reopening that is not run_reopened".into(),
            ));
        };
        let now = self.clock.now_ms();
        let mut trial: Vec<Event> = history.iter().map(|e| Event::clone(e)).collect();
        for kind in [
            reopening.clone(),
            EventKind::WorkflowStarted {
                attempt: *attempt,
                first_position: *next_position,
            },
        ] {
            trial.push(Event {
                id: String::new(),
                run_id: state.id.clone(),
                seq: trial.len() as u64,
                timestamp: now,
                version: EVENT_FORMAT_VERSION,
                kind,
            });
        }
        match self.replay_check(&trial)? {
            HistoryVerdict::Clean => Ok(()),
            HistoryVerdict::NotRegistered { name } => Err(WorldError::conflict(format!(
                "workflow '{name}' of run {} is not registered in this process; register it (the fixed version) and try again",
                state.id
            ))),
            HistoryVerdict::Diverged {
                position,
                recorded,
                issued,
            } => {
                // Said in the failed attempt's numbering, the one its history shows.
                let kept = *next_position..next_position + (kept_until - kept_from);
                let position = match kept.contains(&position) {
                    true => position - next_position + kept_from,
                    false => position,
                };
                Err(WorldError::conflict(format!(
                    "run {} would diverge again: at command #{position} the kept history holds {recorded} but the code now issues {issued}; fix the code (world.verify() checks it) or reset the run to #{position} or earlier",
                    state.id
                )))
            }
        }
    }

    /// Puts a reopened run in motion and starts its new attempt: here, or on a store shared
    /// by several processes, in whichever process claims it (this one tries at once). Its
    /// start is also due as a timer, so a process that stops before starting it leaves it to
    /// the next one.
    async fn drive_reopened(&self, run_id: &str, attempt: u32) -> Result<(), WorldError> {
        if !self.accepting.load(Ordering::Acquire) {
            // Shutting down: the next start reads it back.
            return Ok(());
        }
        if self.store.is_shared() {
            self.recover().await?;
            if !self.runs.drives(run_id) {
                return Ok(());
            }
        } else {
            self.recover_runs(vec![run_id.to_owned()], super::recovery::Cause::ReadBack)
                .await?;
        }
        match self.start_workflow_retry(run_id, attempt).await {
            // Its start timer fired first and started it.
            Err(WorldError::InvalidTransition { .. } | WorldError::Conflict { .. }) => Ok(()),
            started => started,
        }
    }
}
