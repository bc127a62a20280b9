//! Streams seen from outside the runs: write, close, read live, page, describe, list.

use bytes::Bytes;

use crate::error::WorldError;
use crate::model::{Page, ResolveData, WorkflowState};
use crate::streams::{check_name, ChunkStream, StreamChunk, StreamInfo};

use super::World;

/// Page size of [`WorldStreams::chunks`] when the caller passes a limit of 0.
const DEFAULT_CHUNK_PAGE: usize = 100;

/// Runs' streams seen from outside the runs, from [`World::streams`]: write, close, read live,
/// page through, describe, list.
#[derive(Debug, Clone, Copy)]
pub struct WorldStreams<'w> {
    world: &'w World,
}

impl World {
    /// The runs' streams, from outside the runs (see [`crate::streams`]).
    pub fn streams(&self) -> WorldStreams<'_> {
        WorldStreams { world: self }
    }
}

impl WorldStreams<'_> {
    /// The run (by run id or workflow id) whose streams are asked for: 404 if none.
    async fn stream_run(&self, id: &str) -> Result<WorkflowState, WorldError> {
        self.world.engine.get_run(id, ResolveData::None).await
    }

    /// Appends a chunk to stream `name` of a run (by run id or workflow id) and returns it.
    ///
    /// Errors: no such run (404), the stream is closed or the run has finished (409), the chunk
    /// is over the payload limit (413), the name is empty or too long (400).
    pub async fn write(
        &self,
        run_id: &str,
        name: &str,
        data: impl Into<Bytes>,
    ) -> Result<StreamChunk, WorldError> {
        let run = self.stream_run(run_id).await?;
        if run.status.is_terminal() {
            return Err(WorldError::conflict(format!(
                "run {} has finished ({}); its streams take no more chunks",
                run.id, run.status
            )));
        }
        self.world
            .engine
            .streams()
            .write_chunk(&run.id, name, None, data.into())
            .await
    }

    /// Appends `chunks` to stream `name` of a run (by run id or workflow id), in order, and
    /// returns them as stored. The name and every chunk's size are checked before any chunk is
    /// stored: a refusal writes nothing. The chunks get consecutive indices unless another
    /// writer appends to the same stream at the same time. No chunks: nothing is written (the
    /// run must still exist and be open).
    ///
    /// Errors: no such run (404), the stream is closed or the run has finished (409), a chunk
    /// is over the payload limit (413), the name is empty, too long or holds a control
    /// character (400).
    pub async fn write_many(
        &self,
        run_id: &str,
        name: &str,
        chunks: Vec<Bytes>,
    ) -> Result<Vec<StreamChunk>, WorldError> {
        check_name(name)?;
        let run = self.stream_run(run_id).await?;
        if run.status.is_terminal() {
            return Err(WorldError::conflict(format!(
                "run {} has finished ({}); its streams take no more chunks",
                run.id, run.status
            )));
        }
        self.world
            .engine
            .streams()
            .write_chunks(&run.id, name, chunks)
            .await
    }

    /// Closes stream `name` of a run: readers end after its last chunk, writes are refused.
    /// Closing a closed stream does nothing. Errors: no such run (404).
    pub async fn close(&self, run_id: &str, name: &str) -> Result<(), WorldError> {
        let run = self.stream_run(run_id).await?;
        self.world
            .engine
            .streams()
            .close_stream(&run.id, name)
            .await
    }

    /// Reads stream `name` of a run live: the stored chunks from `start_index` (negative counts
    /// back from the tail: `-1` starts at the last chunk), then each chunk as it is written,
    /// ending when the stream is done (closed, or its run finished). Each index comes once, in
    /// order, even while chunks are being written.
    ///
    /// Errors: no such run (404), an invalid name (400); chunks stored encrypted and this world
    /// cannot open them (501, [`WorldError::Encrypted`], the stream's item). A stream the run
    /// has not written to yet waits for its first chunk.
    ///
    /// ```
    /// # use worlds_engine::prelude::*;
    /// # async fn read(world: &World, run_id: &str) -> Result<(), WorldError> {
    /// use futures::StreamExt;
    /// let mut chunks = world.streams().read(run_id, "default", 0).await?;
    /// while let Some(chunk) = chunks.next().await {
    ///     let chunk = chunk?;
    ///     println!("{}: {:?}", chunk.index, chunk.text());
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn read(
        &self,
        run_id: &str,
        name: &str,
        start_index: i64,
    ) -> Result<ChunkStream, WorldError> {
        self.open_reader(run_id, name, start_index, false).await
    }

    /// [`read`](Self::read) for people: chunks stored encrypted that this world has no keys
    /// for come as `(encrypted)` instead of an error (what a dashboard shows).
    pub async fn read_shown(
        &self,
        run_id: &str,
        name: &str,
        start_index: i64,
    ) -> Result<ChunkStream, WorldError> {
        self.open_reader(run_id, name, start_index, true).await
    }

    async fn open_reader(
        &self,
        run_id: &str,
        name: &str,
        start_index: i64,
        shown: bool,
    ) -> Result<ChunkStream, WorldError> {
        check_name(name)?;
        let run = self.stream_run(run_id).await?;
        crate::engine::streams::reader::open(
            self.world.engine.streams().clone(),
            run.id,
            name.to_owned(),
            start_index,
            shown,
        )
        .await
    }

    /// One page of the chunks stored so far: up to `limit` (0: 100) from the `cursor` of the
    /// previous page (`None`: from the first chunk). Errors: no such run (404), a cursor that
    /// is not one this returned (400), chunks stored encrypted that this world cannot open
    /// (501, [`WorldError::Encrypted`]).
    pub async fn chunks(
        &self,
        run_id: &str,
        name: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<StreamChunk>, WorldError> {
        check_name(name)?;
        let run = self.stream_run(run_id).await?;
        let from = match cursor {
            None => 0,
            Some(cursor) => cursor.parse::<u64>().map_err(|_| {
                WorldError::invalid("cursor", format!("not a stream cursor: {cursor:?}"))
            })?,
        };
        let limit = if limit == 0 {
            DEFAULT_CHUNK_PAGE
        } else {
            limit
        };
        let (data, info) = self
            .world
            .engine
            .streams()
            .chunks(&run.id, name, from, limit, false)
            .await?;
        let next = data.last().map_or(from, |c| c.index + 1);
        let has_more = next < info.len();
        Ok(Page {
            data,
            cursor: has_more.then(|| next.to_string()),
            has_more,
        })
    }

    /// The index of the stream's last chunk (-1 if none) and whether it is done: closed, or
    /// its run has finished. Errors: no such run (404).
    pub async fn info(&self, run_id: &str, name: &str) -> Result<StreamInfo, WorldError> {
        check_name(name)?;
        let run = self.stream_run(run_id).await?;
        let mut info = self.world.engine.streams().info(&run.id, name).await?;
        info.done |= run.status.is_terminal();
        Ok(info)
    }

    /// The names of the streams a run has written to (or closed), sorted. Errors: no such run
    /// (404).
    pub async fn list(&self, run_id: &str) -> Result<Vec<String>, WorldError> {
        let run = self.stream_run(run_id).await?;
        self.world.engine.streams().list(&run.id).await
    }
}
