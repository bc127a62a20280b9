//! The [`StreamStore`] contract and what its backends share: a stream's state in memory, and
//! the change signals live readers wait on.
//!
//! Stores know nothing of runs here: a stream is addressed by `(run_id, name)`, and the engine
//! checks that the run exists. A stream comes into being with its first chunk or its close; an
//! unknown stream reads as empty and open.

mod files;
mod line;
mod memory;

use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use tokio::sync::watch;

use crate::clock::Millis;
use crate::error::WorldError;
use crate::model::stream::{StreamChunk, StreamInfo};

pub(crate) use files::FileStreams;
pub(crate) use memory::MemoryStreams;

/// A chunk as the engine hands it to a store: the store gives it its index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewChunk {
    /// The chunk id (`chnk_…`).
    pub id: String,
    /// When it was written (ms since the Unix epoch).
    pub created_at: Millis,
    /// Identifies the write: a store keeps one chunk per key and stream, so writing a key it
    /// holds again returns the stored chunk and adds nothing. `None` for writes never repeated.
    pub key: Option<String>,
    /// The bytes.
    pub data: Bytes,
}

/// Streams of chunks, per run and name.
#[async_trait]
pub trait StreamStore: Send + Sync {
    /// Appends a chunk to the stream, with the next index, and returns it as stored. If the
    /// chunk's key is already in the stream, returns the chunk stored with it and adds nothing
    /// (even once the stream is closed). Fails with a conflict (409) if the stream is closed.
    async fn write_chunk(
        &self,
        run_id: &str,
        name: &str,
        chunk: NewChunk,
    ) -> Result<StreamChunk, WorldError>;

    /// Closes the stream (creating it empty if it does not exist). Closing twice is no error.
    async fn close_stream(&self, run_id: &str, name: &str) -> Result<(), WorldError>;

    /// Closes every open stream of the run.
    async fn close_run_streams(&self, run_id: &str) -> Result<(), WorldError>;

    /// Up to `limit` chunks from index `from` on, and the stream's info as of that read.
    async fn stream_chunks(
        &self,
        run_id: &str,
        name: &str,
        from: u64,
        limit: usize,
    ) -> Result<(Vec<StreamChunk>, StreamInfo), WorldError>;

    /// The stream's tail index and whether it is closed.
    async fn stream_info(&self, run_id: &str, name: &str) -> Result<StreamInfo, WorldError> {
        Ok(self.stream_chunks(run_id, name, u64::MAX, 0).await?.1)
    }

    /// Names of the run's streams, sorted.
    async fn list_streams(&self, run_id: &str) -> Result<Vec<String>, WorldError>;

    /// A signal that fires after each change to any stream of the run made through this store.
    /// Subscribe before reading, and no change after the read goes unnoticed.
    fn watch_streams(&self, run_id: &str) -> StreamSignal;
}

/// Fires when a run's streams change; see [`StreamStore::watch_streams`].
#[derive(Debug)]
pub struct StreamSignal {
    rx: watch::Receiver<u64>,
}

impl StreamSignal {
    /// A signal that fires at each change of the value `rx` watches: for a store outside this
    /// crate, which bumps the sender whenever a stream of the run changes.
    pub fn from_watch(rx: watch::Receiver<u64>) -> Self {
        Self { rx }
    }

    /// Resolves at the next change after the last call (or after the subscription). Never
    /// resolves once the store is gone.
    pub async fn changed(&mut self) {
        if self.rx.changed().await.is_err() {
            futures::future::pending::<()>().await;
        }
    }
}

/// The change signals of a store, one per run that has a reader.
#[derive(Debug, Default)]
pub(crate) struct Signals {
    by_run: Mutex<FxHashMap<String, watch::Sender<u64>>>,
}

impl Signals {
    pub(crate) fn subscribe(&self, run_id: &str) -> StreamSignal {
        let mut by_run = self.by_run.lock();
        let tx = by_run
            .entry(run_id.to_owned())
            .or_insert_with(|| watch::channel(0).0);
        StreamSignal { rx: tx.subscribe() }
    }

    /// Wakes the run's readers. Without a subscriber there is no one to wake.
    pub(crate) fn bump(&self, run_id: &str) {
        let mut by_run = self.by_run.lock();
        if let Some(tx) = by_run.get(run_id) {
            if tx.receiver_count() == 0 {
                by_run.remove(run_id);
            } else {
                tx.send_modify(|version| *version += 1);
            }
        }
    }
}

/// One stream's chunks in memory.
#[derive(Debug, Default)]
pub(crate) struct StreamState {
    chunks: Vec<StreamChunk>,
    /// Write keys, and the index each was stored at.
    keys: FxHashMap<String, u64>,
    done: bool,
}

impl StreamState {
    /// The chunk stored under `key`, if any.
    pub(crate) fn keyed(&self, key: Option<&str>) -> Option<StreamChunk> {
        let index = *self.keys.get(key?)?;
        self.chunks.get(index as usize).cloned()
    }

    /// The conflict for a write to a closed stream.
    pub(crate) fn check_open(&self, run_id: &str, name: &str) -> Result<(), WorldError> {
        if self.done {
            return Err(WorldError::conflict(format!(
                "stream '{name}' of run {run_id} is closed; no chunk can be added"
            )));
        }
        Ok(())
    }

    /// The chunk `new` becomes at the end of the stream.
    pub(crate) fn next_chunk(&self, new: &NewChunk) -> StreamChunk {
        StreamChunk {
            id: new.id.clone(),
            index: self.chunks.len() as u64,
            data: new.data.clone(),
            created_at: new.created_at,
        }
    }

    /// Adds a chunk made by [`next_chunk`](Self::next_chunk).
    pub(crate) fn push(&mut self, chunk: StreamChunk, key: Option<String>) {
        if let Some(key) = key {
            self.keys.insert(key, chunk.index);
        }
        self.chunks.push(chunk);
    }

    /// Writes `new` unless its key is stored (then returns that chunk) or the stream is closed.
    pub(crate) fn write(
        &mut self,
        run_id: &str,
        name: &str,
        new: NewChunk,
    ) -> Result<StreamChunk, WorldError> {
        if let Some(stored) = self.keyed(new.key.as_deref()) {
            return Ok(stored);
        }
        self.check_open(run_id, name)?;
        let chunk = self.next_chunk(&new);
        self.push(chunk.clone(), new.key);
        Ok(chunk)
    }

    pub(crate) fn is_done(&self) -> bool {
        self.done
    }

    pub(crate) fn close(&mut self) {
        self.done = true;
    }

    pub(crate) fn len(&self) -> u64 {
        self.chunks.len() as u64
    }

    pub(crate) fn info(&self) -> StreamInfo {
        StreamInfo {
            tail_index: self.chunks.len() as i64 - 1,
            done: self.done,
        }
    }

    /// Up to `limit` chunks from index `from`.
    pub(crate) fn page(&self, from: u64, limit: usize) -> Vec<StreamChunk> {
        let from = (from.min(self.len())) as usize;
        let to = from.saturating_add(limit).min(self.chunks.len());
        self.chunks[from..to].to_vec()
    }
}

/// The empty, open stream an unknown name reads as.
pub(crate) const EMPTY: StreamInfo = StreamInfo {
    tail_index: -1,
    done: false,
};
