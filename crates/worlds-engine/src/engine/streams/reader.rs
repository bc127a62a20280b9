//! The live reader behind [`WorldStreams::read`](crate::WorldStreams::read).
//!
//! The reader subscribes to the store's change signal for the run *before* its first read, then
//! reads by index: a page of stored chunks from the next index it expects; when that is empty,
//! it waits for the signal (a change made after the read fires it, even if it came before the
//! wait began). Every chunk comes from the store at the index the reader asked for, so none is
//! skipped or seen twice, however writes and reads interleave. It ends once the stream is done,
//! or once its run has finished and one last read found nothing more.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};

use super::Streams;
use crate::error::WorldError;
use crate::store::StreamSignal;

use crate::model::stream::StreamChunk;

/// Chunks read from the store at a time.
const PAGE: usize = 256;

/// How often a reader of a store shared between processes looks for chunks written elsewhere.
const SHARED_POLL: Duration = Duration::from_millis(100);

/// The chunks of a stream, stored then live, until the stream is done. A
/// [`futures::Stream`]: `while let Some(chunk) = chunks.next().await { … }`.
pub struct ChunkStream {
    inner: BoxStream<'static, Result<StreamChunk, WorldError>>,
}

impl std::fmt::Debug for ChunkStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkStream").finish_non_exhaustive()
    }
}

impl Stream for ChunkStream {
    type Item = Result<StreamChunk, WorldError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.poll_next_unpin(cx)
    }
}

struct Reader {
    streams: Arc<Streams>,
    run_id: String,
    name: String,
    next: u64,
    signal: StreamSignal,
    buffer: VecDeque<StreamChunk>,
    /// For people: sealed chunks this world cannot open shown as `(encrypted)`, not refused.
    shown: bool,
    /// The run has finished: one more read, then the end.
    last_read: bool,
    ended: bool,
}

/// Opens a reader of a run's stream from `start` (negative: that many chunks back from the
/// tail, clamped to the first chunk); `shown`: see [`Streams::chunks`].
pub(crate) async fn open(
    streams: Arc<Streams>,
    run_id: String,
    name: String,
    start: i64,
    shown: bool,
) -> Result<ChunkStream, WorldError> {
    let signal = streams.watch(&run_id);
    let next = if start < 0 {
        let len = streams.info(&run_id, &name).await?.len();
        len.saturating_sub(start.unsigned_abs())
    } else {
        start as u64
    };
    let reader = Reader {
        streams,
        run_id,
        name,
        next,
        signal,
        buffer: VecDeque::new(),
        shown,
        last_read: false,
        ended: false,
    };
    let inner = futures::stream::unfold(reader, |mut reader| async move {
        loop {
            if let Some(chunk) = reader.buffer.pop_front() {
                return Some((Ok(chunk), reader));
            }
            if reader.ended {
                return None;
            }
            if let Err(e) = reader.fill().await {
                reader.ended = true;
                return Some((Err(e), reader));
            }
        }
    });
    Ok(ChunkStream {
        inner: inner.boxed(),
    })
}

impl Reader {
    /// Reads the next chunks into the buffer, waiting for some if there are none yet; or marks
    /// the end.
    async fn fill(&mut self) -> Result<(), WorldError> {
        let streams = self.streams.clone();
        loop {
            let (chunks, info) = streams
                .chunks(&self.run_id, &self.name, self.next, PAGE, self.shown)
                .await?;
            if let Some(last) = chunks.last() {
                self.next = last.index + 1;
                self.buffer.extend(chunks);
                return Ok(());
            }
            if info.done || self.last_read {
                self.ended = true;
                return Ok(());
            }
            if streams.run_finished(&self.run_id).await? {
                self.last_read = true;
                continue;
            }
            if let Some(poll) = streams.shared_poll(SHARED_POLL) {
                tokio::select! {
                    _ = self.signal.changed() => {}
                    _ = poll => {}
                }
            } else {
                self.signal.changed().await;
            }
        }
    }
}
