//! The file store: a [`MemoryStore`] for every read, in front of a write-ahead, append-only
//! event log per run on disk, which several processes on one host may share.
//!
//! Layout under the root directory (format 4, see [`mod@format`]):
//!
//! ```text
//! root/
//!   state/format.json                 {"format": 5}
//!   state/lock                        held shared by every file store (a hybrid store takes it exclusive)
//!   state/owners/{member}.lock        held exclusive by one open store: its liveness
//!   state/inbox/{member}/{run_id}     "run_id changed": a note for the member driving it
//!   leases/{run_id}                   the member driving the run
//!   ids/{hex of workflow id}          reserves a workflow id across processes
//!   ids/key-{hex of key}              the run an idempotency key last started, and when
//!   workflows/{run_id}.events.ndjson  one record per line (an event and its checksum, see `record.rs`), in seq order
//!   workflows/{run_id}.removed        a removed run's log while its removal finishes (see `remove.rs`)
//!   streams/{run_id}/{name}.ndjson    one stream chunk per line (see `store/streams/files.rs`)
//!   schedules/{id}.json               one schedule each (see `store/schedules/files.rs`)
//! ```
//!
//! Every acknowledged `create_run` and `append` is on disk (`sync_data`) before it returns.
//! On [`FileStore::open`] each log is read back and replayed through the memory store, which
//! checks every event with the same rules it applies to live writes. A torn last line (a crash
//! mid-write, never acknowledged) is cut off with a warning; corruption anywhere else makes
//! `open` fail with the file and byte offset, so no data is ever dropped silently.
//!
//! **Several processes.** Each write to a run happens under an exclusive advisory lock on the
//! run's log (`flock`); before writing, the store reads whatever other processes appended since
//! it last looked, so the history's rules are checked against the whole history. Each run is
//! driven by one process at a time, its lease holder ([`lease`]); the engine asks
//! [`LeaseStore::claim_runs`](super::LeaseStore::claim_runs) for runs whose holder is gone and
//! [`LeaseStore::external_changes`](super::LeaseStore::external_changes) for runs another
//! process wrote to. Reads of runs another process drives catch up from disk
//! first, so queries see every process's work.
//!
//! [`FileStore::open_read_only`] loads the same way for inspection (the `worlds` CLI) but never
//! writes: it creates nothing, reports a torn last line in [`FileStore::warnings`] instead of
//! cutting it off, and refuses every write.
//!
//! **Retention.** Removing a finished run renames its log to `{run_id}.removed` under the log's
//! lock (the commit point), then deletes its other files and the marker; a marker found on open
//! is a removal a crash interrupted, finished then (see `remove.rs`).
//!
//! Timers are kept in memory only, by the process driving the run: whoever starts driving a run
//! re-arms its timers from history (see `engine::recovery`), so they need no file of their own.

mod checksums;
mod create;
pub(in crate::store) mod dir_lock;
mod format;
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) mod fuzz;
mod keys;
mod lease;
mod log;
mod read;
mod record;
mod remove;
mod unpack;
mod wal_read;

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;

use crate::clock::Millis;
use crate::error::WorldError;
use crate::model::{Event, ListQuery, Page, ResolveData, WorkflowQueryFilter, WorkflowState};

use super::{Appended, EventStore, IdempotencyStore, MemoryStore, RunStore, Timer, TimerStore};

use lease::Membership;
use log::{apply_events, list_run_logs_removing, LOG_SUFFIX, TMP_SUFFIX};
pub(in crate::store) use log::{
    check_run_id, encode, fresh_records, io_error, list_run_logs, load_run_log, log_path, now,
    read_whole_lines, scan_headers_at, sync_dir, truncate_torn, Records,
};
pub(in crate::store) use record::{encode_tombstone, is_tombstone};
pub(in crate::store) use wal_read::{
    list_segments, remove_stale_rewrites, rewrite_path, segment_number, segment_path,
    undo_interrupted_compaction, CompactionMark, WalReplay, SEGMENTS_DIR, SEGMENT_CHUNK, WAL_FILES,
};

