//! The `/v1/devkit` routes: each DevKit World call, planned by [`super::writes`] and answered
//! with [`super::records`].

use std::sync::Arc;

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;
use worlds_engine::model::{HookStatus, StatusFilter};
use worlds_engine::{
    Event, EventKind, FailureStrategy, Payload, ResolveData, RunStatus, WorkflowOptions,
    WorkflowQueryFilter, WorkflowState, WorldError,
};

use super::delivery::{handler_url, Delivery, DELIVERY_WORKFLOW};
use super::log;
use super::records::{self, DevkitEvent, DevkitHook, DevkitRun, DevkitStep};
use super::writes::{self, NewEvent, RunUpdate, StepUpdate};
use crate::error::ApiError;
use crate::openapi::{DevkitBody, ErrorDoc};
use crate::routes::Api;

type Body<T> = Result<Json<T>, JsonRejection>;

/// The most records one page holds.
const MAX_PAGE: usize = 1_000;
/// Records per page when the caller does not say.
const DEFAULT_PAGE: usize = 100;

/// One page, as the DevKit pages: `{data, cursor, hasMore}`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Page<T> {
    data: Vec<T>,
    cursor: Option<String>,
    has_more: bool,
}

/// `?limit=&cursor=&sortOrder=` of a DevKit list.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub(crate) struct Paging {
    /// At most this many (default 100, at most 1000).
    limit: Option<usize>,
    /// The `cursor` of the previous page.
    cursor: Option<String>,
    /// `asc` (default) or `desc`.
    sort_order: Option<String>,
}

impl Paging {
    fn limit(&self) -> usize {
        self.limit.unwrap_or(DEFAULT_PAGE).clamp(1, MAX_PAGE)
    }

    fn descending(&self) -> Result<bool, ApiError> {
        match self.sort_order.as_deref() {
            None | Some("asc") => Ok(false),
            Some("desc") => Ok(true),
            Some(other) => Err(ApiError::invalid(
                "sortOrder",
                format!("sortOrder is asc or desc, not {other:?}"),
            )),
        }
    }

    fn after(&self) -> Result<Option<u64>, ApiError> {
        self.cursor
            .as_deref()
            .map(|c| {
                c.parse::<u64>().map_err(|_| {
                    ApiError::invalid("cursor", format!("not a cursor of this list: {c:?}"))
                })
            })
            .transpose()
    }

    /// The page of `items` (each with its ordering key) after the cursor.
    fn page<T>(&self, items: Vec<(u64, T)>) -> Result<Page<T>, ApiError> {
        let after = self.after()?;
        let descending = self.descending()?;
        let mut items: Vec<(u64, T)> = items
            .into_iter()
            .filter(|(key, _)| match after {
                None => true,
                Some(after) if descending => *key < after,
                Some(after) => *key > after,
            })
            .collect();
        if descending {
            items.reverse();
        }
        let limit = self.limit();
        let has_more = items.len() > limit;
        items.truncate(limit);
        let cursor = has_more
            .then(|| items.last().map(|(key, _)| key.to_string()))
            .flatten();
        Ok(Page {
            data: items.into_iter().map(|(_, item)| item).collect(),
            cursor,
            has_more,
        })
    }
}

/// The run (driven from outside) with its payloads and its history.
async fn load(api: &Api, run_id: &str) -> Result<WorkflowState, WorldError> {
    api.world.external().get_with_history(run_id).await
}

/// The run (driven from outside) with its payloads, without its history: what most writes
/// plan on (a history read on every call would make a run's calls cost its length each).
async fn load_state(api: &Api, run_id: &str) -> Result<WorkflowState, WorldError> {
    api.world.external().get(run_id, ResolveData::All).await
}

/// Whether a write plans on the run's history or on its state alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reads {
    State,
    History,
}

