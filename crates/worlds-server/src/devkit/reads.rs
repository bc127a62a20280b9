//! The reads of the DevKit World (`runs`, `steps`, `events`, `hooks`): each answers off the
//! engine run in the shapes of `log.rs`, paged as the DevKit pages (`{data, cursor, hasMore}`)
//! and with `?resolveData=none` leaving payloads out.

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use worlds_engine::model::{HookStatus, ListQuery, SortOrder, StatusFilter};
use worlds_engine::{ResolveData, RunStatus, WorkflowQueryFilter, WorkflowState, WorldError};

use super::log::{self, LogReader};
use crate::error::ApiError;
use crate::openapi::ErrorDoc;
use crate::state::Api;

/// The most records one page holds.
const MAX_PAGE: usize = 1_000;
/// Records per page when the caller does not say.
const DEFAULT_PAGE: usize = 100;

/// One page, as the DevKit pages: `{data, cursor, hasMore}`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Page {
    data: Vec<Value>,
    cursor: Option<String>,
    has_more: bool,
}

/// `?limit=&cursor=&sortOrder=&resolveData=` of a DevKit read.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub(crate) struct Paging {
    /// At most this many (default 100, at most 1000).
    limit: Option<usize>,
    /// The `cursor` of the previous page.
    cursor: Option<String>,
    /// `asc` (default; newest first for runs) or `desc`.
    sort_order: Option<String>,
    /// `all` (default) or `none`: payloads left out.
    resolve_data: Option<String>,
}

impl Paging {
    fn limit(&self) -> usize {
        self.limit.unwrap_or(DEFAULT_PAGE).clamp(1, MAX_PAGE)
    }

    fn resolve(&self) -> Result<bool, ApiError> {
        match self.resolve_data.as_deref() {
            None | Some("all") => Ok(true),
            Some("none") => Ok(false),
            Some(other) => Err(ApiError::invalid(
                "resolveData",
                format!("resolveData is all or none, not {other:?}"),
            )),
        }
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

    /// The page of `items` (each with its ordering key, ascending) after the cursor; its
    /// cursor is the last item's (null on an empty page), `hasMore` says whether more follow.
    fn page(&self, items: Vec<(u64, Value)>) -> Result<Page, ApiError> {
        let after = self.after()?;
        let descending = self.descending()?;
        let mut items: Vec<(u64, Value)> = items
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
        // The cursor of the last item, on the last page too (as the DevKit's own Worlds
        // answer): the runtime keeps it and next asks only for what came after it, instead of
        // reading the whole log again.
        let cursor = items.last().map(|(key, _)| key.to_string());
        Ok(Page {
            data: items.into_iter().map(|(_, item)| item).collect(),
            cursor,
            has_more,
        })
    }
}

/// `?resolveData=` of a read of one record.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub(crate) struct Resolve {
    /// `all` (default) or `none`: payloads left out.
    resolve_data: Option<String>,
}

impl Resolve {
    fn resolve(&self) -> Result<bool, ApiError> {
        Paging {
            resolve_data: self.resolve_data.clone(),
            ..Paging::default()
        }
        .resolve()
    }
}

/// The run with its history: what the step, event and wait reads are made from.
async fn with_history(api: &Api, run_id: &str) -> Result<WorkflowState, WorldError> {
    api.world.external().get_with_history(run_id).await
}

// ---- runs ------------------------------------------------------------------------------

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
    /// `all` (default) or `none`: inputs, outputs and errors left out.
    resolve_data: Option<String>,
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

/// `runs.list`: the runs driven by DevKit apps, newest first. Runs the engine drives are
/// passed over, so a page may hold fewer than `limit`.
#[utoipa::path(get, path = "/v1/devkit/runs", tag = "devkit", params(RunList),
    security(("api_key" = [])),
    responses((status = 200, body = crate::openapi::DevkitPage), (status = 400, body = ErrorDoc)))]
