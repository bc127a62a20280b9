//! The hybrid store's write-ahead log: writers queue lines; a writer thread hands them to the
//! operating system as they come; a syncer thread makes what was written durable with one
//! `fdatasync` for everything written since its last one (group commit).
//!
//! Each write waits for the level it needs ([`Wait`]): nothing, the write (it then survives a
//! crash of this process, since the kernel holds it), or the sync (it survives a crash of the
//! machine). Writes become visible to readers of the memory store only once synced.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::error::WorldError;
use crate::store::file::io_error;
use crate::store::memory::RunHandle;

/// How long the writer waits before it tries again a write the disk refused (a full disk).
const RETRY_DELAY: Duration = Duration::from_millis(250);

/// The longest written lines stay unsynced when no writer waits for their sync: writes made
/// without waiting share the sync of the next write that waits, or get their own after this.
const NOWAIT_DELAY: Duration = Duration::from_millis(2);

/// How far a write must get before its writer goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wait {
    /// Queued: durable with the next sync, lost if the process dies first.
    Queued,
    /// Written to the operating system: survives a crash of the process, not of the machine.
    Written,
    /// Synced to the disk: survives a crash of the machine.
    Synced,
}

/// A write to publish once it is durable: the run, and its length after the write.
pub(super) type Publish = (RunHandle, u64);

/// The first failed write or sync of the write-ahead log.
#[derive(Debug, Clone)]
pub(super) struct Failure {
    why: String,
    /// The disk was full (or over its quota).
    full: bool,
    /// The disk failed the operation (EIO).
    io: bool,
    /// The refused write waits to be tried again (the log is stalled, not failed).
    waiting: bool,
}

impl Failure {
    fn of(error: &std::io::Error) -> Failure {
        Failure {
            why: error.to_string(),
            full: matches!(
                error.kind(),
                std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
            ),
            io: error.raw_os_error() == Some(5),
            waiting: false,
        }
    }
}

/// True for a refused write worth trying again once it was cut off the file: a full disk, or
/// one over its quota. (A disk that failed the write, `EIO`, may have lost what was written
/// before it; that failure is final.)
fn stalls(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    )
}

/// Where the queued lines are. Tickets number writes from 1 in queue order; the WAL holds them
/// in that order.
#[derive(Default)]
struct State {
    /// Lines queued for the writer thread.
    buf: Vec<u8>,
    /// The writes in `buf`.
    queued: Vec<Publish>,
    /// Ticket of the last write queued.
    enqueued: u64,
    /// Every write up to this ticket is written to the file.
    written: u64,
    /// Writes written but not yet synced.
    unsynced: Vec<Publish>,
    /// Every write up to this ticket is synced and published.
    durable: u64,
    /// The highest ticket a writer waits to see synced.
    sync_wanted: u64,
    /// A write or sync failed: memory holds events the disk may not; every later write is
    /// refused.
    failed: Option<Failure>,
    /// A write the disk refused (and that was cut off the file whole) waits to be tried again:
    /// new writes are refused meanwhile, the queued ones are kept and written once the disk
    /// takes them.
    stalled: Option<Failure>,
    /// The store is closing: the threads empty the queue, sync and stop.
    closing: bool,
    /// The writer thread has stopped (closing, queue empty).
    writer_done: bool,
}

/// The file the writer appends to, and its length: where a write the disk refused part-way is
/// cut back to.
struct Current {
    file: Arc<File>,
    len: u64,
}

impl Current {
    fn new(file: File) -> Current {
        // Opened for appending at its end; an unreadable length only disables the cut-back.
        let len = file.metadata().map(|m| m.len()).unwrap_or(u64::MAX);
        Current {
            file: Arc::new(file),
            len,
        }
    }
}

/// The log, its queue and the two threads' meeting points.
pub(super) struct Wal {
    /// The file the writer appends to. Held while writing, so that a compaction can switch
    /// files between two writes (see [`Wal::switch`]).
    file: Mutex<Current>,
    /// Named in errors.
    path: PathBuf,
    state: Mutex<State>,
    /// Wakes the writer thread: lines were queued, or the store closes.
    to_write: Condvar,
    /// Wakes the syncer thread: something was written, someone waits for a sync, or closing.
    to_sync: Condvar,
    /// Wakes writers waiting for their write ([`Wait::Written`]).
    written: tokio::sync::Notify,
    /// Wakes writers waiting for their sync ([`Wait::Synced`]).
    synced: tokio::sync::Notify,
    appends: AtomicU64,
    fsyncs: AtomicU64,
}

impl Wal {
    /// A log appending to `file` (at `path`).
    pub(super) fn new(file: File, path: &Path) -> Wal {
        Wal {
            file: Mutex::new(Current::new(file)),
            path: path.to_path_buf(),
            state: Mutex::new(State::default()),
            to_write: Condvar::new(),
            to_sync: Condvar::new(),
            written: tokio::sync::Notify::new(),
            synced: tokio::sync::Notify::new(),
            appends: AtomicU64::new(0),
            fsyncs: AtomicU64::new(0),
        }
    }

