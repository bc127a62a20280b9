//! Schedules: start runs of a workflow on a cron expression, or once at a given time.
//!
//! A schedule is a record in the store ([`ScheduleConfig`], kept by the
//! [`ScheduleStore`](crate::store::ScheduleStore)), so it survives restarts. A started world
//! fires the schedules whose workflow it has registered: each firing starts one run whose
//! workflow id is `sched:{schedule id}:{firing time in ms}`. Workflow ids are unique in a store,
//! also across processes sharing a file directory, so a firing that two processes (or a retry
//! after a crash) try to start makes one run; the second attempt is a conflict, taken as "already
//! fired".
//!
//! ```
//! use worlds_engine::prelude::*;
//! use worlds_engine::schedule::{CatchUp, Schedule};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let report = workflow("report", |_ctx: WorkflowContext, day: String| async move {
//!     Ok::<_, WorkflowError>(format!("report for {day}"))
//! });
//! let world = World::new(WorldConfig::memory())?;
//! world.register(&report)?;
//! // Every day at 09:00 in Paris; the input is computed at each firing.
//! let config = world
//!     .add_schedule(
//!         Schedule::cron("daily-report", "report", "0 9 * * *")
//!             .time_zone("Europe/Paris")
//!             .input_fn(|firing| format!("day of {}", firing.at))
//!             .catch_up(CatchUp::Latest),
//!     )
//!     .await?;
//! assert_eq!(config.total_executions, 0);
//! assert!(config.next_execution.is_some());
//! # Ok::<(), WorldError>(())
//! # }).unwrap();
//! ```

mod cron;
pub(crate) mod plan;
mod service;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::clock::Millis;
use crate::error::WorldError;
use crate::payload::Payload;

pub use cron::{CronError, CronExpr, CronField};
pub(crate) use service::Schedules;

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
    fn validate(self) -> Result<(), WorldError> {
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
    /// The run the latest firing started.
    pub last_run_id: Option<String>,
    /// Why the latest firing could not start a run, if it could not.
    pub last_error: Option<String>,
    /// Firings decided but whose run is not yet known to be started, oldest first. A world
    /// retries them; their workflow ids make sure each starts one run.
    #[serde(default)]
    pub pending_firings: Vec<Millis>,
}

impl ScheduleConfig {
    /// True for a schedule made by [`Schedule::once`].
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

/// One firing of a schedule, as an input function sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Firing {
    /// The schedule's id.
    pub schedule_id: String,
    /// The time the firing is for (ms since the Unix epoch): the cron time, not the moment the
    /// run is started, so a late or repeated start computes the same input.
    pub at: Millis,
}

/// Computes a firing's input.
pub(crate) type InputFn = Arc<dyn Fn(&Firing) -> Result<Payload, WorldError> + Send + Sync>;

/// Where a schedule's input comes from.
#[derive(Clone)]
pub(crate) enum InputSource {
    /// One value for every firing (or the error serializing it).
    Value(Result<Payload, Arc<WorldError>>),
    /// Computed at each firing.
    Function(InputFn),
}

/// When a schedule fires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Timing {
    Cron(String),
    Once(Millis),
}

/// A schedule to make with [`World::add_schedule`](crate::World::add_schedule).
///
/// ```
/// use worlds_engine::schedule::{CatchUp, Schedule};
/// let nightly = Schedule::cron("nightly", "cleanup", "30 2 * * *")
///     .time_zone("America/New_York")
///     .input(serde_json::json!({ "older_than_days": 30 }))
///     .catch_up(CatchUp::All { max: 7 });
/// let reminder = Schedule::once("remind", 1_767_258_000_000).input("call back");
/// # let _ = (nightly, reminder);
/// ```
#[derive(Clone)]
pub struct Schedule {
    pub(crate) id: Option<String>,
    pub(crate) workflow_name: String,
    pub(crate) input: InputSource,
    pub(crate) timing: Timing,
    pub(crate) time_zone: Option<String>,
    pub(crate) catch_up: CatchUp,
}

impl std::fmt::Debug for Schedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Schedule")
            .field("id", &self.id)
            .field("workflow_name", &self.workflow_name)
            .field("timing", &self.timing)
            .field("time_zone", &self.time_zone)
            .field("catch_up", &self.catch_up)
            .finish_non_exhaustive()
    }
}

impl Schedule {
    /// A schedule `id` that starts `workflow_name` at the times of a five-field cron
    /// expression (see [`CronExpr`]), in UTC unless [`time_zone`](Self::time_zone) says
    /// otherwise. Its input is `null` unless set.
    pub fn cron(
        id: impl Into<String>,
        workflow_name: impl Into<String>,
        expression: impl Into<String>,
    ) -> Schedule {
        Schedule {
            id: Some(id.into()),
            workflow_name: workflow_name.into(),
            input: InputSource::Value(Ok(Payload::null())),
            timing: Timing::Cron(expression.into()),
            time_zone: None,
            catch_up: CatchUp::default(),
        }
    }

    /// A schedule that starts `workflow_name` once, at `at` (ms since the Unix epoch; a time
    /// already past fires at once), and is deleted once its run is started. It gets a fresh id
    /// (`sched_…`) unless [`id`](Self::id) sets one.
    pub fn once(workflow_name: impl Into<String>, at: Millis) -> Schedule {
        Schedule {
            id: None,
            workflow_name: workflow_name.into(),
            input: InputSource::Value(Ok(Payload::null())),
            timing: Timing::Once(at),
            time_zone: None,
            catch_up: CatchUp::default(),
        }
    }

    /// Sets the id.
    pub fn id(mut self, id: impl Into<String>) -> Schedule {
        self.id = Some(id.into());
        self
    }

    /// The input of every run: serialized now, stored with the schedule.
    pub fn input<I: Serialize>(mut self, input: I) -> Schedule {
        self.input = InputSource::Value(
            Payload::encode(&input)
                .map_err(|e| Arc::new(WorldError::serde("input of the schedule", e))),
        );
        self
    }

    /// Computes the input at each firing instead. A function cannot be stored: give it again
    /// (call [`World::add_schedule`](crate::World::add_schedule) again with the same schedule)
    /// after a restart; until a process has it, the schedule's firings wait.
    pub fn input_fn<I, F>(mut self, f: F) -> Schedule
    where
        I: Serialize,
        F: Fn(&Firing) -> I + Send + Sync + 'static,
    {
        self.input = InputSource::Function(Arc::new(move |firing: &Firing| {
            Payload::encode(&f(firing)).map_err(|e| {
                WorldError::serde(
                    format!("input computed for schedule '{}'", firing.schedule_id),
                    e,
                )
            })
        }));
        self
    }

    /// Reads the cron expression in an IANA time zone (`"Europe/Paris"`) instead of UTC.
    pub fn time_zone(mut self, name: impl Into<String>) -> Schedule {
        self.time_zone = Some(name.into());
        self
    }

    /// Sets what happens to missed firings (default [`CatchUp::Latest`]).
    pub fn catch_up(mut self, policy: CatchUp) -> Schedule {
        self.catch_up = policy;
        self
    }
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
