//! Schedules as stored: what a schedule starts, when, and what it has done so far. The
//! builder and the service that fires them live in [`crate::schedule`].

use serde::{Deserialize, Serialize};

use crate::clock::Millis;
use crate::error::WorldError;
use crate::payload::Payload;

/// The most missed firings [`CatchUp::All`] may start at once.
pub const MAX_CATCH_UP: u32 = 1000;

/// How long after its time a firing still counts as on time rather than missed, for
/// [`CatchUp::Skip`]: one minute, cron's granularity.
pub const ON_TIME_GRACE_MS: Millis = 60_000;

/// Longest schedule id (ids name files in a durable store's `schedules/` directory).
pub const MAX_ID_LEN: usize = 128;

/// What a cron schedule does about the firings it missed while no world was running it
/// (after downtime, or when no process had its workflow registered).
///
/// Time a schedule spends paused is not missed: resuming it starts from the next firing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(tag = "policy", rename_all = "snake_case")]
pub enum CatchUp {
    /// Start one run for the most recent missed firing, drop the older ones. The default.
    #[default]
    Latest,
    /// Drop every missed firing; only a firing reached within [`ON_TIME_GRACE_MS`] of its time
    /// starts a run.
    Skip,
    /// Start one run per missed firing, oldest first, but at most `max` (the most recent
    /// ones); `max` is 1 to [`MAX_CATCH_UP`].
    All {
        /// The most runs one catch-up starts.
        max: u32,
    },
}

impl CatchUp {
    pub(crate) fn validate(self) -> Result<(), WorldError> {
        match self {
            CatchUp::All { max } if max == 0 || max > MAX_CATCH_UP => Err(WorldError::invalid(
                "catch_up",
                format!("`all` needs a max of 1 to {MAX_CATCH_UP} runs, got {max}"),
            )),
            _ => Ok(()),
        }
    }
}

/// A schedule as stored: what it starts, when, and what it has done so far.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ScheduleConfig {
    /// The schedule's id: 1 to [`MAX_ID_LEN`] ASCII letters, digits, `_` or `-`.
    pub id: String,
    /// The workflow each firing starts a run of.
    pub workflow_name: String,
    /// The input of every run, unless `input_fn` is set.
    pub input: Option<Payload>,
    /// The input is computed at each firing by a function given to the process that made the
    /// schedule; only a process that has been given it again fires the schedule.
    #[serde(default)]
    pub input_fn: bool,
    /// The cron expression; `None` for a one-time schedule.
    pub cron_expression: Option<String>,
    /// The IANA time zone the cron expression is read in; `None` for UTC.
    pub time_zone: Option<String>,
    /// A paused schedule does not fire; resuming it continues from the next time after now.
    pub paused: bool,
    /// Runs started by firings so far.
    pub total_executions: u64,
    /// The time of the latest firing that started a run (ms since the Unix epoch).
    pub last_execution: Option<Millis>,
    /// When the schedule fires next (ms since the Unix epoch); `None` once a one-time schedule
    /// has fired (it is deleted once its run is started) or if its expression cannot fire.
    pub next_execution: Option<Millis>,
    /// What to do about missed firings.
    pub catch_up: CatchUp,
    /// When the schedule was made.
    pub created_at: Millis,
    /// The run the latest firing started, while it exists: when a retention sweep removes it,
    /// its id moves to [`removed_last_run_id`](Self::removed_last_run_id).
    pub last_run_id: Option<String>,
    /// The run the latest firing started, once a retention sweep has removed it (with an
    /// archive, it can be found there by this id); the next firing clears it.
    #[serde(default)]
    pub removed_last_run_id: Option<String>,
    /// Why the latest firing could not start a run, if it could not.
    pub last_error: Option<String>,
    /// Firings decided but whose run is not yet known to be started, oldest first. A world
    /// retries them; their workflow ids make sure each starts one run.
    #[serde(default)]
    pub pending_firings: Vec<Millis>,
}

impl ScheduleConfig {
    /// True for a schedule made by [`Schedule::once`](crate::schedule::Schedule::once).
    pub fn is_once(&self) -> bool {
        self.cron_expression.is_none()
    }

    /// The workflow id of the run started by this schedule's firing at `at`.
    pub fn workflow_id_at(&self, at: Millis) -> String {
        firing_workflow_id(&self.id, at)
    }
}

/// The workflow id of the run a firing starts: `sched:{schedule id}:{time in ms}`.
pub fn firing_workflow_id(schedule_id: &str, at: Millis) -> String {
    format!("sched:{schedule_id}:{at}")
}

/// Checks that a schedule id can name a file.
pub(crate) fn check_id(id: &str) -> Result<(), WorldError> {
    let plain = !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if plain {
        Ok(())
    } else {
        Err(WorldError::invalid(
            "id",
            format!(
                "a schedule id is 1 to {MAX_ID_LEN} ASCII letters, digits, '_' or '-' (it names a file); got {id:?}"
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_checked() {
        check_id("daily-report_2").unwrap();
        for bad in ["", "a/b", "a b", "ü", &"x".repeat(MAX_ID_LEN + 1)] {
            let err = check_id(bad).unwrap_err();
            assert_eq!(err.http_status(), 400, "{bad:?}");
        }
    }

    #[test]
    fn catch_up_all_needs_a_cap() {
        CatchUp::All { max: 1 }.validate().unwrap();
        CatchUp::All { max: MAX_CATCH_UP }.validate().unwrap();
        assert!(CatchUp::All { max: 0 }.validate().is_err());
        assert!(CatchUp::All {
            max: MAX_CATCH_UP + 1
        }
        .validate()
        .is_err());
    }

    #[test]
    fn catch_up_policies_serialize_by_name() {
        let all = serde_json::to_value(CatchUp::All { max: 3 }).unwrap();
        assert_eq!(all, serde_json::json!({ "policy": "all", "max": 3 }));
        let latest: CatchUp =
            serde_json::from_value(serde_json::json!({ "policy": "latest" })).unwrap();
        assert_eq!(latest, CatchUp::Latest);
    }
}
