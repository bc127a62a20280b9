//! The hybrid store: a [`MemoryStore`] for every read, in front of one shared write-ahead log
//! with group commit, compacted every 5 s into segment files that hold many runs each.
//!
//! Layout under the root directory (the file store's, plus the WAL, the segments and a lock):
//!
//! ```text
//! root/
//!   state/format.json                 {"format": 5}
//!   state/lock                        held (exclusive) while a HybridStore has the directory open
//!   state/wal.ndjson                  every acknowledged write not yet compacted, in order
//!   state/wal.next.ndjson             while a compaction runs: the writes made since it began
//!   state/compacting.json             while a compaction runs: the newest segment and its length before it began
//!   segments/{n}.ndjson               compacted records (and tombstones) of many runs, in the order written; a new one past 64 MiB
//!   segments/{n}.ndjson.tmp           while segment n is rewritten without the records of removed runs (deleted on open)
//!   workflows/{run_id}.events.ndjson  run logs of file mode (and of builds before segments): read, never written
//!   streams/{run_id}/{name}.ndjson    stream chunks, outside the WAL (see `store/streams/files.rs`)
//!   schedules/{id}.json               one schedule each, outside the WAL (see `store/schedules/files.rs`)
//! ```
//!
//! Every `create_run` and `append` is checked and applied to the memory store's tip (so the next
//! write to the run is checked against it and gets the next `seq`), but stays invisible to
//! readers; its lines are queued for the WAL (see `wal.rs`). A writer thread writes whatever is
//! queued at once; a syncer thread syncs what was written and then publishes the writes it
//! covered (readers see them from then on) and wakes their writers: concurrent writers share
//! fsyncs ([`HybridStore::stats`] counts both). `append` returns once its write is durable,
//! `append_written` once it is written (safe from a crash of the process), `append_nowait` at
//! once (durable within a few milliseconds, or with the next sync); `history_tip` reads the
//! tip. Compaction ([`HybridStore::compact`], every 5 s on a Tokio runtime, and on
//! [`close`](HybridStore::close) or drop; see `compact.rs`) first points the writer at a new
//! `wal.next.ndjson`, so writers never wait for it; then appends the records of `wal.ndjson` to
//! the newest segment (one write and one sync, however many runs), and finally renames
//! `wal.next.ndjson` over `wal.ndjson`. So `wal.ndjson` is never empty while `wal.next.ndjson`
//! exists.
//!
//! On [`HybridStore::open`] the run logs are loaded like the file store's, then the segments by
//! number, then `wal.ndjson` and `wal.next.ndjson` (if a crash interrupted a compaction): a
//! record already loaded (a crash mid-compaction copied it before) is checked to be the same
//! event and passed over, the rest applied. A torn last line of the WAL or of the newest segment
//! is truncated with a warning; corruption anywhere else fails with the file and byte offset.
//! A [`FileStore`] opening the directory later moves every record into the run logs first.
//!
//! **Retention.** Removing a finished run forgets it in memory and queues its *tombstone* (a
//! record of its own, see `store/file/record.rs`) under the WAL's queue lock, so no write to the
//! run comes after it; `remove_run` returns once the tombstone is synced, then deletes the run's
//! streams. Compaction copies tombstones into the segments like any record. On open a tombstone
//! drops every record of its run before it (records after it are a run created again with the
//! same id), and what a removal a crash interrupted left (streams, a run log) goes. A
//! compaction notes where the segments ended before it began (`state/compacting.json`), and an
//! open after a crash mid-compaction cuts what it appended off again, so that no record is both
//! in a segment and in the WAL.
//!
//! **Segment collection** (`gc.rs`). The store knows, per segment, its bytes and the bytes of
//! removed runs' records in it (built while the segments are replayed on open, kept up by
//! compaction), and per run the segments its records sit in. After each background compaction
//! (and whenever [`HybridStore::collect_segment`] is called) at most one segment more than
//! half dead is rewritten with its live records only, in their order, under the same number
//! (`{n}.ndjson.tmp`, synced, renamed over it, the directory synced), or removed if nothing in
//! it is live; a tombstone is dropped only once no earlier segment holds a dead byte. So the
//! space of removed runs comes back, a segment at a time, without writers waiting.
//!
//! [`FileStore`]: super::FileStore