pub(crate) async fn list_runs(
    State(api): State<Api>,
    query: Result<Query<RunList>, QueryRejection>,
) -> Result<Json<Page>, ApiError> {
    let Query(q) = query?;
    let resolve = Resolve {
        resolve_data: q.resolve_data,
    }
    .resolve()?;
    let mut filter = WorkflowQueryFilter::default();
    filter.workflow_name = q.workflow_name;
    filter.status = q.status.as_deref().map(status_filter).transpose()?;
    filter.cursor = q.cursor;
    filter.oldest_first = match q.sort_order.as_deref() {
        None | Some("desc") => false,
        Some("asc") => true,
        Some(other) => {
            return Err(ApiError::invalid(
                "sortOrder",
                format!("sortOrder is asc or desc, not {other:?}"),
            ))
        }
    };
    filter.resolve_data = if resolve {
        ResolveData::All
    } else {
        ResolveData::None
    };
    filter.limit = Some(q.limit.unwrap_or(DEFAULT_PAGE).clamp(1, MAX_PAGE));
    let page = api.world.list_runs(filter).await?;
    Ok(Json(Page {
        data: page
            .data
            .iter()
            .filter(|state| state.external)
            .map(|state| log::run(state, resolve))
            .collect(),
        cursor: page.cursor,
        has_more: page.has_more,
    }))
}

/// `runs.get`.
#[utoipa::path(get, path = "/v1/devkit/runs/{id}", tag = "devkit",
    params(("id" = String, Path, description = "A run id"), Resolve),
    security(("api_key" = [])),
    responses((status = 200, body = crate::openapi::DevkitRun), (status = 404, body = ErrorDoc)))]
pub(crate) async fn get_run(
    State(api): State<Api>,
    Path(id): Path<String>,
    query: Result<Query<Resolve>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query?;
    let state = api.world.external().get(&id, ResolveData::All).await?;
    Ok(Json(log::run(&state, q.resolve()?)))
}

// ---- steps -----------------------------------------------------------------------------

/// `steps.list`: a run's steps in the order they were created.
#[utoipa::path(get, path = "/v1/devkit/runs/{id}/steps", tag = "devkit",
    params(("id" = String, Path, description = "A run id"), Paging),
    security(("api_key" = [])),
    responses((status = 200, body = crate::openapi::DevkitPage), (status = 404, body = ErrorDoc)))]
pub(crate) async fn list_steps(
    State(api): State<Api>,
    Path(id): Path<String>,
    query: Result<Query<Paging>, QueryRejection>,
) -> Result<Json<Page>, ApiError> {
    let Query(q) = query?;
    let state = with_history(&api, &id).await?;
    let steps = log::steps(&state, q.resolve()?)
        .into_iter()
        .enumerate()
        .map(|(i, s)| (i as u64, s))
        .collect();
    Ok(Json(q.page(steps)?))
}

/// `steps.get`.
#[utoipa::path(get, path = "/v1/devkit/runs/{id}/steps/{step}", tag = "devkit",
    params(("id" = String, Path, description = "A run id"), ("step" = String, Path, description = "A step id"), Resolve),
    security(("api_key" = [])),
    responses((status = 200, body = crate::openapi::DevkitStep), (status = 404, body = ErrorDoc)))]
pub(crate) async fn get_step(
    State(api): State<Api>,
    Path((id, step)): Path<(String, String)>,
    query: Result<Query<Resolve>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query?;
    let state = with_history(&api, &id).await?;
    let a = state
        .activities
        .iter()
        .find(|a| a.id == step)
        .ok_or_else(|| WorldError::NotFound {
            what: "step",
            id: step.clone(),
        })?;
    Ok(Json(log::step(&state, a, q.resolve()?)))
}

// ---- events ----------------------------------------------------------------------------

/// `events.list`: a run's DevKit events in the order they happened; the cursor is the engine
/// event's position, stable for ever.
#[utoipa::path(get, path = "/v1/devkit/runs/{id}/events", tag = "devkit",
    params(("id" = String, Path, description = "A run id"), Paging),
    security(("api_key" = [])),
    responses((status = 200, body = crate::openapi::DevkitPage), (status = 404, body = ErrorDoc)))]
