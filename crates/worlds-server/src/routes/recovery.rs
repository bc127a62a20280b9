//! `/v1/runs/{id}/retry|reset|resume`: reopening a failed or quarantined run by hand. Each is
//! recorded in the run's history with the caller's identity and the reason given.

use axum::extract::{Path, State};
use axum::{Extension, Json};
use serde::Deserialize;
use worlds_engine::model::{ReopenRequest, Reopened};

use super::runs::{run_id_of, RunId};
use super::Api;
use crate::auth::Principal;
use crate::error::ApiError;
use crate::openapi::ErrorDoc;

/// `POST /v1/runs/{id}/retry` and `/resume`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Reopen {
    /// Why, recorded in the run's history.
    reason: Option<String>,
}

/// `POST /v1/runs/{id}/reset`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Reset {
    /// The first command position of the failed attempt to run again; everything before it
    /// is kept.
    position: u32,
    /// Why, recorded in the run's history.
    reason: Option<String>,
}

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
