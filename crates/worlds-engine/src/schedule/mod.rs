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
//!     .schedules()
//!     .add(
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

use std::sync::Arc;

use crate::clock::Millis;
use crate::error::WorldError;
use crate::payload::Payload;
use serde::Serialize;

pub(crate) use crate::model::schedule::check_id;
pub use crate::model::schedule::{
    firing_workflow_id, CatchUp, ScheduleConfig, MAX_CATCH_UP, MAX_ID_LEN, ON_TIME_GRACE_MS,
};
pub use cron::{CronError, CronExpr, CronField};

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

/// A schedule to make with [`World::schedules`](crate::WorldSchedules::add).
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
    /// (call [`World::schedules`](crate::WorldSchedules::add) again with the same schedule)
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