/// Plans a write on the run's current state and records it, taking turns with the other
/// writes to the run; if another server's write got in between, plans again. Returns the
/// state after the write and what was appended (nothing when the write was already there).
async fn record(
    api: &Api,
    run_id: &str,
    reads: Reads,
    plan: impl Fn(&WorkflowState) -> Result<Vec<EventKind>, WorldError>,
) -> Result<(WorkflowState, Vec<Arc<Event>>), ApiError> {
    let _turn = api.devkit.lock(run_id).await;
    let mut tries = 0;
    loop {
        let mut state = match reads {
            Reads::State => load_state(api, run_id).await?,
            Reads::History => load(api, run_id).await?,
        };
        let kinds = plan(&state)?;
        if kinds.is_empty() {
            return Ok((state, Vec::new()));
        }
        match api.world.external().append(&state.id, kinds).await {
            Ok(appended) => {
                for event in &appended.events {
                    state.apply(event);
                    state.history.push((**event).clone());
                }
                return Ok((state, appended.events));
            }
            Err(WorldError::Conflict { .. } | WorldError::InvalidTransition { .. })
                if tries < 3 =>
            {
                tries += 1;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

fn now(api: &Api) -> i64 {
    api.world.clock().now_ms()
}

fn raw_payload(raw: Option<&RawValue>, empty: &str) -> Result<Payload, ApiError> {
    match raw {
        Some(raw) => Ok(writes::payload(Some(raw))?),
        None => Ok(Payload::from_json(empty).map_err(|e| WorldError::Internal(e.to_string()))?),
    }
}

// ---- runs ------------------------------------------------------------------------------

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NewRun {
    workflow_name: String,
    #[serde(default)]
    deployment_id: Option<String>,
    #[serde(default)]
    input: Option<Box<RawValue>>,
}

/// `runs.create`: a pending run driven by the app.
#[utoipa::path(post, path = "/v1/devkit/runs", tag = "devkit", request_body = DevkitBody,
    security(("api_key" = [])),
    responses((status = 201, body = crate::openapi::DevkitRun), (status = 400, body = ErrorDoc), (status = 413, body = ErrorDoc)))]
pub(crate) async fn create_run(
    State(api): State<Api>,
    body: Body<NewRun>,
) -> Result<(StatusCode, Json<DevkitRun>), ApiError> {
    let Json(body) = body?;
    let input = raw_payload(body.input.as_deref(), "[]")?;
    let deployment = body.deployment_id.filter(|d| !d.is_empty());
    let state = api
        .world
        .external()
        .create(&body.workflow_name, input, deployment)
        .await?;
    Ok((StatusCode::CREATED, Json(DevkitRun::of(&state))))
}

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub(crate) struct RunList {
    /// Only runs of this workflow.
    workflow_name: Option<String>,
    /// Only runs in this status (`pending`, `running`, `completed`, `failed`, `cancelled`).
    status: Option<String>,
    /// At most this many (default 100, at most 1000).
    limit: Option<usize>,
    /// The `cursor` of the previous page.
    cursor: Option<String>,
    /// `desc` (default: newest first) or `asc`.
    sort_order: Option<String>,
}

fn status_filter(status: &str) -> Result<StatusFilter, ApiError> {
    let statuses = match status {
        "pending" => vec![RunStatus::Pending],
        "running" => vec![RunStatus::Running, RunStatus::Compensating],
        "completed" => vec![RunStatus::Completed],
        "failed" => vec![RunStatus::Failed, RunStatus::Compensated],
        "cancelled" => vec![RunStatus::Cancelled],
        other => {
            return Err(ApiError::invalid(
                "status",
                format!(
                    "status is pending, running, completed, failed or cancelled, not {other:?}"
                ),
            ))
        }
    };
    Ok(StatusFilter::Any(statuses))
}

/// `runs.list`: the runs driven by DevKit apps, newest first.
#[utoipa::path(get, path = "/v1/devkit/runs", tag = "devkit", params(RunList),
    security(("api_key" = [])),
    responses((status = 200, body = crate::openapi::DevkitPage), (status = 400, body = ErrorDoc)))]
