//! Logs: a world's tracing events as entries on the console and in daily NDJSON files.
//!
//! The engine reports what happens with ordinary [`tracing`] events. A world turns the events
//! that belong to it into [`LogEntry`]s (`{timestamp, level, category, message, metadata}`)
//! with a [`tracing_subscriber::Layer`], [`World::logs`](crate::WorldLogs::layer), which
//! an application adds to its own subscriber, next to its own layers:
//!
//! ```no_run
//! use tracing_subscriber::prelude::*;
//! # fn demo(world: &worlds_engine::World) {
//! tracing_subscriber::registry()
//!     .with(tracing_subscriber::fmt::layer())
//!     .with(world.logs().layer())
//!     .init();
//! # }
//! ```
//!
//! or lets [`World::logs`](crate::WorldLogs::init) (feature `console-log`) install a subscriber that writes to the console and the files.
//!
//! * **Files**: `{persistence_path}/logs/{YYYY-MM-DD}.log` for file and hybrid worlds, or
//!   [`LogsConfig::dir`]; a memory world writes files only when `dir` is set. One JSON entry
//!   per line. The day (UTC) is taken from each entry's timestamp, which comes from the
//!   world's clock, so a world on virtual time rotates on virtual midnight.
//! * **Batching**: entries wait in memory and are appended every
//!   [`LogsConfig::flush_interval`] (2 s) of the world's clock, on
//!   [`World::logs`](crate::WorldLogs::flush), on shutdown, when the world is dropped,
//!   and at once when 10 000 are waiting.
//! * **Levels**: [`LogsConfig::level`] is the minimum level written (`info` by default).
//! * **Categories**: a `category = "worker"` field names it; otherwise engine events are
//!   categorized by the module they come from ([`LogCategory::of_target`]), and application
//!   events by the code they run in (a step's code: `activity`, workflow code: `workflow`,
//!   anything else: `system`).
//! * **Several worlds in one process**: each world has its own span
//!   ([`World::logs`](crate::WorldLogs::span)) that its workers and background loops run
//!   in, and each world's layer takes only the events inside its own span (plus, unless
//!   [`LogsConfig::capture_unattributed`] is off, events inside no world's span).
//! * **The world's own records**: a world writes its lifecycle — `world started` (with the
//!   absolute data directory and the number of runs resumed), `run created`, `run failed`,
//!   `run quarantined…`, `run resumed from its history`, `resumed unfinished runs`,
//!   `world stopped` — to its files directly, so they are there even when the application
//!   installed no layer. They are emitted as tracing events too, for the application's own
//!   subscriber; the world layers skip those events, so installing one does not double them.
//!   So are the lines workflow code logs with
//!   [`WorkflowContext::log`](crate::WorkflowContext::log) and its shorthands.
//! * **Reading back**: [`read_logs`] (and `WorldLogs::query`, `worlds logs`) filters the files
//!   by category, minimum level and time.
//! * **A shared store**: a world opened with a [`LogStore`] (a PostgreSQL world keeps its
//!   entries in its schema's `logs` table) hands it each batch too, and reads back from it,
//!   so one query sees the entries of every process of the world.

mod date;
pub(crate) mod direct;
mod entry;
#[cfg(feature = "console-log")]
mod init;
mod layer;
mod query;
mod sink;
mod store;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

pub(crate) use direct::world_log;
pub use entry::{LogCategory, LogEntry, LogLevel, LogQuery, UnknownName};
#[cfg(feature = "console-log")]
pub use init::ClockTime;
pub use layer::WorldLogLayer;
pub use query::read_logs;
pub use store::LogStore;

use crate::clock::{duration_ms, Clock};
use sink::LogFiles;

pub use crate::config::LogsConfig;

/// A log directory that could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// A file system call failed.
    #[error("could not {action} {}: {source}", path.display())]
    Io {
        /// What was being done (`write`, `read`…).
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// A log store refused a call (its own message says why).
    #[error("the log store failed: {message}")]
    Store {
        /// What went wrong.
        message: String,
    },
    /// A batch of entries could not be written and was dropped.
    #[error("{error}; {dropped} log entries were dropped")]
    Dropped {
        /// How many entries were lost.
        dropped: usize,
        /// Why.
        #[source]
        error: Box<LogError>,
    },
}

impl LogError {
    fn io(action: &'static str, path: &Path, source: std::io::Error) -> Self {
        LogError::Io {
            action,
            path: path.to_owned(),
            source,
        }
    }

    fn dropping(self, dropped: usize) -> Self {
        LogError::Dropped {
            dropped,
            error: Box::new(self),
        }
    }
}

impl From<LogError> for crate::WorldError {
    fn from(e: LogError) -> Self {
        crate::WorldError::Unavailable(e.to_string())
    }
}

/// Numbers worlds within the process, to tell their spans apart.
static NEXT_WORLD: AtomicU64 = AtomicU64::new(1);

/// A log store and the entries waiting for its next batch.
type StoreSide = (Arc<dyn LogStore>, Mutex<Vec<LogEntry>>);

/// A world's logging: its identity, its clock, and its files and log store if it writes to
/// any.
pub(crate) struct Logs {
    id: u64,
    clock: Arc<dyn Clock>,
    config: LogsConfig,
    files: Option<LogFiles>,
    /// A shared store the entries also go to, with the entries waiting for the next flush.
    store: Option<StoreSide>,
    /// A failure of a write made outside `flush` (the queue was full), for `flush` to return.
    deferred: Mutex<Option<LogError>>,
    /// A failure was reported and no write has worked since.
    failing: AtomicBool,
    /// The category of an event with none of its own.
    ambient: fn() -> LogCategory,
}

