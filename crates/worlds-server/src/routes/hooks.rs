//! `/v1/hooks`: resuming a waiting hook by its token, reading hooks by id, by run, and those
//! waiting now. A hook's token is never shown: only its holder has it.

use axum::extract::{Path, Query, State};
use axum::Json;
use worlds_engine::store::HookRecord;
use worlds_wire::{PageBody, PageParams, Resume, Resumed};

use super::runs::{page_query, run_id_of, RunId};
use crate::error::ApiError;
use crate::openapi::{ErrorDoc, Hook};
use crate::state::Api;

/// Resumes the hook waiting with `token`; its run goes on.
#[utoipa::path(post, path = "/v1/hooks/resume", tag = "hooks", request_body = Resume,
    security(("api_key" = [])),
    responses(
        (status = 200, body = Resumed),
        (status = 400, description = "The payload does not have the hook's type; the hook keeps waiting", body = ErrorDoc),
        (status = 404, description = "No hook waits with this token", body = ErrorDoc),
        (status = 409, description = "Already resumed", body = ErrorDoc),
        (status = 410, description = "Expired", body = ErrorDoc),
    ))]
pub(crate) async fn resume(
    State(api): State<Api>,
    body: Result<Json<Resume>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<Resumed>, ApiError> {
    let Json(body) = body?;
    Ok(Json(
        api.world
            .resume_hook(&body.token, &body.payload)
            .await?
            .into(),
    ))
}

/// One hook, by id.
#[utoipa::path(get, path = "/v1/hooks/{id}", tag = "hooks",
    params(("id" = String, Path, description = "A hook id (`hook_…`)")),
    security(("api_key" = [])),
    responses((status = 200, body = Hook), (status = 404, body = ErrorDoc)))]
pub(crate) async fn get(
    State(api): State<Api>,
    Path(id): Path<String>,
) -> Result<Json<HookRecord>, ApiError> {
    Ok(Json(api.world.get_hook(&id).await?))
}

/// The hooks waiting for a payload now, in every run.
#[utoipa::path(get, path = "/v1/hooks", tag = "hooks", params(PageParams),
    security(("api_key" = [])),
    responses((status = 200, body = PageBody<Hook>), (status = 400, body = ErrorDoc)))]
pub(crate) async fn waiting(
    State(api): State<Api>,
    query: Result<Query<PageParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<PageBody<HookRecord>>, ApiError> {
    let Query(q) = query?;
    Ok(Json(api.world.waiting_hooks(page_query(q)?).await?.into()))
}

/// One run's hooks.
#[utoipa::path(get, path = "/v1/runs/{id}/hooks", tag = "hooks", params(RunId, PageParams),
    security(("api_key" = [])),
    responses((status = 200, body = PageBody<Hook>), (status = 404, body = ErrorDoc)))]
pub(crate) async fn of_run(
    State(api): State<Api>,
    Path(id): Path<String>,
    query: Result<Query<PageParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<PageBody<HookRecord>>, ApiError> {
    let Query(q) = query?;
    let run_id = run_id_of(&api.world, &id).await?;
    Ok(Json(
        api.world.run_hooks(&run_id, page_query(q)?).await?.into(),
    ))
}