pub(crate) async fn list_runs(
    State(api): State<Api>,
    query: Result<Query<RunList>, QueryRejection>,
) -> Result<Json<Page<DevkitRun>>, ApiError> {
    let Query(q) = query?;
    let limit = q.limit.unwrap_or(DEFAULT_PAGE).clamp(1, MAX_PAGE);
    let mut filter = WorkflowQueryFilter::default();
    filter.workflow_name = q.workflow_name;
    filter.status = q.status.as_deref().map(status_filter).transpose()?;
    filter.cursor = q.cursor;
    filter.oldest_first = matches!(q.sort_order.as_deref(), Some("asc"));
    filter.resolve_data = ResolveData::All;
    // Runs the engine drives are passed over; a page may come back short of `limit`.
    filter.limit = Some(limit);
    let page = api.world.list_runs(filter).await?;
    Ok(Json(Page {
        data: page
            .data
            .iter()
            .filter(|state| state.external)
            .map(DevkitRun::of)
            .collect(),
        cursor: page.cursor,
        has_more: page.has_more,
    }))
}

/// `runs.get`.
#[utoipa::path(get, path = "/v1/devkit/runs/{id}", tag = "devkit",
    params(("id" = String, Path, description = "A run id")),
    security(("api_key" = [])),
    responses((status = 200, body = crate::openapi::DevkitRun), (status = 404, body = ErrorDoc)))]
pub(crate) async fn get_run(
    State(api): State<Api>,
    Path(id): Path<String>,
    query: Result<Query<Resolve>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query?;
    let state = api.world.external().get(&id, ResolveData::All).await?;
    if log::is_event_log(&state) {
        return Ok(Json(log::run(&state, q.resolve())));
    }
    Ok(Json(
        serde_json::to_value(DevkitRun::of(&state))
            .map_err(|e| WorldError::Internal(e.to_string()))?,
    ))
}

/// `?resolveData=` of a read: `none` leaves payloads out.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub(crate) struct Resolve {
    /// `all` (default) or `none`.
    resolve_data: Option<String>,
}

impl Resolve {
    fn resolve(&self) -> bool {
        self.resolve_data.as_deref() != Some("none")
    }
}

/// `runs.update`: `running`, then `completed` with its output, `failed` with its error, or
/// `cancelled`.
#[utoipa::path(patch, path = "/v1/devkit/runs/{id}", tag = "devkit", request_body = DevkitBody,
    params(("id" = String, Path, description = "A run id")),
    security(("api_key" = [])),
    responses((status = 200, body = crate::openapi::DevkitRun), (status = 404, body = ErrorDoc), (status = 409, body = ErrorDoc)))]
pub(crate) async fn update_run(
    State(api): State<Api>,
    Path(id): Path<String>,
    body: Body<RunUpdate>,
) -> Result<Json<DevkitRun>, ApiError> {
    let Json(update) = body?;
    let (state, _) = record(&api, &id, Reads::State, |state| {
        writes::run_update(state, &update)
    })
    .await?;
    Ok(Json(DevkitRun::of(&state)))
}

/// `runs.cancel`.
#[utoipa::path(post, path = "/v1/devkit/runs/{id}/cancel", tag = "devkit",
    params(("id" = String, Path, description = "A run id")),
    security(("api_key" = [])),
    responses((status = 200, body = crate::openapi::DevkitRun), (status = 404, body = ErrorDoc), (status = 409, body = ErrorDoc)))]
pub(crate) async fn cancel_run(
    State(api): State<Api>,
    Path(id): Path<String>,
) -> Result<Json<DevkitRun>, ApiError> {
    let update = RunUpdate {
        status: Some("cancelled".into()),
        ..RunUpdate::default()
    };
    let (state, _) = record(&api, &id, Reads::State, |state| {
        writes::run_update(state, &update)
    })
    .await?;
    Ok(Json(DevkitRun::of(&state)))
}

// ---- steps -----------------------------------------------------------------------------

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NewStep {
    step_id: String,
    step_name: String,
    #[serde(default)]
    input: Option<Box<RawValue>>,
}

fn find_step(state: &WorkflowState, step_id: &str) -> Result<DevkitStep, ApiError> {
    records::steps(state)
        .into_iter()
        .find(|s| s.step_id == step_id)
        .ok_or_else(|| {
            WorldError::NotFound {
                what: "step",
                id: step_id.to_owned(),
            }
            .into()
        })
}

