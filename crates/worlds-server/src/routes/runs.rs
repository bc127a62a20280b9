//! `/v1/runs`: start runs by workflow name, read and list them, wait for their results, page
//! through their histories and steps, cancel them.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use worlds_engine::model::{ListQuery, SortOrder, StatusFilter};
use worlds_engine::{
    ResolveData, RunStatus, StructuredError, WorkflowOptions, WorkflowQueryFilter, WorkflowState,
    World,
};

use super::Api;
use crate::error::ApiError;

/// Longest a result request waits (`wait_ms`), and how long it waits by default.
const MAX_WAIT: Duration = Duration::from_secs(300);
const DEFAULT_WAIT: Duration = Duration::from_secs(30);

/// Largest page a list returns.
const MAX_PAGE: usize = 1_000;

/// `POST /v1/runs`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StartRun {
    /// The registered workflow's name.
    workflow: String,
    /// Its input (JSON `null` if left out).
    #[serde(default)]
    input: Value,
    /// Workflow id, idempotency key, `on_conflict`, priority, task queue, timeout…
    #[serde(default)]
    options: WorkflowOptions,
}

/// The answer to a start.
#[derive(Debug, Serialize)]
pub(crate) struct Started {
    run_id: String,
    workflow_id: String,
}

/// Starts a run; with `?wait_ms=` also waits for its outcome, as `GET …/result` does (one
/// round trip instead of two for a caller that wants the result).
pub(crate) async fn start(
    State(api): State<Api>,
    query: Result<Query<Wait>, axum::extract::rejection::QueryRejection>,
    body: Result<Json<StartRun>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query?;
    let Json(body) = body?;
    let handle = api
        .world
        .execute_by_name::<Value, Value>(&body.workflow, body.input, body.options)
        .await?;
    if q.wait_ms.is_some() {
        let location = format!("/v1/runs/{}", handle.id);
        let mut response = wait_for(&api.world, handle, wait_of(q.wait_ms)).await?;
        if let Ok(value) = axum::http::HeaderValue::from_str(&location) {
            response
                .headers_mut()
                .insert(axum::http::header::LOCATION, value);
        }
        return Ok(response);
    }
    Ok((
        StatusCode::CREATED,
        [(
            axum::http::header::LOCATION,
            format!("/v1/runs/{}", handle.id),
        )],
        Json(Started {
            run_id: handle.id,
            workflow_id: handle.workflow_id,
        }),
    )
        .into_response())
}

/// `?resolve=none|all`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Resolve {
    #[serde(default)]
    resolve: Option<ResolveData>,
}

pub(crate) async fn get(
    State(api): State<Api>,
    Path(id): Path<String>,
    query: Result<Query<Resolve>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<WorkflowState>, ApiError> {
    let Query(query) = query?;
    let resolve = query.resolve.unwrap_or(ResolveData::All);
    Ok(Json(api.world.get_run(&id, resolve).await?))
}

/// `GET /v1/runs` filters.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListRuns {
    /// Comma-separated statuses.
    status: Option<String>,
    workflow: Option<String>,
    parent: Option<String>,
    /// Created at or after (ms since the epoch).
    started_after: Option<i64>,
    /// Created before (ms since the epoch).
    started_before: Option<i64>,
    quarantined: Option<bool>,
    cursor: Option<String>,
    limit: Option<usize>,
    resolve: Option<ResolveData>,
}

/// One page of a list.
#[derive(Debug, Serialize)]
pub(crate) struct PageBody<T> {
    data: Vec<T>,
    cursor: Option<String>,
    has_more: bool,
}

impl<T> PageBody<T> {
    /// The same page with each item changed by `f`.
    pub(crate) fn map<U>(self, f: impl FnMut(T) -> U) -> PageBody<U> {
        PageBody {
            data: self.data.into_iter().map(f).collect(),
            cursor: self.cursor,
            has_more: self.has_more,
        }
    }
}

impl<T> From<worlds_engine::model::Page<T>> for PageBody<T> {
    fn from(page: worlds_engine::model::Page<T>) -> Self {
        PageBody {
            data: page.data,
            cursor: page.cursor,
            has_more: page.has_more,
        }
    }
}

pub(crate) async fn list(
    State(api): State<Api>,
    query: Result<Query<ListRuns>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<PageBody<WorkflowState>>, ApiError> {
    let Query(q) = query?;
    let mut filter = WorkflowQueryFilter::new();
    if let Some(status) = &q.status {
        let statuses = status
            .split(',')
            .map(|s| s.trim().parse::<RunStatus>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ApiError::invalid("status", e.to_string()))?;
        filter.status = Some(StatusFilter::Any(statuses));
    }
    filter.workflow_name = q.workflow;
    filter.parent_id = q.parent;
    filter.started_after = q.started_after;
    filter.started_before = q.started_before;
    filter.quarantined = q.quarantined;
    filter.cursor = q.cursor;
    filter.limit = Some(page_size(q.limit)?);
    filter.resolve_data = q.resolve.unwrap_or(ResolveData::None);
    Ok(Json(api.world.list_runs(filter).await?.into()))
}

fn page_size(limit: Option<usize>) -> Result<usize, ApiError> {
    match limit {
        None => Ok(100),
        Some(0) => Err(ApiError::invalid("limit", "a page holds at least 1 item")),
        Some(n) if n > MAX_PAGE => Err(ApiError::invalid(
            "limit",
            format!("a page holds at most {MAX_PAGE} items; follow the cursor for more"),
        )),
        Some(n) => Ok(n),
    }
}

/// `?wait_ms=` of a result request.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Wait {
    wait_ms: Option<u64>,
}

