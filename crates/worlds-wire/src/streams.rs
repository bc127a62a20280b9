//! A run's streams: chunks as the API shows them, writes of one or many chunks, pages of
//! them, and the shapes the Workflow DevKit's World reads them in.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A chunk as the API shows it: text when it is UTF-8, base64 otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ChunkBody {
    /// Its place in the stream, from 0 with no gaps.
    pub index: u64,
    /// When it was written (ms since the epoch).
    pub created_at: i64,
    /// Its data, when that is UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Its data in base64, when it is not UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base64: Option<String>,
}

/// Where a chunk was written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Written {
    /// Its place in the stream.
    pub index: u64,
}

/// `?cursor=&limit=` of a page of chunks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(
    feature = "openapi",
    derive(utoipa::IntoParams),
    into_params(parameter_in = Query)
)]
#[serde(deny_unknown_fields)]
pub struct ChunkPage {
    /// The `cursor` of the previous page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// Page size: 0 or absent is 100, above 1000 is 1000.
    #[serde(
        default,
        deserialize_with = "page_limit",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", param(value_type = Option<usize>))]
    pub limit: Option<usize>,
}

/// A page size: any run of digits (one too large for a number is the most there is, lowered
/// to the page's maximum like any other); a sign or anything else is refused by name.
fn page_limit<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    let Some(text) = Option::<String>::deserialize(d)? else {
        return Ok(None);
    };
    let digits = text.trim();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(serde::de::Error::custom(format!(
            "limit must be a whole number of chunks, 0 or more; got {text:?}"
        )));
    }
    Ok(Some(digits.parse::<usize>().unwrap_or(usize::MAX)))
}

/// Bytes as the DevKit's World sends and reads them: `{"$bytes": "<standard base64>"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WireBytes {
    /// The bytes, in standard base64 with padding.
    #[serde(rename = "$bytes")]
    pub bytes: String,
}

/// A chunk in the DevKit's shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DevkitChunk {
    /// Its place in the stream, from 0 with no gaps.
    pub index: u64,
    /// Its bytes, as they were written.
    pub data: WireBytes,
}

/// A page of chunks in the DevKit's shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct DevkitChunkPage {
    /// The chunks, by index.
    pub data: Vec<DevkitChunk>,
    /// Pass as `cursor` for the next page; null when this page reaches the stream's tail.
    pub cursor: Option<String>,
    /// True if more chunks are stored after this page.
    pub has_more: bool,
    /// True if the stream is done (closed, or its run finished) and this page reaches its end:
    /// no chunk will follow.
    pub done: bool,
}

/// Where a stream stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct StreamTail {
    /// The index of its last chunk; -1 while it has none (or was never written).
    pub tail_index: i64,
    /// It is closed, or its run has finished: no chunk will follow.
    pub done: bool,
}

/// `{"chunks": [...]}`: chunks to append, each `{"$bytes": "<base64>"}` or a string (its UTF-8
/// bytes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewChunks {
    /// The chunks, in the order they are appended.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<Object>))]
    pub chunks: Vec<Value>,
}

/// Where the chunks of a write went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WrittenMany {
    /// The index of each chunk, in the order sent.
    pub indices: Vec<u64>,
}

/// `?from=` of a live read: the first index (negative counts back from the last chunk).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(
    feature = "openapi",
    derive(utoipa::IntoParams),
    into_params(parameter_in = Query)
)]
#[serde(deny_unknown_fields)]
pub struct Live {
    /// The first index to send (default 0; negative counts from the end). `Last-Event-ID`
    /// takes precedence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<i64>,
}