/// `steps.create`: 409 if the run has the step already (its `details` hold the step, the
/// run's `workflowName` and `startedAt`), 410 if the run has finished.
#[utoipa::path(post, path = "/v1/devkit/runs/{id}/steps", tag = "devkit", request_body = DevkitBody,
    params(("id" = String, Path, description = "A run id")),
    security(("api_key" = [])),
    responses((status = 201, body = crate::openapi::DevkitStep), (status = 404, body = ErrorDoc), (status = 409, body = ErrorDoc), (status = 410, body = ErrorDoc)))]
pub(crate) async fn create_step(
    State(api): State<Api>,
    Path(id): Path<String>,
    body: Body<NewStep>,
) -> Result<(StatusCode, Json<DevkitStep>), ApiError> {
    let Json(body) = body?;
    let input = raw_payload(body.input.as_deref(), "[]")?;
    let created = record(&api, &id, Reads::State, |state| {
        writes::step_create(state, &body.step_id, &body.step_name, input.clone())
    })
    .await;
    let (state, _) = match created {
        Ok(created) => created,
        Err(refused) if refused.status() == StatusCode::CONFLICT => {
            // The step exists: say what it is, so the app can queue its message again if that
            // was lost (a step that never started), without another call.
            let state = load_state(&api, &id).await?;
            let Ok(step) = find_step(&state, &body.step_id) else {
                return Err(refused);
            };
            let run = DevkitRun::of(&state);
            return Err(refused.with_details(serde_json::json!({
                "step": step,
                "workflowName": run.workflow_name,
                "startedAt": run.started_at,
            })));
        }
        Err(refused) => return Err(refused),
    };
    Ok((StatusCode::CREATED, Json(find_step(&state, &body.step_id)?)))
}

/// `steps.list`: a run's steps in the order they were created.
#[utoipa::path(get, path = "/v1/devkit/runs/{id}/steps", tag = "devkit", params(("id" = String, Path, description = "A run id"), Paging),
    security(("api_key" = [])),
    responses((status = 200, body = crate::openapi::DevkitPage), (status = 404, body = ErrorDoc)))]
pub(crate) async fn list_steps(
    State(api): State<Api>,
    Path(id): Path<String>,
    query: Result<Query<Paging>, QueryRejection>,
    resolve: Result<Query<Resolve>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query?;
    let Query(r) = resolve?;
    let state = load(&api, &id).await?;
    let internal = |e: serde_json::Error| WorldError::Internal(e.to_string());
    if log::is_event_log(&state) {
        let steps = log::steps(&state, r.resolve())
            .into_iter()
            .enumerate()
            .map(|(i, s)| (i as u64, s))
            .collect();
        return Ok(Json(
            serde_json::to_value(q.page(steps)?).map_err(internal)?,
        ));
    }
    let steps = records::steps(&state)
        .into_iter()
        .enumerate()
        .map(|(i, s)| (i as u64, s))
        .collect();
    Ok(Json(
        serde_json::to_value(q.page(steps)?).map_err(internal)?,
    ))
}

/// `steps.get`.
#[utoipa::path(get, path = "/v1/devkit/runs/{id}/steps/{step}", tag = "devkit",
    params(("id" = String, Path, description = "A run id"), ("step" = String, Path, description = "A step id")),
    security(("api_key" = [])),
    responses((status = 200, body = crate::openapi::DevkitStep), (status = 404, body = ErrorDoc)))]
pub(crate) async fn get_step(
    State(api): State<Api>,
    Path((id, step)): Path<(String, String)>,
    query: Result<Query<Resolve>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query?;
    let state = load(&api, &id).await?;
    if log::is_event_log(&state) {
        let a = state
            .activities
            .iter()
            .find(|a| a.id == step)
            .ok_or_else(|| WorldError::NotFound {
                what: "step",
                id: step.clone(),
            })?;
        return Ok(Json(log::step(&state, a, q.resolve())));
    }
    Ok(Json(
        serde_json::to_value(find_step(&state, &step)?)
            .map_err(|e| WorldError::Internal(e.to_string()))?,
    ))
}