/// A run's outcome: for a finished run its output or error; for one still going, its status.
#[derive(Debug, Serialize)]
pub(crate) struct Outcome {
    run_id: String,
    workflow_id: String,
    status: RunStatus,
    /// True once the run finished (the answer is then 200; 202 while it goes on).
    done: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    output: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<Box<StructuredError>>,
}

/// Waits up to `wait_ms` for the run to finish (a long poll): 200 with its outcome once it
/// has, 202 with its status if it is still going when the wait ends.
pub(crate) async fn result(
    State(api): State<Api>,
    Path(id): Path<String>,
    query: Result<Query<Wait>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query?;
    let handle = api.world.handle::<Value>(&id).await?;
    wait_for(&api.world, handle, wait_of(q.wait_ms)).await
}

/// The wait a request asked for, within bounds.
fn wait_of(wait_ms: Option<u64>) -> Duration {
    wait_ms
        .map_or(DEFAULT_WAIT, Duration::from_millis)
        .min(MAX_WAIT)
}

/// The outcome of the run of `handle` once it finished (200), or its status when `wait`
/// passed first (202). A completed run's output comes with its end, with no read.
async fn wait_for(
    world: &World,
    handle: worlds_engine::WorkflowHandle<Value>,
    wait: Duration,
) -> Result<Response, ApiError> {
    let clock = world.clock();
    let finished = tokio::select! {
        result = handle.result() => Some(result),
        () = clock.sleep(wait) => None,
    };
    let outcome = match finished {
        Some(Ok(output)) => Outcome {
            run_id: handle.id,
            workflow_id: handle.workflow_id,
            status: RunStatus::Completed,
            done: true,
            output: Some(output),
            error: None,
        },
        _ => {
            let state = world.get_run(&handle.id, ResolveData::All).await?;
            Outcome {
                done: state.status.is_terminal(),
                run_id: state.id,
                workflow_id: state.workflow_id,
                status: state.status,
                output: state.output.and_then(|p| p.decode::<Value>().ok()),
                error: state.error,
            }
        }
    };
    let status = if outcome.done {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    Ok((status, Json(outcome)).into_response())
}

/// Paging of a run's events and steps.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PageParams {
    cursor: Option<String>,
    limit: Option<usize>,
    order: Option<SortOrder>,
    resolve: Option<ResolveData>,
}

impl PageParams {
    pub(crate) fn query(self) -> Result<ListQuery, ApiError> {
        let mut query = ListQuery::new().limit(page_size(self.limit)?);
        query.cursor = self.cursor;
        query.order = self.order.unwrap_or_default();
        query.resolve_data = self.resolve.unwrap_or(ResolveData::All);
        Ok(query)
    }
}

/// The run id of `id` (a run id or a workflow id).
pub(crate) async fn run_id_of(world: &World, id: &str) -> Result<String, ApiError> {
    Ok(world.get_run(id, ResolveData::None).await?.id)
}

pub(crate) async fn events(
    State(api): State<Api>,
    Path(id): Path<String>,
    query: Result<Query<PageParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<PageBody<Arc<worlds_engine::Event>>>, ApiError> {
    let Query(q) = query?;
    let run_id = run_id_of(&api.world, &id).await?;
    Ok(Json(api.world.events(&run_id, q.query()?).await?.into()))
}

pub(crate) async fn steps(
    State(api): State<Api>,
    Path(id): Path<String>,
    query: Result<Query<PageParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<PageBody<worlds_engine::model::ActivityState>>, ApiError> {
    let Query(q) = query?;
    let run_id = run_id_of(&api.world, &id).await?;
    Ok(Json(api.world.steps(&run_id, q.query()?).await?.into()))
}

/// `POST /v1/runs/{id}/cancel`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Cancel {
    reason: Option<String>,
}

pub(crate) async fn cancel(
    State(api): State<Api>,
    Path(id): Path<String>,
    body: Option<Json<Cancel>>,
) -> Result<Json<WorkflowState>, ApiError> {
    match body.and_then(|Json(b)| b.reason) {
        Some(reason) => api.world.cancel_with_reason(&id, reason).await?,
        None => api.world.cancel(&id).await?,
    }
    Ok(Json(api.world.get_run(&id, ResolveData::None).await?))
}
