//! The file store: a [`MemoryStore`] for every read, in front of a write-ahead, append-only
//! event log per run on disk.
//!
//! Layout under the root directory:
//!
//! ```text
//! root/
//!   state/format.json                 {"format": 1}
//!   workflows/{run_id}.events.ndjson  one JSON event per line, in seq order
//! ```
//!
//! Every acknowledged `create_run` and `append` is on disk (`sync_data`) before it returns.
//! On [`FileStore::open`] each log is read back and replayed through the memory store, which
//! checks every event with the same rules it applies to live writes. A torn last line (a crash
//! mid-write, never acknowledged) is cut off with a warning; corruption anywhere else makes
//! `open` fail with the file and byte offset, so no data is ever dropped silently.
//!
//! [`FileStore::open_read_only`] loads the same way for inspection (the `worlds` CLI) but never
//! writes: it creates nothing, reports a torn last line in [`FileStore::warnings`] instead of
//! cutting it off, and refuses every write.
//!
//! Timers are kept in memory only: on start the engine re-arms every timer from run history
//! (see `engine::recovery`), so they need no file of their own.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::clock::Millis;
use crate::error::WorldError;
use crate::model::{
    ActivityState, Event, Page, ResolveData, WorkflowQueryFilter, WorkflowState,
    EVENT_FORMAT_VERSION,
};

use super::{Appended, MemoryStore, RunStore, Timer, TimerStore};

/// The on-disk layout version this build reads and writes.
const STORE_FORMAT: u32 = 1;
/// Extension of a run's event log.
pub(super) const LOG_SUFFIX: &str = ".events.ndjson";
/// Extension of a file being created (renamed into place once complete).
pub(super) const TMP_SUFFIX: &str = ".tmp";
/// Longest run id accepted as a file name.
const MAX_RUN_ID_LEN: usize = 200;

#[derive(Serialize, Deserialize)]
struct FormatFile {
    format: u32,
}

/// The open log of one run.
struct RunLog {
    path: PathBuf,
    /// `None` while the run is being created (or if its creation was refused).
    file: Option<File>,
    /// A write failed after memory accepted events: memory and disk disagree.
    broken: bool,
}

/// Per-run log behind an async mutex: it is held across the memory append and the disk write,
/// so two appends to one run reach the file in `seq` order.
type Slot = Arc<tokio::sync::Mutex<RunLog>>;

/// Durable storage: a [`MemoryStore`] answers every read and query, and each run's history is
/// also written to an append-only, fsynced log file (`Persistence::File`).
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
    /// Opened with [`FileStore::open_read_only`]: every write is refused.
    read_only: bool,
    /// What loading found but left alone (read-only mode only).
    warnings: Vec<String>,
}

impl std::fmt::Debug for FileStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileStore")
            .field("root", &self.root)
            .field("runs", &self.logs.lock().len())
            .field("read_only", &self.read_only)
            .finish()
    }
}

pub(super) fn io_error(what: &str, path: &Path, err: std::io::Error) -> WorldError {
    WorldError::Internal(format!("file store: {what} {}: {err}", path.display()))
}

