//! The hybrid store: a [`MemoryStore`] for every read, in front of one shared write-ahead log
//! with group commit, compacted every 5 s into the same per-run logs the [`FileStore`] keeps.
//!
//! Layout under the root directory (the file store's, plus the WAL and a lock):
//!
//! ```text
//! root/
//!   state/format.json                 {"format": 1}
//!   state/lock                        held (exclusive) while a HybridStore has the directory open
//!   state/wal.ndjson                  every acknowledged write not yet compacted, in order
//!   state/wal.next.ndjson             while a compaction runs: the writes made since it began
//!   workflows/{run_id}.events.ndjson  one JSON event per line, in seq order
//!   streams/{run_id}/{name}.ndjson    stream chunks, outside the WAL (see `store/streams/files.rs`)
//!   schedules/{id}.json               one schedule each, outside the WAL (see `store/schedules/files.rs`)
//! ```
//!
//! Every `create_run` and `append` is checked and applied to the memory store's tip (so the next
//! write to the run is checked against it and gets the next `seq`), but stays invisible to
//! readers; its lines go to a shared pending buffer. One flusher thread writes whatever the
//! buffer holds, syncs the WAL once, then publishes the writes it covered (readers see them from
//! then on) and wakes their writers: concurrent writers share fsyncs ([`HybridStore::stats`]
//! counts both). `append` returns once its write is durable; `append_nowait` returns at once,
//! its write being durable with the next sync. Compaction ([`HybridStore::compact`], every 5 s on
//! a Tokio runtime, and on [`close`](HybridStore::close) or drop) first points the flusher at a
//! new `wal.next.ndjson`, so writers never wait for it; then appends the events of `wal.ndjson`
//! to the per-run logs (all files written, then synced together), and finally renames
//! `wal.next.ndjson` over `wal.ndjson`. So `wal.ndjson` is never empty while `wal.next.ndjson`
//! exists.
//!
//! On [`HybridStore::open`] the run logs are loaded like the file store's, then `wal.ndjson` and
//! `wal.next.ndjson` (if a crash interrupted a compaction) are replayed in that order: events
//! already in their run's log (a crash mid-compaction) are skipped, the rest applied. A torn last
//! WAL line is truncated with a warning; corruption anywhere else fails with the file and byte
//! offset.
//!
//! [`FileStore`]: super::FileStore

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::{Condvar, Mutex};

use crate::clock::Millis;
use crate::error::WorldError;
use crate::model::{ActivityState, Event, Page, ResolveData, WorkflowQueryFilter, WorkflowState};

use super::file::{
    check_run_id, encode, io_error, list_run_logs, load_run_log, log_path, now, scan_events,
    sync_dir, truncate_torn, write_logs_unsynced_dir, FileStore, LogWrite,
};
use super::memory::RunHandle;
use super::{Appended, MemoryStore, RunStore, Timer, TimerStore};

/// How often the background job compacts the WAL.
const COMPACT_EVERY: Duration = Duration::from_secs(5);

/// The longest writes made without waiting stay in the buffer when no waiting write comes to
/// take them along in its sync.
const NOWAIT_DELAY: Duration = Duration::from_millis(2);

/// Lines waiting for the WAL, and how far the WAL is durable.
#[derive(Default)]
struct Pending {
    /// Serialized lines not yet handed to the flusher.
    buf: Vec<u8>,
    /// The writes in `buf`: each run and its length once the write is published.
    writes: Vec<(RunHandle, u64)>,
    /// Ticket of the last write put into `buf` (tickets count from 1).
    enqueued: u64,
    /// Every write with a ticket up to this one is durable and published.
    durable: u64,
    /// Someone waits for the buffer to be durable: sync it now. Writes made without waiting
    /// only leave it for up to [`NOWAIT_DELAY`], so that they share the sync of the next write
    /// that waits.
    urgent: bool,
    /// A WAL write failed: memory holds events the disk may not; every later write is refused.
    failed: Option<String>,
    /// The store is closing: the flusher empties the buffer and stops.
    closing: bool,
}

/// What compaction keeps between runs, behind a mutex that serializes compactions (WAL writes
/// go on meanwhile: they have their own).
struct Disk {
    /// Events in each run's log on disk.
    counts: HashMap<String, u64>,
    /// An earlier compaction failed part-way: compaction is off until the store is reopened (the
    /// WAL keeps everything, so nothing acknowledged is lost).
    broken: Option<String>,
}

