//! The webhook endpoint: a request to `{path of webhook_base_url}/{token}` with a method the
//! webhook accepts (`POST` unless it was created with others) resumes the webhook holding
//! `token` and is answered `202 Accepted` (`{"run_id", "hook_id"}`). Every refusal is
//! `{"error": message}` with the error's status: 400 for a malformed URL, 404 for an unknown
//! token or any other path, 401 for a request without the signature the webhook requires
//! (with `"reason"`: see [`SignatureRefusal::code`](crate::hooks::SignatureRefusal::code)),
//! 405 (with `Allow`) for a method the webhook does not accept, 408
//! for a body that does not arrive in time, 409 for a webhook already resumed, 410 for an
//! expired one, 413 for a body over `max_payload_bytes`, 503 while the world is shut down or
//! after it was dropped.
//!
//! [`WebhookServer`] serves connections with [`serve_connections`] so that hostile clients
//! cannot hold it (header timeouts, a connection limit, bounded shutdown); the handler reads
//! bodies itself, within a deadline and without long pauses.
//!
//! These timeouts guard sockets, not workflows: they run on Tokio's timer, not on the world's
//! [`Clock`](crate::clock::Clock), which may be virtual and would then never fire.

use std::net::SocketAddr;
use std::sync::{Arc, Weak};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::{Json, Router};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use tokio::net::{TcpListener, ToSocketAddrs};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tower_http::timeout::{TimeoutBody, TimeoutError};

use super::serving::{serve_connections, Limits};
use crate::duration::Dur;
use crate::engine::{Engine, Opened};
use crate::error::WorldError;
use crate::hooks::{HookResumed, WebhookRequest};
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

/// What the handlers share. The engine is held weakly: a router or server that outlives its
/// world must not keep the world's store open.
#[derive(Clone)]
struct Endpoint {
    engine: Weak<Engine>,
    base: Arc<str>,
    body_read_timeout: Duration,
    body_deadline: Duration,
}

impl Endpoint {
    fn engine(&self) -> Result<Arc<Engine>, WorldError> {
        self.engine
            .upgrade()
            .filter(|engine| !engine.is_closed())
            .ok_or_else(|| {
                WorldError::Unavailable(
                    "the world behind this webhook endpoint has been dropped; send the request to a running world's endpoint".into(),
                )
            })
    }
}

/// The router answering webhook requests for `engine`.
pub(crate) fn router(engine: &Arc<Engine>) -> Router {
    let base = base_path(engine.webhook_base_url());
    let options = &engine.config().webhook_server;
    let endpoint = Endpoint {
        engine: Arc::downgrade(engine),
        base: Arc::from(base.as_str()),
        body_read_timeout: options.body_read_timeout.0,
        body_deadline: options.body_deadline.0,
    };
    Router::new()
        .route(&format!("{base}/{{token}}"), any(receive))
        .fallback(no_such_path)
        .with_state(endpoint)
}

async fn no_such_path(State(endpoint): State<Endpoint>, uri: Uri) -> Response {
    refusal(&WorldError::NotFound {
        what: "webhook endpoint",
        id: format!("{}; webhook URLs are {}/TOKEN", uri.path(), endpoint.base),
    })
}

async fn receive(
    State(endpoint): State<Endpoint>,
    token: Result<Path<String>, PathRejection>,
    method: Method,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    body: Body,
) -> Response {
    match resume(&endpoint, token, method, headers, query, body).await {
        Ok(resumed) => (StatusCode::ACCEPTED, Json(resumed)).into_response(),
        Err(e) => refusal(&e),
    }
}

async fn resume(
    endpoint: &Endpoint,
    token: Result<Path<String>, PathRejection>,
    method: Method,
    headers: HeaderMap,
    query: Option<String>,
    body: Body,
) -> Result<HookResumed, WorldError> {
    let Path(token) = token.map_err(|e| {
        WorldError::invalid(
            "webhook URL",
            format!(
                "{}; the last path segment must be the webhook's token, as in its URL",
                e.body_text()
            ),
        )
    })?;
    // Checked before the body is read, and the engine let go while it is: a slow body must
    // not keep a dropped world's store open.
    let limit = {
        let engine = endpoint.engine()?;
        engine.check_resumable()?;
        engine.config().max_payload_bytes
    };
    if let Some(declared) = declared_length(&headers) {
        if declared > limit as u64 {
            return Err(body_too_large(
                usize::try_from(declared).unwrap_or(usize::MAX),
                limit,
            ));
        }
    }
    let body = read_body(body, limit, endpoint).await?;
    let size = payload_size(&method, &headers, query.as_deref(), &body);
    if size > limit {
        return Err(WorldError::PayloadTooLarge {
            what: "webhook request as a payload (its body, headers and query as JSON)".into(),
            size,
            limit,
        });
    }
    let engine = endpoint.engine()?;
    let now = engine.now_ms();
    let signatures = &engine.config().webhook_server;
    engine
        .deliver(&token, Some(method.as_str()), |hook| {
            // Checked over the bytes as received, before anything is decoded or recorded.
            let verified = match signatures.signature_for(hook.signature.as_deref())? {
                Some(signature) => {
                    let pairs: Vec<(&str, &str)> = headers
                        .iter()
                        .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)))
                        .collect();
                    Some(signature.verify(&pairs, &body, now)?)
                }
                None => None,
            };
            Ok(Opened {
                payload: request_payload(&method, &headers, query, &body)?,
                delivery: verified.and_then(|v| v.delivery),
            })
        })
        .await
}

