//! Where a run went on after its process stopped, and the timers that fired late because no
//! process was running: what `worlds runs show` and the dashboard mark in a run's history.
//!
//! A pure reading of the history. A process that picks a run up again from its history (its
//! world started again, or it took the run over) records `run_resumed` first. Histories written
//! before that event existed still show two traces of a stop, which are read too: a step
//! attempt recorded as lost because the process running it stopped, and a `workflow_started`
//! that no `workflow_retry` asked for.

use std::borrow::Borrow;

use serde::{Deserialize, Serialize};

use crate::clock::Millis;
use crate::error::codes;

use super::{Event, EventKind};

/// How late a timer must fire to be called late: 1 s (a busy world fires a few ms late).
pub const LATE_TIMER_MS: Millis = 1_000;

/// One place where the run was picked up again after its process stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resumption {
    /// The event that marks it (`run_resumed`, or for older histories the lost attempt or the
    /// unasked `workflow_started`).
    pub seq: u64,
    /// When the run was picked up again.
    pub at: Millis,
    /// When the run's previous event was recorded: its process stopped after this.
    pub last_before: Millis,
}

/// A timer that fired more than [`LATE_TIMER_MS`] after it was due.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LateTimer {
    /// Its `timer_fired` event.
    pub seq: u64,
    /// The timer's command position.
    pub position: u32,
    /// When it was due.
    pub due_at: Millis,
    /// How long after that it fired, in ms.
    pub late_ms: Millis,
    /// True if no process drove the run when the timer was due: the run was resumed after
    /// that moment, and by the time the timer fired.
    pub world_stopped: bool,
}

/// The places where the run was picked up again after its process stopped, in history order.
pub fn resumptions<E: Borrow<Event>>(history: &[E]) -> Vec<Resumption> {
    let mut found = Vec::new();
    let mut started = false;
    let mut retry_asked = false;
    // Right after a `run_resumed`, the attempts recovery records as lost belong to it.
    let mut after_marker = false;
    let mut last: Option<Millis> = None;
    for event in history {
        let event = event.borrow();
        let last_before = last.unwrap_or(event.timestamp);
        let mut mark = || {
            found.push(Resumption {
                seq: event.seq,
                at: event.timestamp,
                last_before,
            })
        };
        match &event.kind {
            EventKind::RunResumed {} => {
                mark();
                after_marker = true;
            }
            EventKind::WorkflowStarted { .. } => {
                if started && !retry_asked {
                    mark();
                }
                started = true;
                retry_asked = false;
                after_marker = false;
            }
            EventKind::ActivityFailed { error, .. }
                if error.code.as_deref() == Some(codes::WORKER_LOST) =>
            {
                // A worker that stopped beating is lost in a process that goes on running.
                let process_stopped = !error.message.contains("stopped sending heartbeats");
                if process_stopped && !after_marker {
                    mark();
                    after_marker = true;
                }
            }
            // Recovery retries a lost attempt at once.
            EventKind::ActivityRetry { .. } => {}
            EventKind::WorkflowRetry { .. } => {
                retry_asked = true;
                after_marker = false;
            }
            _ => after_marker = false,
        }
        last = Some(event.timestamp);
    }
    found
}