    /// `(appends, fsyncs)` so far.
    pub(super) fn stats(&self) -> (u64, u64) {
        (
            self.appends.load(Ordering::Relaxed),
            self.fsyncs.load(Ordering::Relaxed),
        )
    }

    /// Runs `apply` and queues the lines it returns, under one lock: the log holds each run's
    /// writes in the order they were applied. Returns `apply`'s value and the write's ticket
    /// (`None` if it wrote nothing: no lines and nothing to publish). `wait` says whether someone will wait for the sync.
    pub(super) fn queue<T>(
        &self,
        wait: Wait,
        apply: impl FnOnce() -> Result<(T, Vec<u8>, Option<Publish>), WorldError>,
    ) -> Result<(T, Option<u64>), WorldError> {
        let mut state = self.state.lock();
        if let Some(why) = state.failed.as_ref().or(state.stalled.as_ref()) {
            return Err(self.failed(why));
        }
        if state.closing {
            return Err(WorldError::Unavailable("hybrid store: closed".into()));
        }
        let (value, lines, write) = apply()?;
        if write.is_none() && lines.is_empty() {
            return Ok((value, None));
        }
        if state.buf.is_empty() {
            self.to_write.notify_one();
        }
        state.buf.extend_from_slice(&lines);
        // A tombstone has no run to publish: only its lines are queued.
        state.queued.extend(write);
        state.enqueued += 1;
        let ticket = state.enqueued;
        if wait == Wait::Synced {
            state.sync_wanted = ticket;
        }
        self.appends.fetch_add(1, Ordering::Relaxed);
        Ok((value, Some(ticket)))
    }

    /// The ticket of the last write queued.
    pub(super) fn last_ticket(&self) -> u64 {
        self.state.lock().enqueued
    }

    /// Waits until the write with this ticket (and every one before it) got as far as `wait`
    /// says.
    pub(super) async fn wait(&self, ticket: u64, wait: Wait) -> Result<(), WorldError> {
        let notify = match wait {
            Wait::Queued => return Ok(()),
            Wait::Written => &self.written,
            Wait::Synced => &self.synced,
        };
        loop {
            let notified = notify.notified();
            tokio::pin!(notified);
            {
                let mut state = self.state.lock();
                let reached = match wait {
                    Wait::Written => state.written >= ticket,
                    _ => state.durable >= ticket,
                };
                if reached {
                    return Ok(());
                }
                if let Some(why) = &state.failed {
                    return Err(self.failed(why));
                }
                if wait == Wait::Synced && state.sync_wanted < ticket {
                    // Queued without waiting; waited for now (`wait_durable`).
                    state.sync_wanted = ticket;
                    self.to_sync.notify_one();
                }
                // Registered before the lock is released, so the wake-up cannot be missed.
                notified.as_mut().enable();
            }
            notified.await;
        }
    }

    /// The writer thread: writes whatever is queued, as soon as it is, until the store closes
    /// and the queue is empty.
    pub(super) fn write_loop(&self) {
        loop {
            let (buf, writes, upto) = {
                let mut state = self.state.lock();
                while state.buf.is_empty() && !state.closing && state.failed.is_none() {
                    self.to_write.wait(&mut state);
                }
                if state.failed.is_some() {
                    return;
                }
                if state.stalled.is_some() {
                    if state.closing {
                        // What waits can no longer be written: its writers are told so.
                        state.failed = state.stalled.take().map(|f| Failure {
                            waiting: false,
                            ..f
                        });
                        self.wake_all();
                        return;
                    }
                    // Try again after a pause (a close or new space ends it early).
                    self.to_write.wait_for(&mut state, RETRY_DELAY);
                    if state.closing {
                        continue;
                    }
                }
                if state.buf.is_empty() {
                    state.writer_done = true;
                    self.to_sync.notify_one();
                    return;
                }
                (
                    std::mem::take(&mut state.buf),
                    std::mem::take(&mut state.queued),
                    state.enqueued,
                )
            };
            // The file's length before the write, so that a write the disk refuses part-way (a
            // full disk takes what fits) can be cut off whole and tried again later.
            let (result, cut) = {
                let mut current = self.file.lock();
                let result = (&*current.file).write_all(&buf);
                match &result {
                    Ok(()) => {
                        current.len = current.len.saturating_add(buf.len() as u64);
                        (result, false)
                    }
                    Err(_) => {
                        let cut =
                            current.len != u64::MAX && current.file.set_len(current.len).is_ok();
                        (result, cut)
                    }
                }
            };
            {
                let mut state = self.state.lock();
                match result {
                    Ok(()) => {
                        if state.stalled.take().is_some() {
                            tracing::info!(file = %self.path.display(), "hybrid store: the disk takes writes again");
                        }
                        // The syncer waits for work, or for a writer to want a sync.
                        if state.written == state.durable || state.sync_wanted > state.durable {
                            self.to_sync.notify_one();
                        }
                        state.written = upto;
                        state.unsynced.extend(writes);
                    }
                    Err(e) if cut && stalls(&e) => {
                        // Nothing of it stayed in the file: keep it, in order, ahead of what
                        // was queued since, and try again.
                        if state.stalled.is_none() {
                            tracing::error!(file = %self.path.display(), error = %e, "hybrid store: the disk refused a write; new writes are refused until it takes it");
                        }
                        state.stalled = Some(Failure {
                            waiting: true,
                            ..Failure::of(&e)
                        });
                        let mut held = buf;
                        held.append(&mut state.buf);
                        state.buf = held;
                        let mut held_writes = writes;
                        held_writes.append(&mut state.queued);
                        state.queued = held_writes;
                    }
                    Err(e) => self.fail(&mut state, &e),
                }
            }
            self.written.notify_waiters();
        }
    }

