//! Activities (steps): [`EventKind::ActivityScheduled`], [`EventKind::ActivityStarted`],
//! [`EventKind::ActivityCompleted`], [`EventKind::ActivityFailed`],
//! [`EventKind::ActivityRetry`] and [`EventKind::ActivityHeartbeat`], and the state of each
//! step ([`ActivityState`]).

use serde::{Deserialize, Serialize};

use crate::clock::Millis;
use crate::error::{StructuredError, WorldError};
use crate::model::ActivityOptions;
use crate::payload::Payload;

use super::{EventKind, ResolveData, WorkflowState};

/// Where an activity (step) is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActivityStatus {
    /// Waiting in the queue for a worker.
    Scheduled,
    /// An attempt is executing.
    Running,
    /// An attempt failed; the next waits for its retry delay.
    Retrying,
    /// Finished with a result.
    Completed,
    /// Finished with an error, no more attempts.
    Failed,
}

/// One activity (step) of a run, as the debugging view shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActivityState {
    /// Step id (`step_…`).
    pub id: String,
    /// Activity (or step) name.
    pub name: String,
    /// Command position in the workflow.
    pub position: u32,
    /// Current status.
    pub status: ActivityStatus,
    /// Current or last attempt, from 1 (0 before the first start).
    pub attempt: u32,
    /// Input (left out when queried with `ResolveData::None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Payload>,
    /// Options the workflow set for this call, over the activity's defaults.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::model::stored_options::activity"
    )]
    pub options: Option<Box<ActivityOptions>>,
    /// A named step (`ctx.step`), whose code lives in the workflow.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inline: bool,
    /// Result, once completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Payload>,
    /// Last error, if an attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<StructuredError>,
    /// When it was scheduled.
    pub scheduled_at: Millis,
    /// When the current or last attempt started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Millis>,
    /// When it finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Millis>,
    /// Last heartbeat time of the current attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat: Option<Millis>,
    /// Last heartbeat message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_message: Option<String>,
}

impl ActivityState {
    /// This step as a list shows it: with its input and output under [`ResolveData::All`],
    /// without them under [`ResolveData::None`].
    pub fn view(&self, resolve: ResolveData) -> ActivityState {
        let mut copy = self.clone();
        if resolve == ResolveData::None {
            copy.input = None;
            copy.output = None;
        }
        copy
    }
}

impl WorkflowState {
    /// The activity at command `position`, if one was scheduled there.
    pub fn activity(&self, position: u32) -> Option<&ActivityState> {
        self.find_activity(position)
            .ok()
            .map(|i| &self.activities[i])
    }

    /// Where the activity at `position` is in `activities` (kept sorted by position), or where
    /// it would go.
    fn find_activity(&self, position: u32) -> Result<usize, usize> {
        self.activities
            .binary_search_by_key(&position, |a| a.position)
    }

    fn activity_mut(&mut self, position: u32) -> Option<&mut ActivityState> {
        let index = self.find_activity(position).ok()?;
        self.activities.get_mut(index)
    }

    /// The activity at `position`, or the conflict a record for a missing one is.
    fn scheduled_activity(&self, position: u32) -> Result<&ActivityState, WorldError> {
        self.activity(position).ok_or_else(|| {
            WorldError::conflict(format!(
                "run {} has no activity at position {position}",
                self.id
            ))
        })
    }

    /// Ok if the run takes step events and the activity at `position` runs `attempt`.
    fn attempt_running(&self, position: u32, attempt: u32) -> Result<(), WorldError> {
        self.takes_step_events()?;
        let a = self.scheduled_activity(position)?;
        if a.status == ActivityStatus::Running && a.attempt == attempt {
            Ok(())
        } else {
            Err(WorldError::conflict(format!(
                "activity #{position} '{}' of run {} is {:?} at attempt {}; a record for attempt {attempt} was refused",
                a.name, self.id, a.status, a.attempt
            )))
        }
    }
}