mod compact;
mod gc;
mod wal;

pub use gc::CollectedSegment;

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;

use crate::clock::Millis;
use crate::error::WorldError;
use crate::model::{
    ActivityState, Event, ListQuery, Page, ResolveData, WorkflowQueryFilter, WorkflowState,
};

use super::file::{
    check_run_id, dir_lock, encode, encode_tombstone, io_error, list_run_logs, list_segments,
    load_run_log, log_path, remove_stale_rewrites, segment_number, sync_dir,
    undo_interrupted_compaction, FileStore, Records, WalReplay, SEGMENTS_DIR, WAL_FILES,
};
use super::{
    Appended, EventStore, HookRecord, HookStore, IdempotencyStore, LeaseStore, MemoryStore,
    RunStore, StepRecord, StepStore, Timer, TimerStore,
};
use compact::Disk;
use wal::{Publish, Wait, Wal};

struct Inner {
    root: PathBuf,
    /// Where compaction moves the WAL's records (`segments/`).
    segments: PathBuf,
    wal_path: PathBuf,
    /// Where writes go while a compaction moves `wal_path`'s events into the run logs.
    next_path: PathBuf,
    /// The log every write goes through: `wal_path`, or `next_path` during a compaction.
    wal: Wal,
    memory: MemoryStore,
    disk: Mutex<Disk>,
    /// Holds the exclusive lock on `state/lock` for the store's life.
    _lock: File,
}

/// Durable storage for one process (`Persistence::Hybrid`): a [`MemoryStore`] answers every read,
/// and every write is in a shared, group-committed write-ahead log before it is acknowledged.
///
/// The directory is locked exclusively while open; a second open (from this or another process)
/// fails. Use `Persistence::File` for several processes on one host.
///
/// ```
/// use worlds_engine::store::HybridStore;
/// let dir = std::env::temp_dir().join(format!("worlds-hybrid-doc-{}", std::process::id()));
/// let store = HybridStore::open(&dir)?;
/// assert!(dir.join("state/wal.ndjson").exists());
/// assert!(HybridStore::open(&dir).is_err(), "the directory is locked");
/// # drop(store);
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok::<(), worlds_engine::WorldError>(())
/// ```
pub struct HybridStore {
    inner: Arc<Inner>,
    /// The runs' streams, under `streams/` (see `store/streams/files.rs`).
    pub(in crate::store) streams: super::streams::FileStreams,
    /// The schedules, under `schedules/` (see `store/schedules/files.rs`).
    pub(in crate::store) schedules: super::schedules::FileSchedules,
    pub(in crate::store) keys: super::keys::KeyFiles,
    /// The pauses in force, under `pauses/` (see `store/pauses/files.rs`).
    pub(in crate::store) pauses: super::pauses::PauseFiles,
    compactor: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The WAL's writer and syncer threads.
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for HybridStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (appends, fsyncs) = self.stats();
        f.debug_struct("HybridStore")
            .field("root", &self.inner.root)
            .field("appends", &appends)
            .field("fsyncs", &fsyncs)
            .finish()
    }
}