/// What the write-ahead logs of a hybrid store held when a [`FileStore`] read them (see
/// [`FileStore::wal_summary`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WalSummary {
    /// Records in the WAL files, each verified.
    pub records: u64,
    /// Of those, events not yet compacted into a segment or their run's log: acknowledged work
    /// that only the WAL holds until the hybrid store next compacts.
    pub pending: u64,
    /// Segment files (`segments/`): the hybrid store's compacted records, many runs per file.
    pub segments: u64,
    /// Records in the segment files, each verified.
    pub segment_records: u64,
}

/// The open log of one run.
struct RunLog {
    path: PathBuf,
    /// Open for reading and appending; `None` while the run is being created (or if its
    /// creation was refused), and in a read-only store.
    file: Option<File>,
    /// A write failed after memory accepted events: memory and disk disagree.
    broken: bool,
    /// Bytes of the log applied to memory.
    len: u64,
    /// Events applied to memory.
    count: u64,
    /// The run reached a terminal status: its log will not grow again.
    finished: bool,
    /// The member driving the run, as last read from its lease.
    holder: Option<String>,
}

/// Per-run log behind an async mutex: it is held across the memory append and the disk write,
/// so two appends to one run from this process reach the file in `seq` order.
type Slot = Arc<tokio::sync::Mutex<RunLog>>;

/// Durable storage: a [`MemoryStore`] answers every read and query, and each run's history is
/// also written to an append-only, fsynced log file (`Persistence::File`). Several processes
/// may open one directory at once (see the module docs).
///
/// ```
/// use worlds_engine::store::FileStore;
/// let dir = std::env::temp_dir().join(format!("worlds-doc-{}", std::process::id()));
/// let store = FileStore::open(&dir)?;
/// assert!(dir.join("state/format.json").exists());
/// # drop(store);
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok::<(), worlds_engine::WorldError>(())
/// ```
pub struct FileStore {
    root: PathBuf,
    workflows: PathBuf,
    memory: MemoryStore,
    logs: Mutex<HashMap<String, Slot>>,
    /// This store's membership of the directory; `None` when opened read-only.
    member: Option<Membership>,
    /// What loading found but left alone (read-only mode only).
    warnings: Vec<String>,
    /// What a read-only open found in a hybrid store's write-ahead logs.
    wal: WalSummary,
    /// Held while a run created by another process is loaded, so that two threads finding the
    /// same new run load it once.
    loading: Mutex<()>,
    /// The runs' streams, under `streams/` (see `store/streams/files.rs`).
    pub(in crate::store) streams: super::streams::FileStreams,
    /// The schedules, under `schedules/` (see `store/schedules/files.rs`).
    pub(in crate::store) schedules: super::schedules::FileSchedules,
    pub(in crate::store) keys: super::keys::KeyFiles,
    /// The pauses in force, under `pauses/` (see `store/pauses/files.rs`).
    pub(in crate::store) pauses: super::pauses::PauseFiles,
}

impl std::fmt::Debug for FileStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileStore")
            .field("root", &self.root)
            .field("runs", &self.logs.lock().len())
            .field("member", &self.member)
            .finish()
    }
}

/// Runs `f` while holding the exclusive advisory lock on `file`, releasing it afterwards.
fn locked<T>(
    file: &File,
    path: &Path,
    f: impl FnOnce() -> Result<T, WorldError>,
) -> Result<T, WorldError> {
    file.lock()
        .map_err(|e| io_error("could not lock", path, e))?;
    let result = f();
    let unlocked = file
        .unlock()
        .map_err(|e| io_error("could not unlock", path, e));
    let value = result?;
    unlocked?;
    Ok(value)
}