/// The request as the payload the webhook receives.
fn request_payload(
    method: &Method,
    headers: &HeaderMap,
    query: Option<String>,
    body: &[u8],
) -> Result<Payload, WorldError> {
    let mut request = WebhookRequest {
        method: method.as_str().to_owned(),
        query,
        body: String::from_utf8_lossy(body).into_owned(),
        ..WebhookRequest::default()
    };
    for (name, value) in headers {
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
    Payload::encode(&request).map_err(|e| WorldError::serde("webhook request", e))
}

fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
}

fn body_too_large(size: usize, limit: usize) -> WorldError {
    WorldError::PayloadTooLarge {
        what: "body of the webhook request".into(),
        size,
        limit,
    }
}

/// Reads the body: at most `limit` bytes, no pause longer than the read timeout, all of it
/// within the deadline.
async fn read_body(body: Body, limit: usize, endpoint: &Endpoint) -> Result<Bytes, WorldError> {
    let idle = endpoint.body_read_timeout;
    let deadline = endpoint.body_deadline;
    let body = Limited::new(TimeoutBody::new(idle, body), limit);
    match tokio::time::timeout(deadline, body.collect()).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.is::<LengthLimitError>() => Err(body_too_large(limit + 1, limit)),
        Ok(Err(e)) if e.is::<TimeoutError>() => Err(WorldError::RequestTimeout(format!(
            "the request body paused for more than {}; send the body without pauses",
            Dur(idle)
        ))),
        Ok(Err(e)) => Err(WorldError::invalid(
            "request body",
            format!("could not be read: {e}"),
        )),
        Err(_) => Err(WorldError::RequestTimeout(format!(
            "the request body did not arrive within {}; send it faster or in a smaller request",
            Dur(deadline)
        ))),
    }
}

/// The size of the request as a JSON payload, reckoned without building it: a body of control
/// bytes grows sixfold as JSON and invalid UTF-8 threefold, which must be refused before that
/// memory is spent.
fn payload_size(method: &Method, headers: &HeaderMap, query: Option<&str>, body: &[u8]) -> usize {
    // `{"method":"","headers":{},"query":"","body":""}`
    const FRAME: usize = 48;
    let mut size =
        FRAME + json_len(method.as_str().as_bytes()) + query.map_or(0, |q| json_len(q.as_bytes()));
    for (name, value) in headers {
        // `"name":"value",` (or `, ` between repeated values, which is shorter)
        size += json_len(name.as_str().as_bytes()) + json_len(value.as_bytes()) + 6;
    }
    size + json_len(body)
}

/// Bytes of `text` inside a JSON string, after lossy UTF-8 conversion.
fn json_len(text: &[u8]) -> usize {
    text.utf8_chunks()
        .map(|chunk| {
            let valid: usize = chunk
                .valid()
                .bytes()
                .map(|b| match b {
                    b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
                    0..=0x1f => 6,
                    _ => 1,
                })
                .sum();
            // One U+FFFD (3 bytes) replaces each invalid sequence.
            valid + if chunk.invalid().is_empty() { 0 } else { 3 }
        })
        .sum()
}

