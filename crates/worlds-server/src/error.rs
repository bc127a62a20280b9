//! Every refusal of the API has one shape: the HTTP status of the engine's error kind and a
//! JSON [`ErrorBody`] `{"code", "message", "details"}`, where `code` is the kind's
//! [`ErrorKind::code`] (or `UNAUTHENTICATED`, `FORBIDDEN`) for programs to match on and
//! `message` says what was wrong and what to do.

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::Value;
use worlds_engine::{ErrorKind, WorldError};
pub use worlds_wire::ErrorBody;

/// An error answered by the API.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    body: ErrorBody,
}

impl ApiError {
    fn new(status: StatusCode, code: &str, message: impl Into<String>, details: Value) -> Self {
        ApiError {
            status,
            body: ErrorBody {
                code: code.to_owned(),
                message: message.into(),
                details,
            },
        }
    }

    /// 401: the caller is not recognized.
    pub fn unauthenticated(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "UNAUTHENTICATED",
            message,
            Value::Null,
        )
    }

    /// 429: the caller made too many requests; `Retry-After` says when to try again.
    pub fn rate_limited(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "RATE_LIMITED",
            message,
            Value::Null,
        )
    }

    /// 425: too early; `details.retryAfter` says in how many seconds to try again.
    pub fn too_early(message: impl Into<String>, retry_after_secs: u64) -> Self {
        Self::new(
            StatusCode::TOO_EARLY,
            "TOO_EARLY",
            message,
            serde_json::json!({ "retryAfter": retry_after_secs }),
        )
    }

    /// 426: the request needs a newer server.
    pub fn upgrade_required(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UPGRADE_REQUIRED,
            "UPGRADE_REQUIRED",
            message,
            Value::Null,
        )
    }

    /// 403: the caller may not do this.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "FORBIDDEN", message, Value::Null)
    }

    /// 400: the request is malformed; `field` names the part at fault.
    pub fn invalid(field: &str, message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "INVALID_INPUT",
            message,
            serde_json::json!({ "field": field }),
        )
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The body.
    pub fn body(&self) -> &ErrorBody {
        &self.body
    }
}

impl From<WorldError> for ApiError {
    fn from(error: WorldError) -> Self {
        let kind = error.kind();
        let status =
            StatusCode::from_u16(error.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let details = match &error {
            WorldError::NotFound { what, id } => serde_json::json!({ "what": what, "id": id }),
            WorldError::InvalidInput { field, .. } => serde_json::json!({ "field": field }),
            WorldError::UnknownWorkflow { name } => {
                // The engine's words tell a program to call `world.register`; a caller of the
                // API cannot, so it is told what it can do instead.
                return Self::new(
                    status,
                    kind.code(),
                    format!(
                        "no workflow named '{name}' is registered with this server: check the name (it is the one the program serving the API registers, case and all); a workflow not registered there cannot be started over HTTP"
                    ),
                    serde_json::json!({ "workflow": name }),
                );
            }
            WorldError::PayloadTooLarge { size, limit, .. } => {
                serde_json::json!({ "size": size, "limit": limit })
            }
            WorldError::Unauthenticated { reason, .. } => serde_json::json!({ "reason": reason }),
            _ => Value::Null,
        };
        if kind == ErrorKind::Internal {
            tracing::error!(error = %error, "an API call failed inside the engine");
        }
        Self::new(status, kind.code(), error.to_string(), details)
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        let status = rejection.status();
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            return Self::new(
                status,
                "PAYLOAD_TOO_LARGE",
                rejection.body_text(),
                Value::Null,
            );
        }
        let mut message = rejection.body_text();
        let field = rejected_field(&message);
        // serde_json's words for the two refusals a caller cannot guess the cause of.
        if message.contains("hex escape") || message.contains("surrogate") {
            message.push_str(
                " (a \\uD800–\\uDFFF escape must be one half of a surrogate pair: a lone surrogate is not text)",
            );
        } else if message.contains("recursion limit") {
            message.push_str(" (JSON nested deeper than 128 levels is refused)");
        }
        Self::invalid(&field, message)
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        Self::invalid("query", rejection.body_text())
    }
}

