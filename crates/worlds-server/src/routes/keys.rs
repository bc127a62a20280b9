//! `/v1/keys` (admin): the world's API keys, when the server checks keys kept by the world
//! ([`ApiOptions::with_world_keys`](crate::ApiOptions::with_world_keys)). A new key is in the
//! answer to its creation only.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use worlds_engine::clock::Millis;
use worlds_engine::model::keys::{ApiKeyRecord, Scope};
use worlds_engine::WorldError;

use super::Api;
use crate::auth::ApiKeys;
use crate::error::ApiError;

/// `POST /v1/keys`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewKey {
    scope: Scope,
    #[serde(default)]
    name: String,
    /// Refused after this many milliseconds; without it, until revoked.
    expires_in_ms: Option<u64>,
}

fn keys(api: &Api) -> Result<&ApiKeys, ApiError> {
    api.keys.as_deref().ok_or_else(|| {
        ApiError::from(WorldError::Unsupported(
            "this server does not check keys kept by the world; its program manages its callers"
                .into(),
        ))
    })
}

pub(crate) async fn list(State(api): State<Api>) -> Result<Json<Vec<ApiKeyRecord>>, ApiError> {
    Ok(Json(keys(&api)?.list().await?))
}

pub(crate) async fn create(
    State(api): State<Api>,
    body: Result<Json<NewKey>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(body) = body?;
    let keys = keys(&api)?;
    let expires_at = body.expires_in_ms.map(|ms| {
        api.world
            .clock()
            .now_ms()
            .saturating_add(Millis::try_from(ms).unwrap_or(Millis::MAX))
    });
    let new = keys.create(&body.name, body.scope, expires_at).await?;
    Ok((
        StatusCode::CREATED,
        Json(serde_json::json!({ "key": new.key, "record": new.record })),
    )
        .into_response())
}

pub(crate) async fn revoke(
    State(api): State<Api>,
    Path(id): Path<String>,
) -> Result<Json<ApiKeyRecord>, ApiError> {
    Ok(Json(keys(&api)?.revoke(&id).await?))
}