/// The timers of the history that fired more than [`LATE_TIMER_MS`] after they were due, in
/// history order, each saying whether no process drove the run when it was due.
pub fn late_timers<E: Borrow<Event>>(history: &[E]) -> Vec<LateTimer> {
    let resumed = resumptions(history);
    let mut due: std::collections::HashMap<u32, (u64, Millis)> = Default::default();
    let mut late = Vec::new();
    for event in history {
        let event = event.borrow();
        match &event.kind {
            EventKind::TimerScheduled {
                position, fire_at, ..
            } => {
                due.insert(*position, (event.seq, *fire_at));
            }
            EventKind::TimerFired { position } => {
                let Some((scheduled, due_at)) = due.remove(position) else {
                    continue;
                };
                let late_ms = event.timestamp.saturating_sub(due_at);
                if late_ms <= LATE_TIMER_MS {
                    continue;
                }
                // Resumed after the timer was due, and by the time it fired: a store that keeps
                // timers (PostgreSQL) may fire it just before the marker is written.
                let fired_at = event.timestamp;
                let world_stopped = resumed.iter().any(|r| {
                    r.seq > scheduled
                        && r.at > due_at
                        && r.at <= fired_at.saturating_add(LATE_TIMER_MS)
                });
                late.push(LateTimer {
                    seq: event.seq,
                    position: *position,
                    due_at,
                    late_ms,
                    world_stopped,
                });
            }
            _ => {}
        }
    }
    late
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::StructuredError;
    use crate::model::{QueuedRun, EVENT_FORMAT_VERSION};
    use crate::payload::Payload;

    fn history(kinds: Vec<(Millis, EventKind)>) -> Vec<Event> {
        kinds
            .into_iter()
            .enumerate()
            .map(|(seq, (timestamp, kind))| Event {
                id: format!("evnt_{seq}"),
                run_id: "wrun_1".into(),
                seq: seq as u64,
                timestamp,
                version: EVENT_FORMAT_VERSION,
                kind,
            })
            .collect()
    }

    fn queued() -> EventKind {
        EventKind::WorkflowQueued(Box::new(QueuedRun::new("w", "wf", Payload::null())))
    }

    fn started() -> EventKind {
        EventKind::WorkflowStarted {
            attempt: 1,
            first_position: 0,
        }
    }

    fn lost(message: &str) -> EventKind {
        EventKind::ActivityFailed {
            position: 0,
            attempt: 1,
            error: StructuredError::new(message).with_code(codes::WORKER_LOST),
            retrying: true,
        }
    }

    #[test]
    fn a_marker_is_a_resumption_and_owns_the_lost_attempts_after_it() {
        let events = history(vec![
            (0, queued()),
            (1, started()),
            (
                2,
                EventKind::ActivityScheduled {
                    position: 0,
                    activity_id: "step_0".into(),
                    name: "a".into(),
                    input: Payload::null(),
                    options: None,
                    inline: false,
                },
            ),
            (
                3,
                EventKind::ActivityStarted {
                    position: 0,
                    attempt: 1,
                },
            ),
            (500, EventKind::RunResumed {}),
            (
                501,
                lost("attempt 1 of activity 'a' was lost: the process running it stopped"),
            ),
            (
                502,
                EventKind::ActivityRetry {
                    position: 0,
                    attempt: 2,
                    delay_ms: 0,
                },
            ),
        ]);
        assert_eq!(
            resumptions(&events),
            vec![Resumption {
                seq: 4,
                at: 500,
                last_before: 3
            }]
        );
    }

    #[test]
    fn older_histories_show_a_stop_by_its_lost_attempt_but_not_a_silent_worker() {
        let events = history(vec![
            (0, queued()),
            (1, started()),
            (
                90,
                lost("attempt 1 of activity 'a' was lost: its worker stopped sending heartbeats"),
            ),
            (
                700,
                lost("attempt 2 of activity 'a' was lost: the process running it stopped"),
            ),
        ]);
        let found = resumptions(&events);
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].seq, found[0].last_before), (3, 90));
    }

    #[test]
    fn a_timer_due_while_no_process_ran_is_late_because_the_world_stopped() {
        let hour = 3_600_000;
        let events = history(vec![
            (0, queued()),
            (1, started()),
            (
                2,
                EventKind::TimerScheduled {
                    position: 0,
                    fire_at: hour,
                    timer_id: None,
                },
            ),
            (4 * hour, EventKind::RunResumed {}),
            (4 * hour + 5, EventKind::TimerFired { position: 0 }),
            (
                4 * hour + 6,
                EventKind::TimerScheduled {
                    position: 1,
                    fire_at: 4 * hour + 1_000,
                    timer_id: None,
                },
            ),
            // 1.5 s late with the world running: late, but not for a stop.
            (4 * hour + 2_500, EventKind::TimerFired { position: 1 }),
            (
                4 * hour + 2_600,
                EventKind::TimerScheduled {
                    position: 2,
                    fire_at: 4 * hour + 3_000,
                    timer_id: None,
                },
            ),
            // On time.
            (4 * hour + 3_004, EventKind::TimerFired { position: 2 }),
        ]);
        assert_eq!(
            late_timers(&events),
            vec![
                LateTimer {
                    seq: 4,
                    position: 0,
                    due_at: hour,
                    late_ms: 3 * hour + 5,
                    world_stopped: true,
                },
                LateTimer {
                    seq: 6,
                    position: 1,
                    due_at: 4 * hour + 1_000,
                    late_ms: 1_500,
                    world_stopped: false,
                },
            ]
        );
    }

    #[test]
    fn a_resumption_before_the_timer_was_due_does_not_explain_it() {
        let events = history(vec![
            (0, queued()),
            (1, started()),
            (
                2,
                EventKind::TimerScheduled {
                    position: 0,
                    fire_at: 10_000,
                    timer_id: None,
                },
            ),
            (5_000, EventKind::RunResumed {}),
            (60_000, EventKind::TimerFired { position: 0 }),
        ]);
        let late = late_timers(&events);
        assert_eq!(late.len(), 1);
        assert!(!late[0].world_stopped);
    }
}