/// Whether a step event may be appended to `state` now.
pub(super) fn check(state: &WorkflowState, kind: &EventKind) -> Result<(), WorldError> {
    match kind {
        EventKind::ActivityScheduled {
            position,
            activity_id,
            ..
        } => {
            state.takes_step_events()?;
            if state.find_activity(*position).is_ok() {
                return Err(WorldError::conflict(format!(
                    "run {} already has an activity at position {position}",
                    state.id
                )));
            }
            // A step id chosen from outside (a run driven by a DevKit runtime) may repeat
            // one; the engine's own are fresh ids and are not searched for: that search
            // reads every step of the run, and made each step of a long run cost more than
            // the one before.
            if state.external && state.activities.iter().any(|a| a.id == *activity_id) {
                return Err(WorldError::conflict(format!(
                    "run {} already has a step {activity_id}",
                    state.id
                )));
            }
            Ok(())
        }
        EventKind::ActivityStarted { position, attempt } => {
            state.takes_step_events()?;
            let a = state.scheduled_activity(*position)?;
            let expected = a.attempt + 1;
            let startable = matches!(
                a.status,
                ActivityStatus::Scheduled | ActivityStatus::Retrying
            );
            if startable && *attempt == expected {
                Ok(())
            } else {
                Err(WorldError::conflict(format!(
                    "activity #{position} '{}' of run {} is {:?} at attempt {}; attempt {attempt} cannot start",
                    a.name, state.id, a.status, a.attempt
                )))
            }
        }
        EventKind::ActivityFailed {
            position,
            attempt: 0,
            retrying: false,
            ..
        } => {
            // Refused before any attempt (not registered, input over the limit).
            state.takes_step_events()?;
            let a = state.scheduled_activity(*position)?;
            if a.status == ActivityStatus::Scheduled && a.attempt == 0 {
                Ok(())
            } else {
                Err(WorldError::conflict(format!(
                    "activity #{position} of run {} has already started",
                    state.id
                )))
            }
        }
        EventKind::ActivityCompleted {
            position, attempt, ..
        }
        | EventKind::ActivityFailed {
            position, attempt, ..
        }
        | EventKind::ActivityHeartbeat {
            position, attempt, ..
        } => state.attempt_running(*position, *attempt),
        EventKind::ActivityRetry {
            position, attempt, ..
        } => {
            state.takes_step_events()?;
            let a = state.scheduled_activity(*position)?;
            // Written in the same append as the failure it follows, so the activity may
            // still read as running here.
            let waiting = matches!(a.status, ActivityStatus::Retrying | ActivityStatus::Running);
            if waiting && *attempt == a.attempt + 1 {
                Ok(())
            } else {
                Err(WorldError::conflict(format!(
                    "activity #{position} of run {} is not waiting to retry",
                    state.id
                )))
            }
        }
        _ => unreachable!("{} is not a step event", kind.type_name()),
    }
}

