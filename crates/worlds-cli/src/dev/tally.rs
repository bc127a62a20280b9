//! What `worlds dev` reports: the runs it follows, counted by status and by workflow.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use worlds_engine::RunStatus;

/// The statuses of runs that have not finished, in life order.
const IN_FLIGHT: [RunStatus; 3] = [
    RunStatus::Pending,
    RunStatus::Running,
    RunStatus::Compensating,
];

/// The statuses of finished runs: the good ending first.
const FINISHED: [RunStatus; 4] = [
    RunStatus::Completed,
    RunStatus::Compensated,
    RunStatus::Failed,
    RunStatus::Cancelled,
];

/// Finished and total runs of one workflow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct WorkflowCount {
    /// Runs in a terminal status.
    pub(crate) finished: usize,
    /// All runs followed.
    pub(crate) total: usize,
}

/// A count of the runs a `worlds dev` session follows: the ones it resumed and the ones it
/// started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    by_status: BTreeMap<RunStatus, usize>,
    by_workflow: BTreeMap<String, WorkflowCount>,
    /// Runs found in flight and resumed.
    pub(crate) resumed: usize,
    /// New runs started so far.
    pub(crate) started: usize,
    /// New runs to start in all.
    pub(crate) to_start: usize,
}

impl Tally {
    /// An empty count for a session that resumed `resumed` runs, has started `started` new runs
    /// and will start `to_start`.
    pub(crate) fn new(resumed: usize, started: usize, to_start: usize) -> Tally {
        Tally {
            resumed,
            started,
            to_start,
            ..Tally::default()
        }
    }

    /// Counts one run.
    pub(crate) fn add(&mut self, workflow: &str, status: RunStatus) {
        *self.by_status.entry(status).or_default() += 1;
        let count = self.by_workflow.entry(workflow.to_owned()).or_default();
        count.total += 1;
        if status.is_terminal() {
            count.finished += 1;
        }
    }

    /// Runs in this status.
    pub(crate) fn count(&self, status: RunStatus) -> usize {
        self.by_status.get(&status).copied().unwrap_or(0)
    }

    /// Runs counted.
    pub(crate) fn total(&self) -> usize {
        self.by_status.values().sum()
    }

    /// Runs counted that have finished.
    pub(crate) fn finished(&self) -> usize {
        self.by_status
            .iter()
            .filter(|(status, _)| status.is_terminal())
            .map(|(_, n)| n)
            .sum()
    }

    /// Runs counted that have not finished.
    pub(crate) fn in_flight(&self) -> usize {
        self.total() - self.finished()
    }

    /// True once every run is started and finished.
    pub(crate) fn is_done(&self) -> bool {
        self.started >= self.to_start && self.in_flight() == 0
    }

    /// Finished and total runs per workflow name, by name.
    pub(crate) fn workflows(&self) -> impl Iterator<Item = (&str, WorkflowCount)> {
        self.by_workflow
            .iter()
            .map(|(name, count)| (name.as_str(), *count))
    }

    /// The statuses of unfinished runs with their counts: `pending 1 · running 2 · compensating 0`.
    pub(crate) fn in_flight_line(&self) -> String {
        self.counts_line(&IN_FLIGHT)
    }

    /// The statuses of finished runs with their counts: `completed 1 · compensated 0 · …`.
    pub(crate) fn finished_line(&self) -> String {
        self.counts_line(&FINISHED)
    }

    /// Every status with its count: [`in_flight_line`](Self::in_flight_line), then
    /// [`finished_line`](Self::finished_line).
    pub(crate) fn statuses_line(&self) -> String {
        format!("{} · {}", self.in_flight_line(), self.finished_line())
    }

    /// `statuses` with their counts, joined by ` · `.
    fn counts_line(&self, statuses: &[RunStatus]) -> String {
        let mut line = String::new();
        for status in statuses {
            if !line.is_empty() {
                line.push_str(" · ");
            }
            let _ = write!(line, "{status} {}", self.count(*status));
        }
        line
    }

    /// Where the session is: `resumed 2 · started 3/20`.
    pub(crate) fn sources_line(&self) -> String {
        format!(
            "resumed {} · started {}/{}",
            self.resumed, self.started, self.to_start
        )
    }

    /// The statuses that occurred, with their counts: `completed 10, compensated 10`.
    pub(crate) fn outcome_line(&self) -> String {
        let parts: Vec<String> = IN_FLIGHT
            .into_iter()
            .chain(FINISHED)
            .filter(|status| self.count(*status) > 0)
            .map(|status| format!("{status} {}", self.count(status)))
            .collect();
        if parts.is_empty() {
            "no runs".to_owned()
        } else {
            parts.join(", ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Tally {
        let mut tally = Tally::new(1, 2, 4);
        tally.add("checkout", RunStatus::Completed);
        tally.add("checkout", RunStatus::Running);
        tally.add("order-saga", RunStatus::Compensating);
        tally
    }

    #[test]
    fn counts_by_status_and_workflow() {
        let tally = sample();
        assert_eq!(tally.total(), 3);
        assert_eq!(tally.finished(), 1);
        assert_eq!(tally.in_flight(), 2);
        assert_eq!(tally.count(RunStatus::Running), 1);
        assert_eq!(tally.count(RunStatus::Failed), 0);
        let workflows: Vec<_> = tally.workflows().collect();
        assert_eq!(
            workflows,
            vec![
                (
                    "checkout",
                    WorkflowCount {
                        finished: 1,
                        total: 2
                    }
                ),
                (
                    "order-saga",
                    WorkflowCount {
                        finished: 0,
                        total: 1
                    }
                ),
            ]
        );
    }

    #[test]
    fn done_when_everything_started_has_finished() {
        let mut tally = Tally::new(0, 1, 2);
        tally.add("checkout", RunStatus::Completed);
        assert!(!tally.is_done(), "one run is not started yet");
        let mut tally = Tally::new(0, 2, 2);
        tally.add("checkout", RunStatus::Completed);
        tally.add("order-saga", RunStatus::Compensated);
        assert!(tally.is_done());
        tally.add("order-saga", RunStatus::Pending);
        assert!(!tally.is_done());
        assert!(Tally::new(0, 0, 0).is_done());
    }

    #[test]
    fn lines() {
        let tally = sample();
        assert_eq!(
            tally.in_flight_line(),
            "pending 0 · running 1 · compensating 1"
        );
        assert_eq!(
            tally.finished_line(),
            "completed 1 · compensated 0 · failed 0 · cancelled 0"
        );
        assert_eq!(
            tally.statuses_line(),
            "pending 0 · running 1 · compensating 1 · completed 1 · compensated 0 · failed 0 · cancelled 0"
        );
        assert_eq!(tally.sources_line(), "resumed 1 · started 2/4");
        assert_eq!(
            tally.outcome_line(),
            "running 1, compensating 1, completed 1"
        );
        assert_eq!(Tally::default().outcome_line(), "no runs");
    }
}
