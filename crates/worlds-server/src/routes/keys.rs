//! `/v1/keys` (admin): the world's API keys, when the server checks keys kept by the world
//! ([`ApiOptions::with_world_keys`](crate::ApiOptions::with_world_keys)). A new key is in the
//! answer to its creation only.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use worlds_engine::clock::Millis;
use worlds_engine::model::keys::ApiKeyRecord;
use worlds_engine::WorldError;
use worlds_wire::openapi::ApiKey;
use worlds_wire::{CreatedKey, NewKey};

use crate::auth::ApiKeys;
use crate::error::ApiError;
use crate::openapi::ErrorDoc;
use crate::state::Api;

fn keys(api: &Api) -> Result<&ApiKeys, ApiError> {
    api.keys.as_deref().ok_or_else(|| {
        ApiError::from(WorldError::Unsupported(
            "this server does not check keys kept by the world; its program manages its callers"
                .into(),
        ))
    })
}

/// The world's keys (records only, never secrets).
#[utoipa::path(get, path = "/v1/keys", tag = "keys", security(("api_key" = [])),
    responses((status = 200, body = Vec<ApiKey>),
        (status = 501, description = "The server does not check keys kept by the world", body = ErrorDoc)))]
pub(crate) async fn list(State(api): State<Api>) -> Result<Json<Vec<ApiKeyRecord>>, ApiError> {
    Ok(Json(keys(&api)?.list().await?))
}

/// Creates a key.
#[utoipa::path(post, path = "/v1/keys", tag = "keys", request_body = NewKey,
    security(("api_key" = [])),
    responses((status = 201, body = CreatedKey), (status = 400, body = ErrorDoc)))]
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
        Json(CreatedKey {
            key: new.key,
            record: new.record,
        }),
    )
        .into_response())
}

/// Revokes a key: it is refused from now on.
#[utoipa::path(post, path = "/v1/keys/{id}/revoke", tag = "keys",
    params(("id" = String, Path, description = "The key's id")),
    security(("api_key" = [])),
    responses((status = 200, body = ApiKey), (status = 404, body = ErrorDoc)))]
pub(crate) async fn revoke(
    State(api): State<Api>,
    Path(id): Path<String>,
) -> Result<Json<ApiKeyRecord>, ApiError> {
    Ok(Json(keys(&api)?.revoke(&id).await?))
}
