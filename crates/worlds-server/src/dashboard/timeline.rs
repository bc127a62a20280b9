//! A run's timeline, computed from its history: one row per step (each attempt a bar, the
//! retry delays between them gaps), sleep, hook wait, child run and compensation, and marks
//! where the run was picked up again (a restart, a takeover, a retry of the whole run).
//!
//! Pure: events in, rows out. Positions are fractions of the run's span, so the page draws
//! bars as `left`/`width` percentages without a chart library.

use std::collections::BTreeMap;

use worlds_engine::clock::Millis;
use worlds_engine::{Event, EventKind};

/// How a bar ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Finished well.
    Ok,
    /// Failed (an attempt that will be retried, or for good).
    Failed,
    /// Still going when the history was read.
    Open,
}

impl Outcome {
    /// The CSS class of a bar.
    pub(crate) fn class(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Failed => "failed",
            Outcome::Open => "open",
        }
    }
}

/// What a row shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RowKind {
    Step,
    Sleep,
    Hook,
    Child,
    Compensation,
}

impl RowKind {
    pub(crate) fn class(self) -> &'static str {
        match self {
            RowKind::Step => "step",
            RowKind::Sleep => "sleep",
            RowKind::Hook => "hook",
            RowKind::Child => "child",
            RowKind::Compensation => "compensation",
        }
    }
}

/// One span of time on a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Bar {
    pub(crate) start: Millis,
    pub(crate) end: Millis,
    pub(crate) outcome: Outcome,
    /// Shown on hover: attempt, duration, error.
    pub(crate) title: String,
    /// The history event that started it, for the link to it.
    pub(crate) seq: u64,
}

/// One step, sleep, hook, child or compensation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Row {
    pub(crate) kind: RowKind,
    pub(crate) position: u32,
    pub(crate) label: String,
    pub(crate) bars: Vec<Bar>,
    /// A child run's id, for its link.
    pub(crate) child: Option<String>,
}

/// The rows of a run, and where it was picked up again.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Timeline {
    pub(crate) start: Millis,
    pub(crate) end: Millis,
    pub(crate) rows: Vec<Row>,
    /// Moments the run was started again after the first time (restart, takeover, retry).
    pub(crate) restarts: Vec<Millis>,
}