impl FileStore {
    /// Opens (creating if needed) the store under `root`, and loads every run log into memory.
    ///
    /// Fails if `state/format.json` names a newer format than this build knows (an older one is
    /// migrated), if a hybrid world holds the directory, or if a log is corrupt anywhere but its
    /// last line (the error names the file and byte offset). A torn last line, left by a crash
    /// mid-write, is truncated with a warning.
    pub fn open(root: impl AsRef<Path>) -> Result<FileStore, WorldError> {
        let root = root.as_ref().to_path_buf();
        let workflows = root.join("workflows");
        let state = root.join("state");
        for dir in [&workflows, &state] {
            fs::create_dir_all(dir).map_err(|e| io_error("could not create", dir, e))?;
        }
        sync_dir(&root)?;
        format::check_format(&root, false, false)?;
        unpack::fold_hybrid_files(&root)?;
        let member = Membership::join(&root)?;
        member.sweep_dead_members();

        let store = FileStore {
            streams: super::streams::FileStreams::new(&root, true, false),
            schedules: super::schedules::FileSchedules::new(&root, false),
            keys: super::keys::KeyFiles::new(&root, false),
            pauses: super::pauses::PauseFiles::new(&root, false),
            root,
            workflows,
            memory: MemoryStore::new(),
            logs: Mutex::new(HashMap::new()),
            member: Some(member),
            warnings: Vec::new(),
            wal: WalSummary::default(),
            loading: Mutex::new(()),
        };
        store.finish_removals()?;
        store.load_new_runs()?;
        Ok(store)
    }

    /// Opens the store under `root` for inspection, loading every run log into memory like
    /// [`open`](Self::open) but without writing anything, so it is safe to use while worlds run
    /// on the same directory.
    ///
    /// Fails if `root` holds no store (no `workflows/` directory), with the same errors as `open`
    /// for a newer format or a corrupt log. A torn last line is left in place and reported in
    /// [`warnings`](Self::warnings) (with a world running, it may also be a write in progress).
    /// A missing `state/format.json` or an older format is reported there too. Every write
    /// (`create_run`, `append`) fails with an unsupported error.
    pub fn open_read_only(root: impl AsRef<Path>) -> Result<FileStore, WorldError> {
        let root = root.as_ref().to_path_buf();
        let workflows = root.join("workflows");
        if !workflows.is_dir() {
            return Err(WorldError::invalid(
                "directory",
                format!(
                    "no worlds-engine data in {} (it has no workflows/ directory)",
                    root.display()
                ),
            ));
        }
        let format = format::check_format(&root, true, false)?;
        let mut warnings = format.warnings;
        // The WAL files are read before the segments: a hybrid world running on the directory
        // may compact meanwhile, moving events from its WAL into its newest segment, and
        // segments only grow but for the records of removed runs (a rewrite drops those), so
        // whatever the WAL held when it was read is then either still in it or in a segment.
        // (Read the other way round, a compaction in between would leave a gap.) A rewrite
        // racing this read may show a removed run again, or refuse a run created again with its
        // id; opening again sees the directory as it is (see `store/hybrid/gc.rs`). Run logs
        // are written only by file mode, or by builds before segments.
        let state = root.join("state");
        let mut wals = Vec::new();
        for name in WAL_FILES {
            let path = state.join(name);
            if let Some(bytes) = wal_read::read_wal(&path)? {
                wals.push((path, bytes));
            }
        }
        // A compaction a crash interrupted (the second WAL file is there) noted where it began:
        // what it appended to the segments is read from the WAL instead (the next writable
        // open cuts it off the segments).
        let mark = if wals.iter().any(|(path, _)| path.ends_with(WAL_FILES[1])) {
            CompactionMark::read(&state)?
        } else {
            None
        };
        let mut segments = Vec::new();
        for path in list_segments(&root.join(SEGMENTS_DIR))? {
            let number = segment_number(&path).unwrap_or(0);
            if mark.is_some_and(|mark| number > mark.segment) {
                continue;
            }
            if let Some(mut bytes) = wal_read::read_wal(&path)? {
                if let Some(mark) = mark.filter(|mark| mark.segment == number) {
                    bytes.truncate(mark.len as usize);
                }
                segments.push((path, bytes));
            }
        }
        let mut store = FileStore {
            streams: super::streams::FileStreams::new(&root, true, true),
            schedules: super::schedules::FileSchedules::new(&root, true),
            keys: super::keys::KeyFiles::new(&root, true),
            pauses: super::pauses::PauseFiles::new(&root, true),
            root,
            workflows,
            memory: MemoryStore::new(),
            logs: Mutex::new(HashMap::new()),
            member: None,
            warnings: Vec::new(),
            wal: WalSummary::default(),
            loading: Mutex::new(()),
        };
        let mut counts = HashMap::new();
        for run_id in list_run_logs(&store.workflows, true)? {
            let path = log_path(&store.workflows, &run_id);
            let loaded = load_run_log(&path, &run_id, &store.memory, true, format.records)?;
            warnings.extend(loaded.warning);
            counts.insert(run_id, loaded.count);
        }
        let mut replay = WalReplay::new(&store.memory, &counts, format.records, true);
        let newest = segments.len().saturating_sub(1);
        for (i, (path, bytes)) in segments.iter().enumerate() {
            let replayed =
                replay.replay_segment_from(&mut &bytes[..], path, i == newest, SEGMENT_CHUNK)?;
            store.wal.segments += 1;
            store.wal.segment_records += replayed.records;
            warnings.extend(replayed.warning);
        }
        for (path, bytes) in &wals {
            let replayed = replay.replay_bytes(path, bytes)?;
            store.wal.records += replayed.records;
            store.wal.pending += replayed.pending;
            warnings.extend(replayed.warning);
        }
        replay.finish()?;
        drop(replay);
        // Runs only in segments or the WAL have no log: reads find them in memory all the same.
        for (run_id, count) in counts {
            let log = RunLog {
                path: log_path(&store.workflows, &run_id),
                file: None,
                broken: false,
                len: 0,
                count,
                finished: true,
                holder: None,
            };
            store
                .logs
                .lock()
                .insert(run_id, Arc::new(tokio::sync::Mutex::new(log)));
        }
        store.warnings = warnings;
        Ok(store)
    }