struct Inner {
    root: PathBuf,
    workflows: PathBuf,
    wal_path: PathBuf,
    /// Where writes go while a compaction moves `wal_path`'s events into the run logs.
    next_path: PathBuf,
    /// The file the flusher appends to: `wal_path`, or `next_path` during a compaction.
    wal: Mutex<File>,
    memory: MemoryStore,
    pending: Mutex<Pending>,
    /// Wakes the flusher when the buffer gets lines (or the store closes).
    work: Condvar,
    /// Wakes writers waiting for durability after each sync.
    notify: tokio::sync::Notify,
    disk: Mutex<Disk>,
    appends: AtomicU64,
    fsyncs: AtomicU64,
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
    compactor: Mutex<Option<tokio::task::JoinHandle<()>>>,
    flusher: Mutex<Option<std::thread::JoinHandle<()>>>,
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
        let state = root.join("state");
        for dir in [&workflows, &state] {
            fs::create_dir_all(dir).map_err(|e| io_error("could not create", dir, e))?;
        }
        sync_dir(&root)?;
        let lock = Self::lock(&state)?;
        FileStore::check_format(&state, false)?;

        let memory = MemoryStore::new();
        let mut counts = HashMap::new();
        for run_id in list_run_logs(&workflows, false)? {
            let loaded = load_run_log(&log_path(&workflows, &run_id), &run_id, &memory, false)?;
            counts.insert(run_id, loaded.count);
        }

        let wal_path = state.join("wal.ndjson");
        let next_path = state.join("wal.next.ndjson");
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
        let mut replayed = HashMap::new();
        Self::replay(&wal_path, &memory, &counts, &mut replayed)?;
        if interrupted {
            Self::replay(&next_path, &memory, &counts, &mut replayed)?;
        }
        drop(replayed);

