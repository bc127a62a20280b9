//! `/v1/hooks`: resuming a waiting hook by its token, reading hooks by id, by run, and those
//! waiting now. A hook's token is never shown: only its holder has it.

use axum::extract::{Path, Query, State};
use axum::Json;
use serde::Deserialize;
use serde_json::Value;
use worlds_engine::hooks::HookResumed;
use worlds_engine::store::HookRecord;

use super::runs::{run_id_of, PageBody, PageParams};
use super::Api;
use crate::error::ApiError;

/// `POST /v1/hooks/resume`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Resume {
    /// The hook's token.
    token: String,
    /// What the waiting workflow receives. A payload that does not have the hook's type is
    /// refused (400) and the hook keeps waiting.
    #[serde(default)]
    payload: Value,
}

pub(crate) async fn resume(
    State(api): State<Api>,
    body: Result<Json<Resume>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<HookResumed>, ApiError> {
    let Json(body) = body?;
    Ok(Json(
        api.world.resume_hook(&body.token, &body.payload).await?,
    ))
}

pub(crate) async fn get(
    State(api): State<Api>,
    Path(id): Path<String>,
) -> Result<Json<HookRecord>, ApiError> {
    Ok(Json(api.world.get_hook(&id).await?))
}

/// The hooks waiting for a payload now, in every run.
pub(crate) async fn waiting(
    State(api): State<Api>,
    query: Result<Query<PageParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<PageBody<HookRecord>>, ApiError> {
    let Query(q) = query?;
    Ok(Json(api.world.waiting_hooks(q.query()?).await?.into()))
}

/// One run's hooks.
pub(crate) async fn of_run(
    State(api): State<Api>,
    Path(id): Path<String>,
    query: Result<Query<PageParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<PageBody<HookRecord>>, ApiError> {
    let Query(q) = query?;
    let run_id = run_id_of(&api.world, &id).await?;
    Ok(Json(api.world.run_hooks(&run_id, q.query()?).await?.into()))
}
