//! Stream writes: checked and stamped here, stored by the [`StreamStore`](crate::store::StreamStore).

use std::sync::Arc;

use bytes::Bytes;

use crate::error::WorldError;
use crate::ids::CHUNK_PREFIX;
use crate::store::NewChunk;
use crate::streams::{check_name, StreamChunk, StreamOp, StreamSink};

use super::machine::RunCore;
use super::Engine;

impl Engine {
    /// Appends a chunk to a stream of a run: checks the name and size, gives it an id and a
    /// time, and stores it (once per `key`, when there is one).
    pub(crate) async fn write_chunk(
        &self,
        run_id: &str,
        name: &str,
        key: Option<String>,
        data: Bytes,
    ) -> Result<StreamChunk, WorldError> {
        check_name(name)?;
        self.journal.check_size(
            || format!("a chunk of stream '{name}' of run {run_id}"),
            data.len(),
        )?;
        let chunk = NewChunk {
            id: self.ids.next(CHUNK_PREFIX),
            created_at: self.clock.now_ms(),
            key,
            data,
        };
        self.store.write_chunk(run_id, name, chunk).await
    }

    /// Closes a stream of a run.
    pub(crate) async fn close_stream(&self, run_id: &str, name: &str) -> Result<(), WorldError> {
        check_name(name)?;
        self.store.close_stream(run_id, name).await
    }

    /// Stores the stream writes the workflow code issued since the last call, in order. Called
    /// after each poll, before the commands of that poll are acted on. A write the store refuses
    /// (the stream was closed, the disk failed) is logged and noted on the run: the `write` call
    /// returned before the store saw the chunk, so the stream's next `write` reports it.
    pub(crate) async fn flush_stream_ops(&self, core: &RunCore) {
        let run_id = core.info.run_id.as_str();
        for op in core.take_stream_ops() {
            match op {
                StreamOp::Write { name, key, data } => {
                    if let Err(e) = self.write_chunk(run_id, &name, Some(key), data).await {
                        tracing::warn!(run_id, stream = %name, error = %e, "a workflow's stream chunk was not stored");
                        core.refuse_stream_writes(name, e.to_string());
                    }
                }
                StreamOp::Close { name } => {
                    if let Err(e) = self.close_stream(run_id, &name).await {
                        tracing::warn!(run_id, stream = %name, error = %e, "a workflow's stream close was refused");
                    }
                }
            }
        }
    }

    /// Closes every stream of a finished run that is still open.
    pub(crate) async fn close_run_streams(&self, run_id: &str) {
        if let Err(e) = self.store.close_run_streams(run_id).await {
            tracing::warn!(run_id, error = %e, "could not close the streams of a finished run");
        }
    }

    /// The handle a step's writers reach the store through.
    pub(crate) fn stream_sink(self: &Arc<Self>, run_id: &str) -> StreamSink {
        StreamSink {
            engine: Arc::downgrade(self),
            run_id: Arc::from(run_id),
        }
    }
}