impl HybridStore {
    /// Opens (creating if needed) the store under `root`: locks it, loads every run log, replays
    /// and compacts the WAL, and (on a Tokio runtime) starts compacting every 5 s.
    ///
    /// Fails if another store holds the directory, if `state/format.json` names a newer format,
    /// or if a log or the WAL is corrupt anywhere but its last line (naming the file and offset).
    pub fn open(root: impl AsRef<Path>) -> Result<HybridStore, WorldError> {
        let root = root.as_ref().to_path_buf();
        let workflows = root.join("workflows");
        let segments = root.join(SEGMENTS_DIR);
        let state = root.join("state");
        for dir in [&workflows, &segments, &state] {
            fs::create_dir_all(dir).map_err(|e| io_error("could not create", dir, e))?;
        }
        sync_dir(&root)?;
        let lock = Self::lock(&state)?;
        FileStore::check_format(&state, false, true)?;

        // Run logs: written in file mode, or by builds before segments.
        let memory = MemoryStore::new();
        let mut counts = HashMap::new();
        for run_id in list_run_logs(&workflows, false)? {
            let path = log_path(&workflows, &run_id);
            let loaded = load_run_log(&path, &run_id, &memory, false, Records::Checksummed)?;
            counts.insert(run_id, loaded.count);
        }
        // What a compaction a crash interrupted appended to the segments goes: the WAL holds it.
        let undone = undo_interrupted_compaction(&root)?;
        // A segment rewrite a crash interrupted before its rename left the segment as it was.
        remove_stale_rewrites(&segments)?;
        let mut replay = WalReplay::new(&memory, &counts, Records::Checksummed, false);
        let segment_files = list_segments(&segments)?;
        let mut liveness = gc::Liveness::default();
        for (i, path) in segment_files.iter().enumerate() {
            let number = segment_number(path).unwrap_or(0);
            replay.replay_segment_tallied(
                path,
                i + 1 == segment_files.len(),
                &mut |run_id, len, tombstone| liveness.record(number, run_id, len, tombstone),
            )?;
        }
        let on_disk = replay.positions();

        let [wal_name, next_name] = WAL_FILES;
        let wal_path = state.join(wal_name);
        let next_path = state.join(next_name);
        // A compaction that a crash interrupted left the newest writes in `next_path`: writes
        // go on there until the compaction at the end of this function finishes it.
        let interrupted = next_path.exists();
        let active = if interrupted { &next_path } else { &wal_path };
        let wal = OpenOptions::new()
            .create(true)
            .append(true)
            .open(active)
            .map_err(|e| io_error("could not open", active, e))?;
        sync_dir(&state)?;
        replay.replay(&wal_path)?;
        if interrupted {
            replay.replay(&next_path)?;
        }
        // Removals a crash interrupted after their tombstone was durable: what they had left
        // outside the WAL and segments goes now.
        replay.finish()?;
        let removed: Vec<String> = replay.removed().iter().cloned().collect();
        drop(replay);
        for run_id in &removed {
            remove_run_files(&root, run_id)?;
        }

        let inner = Arc::new(Inner {
            wal: Wal::new(wal, &wal_path),
            root,
            segments,
            wal_path,
            next_path,
            memory,
            disk: Mutex::new(Disk {
                segment: None,
                newest: segment_files.last().cloned(),
                segment_bytes: compact::SEGMENT_BYTES,
                // Unless what an interrupted compaction appended was cut off again, a segment
                // may hold copies of the WAL's first records (a build before compaction marks).
                on_disk: (!undone).then_some(on_disk),
                broken: None,
                liveness,
            }),
            _lock: lock,
        });
        inner.compact()?;
        let compactor = tokio::runtime::Handle::try_current()
            .ok()
            .map(|handle| handle.spawn(compact::compact_loop(Arc::downgrade(&inner))));
        let spawn = |name: &str, body: fn(&Inner)| {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || body(&inner))
                .map_err(|e| {
                    WorldError::Internal(format!("could not start the {name} thread: {e}"))
                })
        };
        let threads = vec![
            spawn("worlds-wal", |inner| inner.wal.write_loop())?,
            spawn("worlds-wal-sync", |inner| {
                inner
                    .wal
                    .sync_loop(|run, len| inner.memory.publish(run, len))
            })?,
        ];
        Ok(HybridStore {
            streams: super::streams::FileStreams::new(&inner.root, false, false),
            schedules: super::schedules::FileSchedules::new(&inner.root, false),
            keys: super::keys::KeyFiles::new(&inner.root, false),
            pauses: super::pauses::PauseFiles::new(&inner.root, false),
            inner,
            compactor: Mutex::new(compactor),
            threads: Mutex::new(threads),
        })
    }

    /// Takes the exclusive lock on `state/lock` (see `store/file/dir_lock.rs`).
    fn lock(state: &Path) -> Result<File, WorldError> {
        dir_lock::take(state, dir_lock::Mode::Exclusive)?.ok_or_else(|| {
            WorldError::Unavailable(format!(
                "hybrid store: another process (or another store in this one) owns {} in hybrid mode (it holds {}); hybrid storage is for one process per directory: use Persistence::File for several processes on one host, or PostgreSQL across machines",
                state.parent().unwrap_or(state).display(),
                state.join("lock").display()
            ))
        })
    }

    /// `(appends, fsyncs)` since open: writes acknowledged (`create_run` and `append` calls that
    /// reached the WAL) and WAL syncs that made them durable. Appends per fsync is the mean
    /// group-commit size.
    pub fn stats(&self) -> (u64, u64) {
        self.inner.wal.stats()
    }

    /// Moves the WAL's events into the per-run logs (synced), then drops them from the WAL.
    /// Returns the number of events moved. Runs every 5 s on its own; call it to compact now.
    /// Writers do not wait for it: their writes go to a second WAL file meanwhile.
    pub fn compact(&self) -> Result<usize, WorldError> {
        self.inner.compact()
    }

    /// Gives back the space of removed runs in at most one segment: the oldest whose dead bytes
    /// (records of removed runs, and tombstones no longer needed) pass half of its bytes is
    /// rewritten without them, or removed if nothing in it is live. Returns what was done, or
    /// `None` if no segment needs it. Runs after every background compaction on its own; call it
    /// until it returns `None` to collect everything now. Writers do not wait for it (it holds
    /// the compaction lock only, see `gc.rs`).
    pub fn collect_segment(&self) -> Result<Option<CollectedSegment>, WorldError> {
        self.inner.collect_segment()
    }

    /// Sets the size past which compaction starts a new segment (64 MiB unless set). For tests
    /// and tools that need many small segments; not part of the stable interface.
    #[doc(hidden)]
    pub fn set_segment_bytes(&self, bytes: u64) {
        self.inner.disk.lock().segment_bytes = bytes.max(1);
    }

    /// The heap bytes the store keeps per run for segment collection, in all: for measuring
    /// it; not part of the stable interface.
    #[doc(hidden)]
    pub fn segment_tracking_bytes(&self) -> usize {
        self.inner.disk.lock().liveness.run_bytes()
    }

    /// Makes every write so far durable, stops the background compaction and compacts one last
    /// time.
    pub fn close(&self) -> Result<(), WorldError> {
        if let Some(task) = self.compactor.lock().take() {
            task.abort();
        }
        let threads = std::mem::take(&mut *self.threads.lock());
        if !threads.is_empty() {
            self.inner.wal.close();
            for thread in threads {
                if thread.join().is_err() {
                    return Err(WorldError::Internal(
                        "hybrid store: a WAL thread panicked".into(),
                    ));
                }
            }
        }
        self.inner.compact().map(|_| ())
    }

    /// Checks a write and applies it to the memory store's tip (unpublished), queues its lines
    /// for the WAL, and waits until they got as far as `wait` says. Applying and queueing happen
    /// under one lock, so the WAL holds each run's events in `seq` order.
    async fn write<T>(
        &self,
        wait: Wait,
        apply: impl FnOnce(&MemoryStore) -> Result<(T, Vec<u8>, Option<Publish>), WorldError>,
    ) -> Result<T, WorldError> {
        let (value, ticket) = self.inner.wal.queue(wait, || apply(&self.inner.memory))?;
        if let Some(ticket) = ticket {
            self.inner.wal.wait(ticket, wait).await?;
        }
        Ok(value)
    }

    async fn append_with(
        &self,
        run_id: &str,
        events: Vec<Event>,
        wait: Wait,
    ) -> Result<Appended, WorldError> {
        self.write(wait, |memory| {
            let (appended, run) = memory.append_unpublished(run_id, events)?;
            let Some(last) = appended.events.last() else {
                return Ok((appended, Vec::new(), None));
            };
            let len = last.seq + 1;
            let lines = encode(&appended.events)?;
            Ok((appended, lines, Some((run, len))))
        })
        .await
    }
}

