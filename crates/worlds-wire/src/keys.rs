//! The world's API keys (admin).

use serde::{Deserialize, Serialize};
use worlds_engine::model::keys::{ApiKeyRecord, Scope};

/// `POST /v1/keys`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewKey {
    /// `read`, `write` or `admin`.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub scope: Scope,
    /// A name to recognize it by.
    #[serde(default)]
    pub name: String,
    /// Refused after this many milliseconds; without it, until revoked.
    pub expires_in_ms: Option<u64>,
}

/// A new key: the secret, shown in this answer only, and its record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreatedKey {
    /// The key to send as `Authorization: Bearer …`.
    pub key: String,
    /// What the world keeps of it (never the secret).
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::ApiKey))]
    pub record: ApiKeyRecord,
}
