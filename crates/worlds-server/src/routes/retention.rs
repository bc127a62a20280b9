//! `/v1/prune` and `/v1/retention`: retention sweeps over the API. A sweep removes the
//! finished runs the world's policy lets go (see `worlds_engine::RetentionConfig`); it is a
//! durable run, so it survives a restart and removes each run once.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use worlds_engine::{PruneReport, RetentionStatus};
use worlds_wire::Prune;

use super::runs::RunId;
use crate::error::ApiError;
use crate::openapi::ErrorDoc;
use crate::state::Api;

/// Starts a retention sweep now and answers its report so far (202), or, with `dry_run`,
/// answers what a sweep would remove and the space it takes, removing nothing (200).
#[utoipa::path(post, path = "/v1/prune", tag = "runs",
    request_body(content = Prune),
    security(("api_key" = [])),
    responses(
        (status = 202, description = "The sweep started (a run of `worlds.prune`)", body = crate::openapi::PruneReport),
        (status = 200, description = "The preview of a dry run", body = crate::openapi::PruneReport),
        (status = 400, body = ErrorDoc)))]
pub(crate) async fn prune(
    State(api): State<Api>,
    body: Option<Json<Prune>>,
) -> Result<(StatusCode, Json<PruneReport>), ApiError> {
    let body = body.map(|Json(body)| body).unwrap_or_default();
    if body.dry_run {
        return Ok((StatusCode::OK, Json(api.world.prune_preview().await?)));
    }
    let id = api.world.prune().await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(api.world.prune_report(&id).await?),
    ))
}

/// What retention sweep `id` did so far.
#[utoipa::path(get, path = "/v1/prune/{id}", tag = "runs", params(RunId),
    security(("api_key" = [])),
    responses((status = 200, body = crate::openapi::PruneReport), (status = 400, description = "The run is not a sweep", body = ErrorDoc), (status = 404, body = ErrorDoc)))]
pub(crate) async fn report(
    State(api): State<Api>,
    Path(id): Path<String>,
) -> Result<Json<PruneReport>, ApiError> {
    Ok(Json(api.world.prune_report(&id).await?))
}

/// The world's retention policy, when it next sweeps by itself, and the newest sweep's report.
#[utoipa::path(get, path = "/v1/retention", tag = "runs",
    security(("api_key" = [])),
    responses((status = 200, body = crate::openapi::Retention)))]
pub(crate) async fn status(State(api): State<Api>) -> Result<Json<RetentionStatus>, ApiError> {
    Ok(Json(api.world.retention().await?))
}
