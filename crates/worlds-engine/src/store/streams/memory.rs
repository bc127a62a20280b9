//! Streams of the memory store: chunks kept in process memory, one lock for all.

use std::collections::BTreeMap;

use async_trait::async_trait;
use parking_lot::Mutex;
use rustc_hash::FxHashMap;

use crate::error::WorldError;
use crate::model::stream::{StreamChunk, StreamInfo};
use crate::store::MemoryStore;

use super::{NewChunk, Signals, StreamSignal, StreamState, StreamStore, EMPTY};

/// Every stream, by run and name. The lock is held only to copy chunks in or out (their data is
/// shared, not copied).
#[derive(Debug, Default)]
pub(crate) struct MemoryStreams {
    runs: Mutex<FxHashMap<String, BTreeMap<String, StreamState>>>,
    signals: Signals,
}

impl MemoryStreams {
    fn write(&self, run_id: &str, name: &str, chunk: NewChunk) -> Result<StreamChunk, WorldError> {
        let written = self
            .runs
            .lock()
            .entry(run_id.to_owned())
            .or_default()
            .entry(name.to_owned())
            .or_default()
            .write(run_id, name, chunk)?;
        self.signals.bump(run_id);
        Ok(written)
    }

    fn close(&self, run_id: &str, name: Option<&str>) {
        {
            let mut runs = self.runs.lock();
            match name {
                Some(name) => runs
                    .entry(run_id.to_owned())
                    .or_default()
                    .entry(name.to_owned())
                    .or_default()
                    .close(),
                None => {
                    if let Some(streams) = runs.get_mut(run_id) {
                        streams.values_mut().for_each(StreamState::close);
                    }
                }
            }
        }
        self.signals.bump(run_id);
    }

    fn chunks(
        &self,
        run_id: &str,
        name: &str,
        from: u64,
        limit: usize,
    ) -> (Vec<StreamChunk>, StreamInfo) {
        let runs = self.runs.lock();
        match runs.get(run_id).and_then(|streams| streams.get(name)) {
            Some(stream) => (stream.page(from, limit), stream.info()),
            None => (Vec::new(), EMPTY),
        }
    }

    /// Drops every stream of the run (it was removed); live readers are woken to find them
    /// gone.
    pub(crate) fn forget_run(&self, run_id: &str) {
        let removed = self.runs.lock().remove(run_id).is_some();
        if removed {
            self.signals.bump(run_id);
        }
    }

    fn names(&self, run_id: &str) -> Vec<String> {
        let runs = self.runs.lock();
        runs.get(run_id)
            .map(|streams| streams.keys().cloned().collect())
            .unwrap_or_default()
    }
}

#[async_trait]
impl StreamStore for MemoryStore {
    async fn write_chunk(
        &self,
        run_id: &str,
        name: &str,
        chunk: NewChunk,
    ) -> Result<StreamChunk, WorldError> {
        self.streams.write(run_id, name, chunk)
    }

    async fn close_stream(&self, run_id: &str, name: &str) -> Result<(), WorldError> {
        self.streams.close(run_id, Some(name));
        Ok(())
    }

    async fn close_run_streams(&self, run_id: &str) -> Result<(), WorldError> {
        self.streams.close(run_id, None);
        Ok(())
    }

    async fn stream_chunks(
        &self,
        run_id: &str,
        name: &str,
        from: u64,
        limit: usize,
    ) -> Result<(Vec<StreamChunk>, StreamInfo), WorldError> {
        Ok(self.streams.chunks(run_id, name, from, limit))
    }

    async fn list_streams(&self, run_id: &str) -> Result<Vec<String>, WorldError> {
        Ok(self.streams.names(run_id))
    }

    fn watch_streams(&self, run_id: &str) -> StreamSignal {
        self.streams.signals.subscribe(run_id)
    }
}