    /// What a read-only open found in the write-ahead logs of a hybrid store (`state/wal.ndjson`
    /// and `state/wal.next.ndjson`): every record there is verified and its events are included
    /// in what the store shows. Empty for [`open`](Self::open), which does not read them.
    pub fn wal_summary(&self) -> &WalSummary {
        &self.wal
    }

    /// True if the store was opened with [`open_read_only`](Self::open_read_only).
    pub fn is_read_only(&self) -> bool {
        self.member.is_none()
    }

    /// What a read-only open found and left alone: a torn last line (naming the file and the byte
    /// offset where it starts), a missing format file or an older format. Always empty for
    /// [`open`](Self::open), which repairs what it finds.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// This store's member id in its directory (`None` if read-only): the name leases carry.
    pub fn member_id(&self) -> Option<&str> {
        self.member.as_ref().map(|m| m.id.as_str())
    }

    /// The membership, or the error for a write to a read-only store.
    fn writable(&self) -> Result<&Membership, WorldError> {
        self.member.as_ref().ok_or_else(|| {
            WorldError::Unsupported(format!(
                "file store: {} was opened read-only; writes are refused",
                self.root.display()
            ))
        })
    }

    /// Reads `state/format.json` under the store root `state`'s parent, migrating an older
    /// format or writing it for a new store (see [`mod@format`]). Read-only, problems are returned
    /// as warnings instead.
    pub(super) fn check_format(
        state: &Path,
        read_only: bool,
        dir_lock_held: bool,
    ) -> Result<(), WorldError> {
        let root = state.parent().unwrap_or(state);
        format::check_format(root, read_only, dir_lock_held).map(|_| ())
    }

    fn log_path(&self, run_id: &str) -> PathBuf {
        log_path(&self.workflows, run_id)
    }

    fn slot(&self, run_id: &str) -> Option<Slot> {
        self.logs.lock().get(run_id).cloned()
    }

    /// The slot of a run, loading the run first if another process created it since.
    fn slot_or_load(&self, run_id: &str) -> Result<Slot, WorldError> {
        if let Some(slot) = self.slot(run_id) {
            return Ok(slot);
        }
        if self.member.is_some() && check_run_id(run_id).is_ok() {
            self.load_run(run_id)?;
        }
        self.slot(run_id)
            .ok_or_else(|| WorldError::not_found("run", run_id))
    }

    /// Loads the logs in `workflows/` this store does not know yet: all of them on open, the
    /// runs other processes created since on later calls.
    fn load_new_runs(&self) -> Result<(), WorldError> {
        let Some(member) = &self.member else {
            return Ok(());
        };
        // A temporary file is a creation in progress, or one a crash cut short: remove it only
        // if the member that was writing it is gone.
        let names = list_run_logs_removing(&self.workflows, |name| {
            let base = name.strip_suffix(TMP_SUFFIX).unwrap_or(name);
            if base.ends_with(LOG_SUFFIX) {
                // Written by an older build, which never shared the directory.
                return true;
            }
            base.rsplit_once('.')
                .is_none_or(|(_, writer)| !member.is_alive(writer))
        })?;
        for run_id in names {
            if self.slot(&run_id).is_none() {
                self.load_run(&run_id)?;
            }
        }
        Ok(())
    }

