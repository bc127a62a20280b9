//! Every refusal of the API has one shape: the HTTP status of the engine's error kind and a
//! JSON [`ErrorBody`] `{"code", "message", "details"}`, where `code` is the kind's
//! [`ErrorKind::code`] (or `UNAUTHENTICATED`, `FORBIDDEN`) for programs to match on and
//! `message` says what was wrong and what to do.

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::Value;
pub use worlds_engine::ErrorBody;
use worlds_engine::{ErrorKind, WorldError};

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

    /// The same refusal with `details` for programs (replacing any it had).
    pub(crate) fn with_details(mut self, details: Value) -> Self {
        self.body.details = details;
        self
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
            WorldError::UnknownWorkflow { name } => serde_json::json!({ "workflow": name }),
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
        // serde_json's words for the two refusals a caller cannot guess the cause of.
        if message.contains("hex escape") || message.contains("surrogate") {
            message.push_str(
                " (a \\uD800–\\uDFFF escape must be one half of a surrogate pair: a lone surrogate is not text)",
            );
        } else if message.contains("recursion limit") {
            message.push_str(" (JSON nested deeper than 128 levels is refused)");
        }
        Self::invalid("body", message)
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        Self::invalid("query", rejection.body_text())
    }
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