/// `steps.get` without the run: the step is found by its id.
#[utoipa::path(get, path = "/v1/devkit/steps/{step}", tag = "devkit",
    params(("step" = String, Path, description = "A step id")),
    security(("api_key" = [])),
    responses((status = 200, body = crate::openapi::DevkitStep), (status = 404, body = ErrorDoc)))]
pub(crate) async fn find_step_by_id(
    State(api): State<Api>,
    Path(step): Path<String>,
) -> Result<Json<DevkitStep>, ApiError> {
    let run_id = api.world.external().step_run(&step).await?;
    let state = load(&api, &run_id).await?;
    Ok(Json(find_step(&state, &step)?))
}

/// `steps.update`: `running` with the attempt, `completed` with its output, `failed` with its
/// error, `pending` with `retryAfter` (ms) for another attempt.
#[utoipa::path(patch, path = "/v1/devkit/runs/{id}/steps/{step}", tag = "devkit", request_body = DevkitBody,
    params(("id" = String, Path, description = "A run id"), ("step" = String, Path, description = "A step id")),
    security(("api_key" = [])),
    responses((status = 200, body = crate::openapi::DevkitStep), (status = 404, body = ErrorDoc), (status = 409, body = ErrorDoc), (status = 410, body = ErrorDoc)))]
pub(crate) async fn update_step(
    State(api): State<Api>,
    Path((id, step)): Path<(String, String)>,
    body: Body<StepUpdate>,
) -> Result<Json<DevkitStep>, ApiError> {
    let Json(update) = body?;
    let at = now(&api);
    let (state, _) = record(&api, &id, Reads::History, |state| {
        writes::step_update(state, &step, &update, at)
    })
    .await?;
    Ok(Json(find_step(&state, &step)?))
}

// ---- events ----------------------------------------------------------------------------

/// `events.create`. A repeat of an event already recorded is answered with that event.
#[utoipa::path(post, path = "/v1/devkit/runs/{id}/events", tag = "devkit", request_body = DevkitBody,
    params(("id" = String, Path, description = "A run id")),
    security(("api_key" = [])),
    responses((status = 201, body = crate::openapi::DevkitEvent), (status = 400, body = ErrorDoc), (status = 404, body = ErrorDoc), (status = 409, body = ErrorDoc), (status = 410, body = ErrorDoc)))]
pub(crate) async fn create_event(
    State(api): State<Api>,
    Path(id): Path<String>,
    body: Body<NewEvent>,
) -> Result<(StatusCode, Json<DevkitEvent>), ApiError> {
    let Json(event) = body?;
    let (state, appended) = record(&api, &id, Reads::History, |state| {
        writes::event_create(state, &event)
    })
    .await?;
    let correlation = event.correlation_id.clone().unwrap_or_default();
    let found = records::last_event(&state.history, &event.event_type, &correlation);
    let answer = match found {
        Some(found) => found,
        // The run's own status changes are not DevKit events of the log: answer with the
        // record that was made.
        None => {
            let made = appended
                .last()
                .map(|e| (**e).clone())
                .or_else(|| state.history.last().cloned());
            let (event_id, created_at, seq) = match made {
                Some(e) => (e.id.clone(), e.timestamp, e.seq),
                None => (String::new(), now(&api), state.event_count),
            };
            DevkitEvent {
                run_id: state.id.clone(),
                event_id,
                event_type: static_type(&event.event_type),
                correlation_id: event.correlation_id.clone(),
                event_data: None,
                created_at,
                seq,
            }
        }
    };
    Ok((StatusCode::CREATED, Json(answer)))
}

/// The event types `events.create` takes that do not appear in the event log.
fn static_type(event_type: &str) -> &'static str {
    match event_type {
        "workflow_started" => "workflow_started",
        "workflow_completed" => "workflow_completed",
        "workflow_failed" => "workflow_failed",
        _ => "event",
    }
}

/// `events.list`: a run's DevKit events in the order they happened.
#[utoipa::path(get, path = "/v1/devkit/runs/{id}/events", tag = "devkit", params(("id" = String, Path, description = "A run id"), Paging),
    security(("api_key" = [])),
    responses((status = 200, body = crate::openapi::DevkitPage), (status = 404, body = ErrorDoc)))]
