//! `/v1/runs`: start runs by workflow name, read and list them, wait for their results, page
//! through their histories and steps, cancel them.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::Value;
use worlds_engine::model::{ListQuery, SortOrder, StatusFilter};
use worlds_engine::{
    ResolveData, RunStatus, WorkflowQueryFilter, WorkflowState, World, WorldError,
};
use worlds_wire::{
    Cancel, Outcome, PageBody, PageParams, Resolve, RunFilter, StartRun, Started, Wait,
};

use crate::error::ApiError;
use crate::openapi::{ErrorDoc, HistoryEvent, Run, RunWait, Step};
use crate::state::Api;

/// Longest a result request waits (`wait_ms`), and how long it waits by default.
const MAX_WAIT: Duration = Duration::from_secs(300);
const DEFAULT_WAIT: Duration = Duration::from_secs(30);

/// Largest page a list returns.
const MAX_PAGE: usize = 1_000;

/// Starts a run; with `?wait_ms=` also waits for its outcome, as `GET …/result` does (one
/// round trip instead of two for a caller that wants the result).
#[utoipa::path(post, path = "/v1/runs", tag = "runs", params(Wait), request_body = StartRun,
    security(("api_key" = [])),
    responses(
        (status = 201, description = "Started", body = Started),
        (status = 200, description = "The run that already held this idempotency key, or the workflow id under `on_conflict: use_existing`; with `wait_ms`, the run's outcome once it finished", body = Outcome),
        (status = 202, description = "With `wait_ms`: still running when the wait ended", body = Outcome),
        (status = 400, description = "Malformed body or input", body = ErrorDoc),
        (status = 404, description = "No workflow of that name is registered", body = ErrorDoc),
        (status = 409, description = "The workflow id is taken (`on_conflict: fail`)", body = ErrorDoc),
        (status = 413, description = "Body over the limit", body = ErrorDoc),
    ))]
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
        let mut response = wait_for(&api.world, handle, wait_of(q.wait_ms), &api.stopping).await?;
        if let Ok(value) = axum::http::HeaderValue::from_str(&location) {
            response
                .headers_mut()
                .insert(axum::http::header::LOCATION, value);
        }
        return Ok(response);
    }
    // 200 for a run that already existed (its idempotency key, or `on_conflict`
    // `use_existing`), so a caller can tell a retry from a new start.
    let status = if handle.is_new() {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
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

/// One run, by run id or workflow id.
#[utoipa::path(get, path = "/v1/runs/{id}", tag = "runs", params(RunId, Resolve),
    security(("api_key" = [])),
    responses((status = 200, body = Run), (status = 404, body = ErrorDoc)))]
pub(crate) async fn get(
    State(api): State<Api>,
    Path(id): Path<String>,
    query: Result<Query<Resolve>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<WorkflowState>, ApiError> {
    let Query(query) = query?;
    let resolve = query.resolve.unwrap_or(ResolveData::All);
    Ok(Json(api.world.get_run(&id, resolve).await?))
}

/// The `{id}` of a run route: a run id or a workflow id.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub(crate) struct RunId {
    /// A run id (`wrun_…`) or a workflow id.
    id: String,
}

/// Runs, newest first, filtered and paged.
#[utoipa::path(get, path = "/v1/runs", tag = "runs", params(RunFilter),
    security(("api_key" = [])),
    responses((status = 200, body = PageBody<Run>), (status = 400, body = ErrorDoc)))]
pub(crate) async fn list(
    State(api): State<Api>,
    query: Result<Query<RunFilter>, axum::extract::rejection::QueryRejection>,
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
    filter.code_version = q.code_version;
    filter.workflow_id_prefix = q.workflow_id_prefix;
    filter.cursor = q.cursor;
    filter.oldest_first = q.order == Some(SortOrder::Ascending);
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

/// Waits up to `wait_ms` for the run to finish (a long poll): 200 with its outcome once it
/// has, 202 with its status if it is still going when the wait ends.
#[utoipa::path(get, path = "/v1/runs/{id}/result", tag = "runs", params(RunId, Wait),
    security(("api_key" = [])),
    responses(
        (status = 200, description = "Finished", body = Outcome),
        (status = 202, description = "Still running when the wait ended", body = Outcome),
        (status = 404, body = ErrorDoc),
    ))]
pub(crate) async fn result(
    State(api): State<Api>,
    Path(id): Path<String>,
    query: Result<Query<Wait>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query?;
    let handle = api.world.handle::<Value>(&id).await?;
    wait_for(&api.world, handle, wait_of(q.wait_ms), &api.stopping).await
}

