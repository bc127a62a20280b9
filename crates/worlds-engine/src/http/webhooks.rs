//! The webhook endpoint: `ANY {path of webhook_base_url}/{token}` resumes the webhook holding
//! `token` with the request and answers `202 Accepted` (`{"run_id", "hook_id"}`), or the error's
//! status with `{"error": message}`: 404 for an unknown token, 409 for a webhook already
//! resumed, 410 for an expired one, 413 for a body over the payload limit.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::{Json, Router};
use tokio::net::ToSocketAddrs;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::engine::Engine;
use crate::error::WorldError;
use crate::hooks::WebhookRequest;
use crate::payload::Payload;

/// The path part of a base URL (`http://host:3000/webhooks/` → `/webhooks`), without a
/// trailing slash; empty for a bare host.
pub(crate) fn base_path(base_url: &str) -> String {
    let after_scheme = base_url
        .split_once("://")
        .map_or(base_url, |(_, rest)| rest);
    let path = after_scheme.find('/').map_or("", |i| &after_scheme[i..]);
    path.trim_end_matches('/').to_owned()
}

/// The router answering webhook requests for `engine`.
pub(crate) fn router(engine: Arc<Engine>) -> Router {
    let path = format!("{}/{{token}}", base_path(&engine.hook_kit.webhook_base_url));
    Router::new().route(&path, any(receive)).with_state(engine)
}

async fn receive(
    State(engine): State<Arc<Engine>>,
    Path(token): Path<String>,
    method: Method,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Response {
    let mut request = WebhookRequest {
        method: method.as_str().to_owned(),
        query,
        body: String::from_utf8_lossy(&body).into_owned(),
        ..WebhookRequest::default()
    };
    for (name, value) in &headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        request
            .headers
            .entry(name.as_str().to_owned())
            .and_modify(|v| {
                v.push_str(", ");
                v.push_str(&value);
            })
            .or_insert(value);
    }
    let resumed = match Payload::encode(&request) {
        Ok(payload) => engine.resume_hook(&token, payload).await,
        Err(e) => Err(WorldError::serde("webhook request", e)),
    };
    match resumed {
        Ok(resumed) => (StatusCode::ACCEPTED, Json(resumed)).into_response(),
        Err(e) => {
            let status =
                StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            (status, Json(serde_json::json!({ "error": e.to_string() }))).into_response()
        }
    }
}

/// A running webhook endpoint (see [`World::serve_webhooks`](crate::World::serve_webhooks)).
/// Dropping it stops the server too.
#[derive(Debug)]
pub struct WebhookServer {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl WebhookServer {
    pub(crate) async fn start(
        engine: Arc<Engine>,
        addr: impl ToSocketAddrs,
    ) -> Result<WebhookServer, WorldError> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| WorldError::Unavailable(format!("could not listen for webhooks: {e}")))?;
        let addr = listener
            .local_addr()
            .map_err(|e| WorldError::Internal(format!("webhook listener has no address: {e}")))?;
        let (stop, stopped) = oneshot::channel::<()>();
        let app = router(engine);
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await
        });
        Ok(WebhookServer {
            addr,
            stop: Some(stop),
            task: Some(task),
        })
    }

    /// The address it listens on (useful after binding port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting requests and waits for those in progress.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for WebhookServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_paths_come_from_the_url() {
        assert_eq!(base_path("http://localhost:3000/webhooks"), "/webhooks");
        assert_eq!(base_path("https://x.test/a/b/"), "/a/b");
        assert_eq!(base_path("http://localhost:3000"), "");
        assert_eq!(base_path("/hooks"), "/hooks");
    }
}
