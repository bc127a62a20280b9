//! The two stream writers: one for workflow code (buffered, replay-safe), one for step code
//! (awaited), and the context calls that hand them out. See [`crate::streams`].

use std::sync::Arc;

use bytes::Bytes;
use serde::Serialize;

use super::activity::{ActivityContext, StepStreams, StreamSink};
use super::context::WorkflowContext;
use super::driver::RunDriver;
use super::errors::ContextError;
use crate::error::WorldError;
use crate::model::stream::{check_name, StreamChunk, DEFAULT_STREAM};

/// Streams (see [`crate::streams`]).
impl WorkflowContext {
    /// A writer for the run's default stream. Writes do not wait and are never duplicated by
    /// replay.
    pub fn get_writable(&self) -> WorkflowStream {
        self.get_writable_named(DEFAULT_STREAM)
    }

    /// A writer for the run's stream `name`.
    pub fn get_writable_named(&self, name: &str) -> WorkflowStream {
        WorkflowStream::new(self.core.clone(), name)
    }
}

/// Streams (see [`crate::streams`]).
impl ActivityContext {
    /// A writer for the run's default stream (see [`crate::streams`]). Each attempt writes its
    /// own chunks: after a retry, readers see the chunks of both attempts. Outside a world
    /// ([`detached`](Self::detached)) writes fail as unavailable.
    pub fn get_writable(&self) -> StepStream {
        self.get_writable_named(DEFAULT_STREAM)
    }

    /// A writer for the run's stream `name`.
    pub fn get_writable_named(&self, name: &str) -> StepStream {
        StepStream::new(self.stream_sink(), name)
    }
}

/// A stream of the run, written from workflow code ([`WorkflowContext::get_writable`]).
///
/// `write` only queues the chunk: the engine stores it as soon as the workflow yields. Replay
/// makes the same writes again and the store keeps one chunk for each (see [`crate::streams`]).
///
/// [`WorkflowContext::get_writable`]: crate::WorkflowContext::get_writable
#[derive(Clone)]
pub struct WorkflowStream {
    core: Arc<dyn RunDriver>,
    name: Arc<str>,
}

impl std::fmt::Debug for WorkflowStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkflowStream")
            .field("run_id", &self.core.info().run_id)
            .field("name", &self.name)
            .finish()
    }
}

impl WorkflowStream {
    fn new(core: Arc<dyn RunDriver>, name: &str) -> Self {
        WorkflowStream {
            core,
            name: Arc::from(name),
        }
    }

    /// The stream's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Queues a chunk of bytes or text. Fails at once for an invalid stream name or a chunk over
    /// the payload limit; nothing is queued then. The store takes the chunk when the workflow
    /// next yields; if it refuses it (the stream was closed, the disk failed), the refusal is
    /// logged and every later `write` to this stream fails with
    /// [`ContextError::StreamWriteFailed`].
    pub fn write(&self, data: impl Into<Bytes>) -> Result<(), ContextError> {
        let data = data.into();
        check_name(&self.name).map_err(|e| ContextError::InvalidArgument {
            call: "stream.write",
            message: e.to_string(),
        })?;
        self.core.push_stream_write(self.name.clone(), data)
    }

    /// Queues a value as a JSON chunk (read it back with [`StreamChunk::json`]).
    pub fn write_json<T: Serialize + ?Sized>(&self, value: &T) -> Result<(), ContextError> {
        let data = serde_json::to_vec(value).map_err(|e| ContextError::InvalidArgument {
            call: "stream.write_json",
            message: e.to_string(),
        })?;
        self.write(data)
    }

    /// Closes the stream once the chunks queued before are stored: readers end after them.
    pub fn close(&self) {
        self.core.push_stream_close(self.name.clone());
    }
}

/// A stream of the run, written from step code ([`ActivityContext::get_writable`]).
///
/// Each call returns once the store holds the chunk. Chunks written by an attempt stay when
/// the attempt fails: a retried step writes again (see [`crate::streams`]).
///
/// [`ActivityContext::get_writable`]: crate::ActivityContext::get_writable
#[derive(Clone)]
pub struct StepStream {
    sink: Option<StreamSink>,
    name: Arc<str>,
}

impl std::fmt::Debug for StepStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepStream")
            .field("run_id", &self.sink.as_ref().map(|s| &s.run_id))
            .field("name", &self.name)
            .finish()
    }
}

impl StepStream {
    fn new(sink: Option<StreamSink>, name: &str) -> Self {
        StepStream {
            sink,
            name: Arc::from(name),
        }
    }

    /// The stream's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn streams(&self) -> Result<(Arc<dyn StepStreams>, &str), WorldError> {
        let unavailable = || {
            WorldError::Unavailable(
                "streams can only be written by a step run by a started world".into(),
            )
        };
        let sink = self.sink.as_ref().ok_or_else(unavailable)?;
        let streams = sink.streams.upgrade().ok_or_else(unavailable)?;
        Ok((streams, &sink.run_id))
    }

    /// Writes a chunk of bytes or text and returns it as stored, with its index.
    ///
    /// Errors: the stream is closed (409), the chunk is over the payload limit (413), the name
    /// is invalid (400).
    pub async fn write(&self, data: impl Into<Bytes>) -> Result<StreamChunk, WorldError> {
        let (streams, run_id) = self.streams()?;
        streams.write(run_id, &self.name, data.into()).await
    }

    /// Writes a value as a JSON chunk.
    pub async fn write_json<T: Serialize + ?Sized>(
        &self,
        value: &T,
    ) -> Result<StreamChunk, WorldError> {
        let data = serde_json::to_vec(value).map_err(|e| WorldError::serde("stream chunk", e))?;
        self.write(data).await
    }

    /// Closes the stream. Closing a closed stream does nothing.
    pub async fn close(&self) -> Result<(), WorldError> {
        let (streams, run_id) = self.streams()?;
        streams.close(run_id, &self.name).await
    }
}