impl Timeline {
    /// The rows of `history`; bars still open end at `now`.
    pub(crate) fn of(history: &[Event], now: Millis) -> Timeline {
        let Some(first) = history.first() else {
            return Timeline::default();
        };
        let mut rows = Rows::default();
        let mut restarts = Vec::new();
        let mut started = false;
        let mut finished: Option<Millis> = None;
        // The step a compensation ran: the last one scheduled before it ended.
        let mut last_step: Option<&str> = None;
        for event in history {
            let t = event.timestamp;
            match &event.kind {
                EventKind::WorkflowStarted { .. } => {
                    if started {
                        restarts.push(t);
                    }
                    started = true;
                }
                EventKind::ActivityScheduled { position, name, .. } => {
                    last_step = Some(name);
                    rows.row(RowKind::Step, *position, name);
                }
                EventKind::ActivityStarted { position, attempt } => {
                    rows.open(
                        RowKind::Step,
                        *position,
                        "step",
                        t,
                        format!("attempt {attempt}"),
                        event.seq,
                    );
                }
                EventKind::ActivityCompleted { position, .. } => {
                    rows.close(RowKind::Step, *position, t, Outcome::Ok, None);
                }
                EventKind::ActivityFailed {
                    position, error, ..
                } => {
                    rows.close(
                        RowKind::Step,
                        *position,
                        t,
                        Outcome::Failed,
                        Some(&error.message),
                    );
                }
                EventKind::WorkflowCompensating {} => last_step = None,
                EventKind::TimerScheduled {
                    position, fire_at, ..
                } => {
                    let i = rows.row(RowKind::Sleep, *position, "sleep");
                    rows.rows[i].bars.push(Bar {
                        start: t,
                        end: (*fire_at).max(t),
                        outcome: Outcome::Open,
                        title: "sleeping".into(),
                        seq: event.seq,
                    });
                }
                EventKind::TimerFired { position } => {
                    rows.close(RowKind::Sleep, *position, t, Outcome::Ok, None);
                }
                EventKind::HookCreated {
                    position, webhook, ..
                } => {
                    let label = if *webhook { "webhook" } else { "hook" };
                    rows.open(
                        RowKind::Hook,
                        *position,
                        label,
                        t,
                        "waiting for a payload",
                        event.seq,
                    );
                }
                EventKind::HookReceived { position, .. } => {
                    rows.close(RowKind::Hook, *position, t, Outcome::Ok, None);
                }
                EventKind::HookExpired { position, .. } => {
                    rows.close(
                        RowKind::Hook,
                        *position,
                        t,
                        Outcome::Failed,
                        Some("expired"),
                    );
                }
                EventKind::ChildWorkflowStarted {
                    position,
                    child_id,
                    name,
                    ..
                } => {
                    let i = rows.open(
                        RowKind::Child,
                        *position,
                        name,
                        t,
                        format!("child run {child_id}"),
                        event.seq,
                    );
                    rows.rows[i].child = Some(child_id.clone());
                }
                EventKind::ChildWorkflowCompleted { position, .. } => {
                    rows.close(RowKind::Child, *position, t, Outcome::Ok, None);
                }
                EventKind::ChildWorkflowFailed {
                    position, error, ..
                } => {
                    rows.close(
                        RowKind::Child,
                        *position,
                        t,
                        Outcome::Failed,
                        Some(&error.message),
                    );
                }
                EventKind::CompensationExecuted { position, .. }
                | EventKind::CompensationFailed { position, .. } => {
                    let failed = matches!(event.kind, EventKind::CompensationFailed { .. });
                    let step = last_step.take().unwrap_or("(code)");
                    let i = rows.row(RowKind::Compensation, *position, &format!("undo {step}"));
                    rows.rows[i].bars.push(Bar {
                        start: t,
                        end: t,
                        outcome: if failed { Outcome::Failed } else { Outcome::Ok },
                        title: if failed {
                            "compensation failed"
                        } else {
                            "compensated"
                        }
                        .into(),
                        seq: event.seq,
                    });
                }
                EventKind::WorkflowCompleted { .. }
                | EventKind::WorkflowFailed { .. }
                | EventKind::WorkflowCancelled { .. }
                | EventKind::WorkflowCompensated { .. } => finished = Some(t),
                _ => {}
            }
        }
        let mut rows = rows.rows;
        let end = finished.unwrap_or(now).max(first.timestamp);
        for row in &mut rows {
            for bar in &mut row.bars {
                if bar.outcome == Outcome::Open {
                    bar.end = bar.end.max(end.min(now.max(bar.start)));
                }
            }
        }
        let end = rows
            .iter()
            .flat_map(|r| r.bars.iter().map(|b| b.end))
            .fold(end, Millis::max);
        Timeline {
            start: first.timestamp,
            end,
            rows,
            restarts,
        }
    }

    /// `at` as a percentage of the span from the run's start.
    pub(crate) fn percent(&self, at: Millis) -> f64 {
        let span = (self.end - self.start).max(1) as f64;
        ((at - self.start) as f64 / span * 100.0).clamp(0.0, 100.0)
    }

    /// [`percent`](Self::percent) of a borrowed time (for templates).
    pub(crate) fn percent_of(&self, at: &Millis) -> f64 {
        self.percent(*at)
    }

    /// Where a bar starts, in percent: its time, moved left just enough for an instant bar at
    /// the very end to stay inside the track.
    pub(crate) fn x(&self, bar: &Bar) -> f64 {
        self.percent(bar.start).min(100.0 - self.width(bar))
    }

    /// A bar's width in percent, at least a sliver so instant bars stay visible.
    pub(crate) fn width(&self, bar: &Bar) -> f64 {
        (self.percent(bar.end) - self.percent(bar.start)).max(0.4)
    }
}

/// Rows as they are built, found by kind and position.
#[derive(Default)]
struct Rows {
    rows: Vec<Row>,
    at: BTreeMap<(u8, u32), usize>,
}

impl Rows {
    /// The index of the row of `kind` at `position`, made with `label` if it is new.
    fn row(&mut self, kind: RowKind, position: u32, label: &str) -> usize {
        let rows = &mut self.rows;
        *self.at.entry((kind as u8, position)).or_insert_with(|| {
            rows.push(Row {
                kind,
                position,
                label: label.to_owned(),
                bars: Vec::new(),
                child: None,
            });
            rows.len() - 1
        })
    }

    /// Opens a bar at `t` on the row of `kind` at `position`; returns the row's index.
    fn open(
        &mut self,
        kind: RowKind,
        position: u32,
        label: &str,
        t: Millis,
        title: impl Into<String>,
        seq: u64,
    ) -> usize {
        let i = self.row(kind, position, label);
        self.rows[i].bars.push(Bar {
            start: t,
            end: t,
            outcome: Outcome::Open,
            title: title.into(),
            seq,
        });
        i
    }