    /// Loads one run's log into memory. A torn last line is cut off if no process is writing
    /// to the log (its lock is free); otherwise it is a write in progress and left for later.
    fn load_run(&self, run_id: &str) -> Result<(), WorldError> {
        let _loading = self.loading.lock();
        if self.slot(run_id).is_some() {
            // Another thread loaded it meanwhile.
            return Ok(());
        }
        let path = self.log_path(run_id);
        let file = match OpenOptions::new().read(true).append(true).open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_error("could not open", &path, e)),
        };
        let mut log = RunLog {
            path,
            file: Some(file),
            broken: false,
            len: 0,
            count: 0,
            finished: false,
            holder: None,
        };
        let exclusive = log.file.as_ref().is_some_and(|f| f.try_lock().is_ok());
        let caught_up = catch_up(&self.memory, run_id, &mut log, exclusive);
        if exclusive {
            let _ = log.file.as_ref().map(File::unlock);
        }
        caught_up?;
        if log.count == 0 {
            return Err(log::corrupt(
                &log.path,
                0,
                "the log holds no complete event",
            ));
        }
        if !log.finished {
            log.holder = self.member.as_ref().and_then(|m| m.lease_of(run_id));
        }
        let mut logs = self.logs.lock();
        logs.entry(run_id.to_owned())
            .or_insert_with(|| Arc::new(tokio::sync::Mutex::new(log)));
        Ok(())
    }

    /// Brings a run another process drives up to date with its log on disk. With `check_gone`,
    /// a finished run whose log another process removed is forgotten (one `stat`).
    async fn refresh(&self, run_id: &str, check_gone: bool) -> Result<(), WorldError> {
        let Some(member) = &self.member else {
            return Ok(());
        };
        let Some(slot) = self.slot(run_id) else {
            return Ok(());
        };
        let mut log = slot.lock().await;
        if log.finished && check_gone {
            let gone = log
                .file
                .as_ref()
                .is_some_and(|file| remove::log_gone(file, &log.path));
            if gone {
                // Another process removed the run.
                self.memory.forget_run(run_id);
                self.logs.lock().remove(run_id);
                return Ok(());
            }
        }
        if log.finished || log.broken || log.holder.as_deref() == Some(member.id.as_str()) {
            return Ok(());
        }
        catch_up(&self.memory, run_id, &mut log, false)
    }

    /// Brings every run up to date (for queries over all runs).
    async fn refresh_all(&self) -> Result<(), WorldError> {
        if self.member.is_none() {
            return Ok(());
        }
        self.load_new_runs()?;
        let ids: Vec<String> = self.logs.lock().keys().cloned().collect();
        for run_id in ids {
            self.refresh(&run_id, false).await?;
        }
        Ok(())
    }

    /// Resolves a run id or workflow id to a run, loading it from disk if another process
    /// created it since this store last looked.
    async fn resolve(&self, id: &str) -> Result<String, WorldError> {
        match self.memory.get_run(id, ResolveData::None).await {
            Ok(state) => Ok(state.id),
            Err(WorldError::NotFound { .. }) if self.member.is_some() => {
                self.load_new_runs()?;
                Ok(self.memory.get_run(id, ResolveData::None).await?.id)
            }
            Err(e) => Err(e),
        }
    }

    fn inconsistent(run_id: &str, path: &Path, err: &WorldError) -> WorldError {
        WorldError::Internal(format!(
            "file store is now inconsistent: run {run_id}'s events were accepted in memory but not written to {} ({err}); reopen the store (restart the world) to recover from disk",
            path.display()
        ))
    }
}

