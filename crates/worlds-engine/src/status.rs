//! The run status machine, as one transition table.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Where a run is in its life.
///
/// ```text
/// pending ──▶ running ──▶ completed
///    │           ├──────▶ cancelled
///    │           └──────▶ failed ──▶ compensating ──▶ compensated
///    │                      └──▶ running (reopened: retry, reset, resume)
///    ├──────▶ failed   (timed out or unknown before it started)
///    └──────▶ cancelled
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Accepted and queued; no worker has picked it up yet.
    Pending,
    /// Started: the workflow function is executing or waiting on a step, timer or child.
    Running,
    /// Finished with a result.
    Completed,
    /// Finished with an error.
    Failed,
    /// Stopped on request before it finished.
    Cancelled,
    /// Failed, and its saga compensations are running.
    Compensating,
    /// Failed, and its compensations have run.
    Compensated,
}

/// Every allowed transition, in one place. Anything not listed is an error.
const TRANSITIONS: &[(RunStatus, &[RunStatus])] = &[
    // A run can fail before it starts: its timeout expired in the queue, or no process knows
    // its workflow.
    (
        RunStatus::Pending,
        &[RunStatus::Running, RunStatus::Failed, RunStatus::Cancelled],
    ),
    (
        RunStatus::Running,
        &[
            RunStatus::Completed,
            RunStatus::Failed,
            RunStatus::Cancelled,
        ],
    ),
    // A failed run goes on again when it is reopened by hand (retry, reset, resume).
    (
        RunStatus::Failed,
        &[RunStatus::Compensating, RunStatus::Running],
    ),
    (RunStatus::Compensating, &[RunStatus::Compensated]),
    (RunStatus::Completed, &[]),
    (RunStatus::Cancelled, &[]),
    (RunStatus::Compensated, &[]),
];

impl RunStatus {
    /// All statuses, in life order.
    pub const ALL: [RunStatus; 7] = [
        RunStatus::Pending,
        RunStatus::Running,
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::Cancelled,
        RunStatus::Compensating,
        RunStatus::Compensated,
    ];

    /// True if the run has finished: completed, failed, cancelled or compensated.
    ///
    /// A failed run can still move on to compensating; it is terminal in the sense that its
    /// workflow function will not run again.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunStatus::Completed
                | RunStatus::Failed
                | RunStatus::Cancelled
                | RunStatus::Compensated
        )
    }

    /// True if the machine allows going from `self` to `to`.
    pub fn can_become(self, to: RunStatus) -> bool {
        TRANSITIONS
            .iter()
            .find(|(from, _)| *from == self)
            .is_some_and(|(_, allowed)| allowed.contains(&to))
    }

    /// The lower-case name used in events, filters and the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Pending => "pending",
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Compensating => "compensating",
            RunStatus::Compensated => "compensated",
        }
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for RunStatus {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RunStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown status '{s}'; expected one of: {}",
                    RunStatus::ALL.map(RunStatus::as_str).join(", ")
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn table_covers_every_status_once() {
        for status in RunStatus::ALL {
            assert_eq!(
                TRANSITIONS.iter().filter(|(s, _)| *s == status).count(),
                1,
                "{status}"
            );
        }
    }

    #[test]
    fn spec_transitions() {
        use RunStatus::*;
        assert!(Pending.can_become(Running));
        assert!(Pending.can_become(Cancelled));
        assert!(!Pending.can_become(Completed));
        assert!(Pending.can_become(Failed));
        assert!(Running.can_become(Failed));
        assert!(Failed.can_become(Compensating));
        assert!(Failed.can_become(Running), "a failed run can be reopened");
        assert!(!Compensated.can_become(Running), "a compensated one cannot");
        assert!(Compensating.can_become(Compensated));
        assert!(!Completed.can_become(Running));
        assert!(!Cancelled.can_become(Running));
        assert!(!Running.can_become(Running));
    }

    proptest! {
        #[test]
        fn only_a_failed_run_leaves_a_terminal_status(a in 0usize..7, b in 0usize..7) {
            let (from, to) = (RunStatus::ALL[a], RunStatus::ALL[b]);
            if from.is_terminal() && from.can_become(to) {
                prop_assert_eq!(from, RunStatus::Failed);
                prop_assert!(matches!(to, RunStatus::Compensating | RunStatus::Running));
            }
            prop_assert_eq!(from.as_str().parse::<RunStatus>().unwrap(), from);
        }
    }
}
