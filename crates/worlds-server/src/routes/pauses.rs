//! `/v1/pauses`: workflows and task queues paused by an operator, listed with a read key,
//! paused and resumed with an admin key (recorded as paused by `key:<id>`).

use axum::extract::{Path, State};
use axum::{Extension, Json};
use serde::Deserialize;
use worlds_engine::model::{Pause, PauseTarget};
use worlds_engine::WorldError;

use crate::auth::Principal;
use crate::error::ApiError;
use crate::openapi::{ErrorDoc, PauseRecord};
use crate::state::Api;

/// The body of a pause: why (optional).
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PauseBody {
    /// Why it is paused, shown wherever a run waits on it (at most 4 096 bytes).
    #[serde(default)]
    reason: String,
}

/// Every pause in force.
#[utoipa::path(get, path = "/v1/pauses", tag = "pauses", security(("api_key" = [])),
    responses((status = 200, body = Vec<PauseRecord>)))]
pub(crate) async fn list(State(api): State<Api>) -> Result<Json<Vec<Pause>>, ApiError> {
    Ok(Json(api.world.pauses().await?))
}

/// Pauses a workflow (`kind` = `workflow`) or a task queue (`task_queue`): its runs not
/// started yet stay pending and its steps not started yet stay queued until it is resumed;
/// started runs and running steps go on. Pausing it again replaces the record.
#[utoipa::path(put, path = "/v1/pauses/{kind}/{name}", tag = "pauses",
    params(("kind" = String, Path, description = "`workflow` or `task_queue`"),
        ("name" = String, Path, description = "The workflow's or the task queue's name")),
    request_body(content = Option<PauseBody>),
    security(("api_key" = [])),
    responses((status = 200, body = PauseRecord),
        (status = 400, description = "An unknown kind, or a name or reason that cannot be stored", body = ErrorDoc)))]
pub(crate) async fn pause(
    State(api): State<Api>,
    Extension(principal): Extension<Principal>,
    Path((kind, name)): Path<(String, String)>,
    body: Option<Json<PauseBody>>,
) -> Result<Json<Pause>, ApiError> {
    let target = PauseTarget::parse(&kind, &name)?;
    let reason = body.map(|Json(b)| b.reason).unwrap_or_default();
    Ok(Json(
        api.world.pause(target, &principal.subject, &reason).await?,
    ))
}

/// Lifts a pause: what it held starts. Answers the pause lifted.
#[utoipa::path(delete, path = "/v1/pauses/{kind}/{name}", tag = "pauses",
    params(("kind" = String, Path, description = "`workflow` or `task_queue`"),
        ("name" = String, Path, description = "The workflow's or the task queue's name")),
    security(("api_key" = [])),
    responses((status = 200, body = PauseRecord),
        (status = 400, body = ErrorDoc),
        (status = 404, description = "It is not paused", body = ErrorDoc)))]
pub(crate) async fn resume(
    State(api): State<Api>,
    Extension(principal): Extension<Principal>,
    Path((kind, name)): Path<(String, String)>,
) -> Result<Json<Pause>, ApiError> {
    let target = PauseTarget::parse(&kind, &name)?;
    match api.world.resume(&target, &principal.subject).await? {
        Some(pause) => Ok(Json(pause)),
        None => Err(WorldError::NotFound {
            what: "pause",
            id: format!(
                "{} {}",
                target.kind(),
                target.name().chars().take(128).collect::<String>()
            ),
        }
        .into()),
    }
}