impl Inner {
    /// Deletes what a removed run may have outside the WAL and segments but its streams: a log
    /// a file-mode world left for it.
    fn remove_leftovers(&self, run_id: &str) -> Result<(), WorldError> {
        let path = log_path(&self.root.join("workflows"), run_id);
        match fs::remove_file(&path) {
            Ok(()) => sync_dir(&self.root.join("workflows")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_error("could not remove", &path, e)),
        }
    }
}

/// Deletes the files a removed run may have left outside the WAL and segments (its run log, its
/// streams), when the store opens.
fn remove_run_files(root: &Path, run_id: &str) -> Result<(), WorldError> {
    let log = log_path(&root.join("workflows"), run_id);
    match fs::remove_file(&log) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_error("could not remove", &log, e)),
    }
    let streams = root.join("streams").join(run_id);
    match fs::remove_dir_all(&streams) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_error("could not remove", &streams, e)),
    }
}

impl Drop for HybridStore {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            tracing::warn!(error = %e, "hybrid store: compaction on close failed");
        }
    }
}

#[async_trait]
impl RunStore for HybridStore {
    async fn create_run(&self, mut first: Event) -> Result<(), WorldError> {
        check_run_id(&first.run_id)?;
        self.write(Wait::Synced, |memory| {
            let run = memory.create_unpublished(first.clone())?;
            first.seq = 0;
            Ok(((), encode(&[Arc::new(first)])?, Some((run, 1))))
        })
        .await
    }

