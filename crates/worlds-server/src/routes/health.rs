//! `/healthz` (the process answers) and `/readyz` (its storage answers too). Neither needs a
//! key: load balancers and orchestrators call them.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use worlds_engine::WorkflowQueryFilter;

use crate::state::Api;

/// The process answers. Needs no key.
#[utoipa::path(get, path = "/healthz", tag = "health",
    responses((status = 200, description = "`{\"status\": \"ok\"}`", body = serde_json::Value)))]
pub(crate) async fn healthz() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "status": "ok" }))
}

/// The process and its storage answer. Needs no key.
#[utoipa::path(get, path = "/readyz", tag = "health",
    responses((status = 200, description = "`{\"status\": \"ready\"}`", body = serde_json::Value),
        (status = 503, description = "The storage does not answer", body = serde_json::Value)))]
pub(crate) async fn readyz(State(api): State<Api>) -> Response {
    match api
        .world
        .list_runs(WorkflowQueryFilter::new().limit(1))
        .await
    {
        Ok(_) => Json(serde_json::json!({ "status": "ready" })).into_response(),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({ "status": "unavailable", "message": e.to_string() })),
        )
            .into_response(),
    }
}