pub(crate) async fn list_events(
    State(api): State<Api>,
    Path(id): Path<String>,
    query: Result<Query<Paging>, QueryRejection>,
    resolve: Result<Query<Resolve>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query?;
    let Query(r) = resolve?;
    let state = load(&api, &id).await?;
    let internal = |e: serde_json::Error| WorldError::Internal(e.to_string());
    if log::is_event_log(&state) {
        let events = log::LogReader::events(&state.history, r.resolve())
            .into_iter()
            .map(|e| (e.seq, e.value))
            .collect();
        return Ok(Json(
            serde_json::to_value(q.page(events)?).map_err(internal)?,
        ));
    }
    let events = records::events(&state.history)
        .into_iter()
        .map(|e| (e.seq, e))
        .collect();
    Ok(Json(
        serde_json::to_value(q.page(events)?).map_err(internal)?,
    ))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub(crate) struct ByCorrelation {
    /// A step id (`step_…`) or hook id (`hook_…`).
    correlation_id: String,
    /// At most this many (default 100, at most 1000).
    limit: Option<usize>,
    /// The `cursor` of the previous page.
    cursor: Option<String>,
    /// `asc` (default) or `desc`.
    sort_order: Option<String>,
}

/// `events.listByCorrelationId`: the events of one step or hook. A wait's events are listed
/// with its run's (`events.list`): no index leads from a wait id to its run.
#[utoipa::path(get, path = "/v1/devkit/events", tag = "devkit", params(ByCorrelation),
    security(("api_key" = [])),
    responses((status = 200, body = crate::openapi::DevkitPage), (status = 400, body = ErrorDoc)))]
pub(crate) async fn events_by_correlation(
    State(api): State<Api>,
    query: Result<Query<ByCorrelation>, QueryRejection>,
) -> Result<Json<Page<DevkitEvent>>, ApiError> {
    let Query(q) = query?;
    let paging = Paging {
        limit: q.limit,
        cursor: q.cursor,
        sort_order: q.sort_order,
    };
    let run_id = match api.world.external().step_run(&q.correlation_id).await {
        Ok(run_id) => Some(run_id),
        Err(WorldError::NotFound { .. }) => match api.world.get_hook(&q.correlation_id).await {
            Ok(hook) => Some(hook.run_id),
            Err(WorldError::NotFound { .. }) => None,
            Err(e) => return Err(e.into()),
        },
        Err(e) => return Err(e.into()),
    };
    let events = match run_id {
        Some(run_id) => records::events(&load(&api, &run_id).await?.history)
            .into_iter()
            .filter(|e| e.correlation_id.as_deref() == Some(q.correlation_id.as_str()))
            .map(|e| (e.seq, e))
            .collect(),
        None => Vec::new(),
    };
    Ok(Json(paging.page(events)?))
}

// ---- hooks -----------------------------------------------------------------------------

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NewHook {
    hook_id: String,
    token: String,
    #[serde(default)]
    metadata: Option<Box<RawValue>>,
}

fn hook_of(
    state: &WorkflowState,
    hook_id: &str,
    token: Option<&str>,
) -> Result<DevkitHook, ApiError> {
    let hook = writes::hook(state, hook_id)?;
    Ok(DevkitHook::of(&state.id, hook, token))
}

/// `hooks.create`: a hook the app's `resumeHook(token, …)` resumes, as often as it likes
/// until the hook is disposed. 409 if the run has the hook already or another live hook holds
/// the token; 410 if the run has finished.
#[utoipa::path(post, path = "/v1/devkit/runs/{id}/hooks", tag = "devkit", request_body = DevkitBody,
    params(("id" = String, Path, description = "A run id")),
    security(("api_key" = [])),
    responses((status = 201, body = crate::openapi::DevkitHook), (status = 404, body = ErrorDoc), (status = 409, body = ErrorDoc), (status = 410, body = ErrorDoc)))]
