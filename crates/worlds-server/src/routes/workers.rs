//! `GET /v1/workers`: this process's workers as they are now, and the ones it declared dead
//! lately (their tasks were handed on).

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use worlds_engine::WorkerInfo;

use crate::state::Api;

/// The answer of `GET /v1/workers`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct Workers {
    /// Workers alive now: id, status (`idle`, `busy`…), current task, last heartbeat (ms
    /// since the epoch), tasks completed, task queue.
    #[schema(value_type = Vec<Object>)]
    live: Vec<WorkerInfo>,
    /// Workers declared dead lately (no heartbeat within the timeout), with the task each held.
    #[schema(value_type = Vec<Object>)]
    dead: Vec<WorkerInfo>,
}

/// The workers of the process serving the API.
#[utoipa::path(get, path = "/v1/workers", tag = "metrics", security(("api_key" = [])),
    responses((status = 200, body = Workers)))]
pub(crate) async fn list(State(api): State<Api>) -> Json<Workers> {
    let workers = api.world.workers();
    Json(Workers {
        live: workers.list(),
        dead: workers.dead(),
    })
}