    /// The syncer thread: syncs what was written once a writer waits for it (or after
    /// [`NOWAIT_DELAY`] if none does), then publishes the writes it covered through `publish`
    /// and wakes their writers; until the writer thread stopped and all is synced.
    pub(super) fn sync_loop(&self, publish: impl Fn(&RunHandle, u64)) {
        loop {
            {
                let mut state = self.state.lock();
                loop {
                    if state.failed.is_some() {
                        return;
                    }
                    if state.written > state.durable {
                        if state.sync_wanted > state.durable || state.closing {
                            break;
                        }
                        // Nobody waits: give a writer that will the chance to come and share.
                        if self.to_sync.wait_for(&mut state, NOWAIT_DELAY).timed_out() {
                            break;
                        }
                        continue;
                    }
                    if state.writer_done {
                        return;
                    }
                    self.to_sync.wait(&mut state);
                }
            }
            // The file and what it holds, read together: every write counted in `written` is
            // in this file, or in one synced when a compaction switched away from it.
            let (file, upto, writes) = {
                let current = self.file.lock();
                let mut state = self.state.lock();
                (
                    current.file.clone(),
                    state.written,
                    std::mem::take(&mut state.unsynced),
                )
            };
            let result = file.sync_data();
            self.fsyncs.fetch_add(1, Ordering::Relaxed);
            if result.is_ok() {
                // Readers see the writes only now that they are durable.
                for (run, len) in &writes {
                    publish(run, *len);
                }
            }
            {
                let mut state = self.state.lock();
                match result {
                    Ok(()) => state.durable = upto,
                    Err(e) => self.fail(&mut state, &e),
                }
            }
            self.synced.notify_waiters();
        }
    }

    /// Records a failed write or sync and wakes everyone, who then see it.
    fn fail(&self, state: &mut State, error: &std::io::Error) {
        tracing::error!(file = %self.path.display(), error = %error, "hybrid store: WAL write failed");
        state.failed = Some(Failure::of(error));
        self.wake_all();
    }

    /// Wakes both threads and every waiting writer, who then see what changed.
    fn wake_all(&self) {
        self.to_sync.notify_one();
        self.to_write.notify_one();
        self.written.notify_waiters();
        self.synced.notify_waiters();
    }

    /// Tells both threads to finish: they write and sync what is queued, then stop.
    pub(super) fn close(&self) {
        self.state.lock().closing = true;
        self.to_write.notify_one();
        self.to_sync.notify_one();
    }

    /// Makes writes go to `open()`'s file from now on, unless the current one is empty (then
    /// returns false). The current file is synced first, so that what was written to it is
    /// durable whichever file the syncer syncs next.
    pub(super) fn switch(
        &self,
        open: impl FnOnce() -> Result<File, WorldError>,
    ) -> Result<bool, WorldError> {
        let mut current = self.file.lock();
        let len = current
            .file
            .metadata()
            .map_err(|e| io_error("could not read", &self.path, e))?
            .len();
        if len == 0 {
            return Ok(false);
        }
        current
            .file
            .sync_data()
            .map_err(|e| io_error("could not sync", &self.path, e))?;
        *current = Current::new(open()?);
        Ok(true)
    }

    /// The error for a write after a failed one. The write-ahead log stops at its first
    /// failure (what memory holds beyond the disk cannot be trusted), so the world must be
    /// restarted, which reads back everything acknowledged.
    fn failed(&self, failure: &Failure) -> WorldError {
        let path = self.path.display();
        let why = &failure.why;
        if failure.full && failure.waiting {
            WorldError::StorageFull(format!(
                "hybrid store: the disk of {path} is full ({why}); this write was not made and nothing acknowledged was lost. Free space on it: the writes already accepted are kept and written once it takes them, and the world goes on by itself"
            ))
        } else if failure.full {
            WorldError::StorageFull(format!(
                "hybrid store: the disk of {path} is full ({why}) and the store closed before it took the writes waiting; nothing acknowledged was lost: free space on it, then restart the world"
            ))
        } else if failure.io {
            WorldError::StorageIo(format!(
                "hybrid store: the disk of {path} failed a write ({why}); nothing acknowledged was lost: check the disk, then restart the world"
            ))
        } else {
            WorldError::Internal(format!(
                "hybrid store is now inconsistent: a write to {path} failed ({why}); reopen the store (restart the world) to recover from disk"
            ))
        }
    }
}