pub(crate) async fn create_hook(
    State(api): State<Api>,
    Path(id): Path<String>,
    body: Body<NewHook>,
) -> Result<(StatusCode, Json<DevkitHook>), ApiError> {
    let Json(body) = body?;
    if body.hook_id.is_empty() || body.token.is_empty() {
        return Err(ApiError::invalid(
            "hookId",
            "a hook needs a hookId and a token",
        ));
    }
    let metadata = body
        .metadata
        .as_deref()
        .map(|raw| writes::payload(Some(raw)))
        .transpose()?;
    let _turn = api.devkit.lock(&id).await;
    let state = load_state(&api, &id).await?;
    if state.status.is_terminal() {
        return Err(writes::finished(&state).into());
    }
    if state.hooks.iter().any(|h| h.id == body.hook_id) {
        return Err(WorldError::Conflict {
            message: format!("run {} already has hook {}", state.id, body.hook_id),
        }
        .into());
    }
    let recorded = api
        .world
        .external()
        .create_hook(
            &state.id,
            writes::next_position(&state),
            &body.hook_id,
            &body.token,
            metadata,
        )
        .await?;
    let Some(recorded) = recorded else {
        return Err(
            WorldError::Gone(format!("run {} has finished; it takes no hooks", state.id)).into(),
        );
    };
    if recorded
        .iter()
        .any(|e| matches!(e.kind, EventKind::HookConflict { .. }))
    {
        return Err(WorldError::Conflict {
            message: format!(
                "another live hook holds the token of hook {}; choose another token",
                body.hook_id
            ),
        }
        .into());
    }
    let state = load_state(&api, &state.id).await?;
    Ok((
        StatusCode::CREATED,
        Json(hook_of(&state, &body.hook_id, Some(&body.token))?),
    ))
}

/// `hooks.get`. The token is not stored, so it reads empty.
#[utoipa::path(get, path = "/v1/devkit/hooks/{hook}", tag = "devkit",
    params(("hook" = String, Path, description = "A hook id")),
    security(("api_key" = [])),
    responses((status = 200, body = crate::openapi::DevkitHook), (status = 404, body = ErrorDoc)))]
pub(crate) async fn get_hook(
    State(api): State<Api>,
    Path(hook): Path<String>,
) -> Result<Json<DevkitHook>, ApiError> {
    let run_id = api.world.get_hook(&hook).await?.run_id;
    let state = load_state(&api, &run_id).await?;
    Ok(Json(hook_of(&state, &hook, None)?))
}

#[derive(Debug, Deserialize)]
pub(crate) struct ByToken {
    token: String,
}

/// `hooks.getByToken`: the hook holding the token in a run that has not finished. The token
/// travels in the body, never in a URL (where logs would keep it).
#[utoipa::path(post, path = "/v1/devkit/hooks/by-token", tag = "devkit", request_body = DevkitBody,
    security(("api_key" = [])),
    responses((status = 200, body = crate::openapi::DevkitHook), (status = 404, body = ErrorDoc)))]
pub(crate) async fn hook_by_token(
    State(api): State<Api>,
    body: Body<ByToken>,
) -> Result<Json<Value>, ApiError> {
    let Json(body) = body?;
    let not_found = || WorldError::NotFound {
        what: "hook",
        id: "with this token".into(),
    };
    let Some(at) = api.world.external().hook_by_token(&body.token).await? else {
        return Err(not_found().into());
    };
    let state = load_state(&api, &at.run_id).await?;
    let hook = state
        .hooks
        .iter()
        .find(|h| h.position == at.position && h.status != HookStatus::Conflict)
        .ok_or_else(not_found)?;
    if log::is_event_log(&state) {
        return Ok(Json(log::hook(&state, hook, Some(&body.token), true)));
    }
    Ok(Json(
        serde_json::to_value(DevkitHook::of(&state.id, hook, Some(&body.token)))
            .map_err(|e| WorldError::Internal(e.to_string()))?,
    ))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub(crate) struct HookList {
    /// The run whose hooks to list.
    run_id: String,
    /// At most this many (default 100, at most 1000).
    limit: Option<usize>,
    /// The `cursor` of the previous page.
    cursor: Option<String>,
    /// `asc` (default) or `desc`.
    sort_order: Option<String>,
}

/// `hooks.list`: a run's hooks in the order they were created.
#[utoipa::path(get, path = "/v1/devkit/hooks", tag = "devkit", params(HookList),
    security(("api_key" = [])),
    responses((status = 200, body = crate::openapi::DevkitPage), (status = 400, body = ErrorDoc), (status = 404, body = ErrorDoc)))]
