//! Streams: chunks written by runs (and from outside), checked and stamped here, stored by the
//! [`StreamStore`].
//!
//! [`Streams`] is the one way to a run's streams, for the engine (the writes a workflow queues,
//! closing a finished run's streams), for steps (their [`StreamSink`], through which the
//! writers reach it as [`StepStreams`]) and for the world's stream API and live readers. The
//! live reader ([`ChunkStream`]) lives here; the writers of workflow and step code
//! ([`WorkflowStream`], [`StepStream`]) are on the authoring side (`engine/authoring/streams.rs`)
//! and are re-exported here for [`crate::streams`].

pub(crate) mod reader;

use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;

use crate::clock::Clock;
use crate::error::WorldError;
use crate::ids::{IdGenerator, CHUNK_PREFIX};
use crate::model::stream::{check_name, StreamChunk, StreamInfo};
use crate::model::ResolveData;
use crate::store::{LeaseStore, NewChunk, StreamSignal, StreamStore};

use super::authoring::activity::{StepStreams, StreamSink};
use super::journal::Journal;
use super::machine::{RunCore, StreamOp};

pub use super::authoring::streams::{StepStream, WorkflowStream};
pub use reader::ChunkStream;

/// The runs' streams.
pub(crate) struct Streams {
    /// The chunks.
    streams: Arc<dyn StreamStore>,
    /// The runs they belong to.
    runs: Arc<dyn LeaseStore>,
    clock: Arc<dyn Clock>,
    ids: Arc<IdGenerator>,
    /// Holds the payload size limit a chunk must keep to.
    journal: Arc<Journal>,
}

impl Streams {
    pub(crate) fn new(
        streams: Arc<dyn StreamStore>,
        runs: Arc<dyn LeaseStore>,
        clock: Arc<dyn Clock>,
        ids: Arc<IdGenerator>,
        journal: Arc<Journal>,
    ) -> Self {
        Streams {
            streams,
            runs,
            clock,
            ids,
            journal,
        }
    }

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
        self.journal.check_opens(run_id).await?;
        let chunk = NewChunk {
            id: self.ids.next(CHUNK_PREFIX),
            created_at: self.clock.now_ms(),
            key,
            data,
        };
        self.streams.write_chunk(run_id, name, chunk).await
    }

    /// Appends chunks to a stream of a run, in order, with consecutive indices unless another
    /// writer appends to the same stream meanwhile. The name and every chunk's size are checked
    /// before any is stored, so a refused chunk leaves the stream as it was; only a store
    /// failure part way (the stream closed by someone else, the disk failed) leaves the chunks
    /// before it written.
    pub(crate) async fn write_chunks(
        &self,
        run_id: &str,
        name: &str,
        chunks: Vec<Bytes>,
    ) -> Result<Vec<StreamChunk>, WorldError> {
        check_name(name)?;
        for (i, data) in chunks.iter().enumerate() {
            self.journal.check_size(
                || format!("chunk {i} of the write to stream '{name}' of run {run_id}"),
                data.len(),
            )?;
        }
        if chunks.is_empty() {
            return Ok(Vec::new());
        }
        self.journal.check_opens(run_id).await?;
        let mut written = Vec::with_capacity(chunks.len());
        for data in chunks {
            let chunk = NewChunk {
                id: self.ids.next(CHUNK_PREFIX),
                created_at: self.clock.now_ms(),
                key: None,
                data,
            };
            written.push(self.streams.write_chunk(run_id, name, chunk).await?);
        }
        Ok(written)
    }

    /// Closes a stream of a run.
    pub(crate) async fn close_stream(&self, run_id: &str, name: &str) -> Result<(), WorldError> {
        check_name(name)?;
        self.journal.check_opens(run_id).await?;
        self.streams.close_stream(run_id, name).await
    }

    /// Stores the stream writes the workflow code issued since the last call, in order. Called
    /// after each poll, before the commands of that poll are acted on. A write the store refuses
    /// (the stream was closed, the disk failed) is logged and noted on the run: the `write` call
    /// returned before the store saw the chunk, so the stream's next `write` reports it.
    pub(crate) async fn flush_ops(&self, core: &RunCore) {
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
    pub(crate) async fn close_run(&self, run_id: &str) {
        if let Err(e) = self.streams.close_run_streams(run_id).await {
            tracing::warn!(run_id, error = %e, "could not close the streams of a finished run");
        }
    }

    /// The handle a step's writers reach the streams through.
    pub(crate) fn sink(self: &Arc<Self>, run_id: &str) -> StreamSink {
        let streams: Weak<Streams> = Arc::downgrade(self);
        let streams: Weak<dyn StepStreams> = streams;
        StreamSink {
            streams,
            run_id: Arc::from(run_id),
        }
    }

    /// Up to `limit` stored chunks of a stream from index `from`, and the stream's state.
    /// Chunks stored encrypted that this world cannot open are refused
    /// ([`WorldError::Encrypted`]), or, `shown` to people, shown as `(encrypted)`.
    pub(crate) async fn chunks(
        &self,
        run_id: &str,
        name: &str,
        from: u64,
        limit: usize,
        shown: bool,
    ) -> Result<(Vec<StreamChunk>, StreamInfo), WorldError> {
        let (mut chunks, info) = self
            .streams
            .stream_chunks(run_id, name, from, limit)
            .await?;
        if shown {
            let reveal = crate::store::Reveal::new(None);
            for chunk in &mut chunks {
                reveal.chunk(run_id, chunk);
            }
        } else {
            self.journal.check_chunks_open(run_id, &chunks)?;
        }
        Ok((chunks, info))
    }

    /// A stream's length and whether it is closed.
    pub(crate) async fn info(&self, run_id: &str, name: &str) -> Result<StreamInfo, WorldError> {
        self.streams.stream_info(run_id, name).await
    }

    /// The names of the streams of a run.
    pub(crate) async fn list(&self, run_id: &str) -> Result<Vec<String>, WorldError> {
        self.streams.list_streams(run_id).await
    }

    /// A signal that fires when a stream of the run changes (in this process).
    pub(crate) fn watch(&self, run_id: &str) -> StreamSignal {
        self.streams.watch_streams(run_id)
    }

    /// True if the run has reached a terminal status: its streams take no more chunks.
    pub(crate) async fn run_finished(&self, run_id: &str) -> Result<bool, WorldError> {
        let run = self.runs.get_run(run_id, ResolveData::None).await?;
        Ok(run.status.is_terminal())
    }

    /// How a reader learns of chunks other processes write: `None` when the store is this
    /// process's alone (its change signal sees every write), else a pause of `every` on the
    /// world's clock between looks.
    pub(crate) fn shared_poll(&self, every: Duration) -> Option<BoxFuture<'static, ()>> {
        self.runs.is_shared().then(|| {
            self.clock.sleep_until_background(
                self.clock
                    .now_ms()
                    .saturating_add(crate::clock::duration_ms(every)),
            )
        })
    }
}

/// What step code's writers write through.
impl StepStreams for Streams {
    fn write<'a>(
        &'a self,
        run_id: &'a str,
        name: &'a str,
        data: Bytes,
    ) -> BoxFuture<'a, Result<StreamChunk, WorldError>> {
        Box::pin(self.write_chunk(run_id, name, None, data))
    }

    fn close<'a>(
        &'a self,
        run_id: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<(), WorldError>> {
        Box::pin(self.close_stream(run_id, name))
    }
}