impl Logs {
    /// The logs of a world with this configuration. `ambient` names the kind of code the
    /// current task runs (the category of an event that has none of its own).
    pub(crate) fn new(
        config: &crate::config::WorldConfig,
        clock: Arc<dyn Clock>,
        ambient: fn() -> LogCategory,
        store: Option<Arc<dyn LogStore>>,
    ) -> Arc<Logs> {
        let logs = &config.logs;
        let dir = logs.dir.clone().or_else(|| {
            config
                .persistence
                .uses_directory()
                .then(|| config.persistence_path.join("logs"))
        });
        let files = dir
            .filter(|_| logs.files)
            .map(|dir| LogFiles::new(dir, logs.max_files));
        Arc::new(Logs {
            id: NEXT_WORLD.fetch_add(1, Ordering::Relaxed),
            clock,
            config: logs.clone(),
            files,
            store: store
                .filter(|_| logs.files)
                .map(|store| (store, Mutex::new(Vec::new()))),
            deferred: Mutex::new(None),
            failing: AtomicBool::new(false),
            ambient,
        })
    }

    /// A new span marking work done for this world. Events inside it go to this world's files.
    pub(crate) fn span(&self) -> tracing::Span {
        // At error level so that no level filter drops it: a world's warnings must still be
        // told apart when everything below warn is filtered out.
        tracing::error_span!(target: "worlds_engine::world", "world", id = self.id)
    }

    /// The layer that writes this world's events.
    pub(crate) fn layer(self: &Arc<Self>) -> WorldLogLayer {
        WorldLogLayer::new(
            Arc::downgrade(self),
            self.id,
            self.config.capture_unattributed,
        )
    }

    pub(crate) fn config(&self) -> &LogsConfig {
        &self.config
    }

    #[cfg(feature = "console-log")]
    pub(crate) fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The directory the day files go to, if this world writes any.
    pub(crate) fn dir(&self) -> Option<&Path> {
        self.files.as_ref().map(LogFiles::dir)
    }

    /// True if an entry at `level` would be written: the world writes files or to a log
    /// store, and `level` is at or above the configured minimum.
    pub(crate) fn takes(&self, level: LogLevel) -> bool {
        (self.files.is_some() || self.store.is_some()) && level >= self.config.level
    }

    /// The shared store the entries go to, if any.
    pub(crate) fn store(&self) -> Option<&Arc<dyn LogStore>> {
        self.store.as_ref().map(|(store, _)| store)
    }

    /// Queues one entry, stamped now on the world's clock.
    pub(crate) fn record(
        &self,
        level: LogLevel,
        category: LogCategory,
        message: String,
        metadata: serde_json::Map<String, serde_json::Value>,
    ) {
        if self.files.is_none() && self.store.is_none() {
            return;
        }
        let entry = LogEntry {
            timestamp: self.clock.now_ms(),
            level,
            category,
            message,
            metadata,
        };
        let mut full = false;
        if let Some(files) = &self.files {
            // Strings, numbers and maps with string keys: serializing cannot fail.
            if let Ok(line) = serde_json::to_string(&entry) {
                full |= files.push(entry.timestamp, line);
            }
        }
        if let Some((_, waiting)) = &self.store {
            let mut waiting = waiting.lock();
            waiting.push(entry);
            full |= waiting.len() >= sink::MAX_PENDING;
        }
        if full {
            if let Err(e) = self.flush() {
                // No tracing call from inside an event: the next flush reports it.
                *self.deferred.lock() = Some(e);
            }
        }
    }

    /// Writes every waiting entry; returns how many.
    pub(crate) fn flush(&self) -> Result<usize, LogError> {
        let deferred = self.deferred.lock().take();
        let mut written = 0;
        let mut failed = None;
        if let Some(files) = &self.files {
            match files.flush() {
                Ok(n) => written = n,
                Err(e) => failed = Some(e),
            }
        }
        if let Some((store, waiting)) = &self.store {
            let batch = std::mem::take(&mut *waiting.lock());
            let n = batch.len();
            if n > 0 {
                match store.append(batch) {
                    Ok(()) => written = written.max(n),
                    Err(e) => failed = failed.or(Some(e.dropping(n))),
                }
            }
        }
        match failed.or(deferred) {
            Some(e) => Err(e),
            None => Ok(written),
        }
    }

    /// [`flush`](Self::flush), reporting the first failure of a streak as a warning.
    pub(crate) fn flush_reporting(&self) {
        match self.flush() {
            Ok(_) => self.failing.store(false, Ordering::Relaxed),
            Err(e) => {
                if !self.failing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        error = %e,
                        "could not write the log files; entries are dropped until writing works again"
                    );
                }
            }
        }
    }

    /// Writes waiting entries every flush interval of the world's clock until `stop`.
    pub(crate) async fn flush_loop(self: Arc<Self>, stop: CancellationToken) {
        if self.files.is_none() && self.store.is_none() {
            return;
        }
        let every = duration_ms(self.config.flush_interval.0).max(1);
        loop {
            let tick = self
                .clock
                .sleep_until_background(self.clock.now_ms().saturating_add(every));
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick => self.flush_reporting(),
            }
        }
    }
}

impl Drop for Logs {
    fn drop(&mut self) {
        // Nowhere left to report a failure to: the world is gone.
        let _ = self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_world_span_is_what_the_layer_looks_for() {
        let clock = Arc::new(crate::clock::VirtualClock::new(0));
        let logs = Logs::new(
            &crate::config::WorldConfig::memory(),
            clock,
            || LogCategory::System,
            None,
        );
        tracing::subscriber::with_default(tracing_subscriber::registry(), || {
            let span = logs.span();
            let meta = span.metadata().expect("the span is enabled");
            assert_eq!(meta.name(), layer::WORLD_SPAN);
            assert_eq!(meta.target(), layer::WORLD_TARGET);
        });
    }
}