/// Makes a rename or a new file in `dir` durable. Directories cannot be opened for syncing on
/// every platform; where they cannot, this is a no-op.
pub(super) fn sync_dir(dir: &Path) -> Result<(), WorldError> {
    #[cfg(unix)]
    {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io_error("could not sync directory", dir, e))?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// Run ids become file names, so only plain ones are accepted (the engine's are ULIDs).
pub(super) fn check_run_id(run_id: &str) -> Result<(), WorldError> {
    let plain = !run_id.is_empty()
        && run_id.len() <= MAX_RUN_ID_LEN
        && run_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if plain {
        Ok(())
    } else {
        Err(WorldError::invalid(
            "run_id",
            format!(
                "the file store needs run ids of 1 to {MAX_RUN_ID_LEN} ASCII letters, digits, '_' or '-' (they name files); got {run_id:?}"
            ),
        ))
    }
}

/// Serializes events, one JSON object and a newline each.
pub(super) fn encode(events: &[Arc<Event>]) -> Result<Vec<u8>, WorldError> {
    let mut buf = Vec::new();
    for event in events {
        serde_json::to_writer(&mut buf, &**event).map_err(|e| WorldError::serde("event", e))?;
        buf.push(b'\n');
    }
    Ok(buf)
}

/// Runs a [`MemoryStore`] future to completion from synchronous code. The memory store never
/// waits on I/O or on the runtime, so its futures finish on first poll.
pub(super) fn now<F: std::future::Future>(future: F) -> F::Output {
    futures::executor::block_on(future)
}

/// The path of a run's log under `workflows/`.
pub(super) fn log_path(workflows: &Path, run_id: &str) -> PathBuf {
    workflows.join(format!("{run_id}{LOG_SUFFIX}"))
}

/// The error for a corrupt file: names the file and the byte offset.
pub(super) fn corrupt(path: &Path, offset: usize, why: impl std::fmt::Display) -> WorldError {
    WorldError::Internal(format!(
        "file store: {} is corrupt at byte offset {offset}: {why}; the file was left untouched",
        path.display()
    ))
}

/// What [`scan_events`] found.
pub(super) struct Scan {
    /// Byte offset just past the last complete, accepted event.
    pub(super) good_end: usize,
    /// The last line is incomplete (a crash mid-write, or a write in progress).
    pub(super) torn: bool,
    /// How many events were accepted.
    pub(super) count: u64,
}

/// Reads ndjson events from `bytes` (the contents of `path`), handing each complete one with its
/// byte offset to `each`, which may refuse it with a reason. An incomplete last line stops the
/// scan and is reported as torn; an unreadable line anywhere else, an event of a newer format,
/// or a refused event is a corruption error naming the file and offset.
pub(super) fn scan_events(
    path: &Path,
    bytes: &[u8],
    mut each: impl FnMut(usize, Event) -> Result<(), String>,
) -> Result<Scan, WorldError> {
    let mut offset = 0;
    let mut scan = Scan {
        good_end: 0,
        torn: false,
        count: 0,
    };
    while offset < bytes.len() {
        let rest = &bytes[offset..];
        let (line, next, complete) = match rest.iter().position(|&b| b == b'\n') {
            Some(i) => (&rest[..i], offset + i + 1, true),
            None => (rest, bytes.len(), false),
        };
        let last = next >= bytes.len();
        let event = match serde_json::from_slice::<Event>(line) {
            Ok(event) if complete => event,
            // A whole event whose newline never made it, or a cut-off last line: the write was
            // not finished, so it was never acknowledged.
            Ok(_) => {
                scan.torn = true;
                break;
            }
            Err(_) if last => {
                scan.torn = true;
                break;
            }
            Err(e) => return Err(corrupt(path, offset, format!("not a valid event ({e})"))),
        };
        if event.version > EVENT_FORMAT_VERSION {
            return Err(corrupt(
                path,
                offset,
                format!(
                    "event format version {} is newer than this build's {EVENT_FORMAT_VERSION}",
                    event.version
                ),
            ));
        }
        each(offset, event).map_err(|why| corrupt(path, offset, why))?;
        scan.count += 1;
        offset = next;
        scan.good_end = next;
    }
    Ok(scan)
}

/// Cuts off an incomplete last line at `good_end` (of `len` bytes) and syncs the file.
pub(super) fn truncate_torn(path: &Path, good_end: usize, len: usize) -> Result<(), WorldError> {
    tracing::warn!(
        file = %path.display(),
        offset = good_end,
        dropped_bytes = len - good_end,
        "file store: truncating an incomplete last line left by a crash mid-write"
    );
    let file = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| io_error("could not open", path, e))?;
    file.set_len(good_end as u64)
        .and_then(|()| file.sync_all())
        .map_err(|e| io_error("could not truncate", path, e))
}

/// The run ids that have a log in `workflows/`, sorted. Unless `read_only`, leftover temporary
/// files (runs whose creation never finished, so never acknowledged) are removed.
pub(super) fn list_run_logs(workflows: &Path, read_only: bool) -> Result<Vec<String>, WorldError> {
    let entries = fs::read_dir(workflows).map_err(|e| io_error("could not list", workflows, e))?;
    let mut run_ids = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io_error("could not list", workflows, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        if name.ends_with(TMP_SUFFIX) {
            if read_only {
                // Unfinished (a crash), or a creation in progress: not a run yet.
                continue;
            }
            let path = entry.path();
            tracing::warn!(file = %path.display(), "file store: removing an unfinished run file left by a crash");
            fs::remove_file(&path).map_err(|e| io_error("could not remove", &path, e))?;
        } else if let Some(run_id) = name.strip_suffix(LOG_SUFFIX) {
            run_ids.push(run_id.to_owned());
        }
    }
    run_ids.sort();
    Ok(run_ids)
}