pub(crate) async fn list_events(
    State(api): State<Api>,
    Path(id): Path<String>,
    query: Result<Query<Paging>, QueryRejection>,
) -> Result<Json<Page>, ApiError> {
    let Query(q) = query?;
    let state = with_history(&api, &id).await?;
    let events = LogReader::events(&state.history, q.resolve()?)
        .into_iter()
        .map(|e| (e.seq, e.value))
        .collect();
    Ok(Json(q.page(events)?))
}

/// `events.get`: one event of a run, by its id.
#[utoipa::path(get, path = "/v1/devkit/runs/{id}/events/{event}", tag = "devkit",
    params(("id" = String, Path, description = "A run id"), ("event" = String, Path, description = "An event id (`evnt_…`)"), Resolve),
    security(("api_key" = [])),
    responses((status = 200, body = crate::openapi::DevkitEvent), (status = 404, body = ErrorDoc)))]
pub(crate) async fn get_event(
    State(api): State<Api>,
    Path((id, event)): Path<(String, String)>,
    query: Result<Query<Resolve>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query?;
    let state = with_history(&api, &id).await?;
    let found = LogReader::find(&state.history, &event, q.resolve()?);
    Ok(Json(
        found
            .ok_or(WorldError::NotFound {
                what: "event",
                id: event,
            })?
            .value,
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
    /// `all` (default) or `none`: payloads left out.
    resolve_data: Option<String>,
}

/// `events.listByCorrelationId`: the events of one step or hook. A wait's events are listed
/// with its run's (`events.list`): no index leads from a wait id to its run.
#[utoipa::path(get, path = "/v1/devkit/events", tag = "devkit", params(ByCorrelation),
    security(("api_key" = [])),
    responses((status = 200, body = crate::openapi::DevkitPage), (status = 400, body = ErrorDoc)))]
pub(crate) async fn events_by_correlation(
    State(api): State<Api>,
    query: Result<Query<ByCorrelation>, QueryRejection>,
) -> Result<Json<Page>, ApiError> {
    let Query(q) = query?;
    let paging = Paging {
        limit: q.limit,
        cursor: q.cursor,
        sort_order: q.sort_order,
        resolve_data: q.resolve_data,
    };
    let resolve = paging.resolve()?;
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
        Some(run_id) => LogReader::events(&with_history(&api, &run_id).await?.history, resolve)
            .into_iter()
            .filter(|e| e.correlation_id.as_deref() == Some(q.correlation_id.as_str()))
            .map(|e| (e.seq, e.value))
            .collect(),
        None => Vec::new(),
    };
    Ok(Json(paging.page(events)?))
}

// ---- hooks -----------------------------------------------------------------------------

/// `hooks.get`. Only the token's digest is stored, so the token reads empty.
#[utoipa::path(get, path = "/v1/devkit/hooks/{hook}", tag = "devkit",
    params(("hook" = String, Path, description = "A hook id"), Resolve),
    security(("api_key" = [])),
    responses((status = 200, body = crate::openapi::DevkitHook), (status = 404, body = ErrorDoc)))]
pub(crate) async fn get_hook(
    State(api): State<Api>,
    Path(hook): Path<String>,
    query: Result<Query<Resolve>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query?;
    let found = api.world.get_hook(&hook).await?;
    let state = api
        .world
        .external()
        .get(&found.run_id, ResolveData::All)
        .await?;
    if !log::is_devkit_hook(&found.hook) {
        return Err(WorldError::NotFound {
            what: "hook",
            id: hook,
        }
        .into());
    }
    Ok(Json(log::hook(&state, &found.hook, None, q.resolve()?)))
}

#[derive(Debug, Deserialize)]
pub(crate) struct ByToken {
    token: String,
}

/// `hooks.getByToken`: the hook holding the token in a run that has not ended. The token
/// travels in the body, never in a URL (where logs would keep it).
#[utoipa::path(post, path = "/v1/devkit/hooks/by-token", tag = "devkit", request_body = crate::openapi::DevkitBody,
    params(Resolve),
    security(("api_key" = [])),
    responses((status = 200, body = crate::openapi::DevkitHook), (status = 404, body = ErrorDoc)))]