        let inner = Arc::new(Inner {
            root,
            workflows,
            wal_path,
            next_path,
            wal: Mutex::new(wal),
            memory,
            pending: Mutex::new(Pending::default()),
            work: Condvar::new(),
            notify: tokio::sync::Notify::new(),
            disk: Mutex::new(Disk {
                counts,
                broken: None,
            }),
            appends: AtomicU64::new(0),
            fsyncs: AtomicU64::new(0),
            _lock: lock,
        });
        inner.compact()?;
        let compactor = tokio::runtime::Handle::try_current()
            .ok()
            .map(|handle| handle.spawn(compact_loop(Arc::downgrade(&inner))));
        let flusher = {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name("worlds-wal".into())
                .spawn(move || inner.flush_loop())
                .map_err(|e| WorldError::Internal(format!("could not start the WAL thread: {e}")))?
        };
        Ok(HybridStore {
            streams: super::streams::FileStreams::new(&inner.root, false, false),
            schedules: super::schedules::FileSchedules::new(&inner.root, false),
            inner,
            compactor: Mutex::new(compactor),
            flusher: Mutex::new(Some(flusher)),
        })
    }

    /// Takes the exclusive lock on `state/lock`.
    fn lock(state: &Path) -> Result<File, WorldError> {
        let path = state.join("lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| io_error("could not open", &path, e))?;
        match file.try_lock() {
            Ok(()) => Ok(file),
            Err(fs::TryLockError::WouldBlock) => Err(WorldError::Unavailable(format!(
                "hybrid store: another process (or another store in this one) owns {} in hybrid mode (it holds {}); hybrid storage is for one process per directory: use Persistence::File for several processes on one host, or PostgreSQL across machines",
                state.parent().unwrap_or(state).display(),
                path.display()
            ))),
            Err(fs::TryLockError::Error(e)) => Err(io_error("could not lock", &path, e)),
        }
    }

    /// Applies the WAL's events that are not in their run's log yet to `memory`, truncating a
    /// torn last line. `next` is each run's next `seq`, carried from one WAL file to the next.
    fn replay(
        wal_path: &Path,
        memory: &MemoryStore,
        counts: &HashMap<String, u64>,
        next: &mut HashMap<String, u64>,
    ) -> Result<(), WorldError> {
        let bytes = match fs::read(wal_path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_error("could not read", wal_path, e)),
        };
        let scan = scan_events(wal_path, &bytes, |_, event| {
            check_run_id(&event.run_id).map_err(|e| e.to_string())?;
            let expected = next
                .entry(event.run_id.clone())
                .or_insert_with(|| counts.get(&event.run_id).copied().unwrap_or(0));
            if event.seq < *expected {
                // Already compacted into the run's log before a crash: it must be the same event.
                let stored =
                    now(memory.history(&event.run_id, event.seq)).map_err(|e| e.to_string())?;
                return match stored.first() {
                    Some(first) if first.id == event.id => Ok(()),
                    _ => Err(format!(
                        "event {} of run {} at seq {} differs from the run log's",
                        event.id, event.run_id, event.seq
                    )),
                };
            }
            if event.seq > *expected {
                return Err(format!(
                    "event seq {} of run {} where seq {expected} was expected",
                    event.seq, event.run_id
                ));
            }
            let run_id = event.run_id.clone();
            let stored = if event.seq == 0 {
                now(memory.create_run(event))
            } else {
                now(memory.append(&run_id, vec![event])).map(|_| ())
            };
            stored.map_err(|e| format!("the history refuses this event: {e}"))?;
            *expected += 1;
            Ok(())
        })?;
        if scan.torn {
            truncate_torn(wal_path, scan.good_end, bytes.len())?;
        }
        Ok(())
    }

    /// `(appends, fsyncs)` since open: writes acknowledged (`create_run` and `append` calls that
    /// reached the WAL) and WAL syncs that made them durable. Appends per fsync is the mean
    /// group-commit size.
    pub fn stats(&self) -> (u64, u64) {
        (
            self.inner.appends.load(Ordering::Relaxed),
            self.inner.fsyncs.load(Ordering::Relaxed),
        )
    }

    /// Moves the WAL's events into the per-run logs (synced), then drops them from the WAL.
    /// Returns the number of events moved. Runs every 5 s on its own; call it to compact now.
    /// Writers do not wait for it: their writes go to a second WAL file meanwhile.
    pub fn compact(&self) -> Result<usize, WorldError> {
        self.inner.compact()
    }

    /// Makes every write so far durable, stops the background compaction and compacts one last
    /// time.
    pub fn close(&self) -> Result<(), WorldError> {
        if let Some(task) = self.compactor.lock().take() {
            task.abort();
        }
        if let Some(flusher) = self.flusher.lock().take() {
            self.inner.pending.lock().closing = true;
            self.inner.work.notify_all();
            if flusher.join().is_err() {
                return Err(WorldError::Internal(
                    "hybrid store: the WAL thread panicked".into(),
                ));
            }
        }
        self.inner.compact().map(|_| ())
    }

    /// The error for a write after a WAL write failed.
    fn failed(&self, why: &str) -> WorldError {
        WorldError::Internal(format!(
            "hybrid store is now inconsistent: a write to {} failed ({why}); reopen the store (restart the world) to recover from disk",
            self.inner.wal_path.display()
        ))
    }

    /// Checks a write and applies it to the memory store's tip (unpublished), queues its lines
    /// for the WAL, and (if `wait`) waits until the flusher made them durable and published
    /// them. Applying and queueing happen under one lock, so the WAL holds each run's events in
    /// `seq` order.
    async fn write<T>(
        &self,
        wait: bool,
        apply: impl FnOnce(&MemoryStore) -> Result<(T, Vec<u8>, Option<(RunHandle, u64)>), WorldError>,
    ) -> Result<T, WorldError> {
        let ticket = {
            let mut pending = self.inner.pending.lock();
            if let Some(why) = &pending.failed {
                return Err(self.failed(why));
            }
            if pending.closing {
                return Err(WorldError::Unavailable("hybrid store: closed".into()));
            }
            let (value, lines, write) = apply(&self.inner.memory)?;
            let Some(write) = write else {
                return Ok(value);
            };
            if wait || pending.buf.is_empty() {
                pending.urgent |= wait;
                self.inner.work.notify_one();
            }
            pending.buf.extend_from_slice(&lines);
            pending.writes.push(write);
            pending.enqueued += 1;
            self.inner.appends.fetch_add(1, Ordering::Relaxed);
            if !wait {
                return Ok(value);
            }
            (value, pending.enqueued)
        };
        let (value, ticket) = ticket;
        self.wait_for(ticket).await?;
        Ok(value)
    }

    /// Waits until every write up to `ticket` is durable and published.
    async fn wait_for(&self, ticket: u64) -> Result<(), WorldError> {
        loop {
            let notified = self.inner.notify.notified();
            tokio::pin!(notified);
            {
                let mut pending = self.inner.pending.lock();
                if pending.durable >= ticket {
                    return Ok(());
                }
                if let Some(why) = &pending.failed {
                    return Err(self.failed(why));
                }
                if !pending.urgent && !pending.buf.is_empty() {
                    pending.urgent = true;
                    self.inner.work.notify_one();
                }
                // Registered before the lock is released, so the wake-up cannot be missed.
                notified.as_mut().enable();
            }
            notified.await;
        }
    }
}

