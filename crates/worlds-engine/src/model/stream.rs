//! A stream's records as stored: its chunks and where it stands. Writers and readers live in
//! [`crate::streams`].

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::clock::Millis;

/// The name of a run's default stream, the one `get_writable()` opens.
pub const DEFAULT_STREAM: &str = "default";

/// Longest stream name, in bytes.
pub const MAX_STREAM_NAME: usize = 200;

/// One chunk of a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamChunk {
    /// The chunk id (`chnk_…`).
    pub id: String,
    /// Its place in the stream, dense from 0.
    pub index: u64,
    /// The bytes written.
    pub data: Bytes,
    /// When it was written (ms since the Unix epoch).
    pub created_at: Millis,
}

impl StreamChunk {
    /// The data as UTF-8 text, if it is.
    pub fn text(&self) -> Option<&str> {
        std::str::from_utf8(&self.data).ok()
    }

    /// The data parsed as JSON (what `write_json` wrote).
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.data)
    }
}

/// Where a stream stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamInfo {
    /// Index of the last chunk; -1 while the stream is empty.
    pub tail_index: i64,
    /// The stream is closed: no chunk will follow.
    pub done: bool,
}

impl StreamInfo {
    /// Number of chunks.
    pub fn len(&self) -> u64 {
        (self.tail_index + 1) as u64
    }

    /// True if the stream holds no chunk.
    pub fn is_empty(&self) -> bool {
        self.tail_index < 0
    }
}

/// Checks a stream name: 1 to [`MAX_STREAM_NAME`] bytes, no control characters.
pub(crate) fn check_name(name: &str) -> Result<(), crate::WorldError> {
    if name.is_empty() || name.len() > MAX_STREAM_NAME || name.chars().any(char::is_control) {
        return Err(crate::WorldError::invalid(
            "stream name",
            format!(
                "a stream name must be 1 to {MAX_STREAM_NAME} bytes without control characters; got {name:?}"
            ),
        ));
    }
    Ok(())
}
