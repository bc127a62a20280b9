//! The one shape of every refusal.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Every refusal: `{"code", "message", "details"}`.
///
/// `code` is an engine error kind's code (`worlds_engine::ErrorKind::code`) or one of the
/// API's own (`UNAUTHENTICATED`, `FORBIDDEN`, `RATE_LIMITED`); `details` is `null` when there
/// is nothing more to say.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = Error))]
pub struct ErrorBody {
    /// A stable code: `NOT_FOUND`, `CONFLICT`, `INVALID_INPUT`, `UNAUTHENTICATED`,
    /// `FORBIDDEN`, `RATE_LIMITED`, …
    pub code: String,
    /// What was wrong and what to do.
    pub message: String,
    /// More for programs (the field at fault, the id not found), or null.
    // Absent reads as null, for a refusal from something in front of the server.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub details: Value,
}