/// Applies what the run's log holds beyond `log.len` to memory. With `exclusive` (the caller
/// holds the log's lock, so no write is in progress) a torn last line is cut off; without, it
/// is a write in progress and left alone.
fn catch_up(
    memory: &MemoryStore,
    run_id: &str,
    log: &mut RunLog,
    exclusive: bool,
) -> Result<(), WorldError> {
    let Some(file) = log.file.as_mut() else {
        return Ok(());
    };
    let size = file
        .metadata()
        .map_err(|e| io_error("could not read", &log.path, e))?
        .len();
    if size == log.len {
        return Ok(());
    }
    if size < log.len {
        return Err(log::corrupt(
            &log.path,
            size as usize,
            format!("the log shrank from {} to {size} bytes", log.len),
        ));
    }
    let mut bytes = Vec::with_capacity((size - log.len) as usize);
    file.seek(SeekFrom::Start(log.len))
        .and_then(|_| {
            Read::by_ref(file)
                .take(size - log.len)
                .read_to_end(&mut bytes)
        })
        .map_err(|e| io_error("could not read", &log.path, e))?;
    let scan = apply_events(
        &log.path,
        run_id,
        &bytes,
        log.len as usize,
        log.count,
        memory,
        Records::Checksummed,
    )?;
    log.len += scan.good_end as u64;
    log.count += scan.count;
    if scan.torn && exclusive {
        truncate_torn(&log.path, log.len as usize, size as usize)?;
    }
    if scan.count > 0 {
        log.finished = now(memory.get_run(run_id, ResolveData::None))?
            .status
            .is_terminal();
    }
    Ok(())
}

// Ordering: each write goes to the memory store first, unpublished (it checks the events and
// assigns `seq`, but readers do not see them), then to disk, and is published once synced. So no
// reader, in this process or another (which read the disk), sees an event that is not durable.
//
// The locks and fsyncs are blocking calls made on the async task; the work per call is small.
#[async_trait]
impl RunStore for FileStore {
    async fn create_run(&self, first: Event) -> Result<(), WorldError> {
        self.create_one(first, true).await
    }

    async fn create_runs(&self, firsts: Vec<Event>) -> Vec<Result<(), WorldError>> {
        self.create_many(firsts).await
    }

    async fn get_run(&self, id: &str, resolve: ResolveData) -> Result<WorkflowState, WorldError> {
        let run_id = self.resolve(id).await?;
        self.refresh(&run_id, true).await?;
        self.memory.get_run(&run_id, resolve).await
    }

    async fn list_runs(
        &self,
        filter: &WorkflowQueryFilter,
    ) -> Result<Page<WorkflowState>, WorldError> {
        self.refresh_all().await?;
        self.memory.list_runs(filter).await
    }

    async fn unfinished_runs(&self) -> Result<Vec<String>, WorldError> {
        self.refresh_all().await?;
        self.memory.unfinished_runs().await
    }
}

#[async_trait]
impl IdempotencyStore for FileStore {
    async fn find_by_idempotency_key(
        &self,
        key: &str,
        since: Millis,
    ) -> Result<Option<String>, WorldError> {
        self.find_key(key, since).await
    }

    async fn create_run_once(
        &self,
        first: Event,
        since: Millis,
    ) -> Result<Option<String>, WorldError> {
        self.create_once(first, since).await
    }
}