impl Inner {
    /// The flusher thread: writes whatever is queued, syncs once, publishes the writes covered
    /// and wakes their writers; until the store closes and the buffer is empty.
    fn flush_loop(&self) {
        loop {
            let (buf, writes, upto) = {
                let mut pending = self.pending.lock();
                while pending.buf.is_empty() && !pending.closing {
                    self.work.wait(&mut pending);
                }
                if !pending.urgent && !pending.closing {
                    // Only writes that nobody waits for: give a waiting one the chance to come
                    // and share the sync.
                    self.work.wait_for(&mut pending, NOWAIT_DELAY);
                }
                if pending.buf.is_empty() || pending.failed.is_some() {
                    return;
                }
                pending.urgent = false;
                (
                    std::mem::take(&mut pending.buf),
                    std::mem::take(&mut pending.writes),
                    pending.enqueued,
                )
            };
            let result = {
                let mut wal = self.wal.lock();
                wal.write_all(&buf).and_then(|()| wal.sync_data())
            };
            self.fsyncs.fetch_add(1, Ordering::Relaxed);
            let ok = result.is_ok();
            if ok {
                // Readers see the writes only now that they are durable.
                for (run, len) in &writes {
                    self.memory.publish(run, *len);
                }
            }
            {
                let mut pending = self.pending.lock();
                match result {
                    Ok(()) => pending.durable = upto,
                    Err(e) => {
                        tracing::error!(file = %self.wal_path.display(), error = %e, "hybrid store: WAL write failed");
                        pending.failed = Some(e.to_string());
                    }
                }
            }
            self.notify.notify_waiters();
            if !ok {
                return;
            }
        }
    }

    fn compact(&self) -> Result<usize, WorldError> {
        let mut disk = self.disk.lock();
        if let Some(why) = &disk.broken {
            return Err(WorldError::Internal(format!(
                "hybrid store: compaction is off after an earlier failure ({why}); the WAL keeps every write; reopen the store to retry"
            )));
        }
        let result = self.compact_locked(&mut disk);
        if let Err(e) = &result {
            disk.broken = Some(e.to_string());
        }
        result
    }