pub(crate) async fn list_hooks(
    State(api): State<Api>,
    query: Result<Query<HookList>, QueryRejection>,
) -> Result<Json<Page<DevkitHook>>, ApiError> {
    let Query(q) = query?;
    let paging = Paging {
        limit: q.limit,
        cursor: q.cursor,
        sort_order: q.sort_order,
    };
    let state = load_state(&api, &q.run_id).await?;
    let hooks = state
        .hooks
        .iter()
        .filter(|h| h.status != HookStatus::Conflict)
        .map(|h| (u64::from(h.position), DevkitHook::of(&state.id, h, None)))
        .collect();
    Ok(Json(paging.page(hooks)?))
}

/// `hooks.dispose`: the hook takes no more payloads and its token is free.
#[utoipa::path(post, path = "/v1/devkit/hooks/{hook}/dispose", tag = "devkit",
    params(("hook" = String, Path, description = "A hook id")),
    security(("api_key" = [])),
    responses((status = 200, body = crate::openapi::DevkitHook), (status = 404, body = ErrorDoc)))]
pub(crate) async fn dispose_hook(
    State(api): State<Api>,
    Path(hook): Path<String>,
) -> Result<Json<DevkitHook>, ApiError> {
    let run_id = api.world.get_hook(&hook).await?.run_id;
    let (state, _) = record(&api, &run_id, Reads::State, |state| {
        writes::hook_dispose(state, &hook)
    })
    .await?;
    Ok(Json(hook_of(&state, &hook, None)?))
}

// ---- queue -----------------------------------------------------------------------------

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NewMessage {
    queue_name: String,
    message: Box<RawValue>,
    callback_url: String,
    #[serde(default)]
    idempotency_key: Option<String>,
    #[serde(default)]
    delay_seconds: Option<f64>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Queued {
    message_id: String,
}

/// `queue`: a message the server delivers to the app's handler, signed, with retries; the
/// message id is the id of the run that delivers it. The same idempotency key gives the same
/// message.
#[utoipa::path(post, path = "/v1/devkit/queue", tag = "devkit", request_body = DevkitBody,
    security(("api_key" = [])),
    responses((status = 202, body = crate::openapi::DevkitQueued), (status = 400, body = ErrorDoc), (status = 503, description = "The server has no delivery secret", body = ErrorDoc)))]
pub(crate) async fn queue(
    State(api): State<Api>,
    body: Body<NewMessage>,
) -> Result<(StatusCode, Json<Queued>), ApiError> {
    let Json(body) = body?;
    let url = handler_url(&body.callback_url, &body.queue_name)?;
    api.callbacks.check(&body.callback_url)?;
    if !api
        .world
        .workflow_names()
        .iter()
        .any(|name| name == DELIVERY_WORKFLOW)
    {
        return Err(WorldError::Unavailable(
            "this server delivers no DevKit messages: start it with a delivery secret (`worlds serve` with WORLDS_DELIVERY_SECRET set), the same the app verifies deliveries with".into(),
        )
        .into());
    }
    let mut options = WorkflowOptions::default();
    // A message the app refused, or that ran out of retries, is a dead letter: its run stays
    // failed (and can be retried by hand), instead of restarting by itself.
    options.failure_strategy = Some(FailureStrategy::Ignore);
    options.idempotency_key = body
        .idempotency_key
        .filter(|k| !k.is_empty())
        .map(|k| format!("devkit:{k}"));
    let delivery = Delivery {
        queue_name: body.queue_name,
        message: body.message,
        url,
        delay_ms: super::delivery::delay_ms(body.delay_seconds)?,
    };
    let handle = api
        .world
        .execute_by_name::<Delivery, Value>(DELIVERY_WORKFLOW, delivery, options)
        .await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(Queued {
            message_id: handle.id.clone(),
        }),
    ))
}
