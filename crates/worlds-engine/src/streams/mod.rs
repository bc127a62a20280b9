//! Streams: ordered chunks of data a run publishes while it works (progress, tokens, log lines),
//! read live by anyone who knows the run id and the stream name.
//!
//! A stream belongs to one run and has a name; [`DEFAULT_STREAM`] (`"default"`) is the one
//! `get_writable()` opens. A stream exists from its first chunk (or its close). Each chunk gets a
//! `chnk_` id and an index, dense from 0, assigned by the store in write order. A stream ends
//! when it is closed; when its run finishes, every stream of the run still open is closed.
//!
//! **Writers.**
//!
//! * Step code: [`ActivityContext::get_writable`](crate::ActivityContext::get_writable) returns a
//!   [`StepStream`]; `write(..).await` returns once the store holds the chunk. Each attempt of a
//!   step writes its own chunks: a retried step writes again (at least once), so a reader sees
//!   the failed attempt's chunks followed by the next attempt's. Write a marker chunk at the start
//!   of an attempt ([`ActivityContext::attempt`](crate::ActivityContext::attempt)) if readers need
//!   to tell them apart.
//! * Workflow code: [`WorkflowContext::get_writable`](crate::WorkflowContext::get_writable) returns
//!   a [`WorkflowStream`]; `write(..)` does not wait. The chunk is handed to the store by the
//!   engine right after the workflow yields, before anything the workflow asked for in the same
//!   turn (a step) is started. Replay runs the same writes again: each carries a key made of the
//!   workflow attempt and its rank among the attempt's writes (`w{attempt}.{n}`), and the store
//!   keeps one chunk per key, so replay and eviction never duplicate a chunk, and a write lost
//!   in a crash is made again by the replay. Writes do not take command positions: adding or
//!   removing them does not change how older histories replay. A failed store write (the stream
//!   was closed from outside) is logged, not reported to the workflow code.
//! * Outside code: [`World::write_to_stream`](crate::World::write_to_stream) and
//!   [`World::close_stream`](crate::World::close_stream).
//!
//! Writing to a closed stream is a conflict (409); a chunk over `max_payload_bytes` is refused
//! (413).
//!
//! **Readers.** [`World::read_from_stream`](crate::World::read_from_stream) yields the stored
//! chunks from a start index (negative counts back from the tail: `-1` is the last chunk), then
//! each new chunk as it is written, and ends when the stream is done. It reads by index from the
//! store and waits for a change signal it subscribed to before its first read, so a reader that
//! joins while chunks are being written sees each index exactly once, in order. On a directory
//! shared between processes it also polls the files, since the writer may be another process.
//! [`World::get_stream_chunks`](crate::World::get_stream_chunks) pages through what is stored,
//! [`World::get_stream_info`](crate::World::get_stream_info) gives the tail index and whether
//! the stream is done, [`World::list_streams_by_run_id`](crate::World::list_streams_by_run_id)
//! names a run's streams. An unknown run is a 404; a name the run never wrote to reads as an
//! empty stream, done once the run has finished.
//!
//! ```
//! use worlds_engine::prelude::*;
//!
//! let summarize = activity("summarize", |ctx: ActivityContext, text: String| async move {
//!     let out = ctx.get_writable();
//!     for word in text.split_whitespace() {
//!         out.write(word.to_owned()).await?;
//!     }
//!     Ok::<_, StepError>(text.len())
//! });
//! let step = summarize.clone();
//! let flow = workflow("summary", move |ctx: WorkflowContext, text: String| {
//!     let step = step.clone();
//!     async move {
//!         ctx.get_writable_named("status").write_json(&"started")?;
//!         Ok::<_, WorkflowError>(ctx.run(&step, text).await?)
//!     }
//! });
//! # let _ = flow;
//! ```

pub(crate) mod reader;
mod writer;

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::clock::Millis;

pub use reader::ChunkStream;
pub use writer::{StepStream, WorkflowStream};
pub(crate) use writer::{StreamOp, StreamSink};

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
