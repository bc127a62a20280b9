//! `/v1/schedules`: cron schedules that start runs, listed and read with a read key, made,
//! paused, resumed and deleted with an admin key.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::Value;
use worlds_engine::schedule::ScheduleConfig;

use super::Api;
use crate::error::ApiError;

/// `POST /v1/schedules`: a cron schedule (created, or updated under its id).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewSchedule {
    id: String,
    workflow: String,
    /// Five fields, in UTC: `minute hour day-of-month month day-of-week`.
    cron: String,
    #[serde(default)]
    input: Value,
}

pub(crate) async fn list(State(api): State<Api>) -> Result<Json<Vec<ScheduleConfig>>, ApiError> {
    Ok(Json(api.world.schedules().list().await?))
}

pub(crate) async fn get(
    State(api): State<Api>,
    Path(id): Path<String>,
) -> Result<Json<ScheduleConfig>, ApiError> {
    Ok(Json(api.world.schedules().get(&id).await?))
}

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

pub(crate) async fn pause(
    State(api): State<Api>,
    Path(id): Path<String>,
) -> Result<Json<ScheduleConfig>, ApiError> {
    Ok(Json(api.world.schedules().pause(&id).await?))
}

pub(crate) async fn resume(
    State(api): State<Api>,
    Path(id): Path<String>,
) -> Result<Json<ScheduleConfig>, ApiError> {
    Ok(Json(api.world.schedules().resume(&id).await?))
}

pub(crate) async fn delete(
    State(api): State<Api>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    api.world.schedules().delete(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}
