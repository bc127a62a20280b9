//! `/v1/schedules`: cron schedules that start runs, listed and read with a read key, made,
//! paused, resumed and deleted with an admin key.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use worlds_engine::schedule::ScheduleConfig;
use worlds_wire::NewSchedule;

use crate::error::ApiError;
use crate::openapi::{ErrorDoc, Schedule};
use crate::state::Api;

/// Every schedule.
#[utoipa::path(get, path = "/v1/schedules", tag = "schedules", security(("api_key" = [])),
    responses((status = 200, body = Vec<Schedule>)))]
pub(crate) async fn list(State(api): State<Api>) -> Result<Json<Vec<ScheduleConfig>>, ApiError> {
    Ok(Json(api.world.schedules().list().await?))
}

/// One schedule.
#[utoipa::path(get, path = "/v1/schedules/{id}", tag = "schedules", params(("id" = String, Path, description = "The schedule's id")),
    security(("api_key" = [])),
    responses((status = 200, body = Schedule), (status = 404, body = ErrorDoc)))]
pub(crate) async fn get(
    State(api): State<Api>,
    Path(id): Path<String>,
) -> Result<Json<ScheduleConfig>, ApiError> {
    Ok(Json(api.world.schedules().get(&id).await?))
}

/// Creates a cron schedule, or updates the one of that id.
#[utoipa::path(post, path = "/v1/schedules", tag = "schedules", request_body = NewSchedule,
    security(("api_key" = [])),
    responses((status = 201, body = Schedule),
        (status = 400, description = "A malformed cron expression", body = ErrorDoc),
        (status = 404, description = "No such workflow", body = ErrorDoc)))]
pub(crate) async fn create(
    State(api): State<Api>,
    body: Result<Json<NewSchedule>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(body) = body?;
    let schedule = api
        .world
        .schedules()
        .cron(&body.id, &body.workflow, body.input, &body.cron)
        .await?;
    Ok((StatusCode::CREATED, Json(schedule)).into_response())
}

/// Stops a schedule firing until it is resumed.
#[utoipa::path(post, path = "/v1/schedules/{id}/pause", tag = "schedules", params(("id" = String, Path, description = "The schedule's id")),
    security(("api_key" = [])),
    responses((status = 200, body = Schedule), (status = 404, body = ErrorDoc)))]
pub(crate) async fn pause(
    State(api): State<Api>,
    Path(id): Path<String>,
) -> Result<Json<ScheduleConfig>, ApiError> {
    Ok(Json(api.world.schedules().pause(&id).await?))
}

/// Lets a paused schedule fire again.
#[utoipa::path(post, path = "/v1/schedules/{id}/resume", tag = "schedules", params(("id" = String, Path, description = "The schedule's id")),
    security(("api_key" = [])),
    responses((status = 200, body = Schedule), (status = 404, body = ErrorDoc)))]
pub(crate) async fn resume(
    State(api): State<Api>,
    Path(id): Path<String>,
) -> Result<Json<ScheduleConfig>, ApiError> {
    Ok(Json(api.world.schedules().resume(&id).await?))
}

/// Deletes a schedule; runs it started go on.
#[utoipa::path(delete, path = "/v1/schedules/{id}", tag = "schedules", params(("id" = String, Path, description = "The schedule's id")),
    security(("api_key" = [])),
    responses((status = 204, description = "Deleted"), (status = 404, body = ErrorDoc)))]
pub(crate) async fn delete(
    State(api): State<Api>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    api.world.schedules().delete(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}