/// What [`load_run_log`] loaded.
pub(super) struct LoadedRun {
    /// Events in the log (and now in memory).
    pub(super) count: u64,
    /// A torn last line left in place (read-only loads only).
    pub(super) warning: Option<String>,
}

/// Loads one run log into `memory`, checking every event (run id, dense `seq`, the history's
/// rules). A torn last line is truncated, or, read-only, reported as a warning.
pub(super) fn load_run_log(
    path: &Path,
    run_id: &str,
    memory: &MemoryStore,
    read_only: bool,
) -> Result<LoadedRun, WorldError> {
    let bytes = fs::read(path).map_err(|e| io_error("could not read", path, e))?;
    let mut count: u64 = 0;
    let scan = scan_events(path, &bytes, |_, event| {
        if event.run_id != run_id {
            return Err(format!(
                "event of run {} in the log of run {run_id}",
                event.run_id
            ));
        }
        if event.seq != count {
            return Err(format!(
                "event seq {} where seq {count} was expected",
                event.seq
            ));
        }
        let stored = if count == 0 {
            now(memory.create_run(event))
        } else {
            now(memory.append(run_id, vec![event])).map(|_| ())
        };
        stored.map_err(|e| format!("the history refuses this event: {e}"))?;
        count += 1;
        Ok(())
    })?;
    if scan.count == 0 {
        return Err(corrupt(path, 0, "the log holds no complete event"));
    }
    let mut warning = None;
    if scan.torn && read_only {
        warning = Some(format!(
            "{}: incomplete last line at byte offset {} ({} bytes), left by a crash mid-write or a write in progress; opening the store for writing cuts it off",
            path.display(),
            scan.good_end,
            bytes.len() - scan.good_end
        ));
    } else if scan.torn {
        truncate_torn(path, scan.good_end, bytes.len())?;
    }
    Ok(LoadedRun {
        count: scan.count,
        warning,
    })
}

/// Creates a run's log holding its first lines: written to a temporary file, synced, then
/// renamed into place and the directory synced, so a crash never leaves half a run.
pub(super) fn create_log(workflows: &Path, path: &Path, lines: &[u8]) -> Result<File, WorldError> {
    let file = create_log_unsynced_dir(path, lines)?;
    sync_dir(workflows)?;
    Ok(file)
}

/// [`create_log`] without the directory sync (the caller syncs once for several files).
pub(super) fn create_log_unsynced_dir(path: &Path, lines: &[u8]) -> Result<File, WorldError> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(TMP_SUFFIX);
    let tmp = PathBuf::from(tmp);
    let _ = fs::remove_file(&tmp);
    let mut file = OpenOptions::new()
        .append(true)
        .create_new(true)
        .open(&tmp)
        .map_err(|e| io_error("could not create", &tmp, e))?;
    file.write_all(lines)
        .and_then(|()| file.sync_all())
        .map_err(|e| io_error("could not write", &tmp, e))?;
    fs::rename(&tmp, path).map_err(|e| io_error("could not rename", &tmp, e))?;
    Ok(file)
}

impl FileStore {
    /// Opens (creating if needed) the store under `root`, and loads every run log into memory.
    ///
    /// Fails if `state/format.json` names a newer format than this build knows, or if a log is
    /// corrupt anywhere but its last line (the error names the file and byte offset). A torn
    /// last line, left by a crash mid-write, is truncated with a warning.
    pub fn open(root: impl AsRef<Path>) -> Result<FileStore, WorldError> {
        let root = root.as_ref().to_path_buf();
        let workflows = root.join("workflows");
        let state = root.join("state");
        for dir in [&workflows, &state] {
            fs::create_dir_all(dir).map_err(|e| io_error("could not create", dir, e))?;
        }
        sync_dir(&root)?;
        Self::check_format(&state, false)?;

        let store = FileStore {
            root,
            workflows,
            memory: MemoryStore::new(),
            logs: Mutex::new(HashMap::new()),
            read_only: false,
            warnings: Vec::new(),
        };
        store.load()?;
        Ok(store)
    }

