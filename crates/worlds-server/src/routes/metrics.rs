//! The world's metrics: `GET /v1/metrics` as JSON, `GET /metrics` in the Prometheus text
//! format (a scraper sends its key as a bearer token).

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::Json;
use worlds_engine::telemetry::WorldMetrics;

use super::Api;

pub(crate) async fn json(State(api): State<Api>) -> Json<WorldMetrics> {
    Json(api.world.get_metrics())
}

pub(crate) async fn prometheus(State(api): State<Api>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            worlds_engine::telemetry::prometheus::CONTENT_TYPE,
        )],
        api.world.metrics_prometheus(),
    )
}
