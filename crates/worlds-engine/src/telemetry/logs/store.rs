//! A store for a world's log entries other than the day files: a database that every process
//! of the world writes to and that `worlds logs` reads, so one query sees the whole world.

use async_trait::async_trait;

use super::{LogEntry, LogError, LogQuery};

/// Where a world's log entries are kept when they go to a shared store instead of (or next
/// to) the day files. A world gets one from the crate that opens it (a PostgreSQL world keeps
/// them in its schema's `logs` table); see [`World::with_store_and_logs`](crate::World::with_store_and_logs).
///
/// Entries reach it in batches, at the world's flush interval, like the files.
#[async_trait]
pub trait LogStore: Send + Sync {
    /// Takes a batch of entries, oldest first. Called from the flush path, which must not
    /// block: a store may queue the batch and write it in the background, reporting a failed
    /// write its own way.
    fn append(&self, entries: Vec<LogEntry>) -> Result<(), LogError>;

    /// The entries matching `query`, oldest first (with a limit, the most recent ones).
    async fn query(&self, query: &LogQuery) -> Result<Vec<LogEntry>, LogError>;

    /// Resolves once every batch handed over so far is stored (or dropped after a failure the
    /// store reported). A world's shutdown waits for it, so its last entries are not lost
    /// with the process.
    async fn flush(&self) {}
}