    /// Opens the store under `root` for inspection, loading every run log into memory like
    /// [`open`](Self::open) but without writing anything, so it is safe to use while a world
    /// runs on the same directory.
    ///
    /// Fails if `root` holds no store (no `workflows/` directory), with the same errors as `open`
    /// for a newer format or a corrupt log. A torn last line is left in place and reported in
    /// [`warnings`](Self::warnings) (with a world running, it may also be a write in progress).
    /// A missing `state/format.json` is reported there too. Every write (`create_run`,
    /// `append`) fails with an unsupported error.
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
        let state = root.join("state");
        let mut warnings = Self::check_format(&state, true)?;

        let mut store = FileStore {
            root,
            workflows,
            memory: MemoryStore::new(),
            logs: Mutex::new(HashMap::new()),
            read_only: true,
            warnings: Vec::new(),
        };
        warnings.extend(store.load()?);
        store.warnings = warnings;
        Ok(store)
    }

    /// True if the store was opened with [`open_read_only`](Self::open_read_only).
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// What a read-only open found and left alone: a torn last line (naming the file and the byte
    /// offset where it starts) or a missing format file. Always empty for [`open`](Self::open),
    /// which repairs what it finds.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Refuses a write to a read-only store.
    fn check_writable(&self) -> Result<(), WorldError> {
        if self.read_only {
            return Err(WorldError::Unsupported(format!(
                "file store: {} was opened read-only; writes are refused",
                self.root.display()
            )));
        }
        Ok(())
    }

    /// Reads `state/format.json`, or writes it for a new store. Read-only, a missing file is
    /// returned as a warning instead.
    pub(super) fn check_format(state: &Path, read_only: bool) -> Result<Vec<String>, WorldError> {
        let path = state.join("format.json");
        match fs::read(&path) {
            Ok(bytes) => {
                let found: FormatFile = serde_json::from_slice(&bytes).map_err(|e| {
                    WorldError::Internal(format!(
                        "file store: {} is not a valid format file (expected {{\"format\": {STORE_FORMAT}}}): {e}",
                        path.display()
                    ))
                })?;
                if found.format > STORE_FORMAT {
                    return Err(WorldError::Unsupported(format!(
                        "file store: {} says format {}, but this build only knows format {STORE_FORMAT}; open it with a newer worlds-engine",
                        path.display(),
                        found.format
                    )));
                }
                Ok(Vec::new())
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && read_only => Ok(vec![format!(
                "{} is missing (the store was never opened for writing by this format)",
                path.display()
            )]),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let bytes = serde_json::to_vec(&FormatFile {
                    format: STORE_FORMAT,
                })
                .map_err(|e| WorldError::serde("format file", e))?;
                let tmp = state.join(format!("format.json{TMP_SUFFIX}"));
                let mut file =
                    File::create(&tmp).map_err(|e| io_error("could not create", &tmp, e))?;
                file.write_all(&bytes)
                    .and_then(|()| file.sync_all())
                    .map_err(|e| io_error("could not write", &tmp, e))?;
                fs::rename(&tmp, &path).map_err(|e| io_error("could not rename", &tmp, e))?;
                sync_dir(state)?;
                Ok(Vec::new())
            }
            Err(e) => Err(io_error("could not read", &path, e)),
        }
    }

    /// Loads every run log in `workflows/` into the memory store, returning the warnings of a
    /// read-only load.
    fn load(&self) -> Result<Vec<String>, WorldError> {
        let mut warnings = Vec::new();
        for run_id in list_run_logs(&self.workflows, self.read_only)? {
            let path = self.log_path(&run_id);
            let loaded = load_run_log(&path, &run_id, &self.memory, self.read_only)?;
            warnings.extend(loaded.warning);
            let file = if self.read_only {
                None
            } else {
                Some(
                    OpenOptions::new()
                        .append(true)
                        .open(&path)
                        .map_err(|e| io_error("could not open", &path, e))?,
                )
            };
            let log = RunLog {
                path,
                file,
                broken: false,
            };
            self.logs
                .lock()
                .insert(run_id, Arc::new(tokio::sync::Mutex::new(log)));
        }
        Ok(warnings)
    }

    fn log_path(&self, run_id: &str) -> PathBuf {
        log_path(&self.workflows, run_id)
    }

    fn inconsistent(run_id: &str, path: &Path, err: &WorldError) -> WorldError {
        WorldError::Internal(format!(
            "file store is now inconsistent: run {run_id}'s events were accepted in memory but not written to {} ({err}); reopen the store (restart the world) to recover from disk",
            path.display()
        ))
    }
}