#[async_trait]
impl EventStore for FileStore {
    async fn append(&self, run_id: &str, events: Vec<Event>) -> Result<Appended, WorldError> {
        let member = self.writable()?;
        if let Some(other) = events.iter().find(|e| e.run_id != run_id) {
            return Err(WorldError::invalid(
                "events",
                format!(
                    "event {} belongs to run {}, not to run {run_id}",
                    other.id, other.run_id
                ),
            ));
        }
        let slot = self.slot_or_load(run_id)?;
        let mut guard = slot.lock().await;
        let log = &mut *guard;
        if log.broken {
            let err = WorldError::Internal("an earlier write failed".into());
            return Err(Self::inconsistent(run_id, &log.path, &err));
        }
        let Some(file) = log.file.as_ref() else {
            // Its creation was refused.
            return Err(WorldError::not_found("run", run_id));
        };
        let file = file
            .try_clone()
            .map_err(|e| io_error("could not open", &log.path, e))?;
        let path = log.path.clone();
        locked(&file, &path, || {
            if remove::log_gone(&file, &path) {
                // Another process removed the run (renamed its log away) since this one
                // opened it.
                self.memory.forget_run(run_id);
                self.logs.lock().remove(run_id);
                return Err(WorldError::not_found("run", run_id));
            }
            catch_up(&self.memory, run_id, log, true)?;
            // Readers see the events only once they are on disk (published below).
            let (appended, run) = self.memory.append_unpublished(run_id, events)?;
            if appended.events.is_empty() {
                return Ok(appended);
            }
            if log.finished && !appended.status.is_terminal() {
                // Reopened by hand: nobody drives it until a member claims it (the lease goes
                // before the events land, so a crash in between leaves it finished, not held
                // by a process that is not driving it). Its last holder, if alive, is told,
                // so it reads the run back and may claim it.
                if let Some(holder) = member.lease_of(run_id) {
                    if holder != member.id && member.is_alive(&holder) {
                        member.notify(&holder, run_id)?;
                    }
                }
                member.release_lease(run_id)?;
                log.holder = None;
            } else if log.holder.as_deref() != Some(member.id.as_str()) {
                // Another live process drives the run: tell it, before the events land (it
                // takes the note under this lock, so it reads them after they are written).
                log.holder = member.lease_of(run_id);
                if let Some(holder) = &log.holder {
                    if holder != &member.id && member.is_alive(holder) {
                        member.notify(holder, run_id)?;
                    }
                }
            }
            let written = encode(&appended.events).and_then(|buf| {
                let mut out = &file;
                out.write_all(&buf)
                    .and_then(|()| file.sync_data())
                    .map_err(|e| io_error("could not write", &path, e))?;
                Ok(buf.len() as u64)
            });
            match written {
                Ok(len) => {
                    log.len += len;
                    log.count += appended.events.len() as u64;
                    log.finished = appended.status.is_terminal();
                    self.memory.publish(&run, log.count);
                    Ok(appended)
                }
                Err(e) => {
                    // Cut off whatever part of the lines reached the file, so the log ends
                    // where the store last acknowledged it, and take the events back: the next
                    // append starts clean (a full disk goes on once space is freed). If even
                    // that fails, the run stays refused until the store is opened again.
                    let restored = file
                        .set_len(log.len)
                        .and_then(|()| file.sync_data())
                        .map_err(|e| io_error("could not cut back", &path, e))
                        .and_then(|()| self.memory.discard_unpublished(&run));
                    match restored {
                        Ok(_) => Err(e),
                        Err(_) => {
                            log.broken = true;
                            Err(Self::inconsistent(run_id, &path, &e))
                        }
                    }
                }
            }
        })
    }

    async fn history(&self, run_id: &str, from_seq: u64) -> Result<Vec<Arc<Event>>, WorldError> {
        let run_id = self.resolve(run_id).await?;
        self.refresh(&run_id, true).await?;
        self.memory.history(&run_id, from_seq).await
    }

    async fn list_events(
        &self,
        run_id: &str,
        query: &ListQuery,
    ) -> Result<Page<Arc<Event>>, WorldError> {
        let run_id = self.resolve(run_id).await?;
        self.refresh(&run_id, true).await?;
        self.memory.list_events(&run_id, query).await
    }

    async fn list_events_by_correlation_id(
        &self,
        correlation_id: &str,
        query: &ListQuery,
    ) -> Result<Page<Arc<Event>>, WorldError> {
        self.refresh_owner(correlation_id).await?;
        self.memory
            .list_events_by_correlation_id(correlation_id, query)
            .await
    }
}

/// Timers live in memory only: the engine re-arms them from run history on start.
#[async_trait]
impl TimerStore for FileStore {
    async fn add_timer(&self, timer: Timer) -> Result<(), WorldError> {
        self.memory.add_timer(timer).await
    }

    async fn take_due_timers(&self, now: Millis, limit: usize) -> Result<Vec<Timer>, WorldError> {
        self.memory.take_due_timers(now, limit).await
    }

    async fn next_timer_at(&self) -> Result<Option<Millis>, WorldError> {
        self.memory.next_timer_at().await
    }

    async fn remove_run_timers(&self, run_id: &str) -> Result<bool, WorldError> {
        self.memory.remove_run_timers(run_id).await
    }
}
