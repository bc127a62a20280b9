//! Runs: starting one, waiting for its outcome, listing them, cancelling and reopening them,
//! and acting on many at once.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use worlds_engine::model::{ResolveData, SortOrder};
use worlds_engine::{BulkAction, RunStatus, StructuredError, WorkflowOptions, WorkflowQueryFilter};

/// `POST /v1/runs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct StartRun {
    /// The registered workflow's name.
    pub workflow: String,
    /// Its input (JSON `null` if left out).
    #[serde(default)]
    pub input: Value,
    /// Workflow id, idempotency key, `on_conflict`, priority, task queue, timeout…
    #[serde(default)]
    #[cfg_attr(
        feature = "openapi",
        schema(value_type = Option<crate::openapi::StartOptions>)
    )]
    pub options: WorkflowOptions,
}

/// The answer to a start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Started {
    /// The new run's id (`wrun_…`), or that of the run the start found under its key.
    pub run_id: String,
    /// Its workflow id.
    pub workflow_id: String,
}

/// `?wait_ms=`: how long a start or a result request waits for the run to finish.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(
    feature = "openapi",
    derive(utoipa::IntoParams),
    into_params(parameter_in = Query)
)]
#[serde(deny_unknown_fields)]
pub struct Wait {
    /// How long to wait for the run to finish, in ms (default 30 000, at most 300 000).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
}

/// `?resolve=none|all` of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(
    feature = "openapi",
    derive(utoipa::IntoParams),
    into_params(parameter_in = Query)
)]
pub struct Resolve {
    /// `all` (the default) includes inputs and outputs; `none` leaves them out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(value_type = Option<String>))]
    pub resolve: Option<ResolveData>,
}

/// A run's outcome: for a finished run its output or error; for one still going, its status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Outcome {
    /// The run's id.
    pub run_id: String,
    /// Its workflow id.
    pub workflow_id: String,
    /// `pending`, `running`, `completed`, `failed`, `cancelled`…
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub status: RunStatus,
    /// True once the run finished (the answer is then 200; 202 while it goes on).
    pub done: bool,
    /// The output of a completed run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// The error of a failed run.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::openapi::RunError>))]
    pub error: Option<StructuredError>,
}

/// `GET /v1/runs` filters; all optional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(
    feature = "openapi",
    derive(utoipa::IntoParams),
    into_params(parameter_in = Query)
)]
#[serde(deny_unknown_fields)]
pub struct RunFilter {
    /// Comma-separated statuses (`pending,running`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Only runs of this workflow name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    /// Only children of this run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Created at or after (ms since the epoch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_after: Option<i64>,
    /// Created before (ms since the epoch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_before: Option<i64>,
    /// Only quarantined runs (`true`) or only others (`false`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quarantined: Option<bool>,
    /// Only runs accepted by a world of this code version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code_version: Option<String>,
    /// Only runs whose workflow id starts with this.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workflow_id_prefix: Option<String>,
    /// The `cursor` of the previous page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// Page size, 1 to 1000 (default 100).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// `descending` (the default: newest first) or `ascending`; a cursor continues in the
    /// order of its page.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(value_type = Option<String>))]
    pub order: Option<SortOrder>,
    /// `none` (the default) leaves inputs and outputs out; `all` includes them.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(value_type = Option<String>))]
    pub resolve: Option<ResolveData>,
}

/// `POST /v1/runs/{id}/cancel`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Cancel {
    /// Recorded with the cancellation.
    pub reason: Option<String>,
}

/// `POST /v1/runs/{id}/retry` and `/resume`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Reopen {
    /// Why, recorded in the run's history.
    pub reason: Option<String>,
}

/// `POST /v1/runs/{id}/reset`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Reset {
    /// The first command position of the failed attempt to run again; everything before it
    /// is kept.
    pub position: u32,
    /// Why, recorded in the run's history.
    pub reason: Option<String>,
}

/// `POST /v1/bulk`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Bulk {
    /// `cancel`, `retry` or `resume`.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub action: BulkAction,
    /// Which runs: `status`, `workflow_name`, `workflow_id_prefix`, `code_version`,
    /// `started_after`, `started_before` (ms since the Unix epoch), `quarantined`. Paging
    /// fields are ignored.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub filter: WorkflowQueryFilter,
    /// Why, recorded on each run acted on.
    pub reason: Option<String>,
    /// A name for the operation: submitting again under it answers the first one.
    pub name: Option<String>,
}

/// `POST /v1/prune`: a retention sweep now, or its preview.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Prune {
    /// Only say what a sweep would remove, and the space it takes; remove nothing.
    #[serde(default, alias = "dryRun")]
    pub dry_run: bool,
}
