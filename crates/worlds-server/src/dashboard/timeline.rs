//! A run's timeline, computed from its history: one row per step (each attempt a bar, the
//! retry delays between them gaps), sleep, hook wait, child run and compensation, and marks
//! where the run was picked up again (a restart, a takeover, a retry of the whole run).
//!
//! Pure: events in, rows out. Positions are fractions of the run's span, so the page draws
//! bars as `left`/`width` percentages without a chart library.

use std::collections::BTreeMap;

use worlds_engine::clock::Millis;
use worlds_engine::{Event, EventKind};

use super::shown::{duration_text, one_line};

/// The most characters of a row's label (a step's name, which a caller may choose).
const LABEL_TEXT: usize = 160;
/// The most characters of an error in a bar's title.
const ERROR_TEXT: usize = 300;

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
    pub(crate) restarts: Vec<Restart>,
}

/// A moment the run was started again, marked across every row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Restart {
    pub(crate) at: Millis,
    /// Shown on hover: why it started again.
    pub(crate) title: &'static str,
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
        let late = worlds_engine::model::late_timers(history);
        for event in history {
            let t = event.timestamp;
            match &event.kind {
                EventKind::WorkflowStarted { .. } => {
                    if started {
                        restarts.push(Restart {
                            at: t,
                            title: "started again",
                        });
                    }
                    started = true;
                }
                EventKind::RunResumed {} => restarts.push(Restart {
                    at: t,
                    title: "resumed after a restart or takeover",
                }),
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
                    let why = late.iter().find(|l| l.seq == event.seq).map(|l| {
                        let late = duration_text(l.late_ms);
                        if l.world_stopped {
                            format!("fired {late} late: the world was not running when it was due")
                        } else {
                            format!("fired {late} late")
                        }
                    });
                    rows.close(RowKind::Sleep, *position, t, Outcome::Ok, why.as_deref());
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

    /// [`percent`](Self::percent) of a borrowed time (templates hand over references).
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

/// A mark of the time axis under the rows.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Tick {
    /// Where, in percent of the track.
    pub(crate) percent: f64,
    /// Time since the run's first event: `0`, `30 s`, `2 min`…
    pub(crate) label: String,
    /// `start`, `middle` or `end`: how the label sits on its mark (the first and the last stay
    /// inside the track).
    pub(crate) anchor: &'static str,
}

/// Steps between two marks of the axis, in ms: the first that gives at most
/// [`MOST_TICKS`] intervals is taken.
const TICK_STEPS: [Millis; 28] = [
    1,
    2,
    5,
    10,
    20,
    50,
    100,
    200,
    500,
    1_000,
    2_000,
    5_000,
    10_000,
    15_000,
    30_000,
    60_000,
    120_000,
    300_000,
    600_000,
    900_000,
    1_800_000,
    3_600_000,
    7_200_000,
    10_800_000,
    21_600_000,
    43_200_000,
    86_400_000,
    604_800_000,
];
/// Most intervals between marks on the axis.
const MOST_TICKS: Millis = 6;

/// A time since the start in its two largest units: `3 h`, `1 h 30 min`, `1 s 500 ms`.
fn tick_label(ms: Millis) -> String {
    const UNITS: [(Millis, &str); 5] = [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "min"),
        (1_000, "s"),
        (1, "ms"),
    ];
    if ms == 0 {
        return "0".into();
    }
    let mut rest = ms;
    let mut parts = Vec::new();
    for (unit, name) in UNITS {
        if rest >= unit {
            parts.push(format!("{} {name}", rest / unit));
            rest %= unit;
        } else if !parts.is_empty() {
            // Two units at most, and adjacent ones: `1 h 30 min`, never `1 h 5 s`.
            break;
        }
        if parts.len() == 2 {
            break;
        }
    }
    parts.join(" ")
}

impl Timeline {
    /// The marks of the time axis: from the run's first event, at a round step that gives
    /// at most a handful of them.
    pub(crate) fn ticks(&self) -> Vec<Tick> {
        let span = (self.end - self.start).max(1);
        let step = TICK_STEPS
            .iter()
            .copied()
            .find(|step| span / step <= MOST_TICKS)
            .unwrap_or_else(|| (span + MOST_TICKS - 1) / MOST_TICKS);
        let count = span / step;
        (0..=count)
            .map(|i| {
                let at = i * step;
                Tick {
                    percent: self.percent(self.start + at),
                    label: tick_label(at),
                    anchor: match i {
                        0 => "start",
                        _ if i == count && at * 100 > span * 95 => "end",
                        _ => "middle",
                    },
                }
            })
            .collect()
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
                label: one_line(label, LABEL_TEXT),
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
            bar.title = format!("{}: {}", bar.title, one_line(error, ERROR_TEXT));
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
        assert_eq!(
            timeline.restarts,
            vec![Restart {
                at: 60,
                title: "started again"
            }]
        );
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

    #[test]
    fn a_resumption_is_marked_and_a_sleep_it_made_late_says_why() {
        let hour = 3_600_000;
        let history = vec![
            event(
                0,
                0,
                EventKind::WorkflowStarted {
                    attempt: 1,
                    first_position: 0,
                },
            ),
            event(
                1,
                1,
                EventKind::TimerScheduled {
                    position: 0,
                    fire_at: hour,
                    timer_id: None,
                },
            ),
            event(2, 3 * hour, EventKind::RunResumed {}),
            event(3, 3 * hour + 10, EventKind::TimerFired { position: 0 }),
        ];
        let timeline = Timeline::of(&history, 4 * hour);
        assert_eq!(
            timeline.restarts,
            vec![Restart {
                at: 3 * hour,
                title: "resumed after a restart or takeover"
            }]
        );
        let sleep = &timeline.rows[0].bars[0];
        assert!(
            sleep
                .title
                .ends_with("fired 2h 0m late: the world was not running when it was due"),
            "{}",
            sleep.title
        );
    }

    #[test]
    fn the_axis_marks_round_times_since_the_start() {
        let timeline = Timeline {
            start: 1_000,
            end: 1_000 + 3 * 3_600_000 + 12 * 60_000,
            rows: Vec::new(),
            restarts: Vec::new(),
        };
        let ticks = timeline.ticks();
        let labels: Vec<&str> = ticks.iter().map(|t| t.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "0",
                "30 min",
                "1 h",
                "1 h 30 min",
                "2 h",
                "2 h 30 min",
                "3 h"
            ]
        );
        assert_eq!((ticks[0].percent, ticks[0].anchor), (0.0, "start"));
        assert!(ticks[6].percent > 90.0 && ticks[6].percent < 100.0);
        assert_eq!(
            ticks[6].anchor, "middle",
            "3 h is not the end of 3 h 12 min"
        );

        let short = Timeline {
            start: 0,
            end: 2_500,
            ..timeline
        };
        let labels: Vec<String> = short.ticks().into_iter().map(|t| t.label).collect();
        assert_eq!(
            labels,
            ["0", "500 ms", "1 s", "1 s 500 ms", "2 s", "2 s 500 ms"]
        );
        assert_eq!(short.ticks().last().unwrap().anchor, "end");
        assert_eq!(tick_label(90_000), "1 min 30 s");
        assert_eq!(tick_label(3_600_000 + 5_000), "1 h");
        assert_eq!(tick_label(86_400_000 + 7_200_000), "1 d 2 h");
    }
}
