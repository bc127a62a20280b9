//! What an unfinished run waits on now, since when, and whether that waiting looks wrong.
//!
//! A pure reading of the run's state at a moment: [`waits`] lists each thing the run waits
//! on (a worker to start it, a step queued or running or waiting to retry, a timer, a hook, a
//! child run, a workflow retry) with the moment it began and, where there is one, the moment
//! it is due. A wait gets a *concern* when it looks stuck rather than slow:
//!
//! | wait | concern when |
//! | --- | --- |
//! | timer, workflow retry, step retry | due more than [`LATE_MS`] ago and not fired |
//! | hook | its expiry passed more than [`LATE_MS`] ago and it still waits |
//! | step running | past its timeout, or its heartbeat timeout since the last beat, by more than [`LATE_MS`] |
//! | step queued, run pending | waiting more than [`QUEUED_MS`] for a worker |
//!
//! All of these are the engine's own doing (a timer fires, a timeout fails the attempt, a
//! worker takes the task), so a concern means the process that should act is gone or behind.

use std::borrow::Borrow;

use serde::{Deserialize, Serialize};

use crate::clock::Millis;

use super::{
    ActivityStatus, Event, EventKind, HookStatus, Pause, PauseTarget, RunStatus, WorkflowState,
};

/// How late a due timer, expiry or timeout may be before it is a concern: 60 s.
pub const LATE_MS: Millis = 60_000;
/// How long work may wait for a worker before it is a concern: 5 minutes.
pub const QUEUED_MS: Millis = 300_000;

/// One thing a run waits on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wait {
    /// What it is.
    #[serde(flatten)]
    pub on: WaitOn,
    /// Since when the run waits on it.
    pub since: Millis,
    /// When it is due, for timers, retries and expiring hooks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due: Option<Millis>,
    /// Why this waiting looks wrong, if it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concern: Option<String>,
}

/// What a run waits on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "on", rename_all = "snake_case")]
pub enum WaitOn {
    /// A worker to start the run.
    Start,
    /// The next attempt of the whole workflow (the `retry` strategy).
    WorkflowRetry {
        /// The attempt that will start.
        attempt: u32,
    },
    /// A step queued for a worker.
    StepQueued {
        /// Its name.
        name: String,
        /// Its command position.
        position: u32,
    },
    /// A step attempt running.
    StepRunning {
        /// Its name.
        name: String,
        /// Its command position.
        position: u32,
        /// The attempt, from 1.
        attempt: u32,
        /// Its last heartbeat, if it sent any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        last_heartbeat: Option<Millis>,
    },
    /// A step waiting out its retry delay.
    StepRetry {
        /// Its name.
        name: String,
        /// Its command position.
        position: u32,
        /// The attempt that will start.
        attempt: u32,
    },
    /// A durable timer (`ctx.sleep`).
    Timer {
        /// Its command position.
        position: u32,
    },
    /// A hook's payload.
    Hook {
        /// The hook id.
        hook_id: String,
        /// Its command position.
        position: u32,
        /// A webhook (its payload is an HTTP request).
        webhook: bool,
    },
    /// A child run to end.
    Child {
        /// The child's run id.
        run_id: String,
    },
    /// An operator's pause of its workflow or task queue to be lifted: the run's start, or a
    /// step's next attempt, is held (see `World::pause`).
    Paused {
        /// What is paused.
        target: PauseTarget,
        /// Who paused it.
        by: String,
        /// Why, as they said.
        reason: String,
        /// Since when it is paused.
        paused_since: Millis,
        /// The step held, by name and position; `None` when the run's start is held.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step: Option<(String, u32)>,
    },
}