pub(crate) async fn hook_by_token(
    State(api): State<Api>,
    query: Result<Query<Resolve>, QueryRejection>,
    body: Result<Json<ByToken>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query?;
    let Json(body) = body?;
    let not_found = || WorldError::NotFound {
        what: "hook",
        id: "with this token".into(),
    };
    let Some(at) = api.world.external().hook_by_token(&body.token).await? else {
        return Err(not_found().into());
    };
    let state = api
        .world
        .external()
        .get(&at.run_id, ResolveData::All)
        .await?;
    let hook = state
        .hooks
        .iter()
        .find(|h| h.position == at.position && h.status != HookStatus::Conflict)
        .ok_or_else(not_found)?;
    Ok(Json(log::hook(
        &state,
        hook,
        Some(&body.token),
        q.resolve()?,
    )))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub(crate) struct HookList {
    /// The run whose hooks to list; without it, the hooks waiting now in every DevKit run.
    run_id: Option<String>,
    /// At most this many (default 100, at most 1000).
    limit: Option<usize>,
    /// The `cursor` of the previous page.
    cursor: Option<String>,
    /// `asc` (default) or `desc`.
    sort_order: Option<String>,
    /// `all` (default) or `none`: metadata left out.
    resolve_data: Option<String>,
}

/// `hooks.list`: a run's hooks in the order they were created, or, without `runId`, the
/// hooks waiting now in every DevKit run (by run, then creation).
#[utoipa::path(get, path = "/v1/devkit/hooks", tag = "devkit", params(HookList),
    security(("api_key" = [])),
    responses((status = 200, body = crate::openapi::DevkitPage), (status = 400, body = ErrorDoc), (status = 404, body = ErrorDoc)))]
pub(crate) async fn list_hooks(
    State(api): State<Api>,
    query: Result<Query<HookList>, QueryRejection>,
) -> Result<Json<Page>, ApiError> {
    let Query(q) = query?;
    let paging = Paging {
        limit: q.limit,
        cursor: q.cursor,
        sort_order: q.sort_order,
        resolve_data: q.resolve_data,
    };
    let resolve = paging.resolve()?;
    let Some(run_id) = q.run_id else {
        return waiting_hooks(&api, &paging, resolve).await.map(Json);
    };
    let state = api.world.external().get(&run_id, ResolveData::All).await?;
    let hooks = state
        .hooks
        .iter()
        .filter(|h| log::is_devkit_hook(h))
        .map(|h| (u64::from(h.position), log::hook(&state, h, None, resolve)))
        .collect();
    Ok(Json(paging.page(hooks)?))
}

/// One page of the hooks waiting now in DevKit runs, through the engine's index of waiting
/// hooks (its cursor is the engine's).
async fn waiting_hooks(api: &Api, paging: &Paging, resolve: bool) -> Result<Page, ApiError> {
    let mut query = ListQuery::new().limit(paging.limit());
    query.cursor = paging.cursor.clone();
    query.order = if paging.descending()? {
        SortOrder::Descending
    } else {
        SortOrder::Ascending
    };
    query.resolve_data = ResolveData::None;
    let page = api.world.waiting_hooks(query).await?;
    let mut data = Vec::with_capacity(page.data.len());
    let mut last: Option<WorkflowState> = None;
    for record in page.data {
        if last.as_ref().is_none_or(|s| s.id != record.run_id) {
            last = Some(api.world.get_run(&record.run_id, ResolveData::All).await?);
        }
        let Some(state) = last.as_ref().filter(|s| s.external) else {
            continue;
        };
        if let Some(hook) = state.hooks.iter().find(|h| h.id == record.hook.id) {
            data.push(log::hook(state, hook, None, resolve));
        }
    }
    Ok(Page {
        data,
        cursor: page.cursor,
        has_more: page.has_more,
    })
}
