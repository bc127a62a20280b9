//! `/v1/runs/{id}/retry|reset|resume`: reopening a failed or quarantined run by hand, and
//! `/v1/bulk`: doing it (or cancelling) over every run a filter matches. Each is recorded in
//! the run's history with the caller's identity and the reason given.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use worlds_engine::model::{ReopenRequest, Reopened};
use worlds_engine::{BulkProgress, BulkRequest};
use worlds_wire::{Bulk, Reopen, Reset};

use super::runs::{run_id_of, RunId};
use crate::auth::Principal;
use crate::error::ApiError;
use crate::openapi::ErrorDoc;
use crate::state::Api;

/// What a reopening did.
#[derive(utoipa::ToSchema)]
#[schema(as = Reopened)]
#[allow(dead_code)]
pub(crate) struct ReopenedDoc {
    /// The run id.
    run_id: String,
    /// `retry`, `reset` or `resume`.
    action: String,
    /// The attempt that starts.
    attempt: u32,
    /// The first command position that runs again (everything before it is kept).
    kept_until: u32,
    /// True if nothing was done because the same bulk operation had already reopened it.
    already: bool,
}

async fn reopen(
    api: &Api,
    principal: &Principal,
    id: &str,
    request: ReopenRequest,
    reason: Option<String>,
) -> Result<Json<Reopened>, ApiError> {
    let run_id = run_id_of(&api.world, id).await?;
    let mut request = request.by(principal.subject.clone());
    request.reason = reason;
    Ok(Json(api.world.reopen(&run_id, request).await?))
}

/// Runs a failed or quarantined run's failed part again with the code deployed now: every
/// result recorded before the last failure is kept, nothing before it runs again.
#[utoipa::path(post, path = "/v1/runs/{id}/retry", tag = "runs", params(RunId),
    request_body(content = Option<Reopen>),
    security(("api_key" = [])),
    responses((status = 200, body = ReopenedDoc), (status = 404, body = ErrorDoc),
        (status = 409, description = "The run did not fail, its compensations ran, it is a child, or the code deployed now cannot replay what it keeps", body = ErrorDoc)))]
pub(crate) async fn retry(
    State(api): State<Api>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    body: Option<Json<Reopen>>,
) -> Result<Json<Reopened>, ApiError> {
    let reason = body.and_then(|Json(b)| b.reason);
    reopen(&api, &principal, &id, ReopenRequest::retry(), reason).await
}

/// Runs a failed or quarantined run again from a command position of its failed attempt,
/// keeping what came before it.
#[utoipa::path(post, path = "/v1/runs/{id}/reset", tag = "runs", params(RunId),
    request_body(content = Reset),
    security(("api_key" = [])),
    responses((status = 200, body = ReopenedDoc), (status = 400, description = "No such position, or one past a command without a result", body = ErrorDoc),
        (status = 404, body = ErrorDoc), (status = 409, body = ErrorDoc)))]
pub(crate) async fn reset(
    State(api): State<Api>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    Json(body): Json<Reset>,
) -> Result<Json<Reopened>, ApiError> {
    let request = ReopenRequest::reset(body.position);
    reopen(&api, &principal, &id, request, body.reason).await
}

/// Lets a quarantined run go on from where it stopped, once its code was fixed (checked by
/// replaying its history first).
#[utoipa::path(post, path = "/v1/runs/{id}/resume", tag = "runs", params(RunId),
    request_body(content = Option<Reopen>),
    security(("api_key" = [])),
    responses((status = 200, body = ReopenedDoc), (status = 404, body = ErrorDoc),
        (status = 409, description = "The run is not quarantined, or the code deployed now still diverges from its history", body = ErrorDoc)))]
pub(crate) async fn resume(
    State(api): State<Api>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    body: Option<Json<Reopen>>,
) -> Result<Json<Reopened>, ApiError> {
    let reason = body.and_then(|Json(b)| b.reason);
    reopen(&api, &principal, &id, ReopenRequest::resume(), reason).await
}

/// How far a bulk operation got.
#[derive(utoipa::ToSchema)]
#[schema(as = BulkProgress)]
#[allow(dead_code)]
pub(crate) struct BulkProgressDoc {
    /// The operation's id (a run of the built-in `worlds.bulk` workflow).
    id: String,
    /// Its run status.
    status: String,
    /// Runs matched so far.
    matched: u64,
    /// Runs acted on.
    applied: u64,
    /// Runs left as they were (already finished, already reopened by this operation).
    skipped: u64,
    /// Runs the action was refused for.
    refused: u64,
    /// The first refusals: `{run_id, error}`.
    refusals: Vec<serde_json::Value>,
    /// True once every page is done.
    done: bool,
}

/// Starts a bulk operation — cancel, retry or resume every run a filter matches — as a
/// durable run, and answers its progress so far. Each run is acted on once, however often
/// the operation is interrupted; runs created after it are not in it.
#[utoipa::path(post, path = "/v1/bulk", tag = "runs",
    request_body(content = Bulk),
    security(("api_key" = [])),
    responses((status = 202, body = BulkProgressDoc), (status = 400, body = ErrorDoc)))]
pub(crate) async fn bulk(
    State(api): State<Api>,
    Extension(principal): Extension<Principal>,
    Json(body): Json<Bulk>,
) -> Result<(StatusCode, Json<BulkProgress>), ApiError> {
    let mut request = BulkRequest::new(body.action, body.filter).by(principal.subject.clone());
    request.reason = body.reason;
    request.name = body.name;
    let id = api.world.bulk(request).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(api.world.bulk_progress(&id).await?),
    ))
}

/// How far a bulk operation got.
#[utoipa::path(get, path = "/v1/bulk/{id}", tag = "runs", params(RunId),
    security(("api_key" = [])),
    responses((status = 200, body = BulkProgressDoc), (status = 400, description = "The run is not a bulk operation", body = ErrorDoc), (status = 404, body = ErrorDoc)))]
pub(crate) async fn bulk_progress(
    State(api): State<Api>,
    Path(id): Path<String>,
) -> Result<Json<BulkProgress>, ApiError> {
    Ok(Json(api.world.bulk_progress(&id).await?))
}
