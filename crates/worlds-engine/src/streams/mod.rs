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
//! * Outside code: [`World::streams`](crate::WorldStreams::write) and
//!   [`World::streams`](crate::WorldStreams::close).
//!
//! Writing to a closed stream is a conflict (409); a chunk over `max_payload_bytes` is refused
//! (413).
//!
//! **Readers.** [`World::streams`](crate::WorldStreams::read) yields the stored
//! chunks from a start index (negative counts back from the tail: `-1` is the last chunk), then
//! each new chunk as it is written, and ends when the stream is done. It reads by index from the
//! store and waits for a change signal it subscribed to before its first read, so a reader that
//! joins while chunks are being written sees each index exactly once, in order. On a directory
//! shared between processes it also polls the files, since the writer may be another process.
//! [`World::streams`](crate::WorldStreams::chunks) pages through what is stored,
//! [`World::streams`](crate::WorldStreams::info) gives the tail index and whether
//! the stream is done, [`World::streams`](crate::WorldStreams::list)
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

pub use crate::engine::streams::{ChunkStream, StepStream, WorkflowStream};
pub(crate) use crate::model::stream::check_name;
pub use crate::model::stream::{StreamChunk, StreamInfo};
pub use crate::model::stream::{DEFAULT_STREAM, MAX_STREAM_NAME};