/// The one shape of every refusal: the error's status and `{"error": message}` (with
/// `"reason"`, a stable code, for a refused signature).
fn refusal(error: &WorldError) -> Response {
    let status =
        StatusCode::from_u16(error.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = match error {
        WorldError::Unauthenticated { reason, message } => {
            serde_json::json!({ "error": message, "reason": reason })
        }
        _ => serde_json::json!({ "error": error.to_string() }),
    };
    let mut response = (status, Json(body)).into_response();
    let headers = response.headers_mut();
    match error {
        WorldError::MethodNotAllowed { allowed, .. } => {
            if let Ok(allow) = HeaderValue::from_str(&allowed.join(", ")) {
                headers.insert(header::ALLOW, allow);
            }
        }
        // The rest of such a body may never come, or is not worth reading.
        WorldError::RequestTimeout(_) | WorldError::PayloadTooLarge { .. } => {
            headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        _ => {}
    }
    response
}

/// A running webhook endpoint (see [`World::serve_webhooks`](crate::World::serve_webhooks)).
/// It stops when shut down, when dropped, or when its world is dropped; it does not keep the
/// world alive.
#[derive(Debug)]
pub struct WebhookServer {
    addr: SocketAddr,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl WebhookServer {
    pub(crate) async fn start(
        engine: &Arc<Engine>,
        addr: impl ToSocketAddrs,
    ) -> Result<WebhookServer, WorldError> {
        // Resolved first so that an error (an address in use, say) can name the address: the
        // caller may have passed a host name or a port another program holds.
        let addrs: Vec<std::net::SocketAddr> = tokio::net::lookup_host(addr)
            .await
            .map_err(|e| {
                WorldError::Unavailable(format!("could not resolve the webhook address: {e}"))
            })?
            .collect();
        let named = addrs
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        let listener = TcpListener::bind(addrs.as_slice()).await.map_err(|e| {
            WorldError::Unavailable(format!("could not listen for webhooks on {named}: {e}"))
        })?;
        let addr = listener
            .local_addr()
            .map_err(|e| WorldError::Internal(format!("webhook listener has no address: {e}")))?;
        let stop = CancellationToken::new();
        let limits = Limits::of(
            &engine.config().webhook_server,
            engine.config().shutdown_grace.0,
        );
        // It stops when told to, and when its world is dropped.
        let until = stop.clone();
        let world_dropped = engine.closed();
        let task = tokio::spawn(serve_connections(
            listener,
            router(engine),
            limits,
            async move {
                tokio::select! {
                    () = until.cancelled() => {}
                    () = world_dropped.cancelled() => {}
                }
            },
        ));
        Ok(WebhookServer {
            addr,
            stop,
            task: Some(task),
        })
    }

    /// The address it listens on (useful after binding port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting connections, lets requests in progress finish for at most the world's
    /// `shutdown_grace`, then closes the connections still open.
    pub async fn shutdown(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for WebhookServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::WebhookServerOptions;

    #[test]
    fn base_paths_come_from_the_url() {
        assert_eq!(base_path("http://localhost:3000/webhooks"), "/webhooks");
        assert_eq!(base_path("https://x.test/a/b/"), "/a/b");
        assert_eq!(base_path("http://localhost:3000"), "");
        assert_eq!(base_path("/hooks"), "/hooks");
    }

    #[test]
    fn json_len_matches_serde_json() {
        for text in [
            &b"plain"[..],
            b"quote \" and \\ backslash",
            b"\x00\x01\x1f\n\r\t\x08\x0c",
            b"caf\xc3\xa9 \xff\xfe broken",
            b"",
        ] {
            let lossy = String::from_utf8_lossy(text);
            let encoded = serde_json::to_string(&lossy).unwrap();
            assert_eq!(json_len(text) + 2, encoded.len(), "{text:?}");
        }
    }

    #[test]
    fn payload_size_is_not_below_the_encoded_request() {
        let mut headers = HeaderMap::new();
        headers.insert("x-signature", HeaderValue::from_static("abc\"def"));
        headers.append("x-many", HeaderValue::from_static("one"));
        headers.append("x-many", HeaderValue::from_static("two"));
        let body = b"{\"amount\":42}\n\x01";
        let mut request = WebhookRequest::new("POST", String::from_utf8_lossy(body))
            .header("x-signature", "abc\"def")
            .header("x-many", "one, two");
        request.query = Some("a=1&b=\"2\"".into());
        let encoded = Payload::encode(&request).unwrap();
        let reckoned = payload_size(&Method::POST, &headers, request.query.as_deref(), body);
        assert!(
            reckoned >= serde_json::to_vec(&request).unwrap().len(),
            "{reckoned} vs {encoded:?}"
        );
    }

    #[test]
    fn options_are_checked() {
        assert!(WebhookServerOptions::default().validate().is_ok());
        let options = WebhookServerOptions {
            max_connections: 0,
            ..WebhookServerOptions::default()
        };
        let err = options.validate().unwrap_err();
        assert!(err.to_string().contains("max_connections"), "{err}");
        let options = WebhookServerOptions {
            body_deadline: Dur::ZERO,
            ..WebhookServerOptions::default()
        };
        let err = options.validate().unwrap_err();
        assert!(err.to_string().contains("body_deadline"), "{err}");
    }
}