/// The part of the request an extractor's refusal is about: for a JSON body of the wrong shape,
/// the path serde names (`options.priority`), else `body`, `query`, `path` or `content-type`.
fn rejected_field(message: &str) -> String {
    const SHAPE: &str = "Failed to deserialize the JSON body into the target type: ";
    if let Some(rest) = message.strip_prefix(SHAPE) {
        // serde_path_to_error puts the path first: `options.priority: invalid type…`.
        if let Some((path, _)) = rest.split_once(": ") {
            if !path.is_empty() && path != "." && !path.contains(char::is_whitespace) {
                return format!("body.{path}");
            }
        }
        return "body".into();
    }
    if message.contains("Content-Type") {
        "content-type".into()
    } else if message.contains("query string") {
        "query".into()
    } else if message.contains("URL") || message.contains("path") {
        "path".into()
    } else {
        "body".into()
    }
}

/// What a path no route serves answers (to a browser asking for a page, the dashboard answers
/// its own page instead).
pub(crate) fn no_route() -> Response {
    ApiError::from(WorldError::NotFound {
        what: "route",
        id: "this path".into(),
    })
    .into_response()
}

/// True for the paths of the API (not the dashboard's pages).
fn is_api_path(path: &str) -> bool {
    path == "/v1" || path.starts_with("/v1/") || matches!(path, "/healthz" | "/readyz" | "/metrics")
}

/// Middleware: every refusal of an API route has the one JSON shape. The API's own handlers
/// answer [`ApiError`]s; what answers without them — axum's extractors (a body of the wrong
/// shape or type, a malformed query or path, a body over the limit), a method the route does
/// not take — answers plain text or nothing, and is rewritten here: same status (but 422, a
/// body of the wrong type, is the field-naming 400 of every other malformed request, and so is
/// 415, a body without its JSON content type), the text as the message, the field named.
pub(crate) async fn one_shape(request: Request, next: Next) -> Response {
    if !is_api_path(request.uri().path()) {
        return next.run(request).await;
    }
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let response = next.run(request).await;
    let status = response.status();
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 64 * 1024)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .unwrap_or_default();
    let allow = parts.headers.get(header::ALLOW).cloned();
    let error = match status {
        StatusCode::BAD_REQUEST
        | StatusCode::UNPROCESSABLE_ENTITY
        | StatusCode::UNSUPPORTED_MEDIA_TYPE => {
            let message = match text.is_empty() {
                true => format!("{method} {path}: the request is malformed"),
                false => text.clone(),
            };
            ApiError::invalid(&rejected_field(&text), message)
        }
        StatusCode::METHOD_NOT_ALLOWED => {
            let allowed = allow.as_ref().and_then(|v| v.to_str().ok());
            let takes = match allowed {
                Some(allowed) => format!("it takes {allowed}"),
                None => format!(
                    "the methods of each route are in {}",
                    crate::openapi::OPENAPI_PATH
                ),
            };
            ApiError::new(
                status,
                ErrorKind::MethodNotAllowed.code(),
                format!("{path} does not take {method}; {takes}"),
                serde_json::json!({ "method": method.as_str(), "allow": allowed }),
            )
        }
        _ => {
            let code = match status.as_u16() {
                401 => "UNAUTHENTICATED",
                403 => "FORBIDDEN",
                429 => "RATE_LIMITED",
                500 => ErrorKind::Internal.code(),
                503 => ErrorKind::Unavailable.code(),
                code => ErrorKind::ALL
                    .into_iter()
                    .find(|kind| kind.http_status() == code)
                    .map_or(
                        match status.is_client_error() {
                            true => ErrorKind::InvalidInput.code(),
                            false => ErrorKind::Internal.code(),
                        },
                        ErrorKind::code,
                    ),
            };
            let message = match text.is_empty() {
                true => status
                    .canonical_reason()
                    .unwrap_or("refused")
                    .to_lowercase(),
                false => text,
            };
            ApiError::new(status, code, message, Value::Null)
        }
    };
    let mut response = error.into_response();
    // What the refusal's headers told the caller still holds (`Allow`, `Retry-After`, a
    // connection to close).
    for (name, value) in parts.headers.iter() {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            response.headers_mut().insert(name.clone(), value.clone());
        }
    }
    response
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body)).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_errors_keep_their_status_and_get_a_code() {
        let e = ApiError::from(WorldError::NotFound {
            what: "run",
            id: "wrun_x".into(),
        });
        assert_eq!(e.status(), StatusCode::NOT_FOUND);
        assert_eq!(e.body().code, "NOT_FOUND");
        assert_eq!(e.body().details["id"], "wrun_x");
        let e = ApiError::from(WorldError::Gone("expired".into()));
        assert_eq!((e.status().as_u16(), e.body().code.as_str()), (410, "GONE"));
        assert_eq!(ApiError::forbidden("no").status(), StatusCode::FORBIDDEN);
    }
}