/// The wait a request asked for, within bounds.
fn wait_of(wait_ms: Option<u64>) -> Duration {
    wait_ms
        .map_or(DEFAULT_WAIT, Duration::from_millis)
        .min(MAX_WAIT)
}

/// The outcome of the run of `handle` once it finished (200), or its status when `wait`
/// passed first, or the server began to shut down (202). A completed run's output comes with
/// its end, with no read.
async fn wait_for(
    world: &World,
    handle: worlds_engine::WorkflowHandle<Value>,
    wait: Duration,
    stopping: &tokio_util::sync::CancellationToken,
) -> Result<Response, ApiError> {
    let clock = world.clock();
    let finished = tokio::select! {
        result = handle.result() => Some(result),
        () = clock.sleep(wait) => None,
        () = stopping.cancelled() => None,
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
            if state.status.is_terminal() {
                // Stored encrypted and this world cannot open it: the state read here would
                // hand out the sealed form as the output or error.
                if let Err(e @ WorldError::Encrypted { .. }) = handle.result().await {
                    return Err(e.into());
                }
            }
            Outcome {
                done: state.status.is_terminal(),
                run_id: state.id,
                workflow_id: state.workflow_id,
                status: state.status,
                output: state.output.and_then(|p| p.decode::<Value>().ok()),
                error: state.error.map(|e| *e),
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

/// What a page of a run's events, steps or hooks asks the world for: `limit` within bounds,
/// oldest first and with payloads unless the caller said otherwise.
pub(crate) fn page_query(params: PageParams) -> Result<ListQuery, ApiError> {
    let mut query = ListQuery::new().limit(page_size(params.limit)?);
    query.cursor = params.cursor;
    query.order = params.order.unwrap_or_default();
    query.resolve_data = params.resolve.unwrap_or(ResolveData::All);
    Ok(query)
}

/// The run id of `id` (a run id or a workflow id).
pub(crate) async fn run_id_of(world: &World, id: &str) -> Result<String, ApiError> {
    Ok(world.get_run(id, ResolveData::None).await?.id)
}

/// A run's history, paged.
#[utoipa::path(get, path = "/v1/runs/{id}/events", tag = "runs", params(RunId, PageParams),
    security(("api_key" = [])),
    responses((status = 200, body = PageBody<HistoryEvent>), (status = 404, body = ErrorDoc)))]
pub(crate) async fn events(
    State(api): State<Api>,
    Path(id): Path<String>,
    query: Result<Query<PageParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<PageBody<Arc<worlds_engine::Event>>>, ApiError> {
    let Query(q) = query?;
    let run_id = run_id_of(&api.world, &id).await?;
    Ok(Json(
        api.world.events(&run_id, page_query(q)?).await?.into(),
    ))
}

/// What a run waits on now, since when, and which waits look stuck.
#[utoipa::path(get, path = "/v1/runs/{id}/waits", tag = "runs", params(RunId),
    security(("api_key" = [])),
    responses((status = 200, body = Vec<RunWait>), (status = 404, body = ErrorDoc)))]
pub(crate) async fn waits(
    State(api): State<Api>,
    Path(id): Path<String>,
) -> Result<Json<Vec<worlds_engine::model::Wait>>, ApiError> {
    Ok(Json(api.world.waits(&id).await?))
}

/// A run's steps, paged.
#[utoipa::path(get, path = "/v1/runs/{id}/steps", tag = "runs", params(RunId, PageParams),
    security(("api_key" = [])),
    responses((status = 200, body = PageBody<Step>), (status = 404, body = ErrorDoc)))]
pub(crate) async fn steps(
    State(api): State<Api>,
    Path(id): Path<String>,
    query: Result<Query<PageParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<PageBody<worlds_engine::model::ActivityState>>, ApiError> {
    let Query(q) = query?;
    let run_id = run_id_of(&api.world, &id).await?;
    Ok(Json(api.world.steps(&run_id, page_query(q)?).await?.into()))
}

/// Cancels a run and its unfinished children; answers the run as it is then.
#[utoipa::path(post, path = "/v1/runs/{id}/cancel", tag = "runs", params(RunId),
    request_body(content = Option<Cancel>),
    security(("api_key" = [])),
    responses((status = 200, body = Run), (status = 404, body = ErrorDoc),
        (status = 409, description = "The run already finished", body = ErrorDoc)))]
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
