//! What one DevKit event does to its run: the engine events to append in one write, planned on
//! the run's state and history (see `log.rs` for which engine event each DevKit event is).
//!
//! The rules a write is checked against, beyond the engine's own:
//!
//! | event | refused with |
//! |---|---|
//! | `run_created` with a run id that exists | 409 |
//! | `run_started` on a run that has ended | 410 (a missing run is first created from the event's data) |
//! | `run_completed` / `run_failed` / `run_cancelled` on a run that has ended | 409 (`run_cancelled` on a cancelled run is answered as it stands) |
//! | `attr_set` on an ended run, with a reserved key, or repeating a workflow's correlation id | 409 / 400 / 409 |
//! | `step_created` for a step that exists, or on an ended run | 409 |
//! | `step_started` of a step that ended; before its `retryAfter`; carrying creation data for a step that exists | 409; 425; 409 |
//! | `step_completed` / `step_failed` / `step_retrying` of a step that ended | 409 |
//! | `hook_created` with an id that exists | 409 (a token another live hook holds is answered with `hook_conflict`) |
//! | `hook_received` / `hook_disposed` of a hook that does not exist or was disposed | 404 |
//! | `wait_created` with an id that exists; `wait_completed` of a completed wait | 409 |

use serde_json::Value;
use worlds_engine::model::{check_attribute_changes, ActivityStatus, AttributeChange};
use worlds_engine::{EventKind, Payload, RunStatus, StructuredError, WorkflowState, WorldError};

use super::event::{conflict, ended, error, gone, invalid, payload, NewEvent};
use super::log::{self, parse_time};

/// The position a new record of the run takes: its next event's.
pub(crate) fn next_position(state: &WorkflowState) -> u32 {
    u32::try_from(state.event_count).unwrap_or(u32::MAX)
}

/// What a write does to a run, planned on its state and history.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    /// The engine events to append, in one write.
    pub(crate) kinds: Vec<EventKind>,
    /// A hook to create (through the engine's token rules) instead of appending.
    pub(crate) hook: Option<NewHook>,
    /// True when the write creates the step it starts.
    pub(crate) step_created: bool,
}

/// A hook to create.
#[derive(Debug)]
pub(crate) struct NewHook {
    pub(crate) position: u32,
    pub(crate) hook_id: String,
    pub(crate) token: String,
    pub(crate) metadata: Option<Payload>,
}

/// `workflow_started` first if the run has not started.
fn start_if_pending(state: &WorkflowState, kinds: &mut Vec<EventKind>) {
    if state.status == RunStatus::Pending {
        kinds.push(EventKind::WorkflowStarted {
            attempt: 1,
            first_position: 0,
        });
    }
}

pub(crate) fn find_step<'s>(
    state: &'s WorkflowState,
    step_id: &str,
) -> Option<&'s worlds_engine::model::ActivityState> {
    state.activities.iter().find(|a| a.id == step_id)
}

fn step_ended(a: &worlds_engine::model::ActivityState) -> bool {
    matches!(a.status, ActivityStatus::Completed | ActivityStatus::Failed)
}