/// What a step event accepted by [`check`] changes, at time `at`.
pub(super) fn apply(state: &mut WorkflowState, kind: &EventKind, at: Millis) {
    match kind {
        EventKind::ActivityScheduled {
            position,
            activity_id,
            name,
            input,
            options,
            inline,
        } => {
            // Positions grow in command order, so this is nearly always the end.
            let index = state.find_activity(*position).unwrap_or_else(|i| i);
            state.activities.insert(
                index,
                ActivityState {
                    id: activity_id.clone(),
                    name: name.clone(),
                    position: *position,
                    status: ActivityStatus::Scheduled,
                    attempt: 0,
                    input: Some(input.clone()),
                    options: options.clone(),
                    inline: *inline,
                    output: None,
                    error: None,
                    scheduled_at: at,
                    started_at: None,
                    completed_at: None,
                    last_heartbeat: None,
                    heartbeat_message: None,
                },
            );
        }
        EventKind::ActivityStarted { position, attempt } => {
            if let Some(a) = state.activity_mut(*position) {
                a.status = ActivityStatus::Running;
                a.attempt = *attempt;
                a.started_at = Some(at);
                a.last_heartbeat = Some(at);
            }
        }
        EventKind::ActivityCompleted {
            position, output, ..
        } => {
            if let Some(a) = state.activity_mut(*position) {
                a.status = ActivityStatus::Completed;
                a.output = Some(output.clone());
                a.completed_at = Some(at);
            }
        }
        EventKind::ActivityFailed {
            position,
            error,
            retrying,
            ..
        } => {
            if let Some(a) = state.activity_mut(*position) {
                a.error = Some(error.clone());
                if *retrying {
                    a.status = ActivityStatus::Retrying;
                } else {
                    a.status = ActivityStatus::Failed;
                    a.completed_at = Some(at);
                }
            }
        }
        EventKind::ActivityRetry { .. } => {}
        EventKind::ActivityHeartbeat {
            position, message, ..
        } => {
            if let Some(a) = state.activity_mut(*position) {
                a.last_heartbeat = Some(at);
                if message.is_some() {
                    a.heartbeat_message = message.clone();
                }
            }
        }
        _ => unreachable!("{} is not a step event", kind.type_name()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{ev, queued};
    use super::*;
    use crate::model::RunStatus;

    #[test]
    fn materializes_a_step_and_refuses_a_duplicate_completion() {
        let mut s = WorkflowState::from_first_event(&queued()).unwrap();
        let events = [
            EventKind::WorkflowStarted {
                attempt: 1,
                first_position: 0,
            },
            EventKind::ActivityScheduled {
                position: 0,
                activity_id: "step_1".into(),
                name: "a".into(),
                input: Payload::null(),
                options: None,
                inline: false,
            },
            EventKind::ActivityStarted {
                position: 0,
                attempt: 1,
            },
            EventKind::ActivityCompleted {
                position: 0,
                attempt: 1,
                output: Payload::encode(&7).unwrap(),
            },
        ];
        for (i, kind) in events.into_iter().enumerate() {
            s.check(&kind).unwrap();
            s.apply(&ev(i as u64 + 1, kind));
        }
        assert_eq!(s.status, RunStatus::Running);
        assert_eq!(s.started_at, Some(1001));
        let a = s.activity(0).unwrap();
        assert_eq!(a.status, ActivityStatus::Completed);
        let dup = EventKind::ActivityCompleted {
            position: 0,
            attempt: 1,
            output: Payload::null(),
        };
        assert_eq!(s.check(&dup).unwrap_err().http_status(), 409);
    }

    /// Regression (W6: the cost of a step grew with the run's history): checking a new step
    /// searched every earlier step of the run for its id, 10 000 string comparisons for the
    /// 10 000th step. The engine's step ids are fresh, so only a run driven from outside,
    /// whose caller picks them, is searched.
    #[test]
    fn a_new_step_id_is_searched_for_only_in_a_run_driven_from_outside() {
        let mut s = WorkflowState::from_first_event(&queued()).unwrap();
        let scheduled = |position: u32| EventKind::ActivityScheduled {
            position,
            activity_id: "step_1".into(),
            name: "a".into(),
            input: Payload::null(),
            options: None,
            inline: false,
        };
        for (i, kind) in [
            EventKind::WorkflowStarted {
                attempt: 1,
                first_position: 0,
            },
            scheduled(0),
        ]
        .into_iter()
        .enumerate()
        {
            s.check(&kind).unwrap();
            s.apply(&ev(i as u64 + 1, kind));
        }
        // The same id again at a new position: not looked for in the engine's run...
        s.check(&scheduled(1)).unwrap();
        // ...and refused in one driven from outside.
        s.external = true;
        let refused = s.check(&scheduled(1)).unwrap_err();
        assert!(
            refused.to_string().contains("already has a step step_1"),
            "{refused}"
        );
    }
}