    /// Points the flusher at `wal.next.ndjson` (unless a crash left it in use already), moves
    /// the events of `wal.ndjson` into the run logs, then renames `wal.next.ndjson` over it.
    fn compact_locked(&self, disk: &mut Disk) -> Result<usize, WorldError> {
        let state = self.wal_path.parent().unwrap_or(&self.root);
        {
            let mut wal = self.wal.lock();
            if !self.next_path.exists() {
                let len = wal
                    .metadata()
                    .map_err(|e| io_error("could not read", &self.wal_path, e))?
                    .len();
                if len == 0 {
                    return Ok(0);
                }
                *wal = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.next_path)
                    .map_err(|e| io_error("could not create", &self.next_path, e))?;
                sync_dir(state)?;
            }
        }
        let moved = self.move_to_logs(disk)?;
        // Every event of `wal.ndjson` is in its run's log and synced: it can go. The flusher
        // keeps appending to the renamed file.
        fs::rename(&self.next_path, &self.wal_path)
            .map_err(|e| io_error("could not rename", &self.next_path, e))?;
        sync_dir(state)?;
        Ok(moved)
    }

    /// Appends the events of `wal.ndjson` that are not in their run's log yet to the logs, and
    /// syncs them.
    fn move_to_logs(&self, disk: &mut Disk) -> Result<usize, WorldError> {
        let bytes = match fs::read(&self.wal_path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(io_error("could not read", &self.wal_path, e)),
        };
        if bytes.is_empty() {
            return Ok(0);
        }
        // Lines of the events not yet in each run's log, in order, as byte ranges of the WAL:
        // a WAL line is the run log's line byte for byte, so events are checked here but not
        // kept (or encoded again).
        let mut fresh: BTreeMap<String, Vec<Range<usize>>> = BTreeMap::new();
        let counts = &disk.counts;
        let scan = scan_events(&self.wal_path, &bytes, |offset, event| {
            let have = counts.get(&event.run_id).copied().unwrap_or(0);
            let batched = fresh.get(&event.run_id).map_or(0, Vec::len);
            let expected = have + batched as u64;
            if event.seq < expected {
                return Ok(());
            }
            if event.seq > expected {
                return Err(format!(
                    "event seq {} of run {} where seq {expected} was expected",
                    event.seq, event.run_id
                ));
            }
            let end = bytes[offset..]
                .iter()
                .position(|&b| b == b'\n')
                .map_or(bytes.len(), |i| offset + i + 1);
            fresh.entry(event.run_id).or_default().push(offset..end);
            Ok(())
        })?;
        if scan.torn {
            return Err(WorldError::Internal(format!(
                "hybrid store: {} has an incomplete line at byte offset {} while open; not compacting",
                self.wal_path.display(),
                scan.good_end
            )));
        }
        // Every run's lines are written first, then synced together (see
        // `write_logs_unsynced_dir`): one sync each, in sequence, made compaction of many new
        // runs take minutes.
        let workflows = &self.workflows;
        let writes = fresh
            .iter()
            .filter(|(_, lines)| !lines.is_empty())
            .map(|(run_id, ranges)| {
                let mut lines = Vec::with_capacity(ranges.iter().map(Range::len).sum());
                for range in ranges {
                    lines.extend_from_slice(&bytes[range.clone()]);
                }
                Ok(LogWrite {
                    path: log_path(workflows, run_id),
                    lines,
                    create: !counts.contains_key(run_id),
                })
            });
        let created = write_logs_unsynced_dir(writes)?;
        let mut moved = 0;
        for (run_id, ranges) in fresh {
            if !ranges.is_empty() {
                moved += ranges.len();
                *disk.counts.entry(run_id).or_insert(0) += ranges.len() as u64;
            }
        }
        if created {
            sync_dir(&self.workflows)?;
        }
        Ok(moved)
    }
}

/// Compacts every [`COMPACT_EVERY`] until the store is dropped.
async fn compact_loop(inner: std::sync::Weak<Inner>) {
    loop {
        tokio::time::sleep(COMPACT_EVERY).await;
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let compacted = tokio::task::spawn_blocking(move || strong.compact()).await;
        match compacted {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "hybrid store: compaction failed"),
            Err(_) => return,
        }
    }
}

impl HybridStore {
    async fn append_with(
        &self,
        run_id: &str,
        events: Vec<Event>,
        wait: bool,
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
        self.write(true, |memory| {
            let run = memory.create_unpublished(first.clone())?;
            first.seq = 0;
            Ok(((), encode(&[Arc::new(first)])?, Some((run, 1))))
        })
        .await
    }

    async fn find_by_idempotency_key(
        &self,
        key: &str,
        since: Millis,
    ) -> Result<Option<String>, WorldError> {
        self.inner.memory.find_by_idempotency_key(key, since).await
    }

    async fn append(&self, run_id: &str, events: Vec<Event>) -> Result<Appended, WorldError> {
        self.append_with(run_id, events, true).await
    }

    async fn append_nowait(
        &self,
        run_id: &str,
        events: Vec<Event>,
    ) -> Result<Appended, WorldError> {
        self.append_with(run_id, events, false).await
    }

    async fn wait_durable(&self, run_id: &str) -> Result<(), WorldError> {
        if self.inner.memory.is_published(run_id) {
            return Ok(());
        }
        let ticket = self.inner.pending.lock().enqueued;
        self.wait_for(ticket).await
    }

    async fn get_run(&self, id: &str, resolve: ResolveData) -> Result<WorkflowState, WorldError> {
        self.inner.memory.get_run(id, resolve).await
    }

    async fn find_hook(&self, token_digest: &str) -> Result<Option<super::HookRef>, WorldError> {
        self.inner.memory.find_hook(token_digest).await
    }

    async fn get_activity(&self, run_id: &str, position: u32) -> Result<ActivityState, WorldError> {
        self.inner.memory.get_activity(run_id, position).await
    }

    async fn history(&self, run_id: &str, from_seq: u64) -> Result<Vec<Arc<Event>>, WorldError> {
        self.inner.memory.history(run_id, from_seq).await
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

    async fn remove_run_timers(&self, run_id: &str) -> Result<(), WorldError> {
        self.inner.memory.remove_run_timers(run_id).await
    }
}
