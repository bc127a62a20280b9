//! `/v1/hooks`: resuming a waiting hook by its token.

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use serde_json::Value;
use worlds_engine::hooks::HookResumed;

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