// Ordering: each write goes to the memory store first (which checks the events and assigns
// `seq`), then to disk, then returns. A concurrent reader may therefore briefly see an event that
// is not yet durable; within one process that is acceptable, since no caller is told it was
// stored before it is on disk. Writing to disk first would need a check-without-apply API on the
// memory store.
//
// The fsyncs are blocking calls made on the async task; the work per call is small.
#[async_trait]
impl RunStore for FileStore {
    async fn create_run(&self, mut first: Event) -> Result<(), WorldError> {
        self.check_writable()?;
        let run_id = first.run_id.clone();
        check_run_id(&run_id)?;
        let path = self.log_path(&run_id);
        let slot: Slot = Arc::new(tokio::sync::Mutex::new(RunLog {
            path: path.clone(),
            file: None,
            broken: false,
        }));
        // Reserve the run id (appends to it wait on the slot until the file exists).
        let mut log = slot.clone().lock_owned().await;
        {
            let mut logs = self.logs.lock();
            if logs.contains_key(&run_id) {
                return Err(WorldError::conflict(format!(
                    "a run with id {run_id} already exists"
                )));
            }
            logs.insert(run_id.clone(), slot);
        }
        if let Err(refused) = self.memory.create_run(first.clone()).await {
            self.logs.lock().remove(&run_id);
            return Err(refused);
        }
        first.seq = 0;
        let written =
            encode(&[Arc::new(first)]).and_then(|line| create_log(&self.workflows, &path, &line));
        match written {
            Ok(file) => {
                log.file = Some(file);
                Ok(())
            }
            Err(e) => {
                log.broken = true;
                Err(Self::inconsistent(&run_id, &path, &e))
            }
        }
    }

    async fn append(&self, run_id: &str, events: Vec<Event>) -> Result<Appended, WorldError> {
        self.check_writable()?;
        if let Some(other) = events.iter().find(|e| e.run_id != run_id) {
            return Err(WorldError::invalid(
                "events",
                format!(
                    "event {} belongs to run {}, not to run {run_id}",
                    other.id, other.run_id
                ),
            ));
        }
        let slot = self
            .logs
            .lock()
            .get(run_id)
            .cloned()
            .ok_or_else(|| WorldError::not_found("run", run_id))?;
        let mut log = slot.lock().await;
        if log.broken {
            let err = WorldError::Internal("an earlier write failed".into());
            return Err(Self::inconsistent(run_id, &log.path, &err));
        }
        if log.file.is_none() {
            // Its creation was refused.
            return Err(WorldError::not_found("run", run_id));
        }
        let appended = self.memory.append(run_id, events).await?;
        if appended.events.is_empty() {
            return Ok(appended);
        }
        let log = &mut *log;
        let written = encode(&appended.events).and_then(|buf| {
            let file = log
                .file
                .as_mut()
                .ok_or_else(|| WorldError::Internal("the run's log file is not open".into()))?;
            file.write_all(&buf)
                .and_then(|()| file.sync_data())
                .map_err(|e| io_error("could not write", &log.path, e))
        });
        if let Err(e) = written {
            log.broken = true;
            return Err(Self::inconsistent(run_id, &log.path, &e));
        }
        Ok(appended)
    }

    async fn get_run(&self, id: &str, resolve: ResolveData) -> Result<WorkflowState, WorldError> {
        self.memory.get_run(id, resolve).await
    }

    async fn get_activity(&self, run_id: &str, position: u32) -> Result<ActivityState, WorldError> {
        self.memory.get_activity(run_id, position).await
    }

    async fn history(&self, run_id: &str, from_seq: u64) -> Result<Vec<Arc<Event>>, WorldError> {
        self.memory.history(run_id, from_seq).await
    }

    async fn list_runs(
        &self,
        filter: &WorkflowQueryFilter,
    ) -> Result<Page<WorkflowState>, WorldError> {
        self.memory.list_runs(filter).await
    }

    async fn unfinished_runs(&self) -> Result<Vec<String>, WorldError> {
        self.memory.unfinished_runs().await
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

    async fn remove_run_timers(&self, run_id: &str) -> Result<(), WorldError> {
        self.memory.remove_run_timers(run_id).await
    }
}
