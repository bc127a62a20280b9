//! `queue` of the DevKit World: a message becomes a run of the built-in delivery workflow
//! (`delivery.rs`), which delivers it to the app's handler, signed, with retries.

use axum::extract::rejection::JsonRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;
use worlds_engine::{FailureStrategy, WorkflowOptions, WorldError};

use super::delivery::{handler_url, Delivery, DELIVERY_WORKFLOW};
use crate::error::ApiError;
use crate::openapi::{DevkitBody, ErrorDoc};
use crate::state::Api;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NewMessage {
    queue_name: String,
    message: Box<RawValue>,
    callback_url: String,
    #[serde(default)]
    idempotency_key: Option<String>,
    #[serde(default)]
    delay_seconds: Option<f64>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Queued {
    message_id: String,
}

/// `queue`: a message the server delivers to the app's handler, signed, with retries; the
/// message id is the id of the run that delivers it. The same idempotency key gives the same
/// message.
#[utoipa::path(post, path = "/v1/devkit/queue", tag = "devkit", request_body = DevkitBody,
    security(("api_key" = [])),
    responses((status = 202, body = crate::openapi::DevkitQueued), (status = 400, body = ErrorDoc), (status = 503, description = "The server has no delivery secret", body = ErrorDoc)))]
pub(crate) async fn queue(
    State(api): State<Api>,
    body: Result<Json<NewMessage>, JsonRejection>,
) -> Result<(StatusCode, Json<Queued>), ApiError> {
    let Json(body) = body?;
    let url = handler_url(&body.callback_url, &body.queue_name)?;
    api.callbacks.check(&body.callback_url)?;
    if !api
        .world
        .workflow_names()
        .iter()
        .any(|name| name == DELIVERY_WORKFLOW)
    {
        return Err(WorldError::Unavailable(
            "this server delivers no DevKit messages: start it with a delivery secret (`worlds serve` with WORLDS_DELIVERY_SECRET set), the same the app verifies deliveries with".into(),
        )
        .into());
    }
    let mut options = WorkflowOptions::default();
    // A message the app refused, or that ran out of retries, is a dead letter: its run stays
    // failed (and can be retried by hand), instead of restarting by itself.
    options.failure_strategy = Some(FailureStrategy::Ignore);
    options.idempotency_key = body
        .idempotency_key
        .filter(|k| !k.is_empty())
        .map(|k| format!("devkit:{k}"));
    let delivery = Delivery {
        queue_name: body.queue_name,
        message: body.message,
        url,
        delay_ms: super::delivery::delay_ms(body.delay_seconds)?,
    };
    let handle = api
        .world
        .execute_by_name::<Delivery, Value>(DELIVERY_WORKFLOW, delivery, options)
        .await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(Queued {
            message_id: handle.id.clone(),
        }),
    ))
}
