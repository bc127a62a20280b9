//! Cron schedules that start runs.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `POST /v1/schedules`: a cron schedule (created, or updated under its id).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewSchedule {
    /// The schedule's id; an existing schedule of this id is updated.
    pub id: String,
    /// The registered workflow each firing starts.
    pub workflow: String,
    /// Five fields, in UTC: `minute hour day-of-month month day-of-week`.
    pub cron: String,
    /// The input of every run it starts.
    #[serde(default)]
    pub input: Value,
}