/// [`waits`], with the pauses in force: a run not started, or a step queued, that a pause
/// holds waits on the pause (with who set it, why and since when) instead of on a worker,
/// and is no concern however long it waits.
pub fn waits_paused<E: Borrow<Event>>(
    state: &WorkflowState,
    history: &[E],
    now: Millis,
    pauses: &[Pause],
) -> Vec<Wait> {
    let mut waits = waits(state, history, now);
    if pauses.is_empty() {
        return waits;
    }
    let paused = |target: PauseTarget| pauses.iter().find(|p| p.target == target);
    let queue_of_run = state.task_queue.clone();
    for wait in &mut waits {
        let (pause, step) = match &wait.on {
            WaitOn::Start => (
                paused(PauseTarget::Workflow(state.name.clone())).or_else(|| {
                    queue_of_run
                        .clone()
                        .and_then(|q| paused(PauseTarget::TaskQueue(q)))
                }),
                None,
            ),
            WaitOn::StepQueued { name, position } => {
                let queue = state
                    .activities
                    .iter()
                    .find(|a| a.position == *position)
                    .and_then(|a| a.options.as_deref())
                    .and_then(|o| o.task_queue.clone())
                    .or_else(|| queue_of_run.clone());
                (
                    queue.and_then(|q| paused(PauseTarget::TaskQueue(q))),
                    Some((name.clone(), *position)),
                )
            }
            _ => continue,
        };
        if let Some(pause) = pause {
            wait.on = WaitOn::Paused {
                target: pause.target.clone(),
                by: pause.by.clone(),
                reason: pause.reason.clone(),
                paused_since: pause.since,
                step,
            };
            wait.concern = None;
        }
    }
    waits
}

/// What `state` (with its `history`, for retry delays) waits on at `now`; empty for a finished
/// run.
pub fn waits<E: Borrow<Event>>(state: &WorkflowState, history: &[E], now: Millis) -> Vec<Wait> {
    if state.status.is_terminal() {
        return Vec::new();
    }
    let late = |due: Millis, what: &str| {
        (now.saturating_sub(due) > LATE_MS).then(|| {
            format!(
                "{what} was due {} ago and has not happened: is a process driving this run?",
                ago(now, due)
            )
        })
    };
    let queued = |since: Millis, what: &str| {
        (now.saturating_sub(since) > QUEUED_MS).then(|| {
            format!(
                "{what} for {}: are the workers busy, or is no worker serving its task queue?",
                ago(now, since)
            )
        })
    };
    let mut waits = Vec::new();
    if state.status == RunStatus::Pending {
        waits.push(Wait {
            on: WaitOn::Start,
            since: state.created_at,
            due: None,
            concern: queued(state.created_at, "waiting for a worker to start it"),
        });
    }
    if let Some(retry) = state.retry_pending() {
        waits.push(Wait {
            on: WaitOn::WorkflowRetry {
                attempt: retry.attempt,
            },
            since: state.updated_at,
            due: Some(retry.due_at),
            concern: late(retry.due_at, "the workflow's next attempt"),
        });
    }
    for step in &state.activities {
        let (name, position) = (step.name.clone(), step.position);
        match step.status {
            ActivityStatus::Scheduled => waits.push(Wait {
                on: WaitOn::StepQueued { name, position },
                since: step.scheduled_at,
                due: None,
                concern: queued(step.scheduled_at, "queued"),
            }),
            ActivityStatus::Running => {
                let started = step.started_at.unwrap_or(step.scheduled_at);
                let options = step.options.as_deref();
                let timeout_due = options
                    .and_then(|o| o.timeout)
                    .map(|t| started.saturating_add(ms(t.0)));
                let beat_due = options.and_then(|o| o.heartbeat_timeout).map(|t| {
                    step.last_heartbeat
                        .unwrap_or(started)
                        .saturating_add(ms(t.0))
                });
                let concern = timeout_due
                    .and_then(|due| late(due, "its timeout"))
                    .or_else(|| beat_due.and_then(|due| late(due, "its heartbeat timeout")));
                waits.push(Wait {
                    on: WaitOn::StepRunning {
                        name,
                        position,
                        attempt: step.attempt,
                        last_heartbeat: step.last_heartbeat,
                    },
                    since: started,
                    due: timeout_due,
                    concern,
                });
            }
            ActivityStatus::Retrying => {
                let retried =
                    history
                        .iter()
                        .map(Borrow::borrow)
                        .rev()
                        .find_map(|e: &Event| match &e.kind {
                            EventKind::ActivityRetry {
                                position: p,
                                delay_ms,
                                ..
                            } if *p == position => Some((e.timestamp, *delay_ms)),
                            _ => None,
                        });
                let since = retried.map_or(step.scheduled_at, |(at, _)| at);
                let due = retried.map(|(at, delay)| at.saturating_add(ms_u64(delay)));
                waits.push(Wait {
                    on: WaitOn::StepRetry {
                        name,
                        position,
                        attempt: step.attempt + 1,
                    },
                    since,
                    due,
                    concern: due.and_then(|due| late(due, "its retry")),
                });
            }
            ActivityStatus::Completed | ActivityStatus::Failed => {}
        }
    }
    for (position, fire_at) in state.pending_timers() {
        let since = history
            .iter()
            .map(Borrow::borrow)
            .rev()
            .find_map(|e: &Event| match &e.kind {
                EventKind::TimerScheduled { position: p, .. } if *p == position => {
                    Some(e.timestamp)
                }
                _ => None,
            })
            .unwrap_or(state.updated_at);
        waits.push(Wait {
            on: WaitOn::Timer { position },
            since,
            due: Some(fire_at),
            concern: late(fire_at, "the timer"),
        });
    }
    for hook in state
        .hooks
        .iter()
        .filter(|h| h.status == HookStatus::Waiting)
    {
        waits.push(Wait {
            on: WaitOn::Hook {
                hook_id: hook.id.clone(),
                position: hook.position,
                webhook: hook.webhook,
            },
            since: hook.created_at,
            due: hook.expires_at,
            concern: hook.expires_at.and_then(|at| late(at, "the hook's expiry")),
        });
    }
    let ended: Vec<&str> = history
        .iter()
        .map(Borrow::borrow)
        .filter_map(|e: &Event| match &e.kind {
            EventKind::ChildWorkflowCompleted { child_id, .. }
            | EventKind::ChildWorkflowFailed { child_id, .. } => Some(child_id.as_str()),
            _ => None,
        })
        .collect();
    for event in history.iter().map(Borrow::borrow) {
        if let EventKind::ChildWorkflowStarted { child_id, .. } = &event.kind {
            if !ended.contains(&child_id.as_str()) {
                waits.push(Wait {
                    on: WaitOn::Child {
                        run_id: child_id.clone(),
                    },
                    since: event.timestamp,
                    due: None,
                    concern: None,
                });
            }
        }
    }
    waits
}