/// Plans `event` on the run (with its history); `now` for retry times.
pub(crate) fn plan(state: &WorkflowState, event: &NewEvent, now: i64) -> Result<Plan, WorldError> {
    let mut plan = Plan::default();
    let terminal = state.status.is_terminal();
    match event.event_type.as_str() {
        "run_started" => {
            if terminal {
                return Err(gone(state));
            }
            start_if_pending(state, &mut plan.kinds);
        }
        "run_completed" => {
            if terminal {
                return Err(ended(state, "it cannot complete"));
            }
            start_if_pending(state, &mut plan.kinds);
            plan.kinds.push(EventKind::WorkflowCompleted {
                output: event.payload("output")?.unwrap_or_else(Payload::null),
            });
        }
        "run_failed" => {
            if terminal {
                return Err(ended(state, "it cannot fail"));
            }
            start_if_pending(state, &mut plan.kinds);
            plan.kinds.push(EventKind::WorkflowFailed {
                error: error(event.field("error"), event.text("errorCode"))?,
            });
        }
        "run_cancelled" => {
            if state.status == RunStatus::Cancelled {
                return Ok(plan);
            }
            if terminal {
                return Err(ended(state, "it cannot be cancelled"));
            }
            plan.kinds.push(EventKind::WorkflowCancelled {
                reason: event.text("cancelReason"),
            });
        }
        "attr_set" => {
            if terminal {
                return Err(ended(state, "its attributes can no longer change"));
            }
            let changes: Vec<AttributeChange> = match event.field("changes") {
                Some(value) => serde_json::from_value(value.clone()).map_err(|e| {
                    invalid(
                        "eventData.changes",
                        format!("changes are [{{key, value: string | null}}]: {e}"),
                    )
                })?,
                None => return Err(invalid("eventData.changes", "attr_set needs its changes")),
            };
            let current = state
                .runtime
                .as_ref()
                .map(|r| r.attributes.clone())
                .unwrap_or_default();
            check_attribute_changes(
                &current,
                &changes,
                event.field("allowReservedAttributes") == Some(&Value::Bool(true)),
            )?;
            let writer = event.field("writer");
            let by_workflow =
                writer.and_then(|w| w.get("type")).and_then(Value::as_str) == Some("workflow");
            if let (Some(id), true) = (event.correlation_id.as_deref(), by_workflow) {
                let seen = state.history.iter().any(|e| {
                    matches!(&e.kind, EventKind::AttributesSet { correlation_id: Some(c), .. } if c == id)
                });
                if seen {
                    return Err(conflict(format!(
                        "attribute change {id} of run {} is already recorded",
                        state.id
                    )));
                }
            }
            plan.kinds.push(EventKind::AttributesSet {
                changes,
                correlation_id: event.correlation_id.clone(),
                writer: writer.map(payload).transpose()?,
            });
        }
        "step_created" => {
            let step_id = event.correlation()?;
            if terminal {
                return Err(ended(state, "it takes no new steps"));
            }
            if find_step(state, step_id).is_some() {
                return Err(conflict(format!("step {step_id} already exists")));
            }
            start_if_pending(state, &mut plan.kinds);
            plan.kinds.push(EventKind::ActivityScheduled {
                position: next_position(state),
                activity_id: step_id.to_owned(),
                name: event
                    .text("stepName")
                    .ok_or_else(|| invalid("eventData.stepName", "a step needs its stepName"))?,
                input: event.payload("input")?.unwrap_or_else(Payload::null),
                options: None,
                inline: false,
            });
        }
        "step_started" => {
            let step_id = event.correlation()?;
            match find_step(state, step_id) {
                Some(_) if event.creates_step() => {
                    return Err(conflict(format!("step {step_id} already exists")))
                }
                Some(a) => {
                    if step_ended(a) {
                        return Err(conflict(format!(
                            "step {step_id} has ended; it cannot start again"
                        )));
                    }
                    if terminal && a.status != ActivityStatus::Running {
                        return Err(gone(state));
                    }
                    if a.status == ActivityStatus::Running {
                        // Started again (a redelivery after a crash): the attempt that
                        // was running is given up, and the next starts now.
                        plan.kinds.push(EventKind::ActivityFailed {
                            position: a.position,
                            attempt: a.attempt,
                            error: StructuredError::new(
                                "the attempt was started again before it ended",
                            ),
                            retrying: true,
                        });
                        plan.kinds.push(EventKind::ActivityRetry {
                            position: a.position,
                            attempt: a.attempt + 1,
                            delay_ms: 0,
                        });
                    }
                    plan.kinds.push(EventKind::ActivityStarted {
                        position: a.position,
                        attempt: a.attempt + 1,
                    });
                }
                None if event.creates_step() => {
                    if terminal {
                        return Err(ended(state, "it takes no new steps"));
                    }
                    start_if_pending(state, &mut plan.kinds);
                    let position = next_position(state);
                    plan.kinds.push(EventKind::ActivityScheduled {
                        position,
                        activity_id: step_id.to_owned(),
                        name: event.text("stepName").unwrap_or_default(),
                        input: event.payload("input")?.unwrap_or_else(Payload::null),
                        options: None,
                        inline: false,
                    });
                    plan.kinds.push(EventKind::ActivityStarted {
                        position,
                        attempt: 1,
                    });
                    plan.step_created = true;
                }
                None => {
                    return Err(WorldError::NotFound {
                        what: "step",
                        id: step_id.to_owned(),
                    })
                }
            }
        }
        "step_completed" | "step_failed" | "step_retrying" => {
            let step_id = event.correlation()?;
            let a = find_step(state, step_id).ok_or_else(|| WorldError::NotFound {
                what: "step",
                id: step_id.to_owned(),
            })?;
            if step_ended(a) {
                return Err(conflict(format!("step {step_id} has already ended")));
            }
            if a.status != ActivityStatus::Running {
                if terminal {
                    return Err(gone(state));
                }
                plan.kinds.push(EventKind::ActivityStarted {
                    position: a.position,
                    attempt: a.attempt + 1,
                });
            }
            let attempt = if a.status == ActivityStatus::Running {
                a.attempt
            } else {
                a.attempt + 1
            };
            match event.event_type.as_str() {
                "step_completed" => plan.kinds.push(EventKind::ActivityCompleted {
                    position: a.position,
                    attempt,
                    output: event.payload("result")?.unwrap_or_else(Payload::null),
                }),
                "step_failed" => plan.kinds.push(EventKind::ActivityFailed {
                    position: a.position,
                    attempt,
                    error: error(event.field("error"), None)?,
                    retrying: false,
                }),
                _ => {
                    plan.kinds.push(EventKind::ActivityFailed {
                        position: a.position,
                        attempt,
                        error: error(event.field("error"), None)?,
                        retrying: true,
                    });
                    let delay = event
                        .field("retryAfter")
                        .and_then(parse_time)
                        .map_or(0, |at| (at - now).max(0));
                    plan.kinds.push(EventKind::ActivityRetry {
                        position: a.position,
                        attempt: attempt + 1,
                        delay_ms: u64::try_from(delay).unwrap_or(0),
                    });
                }
            }
        }
        "hook_created" => {
            let hook_id = event.correlation()?;
            if terminal {
                return Err(ended(state, "it takes no new hooks"));
            }
            if state.hooks.iter().any(|h| h.id == hook_id) {
                return Err(conflict(format!("hook {hook_id} already exists")));
            }
            let token = event
                .text("token")
                .filter(|t| !t.is_empty())
                .ok_or_else(|| invalid("eventData.token", "a hook needs its token"))?;
            start_if_pending(state, &mut plan.kinds);
            plan.hook = Some(NewHook {
                position: next_position(state) + u32::from(!plan.kinds.is_empty()),
                hook_id: hook_id.to_owned(),
                token,
                metadata: event.payload("metadata")?,
            });
        }
        "hook_received" | "hook_disposed" => {
            let hook_id = event.correlation()?;
            let hook = state
                .hooks
                .iter()
                .find(|h| h.id == hook_id && log::is_devkit_hook(h))
                .ok_or_else(|| WorldError::NotFound {
                    what: "hook",
                    id: hook_id.to_owned(),
                })?;
            if event.event_type == "hook_received" {
                if terminal {
                    return Err(WorldError::NotFound {
                        what: "hook",
                        id: hook_id.to_owned(),
                    });
                }
                plan.kinds.push(EventKind::HookReceived {
                    position: hook.position,
                    hook_id: hook.id.clone(),
                    payload: event.payload("payload")?.unwrap_or_else(Payload::null),
                });
            } else {
                plan.kinds.push(EventKind::HookDisposed {
                    position: hook.position,
                    hook_id: hook.id.clone(),
                });
            }
        }
        "wait_created" => {
            let wait_id = event.correlation()?;
            if terminal {
                return Err(ended(state, "it takes no new waits"));
            }
            if log::wait(state, wait_id).is_some() {
                return Err(conflict(format!("wait {wait_id} already exists")));
            }
            let fire_at = event
                .field("resumeAt")
                .and_then(parse_time)
                .ok_or_else(|| {
                    invalid(
                        "eventData.resumeAt",
                        "a wait needs resumeAt (an RFC 3339 time)",
                    )
                })?;
            start_if_pending(state, &mut plan.kinds);
            plan.kinds.push(EventKind::TimerScheduled {
                position: next_position(state) + u32::from(!plan.kinds.is_empty()),
                fire_at,
                timer_id: Some(wait_id.to_owned()),
            });
        }
        "wait_completed" => {
            let wait_id = event.correlation()?;
            let mut found = None;
            for e in &state.history {
                match &e.kind {
                    EventKind::TimerScheduled {
                        position,
                        timer_id: Some(id),
                        ..
                    } if id == wait_id => found = Some((*position, true)),
                    EventKind::TimerFired { position } => {
                        if let Some(f) = found.as_mut().filter(|f| f.0 == *position) {
                            f.1 = false;
                        }
                    }
                    _ => {}
                }
            }
            match found {
                None => {
                    return Err(WorldError::NotFound {
                        what: "wait",
                        id: wait_id.to_owned(),
                    })
                }
                Some((_, false)) => {
                    return Err(conflict(format!("wait {wait_id} has already completed")))
                }
                Some(_) if terminal => return Err(gone(state)),
                Some((position, true)) => plan.kinds.push(EventKind::TimerFired { position }),
            }
        }
        "run_created" => {
            return Err(conflict(format!("run {} already exists", state.id)));
        }
        "hook_conflict" => {
            return Err(invalid(
                "eventType",
                "hook_conflict is answered by the world, never created by a runtime",
            ))
        }
        other => {
            return Err(invalid(
                "eventType",
                format!("{other:?} is not an event type of the DevKit World"),
            ))
        }
    }
    Ok(plan)
}
