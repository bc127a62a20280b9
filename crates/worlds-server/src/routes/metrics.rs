//! The world's metrics: `GET /v1/metrics` as JSON, `GET /metrics` in the Prometheus text
//! format (a scraper sends its key as a bearer token).

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::Json;
use worlds_engine::telemetry::WorldMetrics;

use crate::state::Api;

/// The world's metrics as JSON.
#[utoipa::path(get, path = "/v1/metrics", tag = "metrics", security(("api_key" = [])),
    responses((status = 200, body = crate::openapi::Metrics)))]
pub(crate) async fn json(State(api): State<Api>) -> Json<WorldMetrics> {
    Json(api.world.get_metrics())
}

/// The world's metrics in the Prometheus text format.
#[utoipa::path(get, path = "/metrics", tag = "metrics", security(("api_key" = [])),
    responses((status = 200, description = "Prometheus text exposition", content_type = "text/plain")))]
pub(crate) async fn prometheus(State(api): State<Api>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            worlds_engine::telemetry::prometheus::CONTENT_TYPE,
        )],
        api.world.metrics_prometheus(),
    )
}