fn ms(duration: std::time::Duration) -> Millis {
    Millis::try_from(duration.as_millis()).unwrap_or(Millis::MAX)
}

fn ms_u64(ms: u64) -> Millis {
    Millis::try_from(ms).unwrap_or(Millis::MAX)
}

/// `now - at` in words: "90 s", "12 min", "3 h", "2 d".
fn ago(now: Millis, at: Millis) -> String {
    let s = now.saturating_sub(at).max(0) / 1_000;
    match s {
        0..=119 => format!("{s} s"),
        120..=7_199 => format!("{} min", s / 60),
        7_200..=172_799 => format!("{} h", s / 3_600),
        _ => format!("{} d", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{EventKind, QueuedRun, EVENT_FORMAT_VERSION};
    use crate::payload::Payload;

    const T0: Millis = 1_000_000_000;

    fn event(seq: u64, at: Millis, kind: EventKind) -> Event {
        Event {
            id: format!("evnt_{seq}"),
            run_id: "wrun_1".into(),
            seq,
            timestamp: at,
            version: EVENT_FORMAT_VERSION,
            kind,
        }
    }

    fn history(kinds: Vec<(Millis, EventKind)>) -> Vec<Event> {
        let mut events = vec![event(
            0,
            T0,
            EventKind::WorkflowQueued(Box::new(QueuedRun::new("w", "wrun_1", Payload::null()))),
        )];
        for (at, kind) in kinds {
            events.push(event(events.len() as u64, at, kind));
        }
        events
    }

    fn waits_at(events: &[Event], now: Millis) -> Vec<Wait> {
        let state = WorkflowState::from_history(events).unwrap();
        waits(&state, events, now)
    }

    #[test]
    fn a_paused_start_or_step_waits_on_its_pause_and_is_no_concern() {
        let events = history(Vec::new());
        let state = WorkflowState::from_history(&events).unwrap();
        let late = T0 + QUEUED_MS + 1;
        let pause = Pause {
            target: PauseTarget::Workflow("w".into()),
            by: "ops".into(),
            reason: "incident".into(),
            since: T0 + 5,
        };
        let got = waits_paused(&state, &events, late, std::slice::from_ref(&pause));
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].since, T0);
        assert_eq!(got[0].concern, None);
        assert_eq!(
            got[0].on,
            WaitOn::Paused {
                target: pause.target.clone(),
                by: "ops".into(),
                reason: "incident".into(),
                paused_since: T0 + 5,
                step: None,
            }
        );
        // Another workflow's pause changes nothing: a worker is awaited, late.
        let other = Pause {
            target: PauseTarget::Workflow("v".into()),
            ..pause
        };
        let got = waits_paused(&state, &events, late, &[other]);
        assert_eq!(got[0].on, WaitOn::Start);
        assert!(got[0].concern.is_some());
    }

    #[test]
    fn each_wait_is_named_with_its_moments_and_a_concern_only_when_late() {
        let started = (
            T0 + 10,
            EventKind::WorkflowStarted {
                attempt: 1,
                first_position: 0,
            },
        );
        let sleep = (
            T0 + 20,
            EventKind::TimerScheduled {
                position: 0,
                fire_at: T0 + 3_600_000,
                timer_id: None,
            },
        );
        let events = history(vec![started.clone(), sleep]);
        // (now, concern expected)
        for (now, concern) in [
            (T0 + 1_000, false),
            (T0 + 3_600_000 + LATE_MS, false),
            (T0 + 3_600_000 + LATE_MS + 1, true),
        ] {
            let found = waits_at(&events, now);
            assert_eq!(found.len(), 1, "{found:?}");
            assert_eq!(found[0].on, WaitOn::Timer { position: 0 });
            assert_eq!(
                (found[0].since, found[0].due),
                (T0 + 20, Some(T0 + 3_600_000))
            );
            assert_eq!(found[0].concern.is_some(), concern, "at {now}: {found:?}");
        }

        // Pending: waits for a worker; a concern after QUEUED_MS.
        let pending = history(vec![]);
        let found = waits_at(&pending, T0 + QUEUED_MS + 1);
        assert_eq!(found[0].on, WaitOn::Start);
        assert!(found[0].concern.as_deref().unwrap().contains("worker"));
        assert!(waits_at(&pending, T0 + 5)
            .iter()
            .all(|w| w.concern.is_none()));
    }

    #[test]
    fn an_expired_hook_and_a_step_past_its_timeout_are_concerns() {
        use crate::model::ActivityOptions;
        let started = (
            T0 + 1,
            EventKind::WorkflowStarted {
                attempt: 1,
                first_position: 0,
            },
        );
        let hook = (
            T0 + 2,
            EventKind::HookCreated {
                position: 0,
                hook_id: "hook_1".into(),
                token_digest: "d".repeat(64),
                webhook: false,
                methods: Vec::new(),
                hook_type: None,
                signature: None,
                expires_at: Some(T0 + 10_000),
                metadata: None,
            },
        );
        let step = (
            T0 + 3,
            EventKind::ActivityScheduled {
                position: 1,
                activity_id: "step_1".into(),
                name: "slow".into(),
                input: Payload::null(),
                options: Some(Box::new(
                    ActivityOptions::new().timeout(std::time::Duration::from_secs(30)),
                )),
                inline: false,
            },
        );
        let running = (
            T0 + 4,
            EventKind::ActivityStarted {
                position: 1,
                attempt: 1,
            },
        );
        let events = history(vec![started, hook, step, running]);
        let calm = waits_at(&events, T0 + 20_000);
        assert_eq!(calm.len(), 2, "{calm:?}");
        assert!(calm.iter().all(|w| w.concern.is_none()), "{calm:?}");
        let late = waits_at(&events, T0 + 10_000 + LATE_MS + 30_000);
        let hook = late
            .iter()
            .find(|w| matches!(w.on, WaitOn::Hook { .. }))
            .unwrap();
        assert!(
            hook.concern.as_deref().unwrap().contains("expiry"),
            "{hook:?}"
        );
        let step = late
            .iter()
            .find(|w| matches!(w.on, WaitOn::StepRunning { .. }))
            .unwrap();
        assert_eq!(step.due, Some(T0 + 4 + 30_000));
        assert!(
            step.concern.as_deref().unwrap().contains("timeout"),
            "{step:?}"
        );
    }

    #[test]
    fn a_finished_run_waits_on_nothing() {
        let events = history(vec![
            (
                T0 + 1,
                EventKind::WorkflowStarted {
                    attempt: 1,
                    first_position: 0,
                },
            ),
            (
                T0 + 2,
                EventKind::WorkflowCompleted {
                    output: Payload::null(),
                },
            ),
        ]);
        assert!(waits_at(&events, T0 + 10_000_000).is_empty());
    }
}