    async fn get_run(&self, id: &str, resolve: ResolveData) -> Result<WorkflowState, WorldError> {
        self.inner.memory.get_run(id, resolve).await
    }

    async fn list_runs(
        &self,
        filter: &WorkflowQueryFilter,
    ) -> Result<Page<WorkflowState>, WorldError> {
        self.inner.memory.list_runs(filter).await
    }

    async fn unfinished_runs(&self) -> Result<Vec<String>, WorldError> {
        self.inner.memory.unfinished_runs().await
    }
}

#[async_trait]
impl IdempotencyStore for HybridStore {
    async fn find_by_idempotency_key(
        &self,
        key: &str,
        since: Millis,
    ) -> Result<Option<String>, WorldError> {
        self.inner.memory.find_by_idempotency_key(key, since).await
    }
}

#[async_trait]
impl EventStore for HybridStore {
    async fn append(&self, run_id: &str, events: Vec<Event>) -> Result<Appended, WorldError> {
        self.append_with(run_id, events, Wait::Synced).await
    }

    async fn append_written(
        &self,
        run_id: &str,
        events: Vec<Event>,
    ) -> Result<Appended, WorldError> {
        self.append_with(run_id, events, Wait::Written).await
    }

    async fn append_nowait(
        &self,
        run_id: &str,
        events: Vec<Event>,
    ) -> Result<Appended, WorldError> {
        self.append_with(run_id, events, Wait::Queued).await
    }

    async fn wait_durable(&self, run_id: &str) -> Result<(), WorldError> {
        if self.inner.memory.is_published(run_id) {
            return Ok(());
        }
        let ticket = self.inner.wal.last_ticket();
        self.inner.wal.wait(ticket, Wait::Synced).await
    }

    async fn history(&self, run_id: &str, from_seq: u64) -> Result<Vec<Arc<Event>>, WorldError> {
        self.inner.memory.history(run_id, from_seq).await
    }

    async fn history_tip(
        &self,
        run_id: &str,
        from_seq: u64,
    ) -> Result<Vec<Arc<Event>>, WorldError> {
        self.inner.memory.history_tip(run_id, from_seq)
    }

    async fn list_events(
        &self,
        run_id: &str,
        query: &ListQuery,
    ) -> Result<Page<Arc<Event>>, WorldError> {
        self.inner.memory.list_events(run_id, query).await
    }

    async fn list_events_by_correlation_id(
        &self,
        correlation_id: &str,
        query: &ListQuery,
    ) -> Result<Page<Arc<Event>>, WorldError> {
        self.inner
            .memory
            .list_events_by_correlation_id(correlation_id, query)
            .await
    }
}