    /// Ends the last open bar of that row at `t`.
    fn close(
        &mut self,
        kind: RowKind,
        position: u32,
        t: Millis,
        outcome: Outcome,
        error: Option<&str>,
    ) {
        if let Some(&i) = self.at.get(&(kind as u8, position)) {
            close(&mut self.rows[i], t, outcome, error);
        }
    }
}

/// Ends the last open bar of `row` at `t`.
fn close(row: &mut Row, t: Millis, outcome: Outcome, error: Option<&str>) {
    if let Some(bar) = row
        .bars
        .iter_mut()
        .rev()
        .find(|b| b.outcome == Outcome::Open)
    {
        bar.end = t;
        bar.outcome = outcome;
        bar.title = format!("{}, {} ms", bar.title, t - bar.start);
        if let Some(error) = error {
            bar.title = format!("{}: {error}", bar.title);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use worlds_engine::Payload;
    use worlds_engine::StructuredError;

    fn event(seq: u64, at: Millis, kind: EventKind) -> Event {
        Event {
            id: format!("evnt_{seq}"),
            run_id: "wrun_1".into(),
            seq,
            timestamp: at,
            version: 1,
            kind,
        }
    }

    #[test]
    fn attempts_sleeps_and_compensations_become_rows() {
        let history = vec![
            event(
                1,
                0,
                EventKind::WorkflowStarted {
                    attempt: 1,
                    first_position: 0,
                },
            ),
            event(
                2,
                0,
                EventKind::ActivityScheduled {
                    position: 0,
                    activity_id: "a".into(),
                    name: "charge".into(),
                    input: Payload::null(),
                    options: None,
                    inline: false,
                },
            ),
            event(
                3,
                10,
                EventKind::ActivityStarted {
                    position: 0,
                    attempt: 1,
                },
            ),
            event(
                4,
                20,
                EventKind::ActivityFailed {
                    position: 0,
                    attempt: 1,
                    error: StructuredError::new("card declined"),
                    retrying: true,
                },
            ),
            event(
                5,
                40,
                EventKind::ActivityStarted {
                    position: 0,
                    attempt: 2,
                },
            ),
            event(
                6,
                50,
                EventKind::ActivityCompleted {
                    position: 0,
                    attempt: 2,
                    output: Payload::null(),
                },
            ),
            event(
                7,
                50,
                EventKind::TimerScheduled {
                    position: 1,
                    fire_at: 90,
                    timer_id: None,
                },
            ),
            event(
                8,
                60,
                EventKind::WorkflowStarted {
                    attempt: 1,
                    first_position: 0,
                },
            ),
            event(9, 90, EventKind::TimerFired { position: 1 }),
            event(
                10,
                95,
                EventKind::CompensationExecuted {
                    position: 0,
                    compensation_id: "c".into(),
                },
            ),
            event(11, 100, EventKind::WorkflowCompensated {}),
        ];
        let timeline = Timeline::of(&history, 1_000);
        assert_eq!((timeline.start, timeline.end), (0, 100));
        assert_eq!(timeline.restarts, vec![60]);
        type Spans = Vec<(Millis, Millis, Outcome)>;
        let shape: Vec<(RowKind, &str, Spans)> = timeline
            .rows
            .iter()
            .map(|r| {
                (
                    r.kind,
                    r.label.as_str(),
                    r.bars.iter().map(|b| (b.start, b.end, b.outcome)).collect(),
                )
            })
            .collect();
        assert_eq!(
            shape,
            vec![
                (
                    RowKind::Step,
                    "charge",
                    vec![(10, 20, Outcome::Failed), (40, 50, Outcome::Ok)]
                ),
                (RowKind::Sleep, "sleep", vec![(50, 90, Outcome::Ok)]),
                (
                    RowKind::Compensation,
                    "undo charge",
                    vec![(95, 95, Outcome::Ok)]
                ),
            ]
        );
        assert!(timeline.rows[0].bars[0].title.contains("card declined"));
        assert_eq!(timeline.percent(50), 50.0);
    }

    #[test]
    fn open_bars_of_an_unfinished_run_reach_now() {
        let history = vec![
            event(
                1,
                0,
                EventKind::WorkflowStarted {
                    attempt: 1,
                    first_position: 0,
                },
            ),
            event(
                2,
                5,
                EventKind::ActivityStarted {
                    position: 0,
                    attempt: 1,
                },
            ),
        ];
        let timeline = Timeline::of(&history, 30);
        assert_eq!(timeline.rows[0].bars[0].end, 30);
        assert_eq!(timeline.rows[0].bars[0].outcome, Outcome::Open);
        assert_eq!(timeline.end, 30);
        assert_eq!(Timeline::of(&[], 5), Timeline::default());
    }
}
