//! `GET /v1/workers`: this process's workers as they are now, and the ones it declared dead
//! lately (their tasks were handed on).

use axum::extract::State;
use axum::Json;
use worlds_wire::Workers;

use crate::state::Api;

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