#[async_trait]
impl StepStore for HybridStore {
    async fn get_activity(&self, run_id: &str, position: u32) -> Result<ActivityState, WorldError> {
        self.inner.memory.get_activity(run_id, position).await
    }

    async fn get_step(
        &self,
        step_id: &str,
        resolve: ResolveData,
    ) -> Result<StepRecord, WorldError> {
        self.inner.memory.get_step(step_id, resolve).await
    }

    async fn list_steps(
        &self,
        run_id: &str,
        query: &ListQuery,
    ) -> Result<Page<ActivityState>, WorldError> {
        self.inner.memory.list_steps(run_id, query).await
    }
}

#[async_trait]
impl HookStore for HybridStore {
    async fn find_hook(&self, token_digest: &str) -> Result<Option<super::HookRef>, WorldError> {
        self.inner.memory.find_hook(token_digest).await
    }

    async fn get_hook(&self, hook_id: &str) -> Result<HookRecord, WorldError> {
        self.inner.memory.get_hook(hook_id).await
    }

    async fn list_run_hooks(
        &self,
        run_id: &str,
        query: &ListQuery,
    ) -> Result<Page<HookRecord>, WorldError> {
        self.inner.memory.list_run_hooks(run_id, query).await
    }

    async fn list_waiting_hooks(&self, query: &ListQuery) -> Result<Page<HookRecord>, WorldError> {
        self.inner.memory.list_waiting_hooks(query).await
    }
}

/// One process holds the directory: every unfinished run is its to drive (the defaults).
impl LeaseStore for HybridStore {}

/// Retention: a removal is a tombstone in the WAL, durable before `remove_run` returns (see
/// the module docs).
#[async_trait]
impl super::RetentionStore for HybridStore {
    async fn ended_runs(
        &self,
        before: Millis,
        after: Option<&super::EndedCursor>,
        limit: usize,
    ) -> Result<Vec<super::EndedRun>, WorldError> {
        Ok(self.inner.memory.list_ended(before, after, limit))
    }

    async fn remove_runs(
        &self,
        runs: &[super::RemoveRun],
    ) -> Result<Vec<super::Removal>, WorldError> {
        // Memory forgets each run under the WAL's queue lock, as its tombstone is queued: no
        // write to the run can come after it. The batch's tombstones go in one write and one
        // sync. A crash before they are synced leaves the runs in place on the next open.
        let removals = self
            .write(Wait::Synced, |memory| {
                let mut lines = Vec::new();
                let mut removals = Vec::with_capacity(runs.len());
                for run in runs {
                    removals.push(memory.remove_ended_with(
                        &run.run_id,
                        run.ended_before,
                        |state| {
                            encode_tombstone(
                                &mut lines,
                                &state.id,
                                state.completed_at.unwrap_or(state.updated_at),
                            );
                            Ok(())
                        },
                    )?);
                }
                Ok((removals, lines, None))
            })
            .await?;
        for (run, removal) in runs.iter().zip(&removals) {
            if let super::Removal::Removed { .. } = removal {
                self.inner.remove_leftovers(&run.run_id)?;
                self.streams.remove_run(&run.run_id)?;
            }
        }
        Ok(removals)
    }
}

/// Timers live in memory only: the engine re-arms them from run history on start.
#[async_trait]
impl TimerStore for HybridStore {
    async fn add_timer(&self, timer: Timer) -> Result<(), WorldError> {
        self.inner.memory.add_timer(timer).await
    }

    async fn take_due_timers(&self, now: Millis, limit: usize) -> Result<Vec<Timer>, WorldError> {
        self.inner.memory.take_due_timers(now, limit).await
    }

    async fn next_timer_at(&self) -> Result<Option<Millis>, WorldError> {
        self.inner.memory.next_timer_at().await
    }

    async fn remove_run_timers(&self, run_id: &str) -> Result<bool, WorldError> {
        self.inner.memory.remove_run_timers(run_id).await
    }
}
