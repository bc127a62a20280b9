//! Compaction: moves the WAL's records into the newest segment file (every [`COMPACT_EVERY`],
//! and on close). Replaying segments and the WAL into memory when the store opens is
//! `store/file/wal_read.rs`.
//!
//! A segment holds the records of many runs, each line exactly as the WAL held it, in the order
//! they were written; a new one is started once the newest passes [`SEGMENT_BYTES`]. So a
//! compaction costs one sequential write and one sync however many runs it touches (one file
//! per run cost a file creation and a sync each).
//!
//! Before it begins, a compaction notes the newest segment and its length in
//! `state/compacting.json` (removed once it finished): a crash part-way leaves
//! `wal.next.ndjson`, and the next open cuts what was appended off the segments again, so that
//! no record is in a segment and the WAL at once (a tombstone and a copy of the records it
//! removed would otherwise bring the run back).
//!
//! As it moves records, compaction counts each one's bytes per segment and run (only run ids
//! and `seq`s are decoded), so that a tombstone moved in turns its run's bytes dead; after each
//! background compaction, at most one segment mostly dead is rewritten without them, under the
//! same lock (see `gc.rs`). So a mark never names a segment a rewrite is about to shorten: no
//! rewrite runs while a compaction is in flight, and the next compaction notes the new length.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::WorldError;
use crate::store::file::{
    fresh_records, io_error, is_tombstone, read_whole_lines, scan_headers_at, segment_number,
    segment_path, sync_dir, CompactionMark,
};

use super::gc::Liveness;
use super::Inner;

/// How often the background job compacts the WAL.
const COMPACT_EVERY: Duration = Duration::from_secs(5);

/// Bytes of the WAL compaction reads and moves at a time.
const CHUNK: usize = 8 << 20;

/// Size past which compaction starts a new segment.
pub(super) const SEGMENT_BYTES: u64 = 64 << 20;

/// The segment compaction appends to.
pub(super) struct Segment {
    dir: PathBuf,
    number: u64,
    path: PathBuf,
    file: File,
    len: u64,
}

impl Segment {
    /// Opens the newest segment of `dir` for appending (`newest`, found by the open), or
    /// creates the first one.
    pub(super) fn open(dir: &Path, newest: Option<&Path>) -> Result<Segment, WorldError> {
        match newest.and_then(|path| Some((path, segment_number(path)?))) {
            Some((path, number)) => {
                let file = OpenOptions::new()
                    .append(true)
                    .open(path)
                    .map_err(|e| io_error("could not open", path, e))?;
                let len = file
                    .metadata()
                    .map_err(|e| io_error("could not read", path, e))?
                    .len();
                Ok(Segment {
                    dir: dir.to_path_buf(),
                    number,
                    path: path.to_path_buf(),
                    file,
                    len,
                })
            }
            None => Segment::create(dir, 1),
        }
    }

    /// Creates segment `number` (empty), and syncs the directory so that it survives a crash.
    fn create(dir: &Path, number: u64) -> Result<Segment, WorldError> {
        let path = segment_path(dir, number);
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| io_error("could not create", &path, e))?;
        sync_dir(dir)?;
        Ok(Segment {
            dir: dir.to_path_buf(),
            number,
            path,
            file,
            len: 0,
        })
    }

    /// Its number.
    pub(super) fn number(&self) -> u64 {
        self.number
    }

    /// Appends whole lines (not synced).
    fn write(&mut self, lines: &[u8]) -> Result<(), WorldError> {
        self.file
            .write_all(lines)
            .map_err(|e| io_error("could not write", &self.path, e))?;
        self.len += lines.len() as u64;
        Ok(())
    }

    /// Makes what was written durable.
    fn sync(&self) -> Result<(), WorldError> {
        self.file
            .sync_data()
            .map_err(|e| io_error("could not sync", &self.path, e))
    }

    /// Moves on to a new segment if this one holds `limit` bytes or more, syncing it first.
    fn roll_if_full(&mut self, limit: u64) -> Result<(), WorldError> {
        if self.len < limit {
            return Ok(());
        }
        self.sync()?;
        *self = Segment::create(&self.dir, self.number + 1)?;
        Ok(())
    }
}

/// What compaction keeps between runs, behind a mutex that serializes compactions (WAL writes
/// go on meanwhile: they have their own).
pub(super) struct Disk {
    /// Where compacted records go; opened by the first compaction.
    pub(super) segment: Option<Segment>,
    /// The newest segment found when the store opened.
    pub(super) newest: Option<PathBuf>,
    /// Size past which a new segment is started: [`SEGMENT_BYTES`], smaller in tests.
    pub(super) segment_bytes: u64,
    /// Until the first compaction: the events of each run already in the run logs and segments.
    /// A crash part-way through a compaction leaves some of the WAL's records in a segment
    /// already; the first compaction passes over those. Every later WAL holds only new records.
    pub(super) on_disk: Option<HashMap<String, u64>>,
    /// An earlier compaction failed part-way: compaction is off until the store is reopened (the
    /// WAL keeps everything, so nothing acknowledged is lost).
    pub(super) broken: Option<String>,
    /// Which bytes of each segment are dead, kept up as records are moved in (see `gc.rs`).
    pub(super) liveness: Liveness,
}

impl Inner {
    pub(super) fn compact(&self) -> Result<usize, WorldError> {
        self.compact_in_chunks(CHUNK)
    }

    /// [`compact`](Self::compact), reading the WAL `chunk` bytes at a time.
    fn compact_in_chunks(&self, chunk: usize) -> Result<usize, WorldError> {
        let mut disk = self.disk.lock();
        if let Some(why) = &disk.broken {
            return Err(WorldError::Internal(format!(
                "hybrid store: compaction is off after an earlier failure ({why}); the WAL keeps every write; reopen the store to retry"
            )));
        }
        let result = self.compact_locked(&mut disk, chunk);
        match &result {
            Ok(_) => disk.on_disk = None,
            Err(e) => disk.broken = Some(e.to_string()),
        }
        result
    }

    /// Points the writer at `wal.next.ndjson` (unless a crash left it in use already), moves
    /// the records of `wal.ndjson` into the newest segment, then renames `wal.next.ndjson` over
    /// it.
    fn compact_locked(&self, disk: &mut Disk, chunk: usize) -> Result<usize, WorldError> {
        let state = self.wal_path.parent().unwrap_or(&self.root);
        // Only compaction (one at a time) creates or renames `next_path`.
        let resuming = self.next_path.exists();
        if !resuming {
            let len = fs::metadata(&self.wal_path)
                .map_err(|e| io_error("could not read", &self.wal_path, e))?
                .len();
            if len == 0 {
                return Ok(0);
            }
        }
        // Where the segments end before this compaction, noted before the writer is pointed
        // at `next_path`: if a crash interrupts it, the next open cuts off what it appended.
        let segment = match &mut disk.segment {
            Some(segment) => segment,
            None => disk
                .segment
                .insert(Segment::open(&self.segments, disk.newest.as_deref())?),
        };
        CompactionMark {
            segment: segment.number,
            len: segment.len,
        }
        .write(state)?;
        if !resuming {
            let switched = self.wal.switch(|| {
                let next = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.next_path)
                    .map_err(|e| io_error("could not create", &self.next_path, e))?;
                sync_dir(state)?;
                Ok(next)
            })?;
            if !switched {
                CompactionMark::clear(state)?;
                return Ok(0);
            }
        }
        let moved = self.move_to_segment(disk, chunk)?;
        // Every record of `wal.ndjson` is in a segment and synced: it can go. The writer keeps
        // appending to the renamed file.
        fs::rename(&self.next_path, &self.wal_path)
            .map_err(|e| io_error("could not rename", &self.next_path, e))?;
        sync_dir(state)?;
        CompactionMark::clear(state)?;
        Ok(moved)
    }

    /// Appends the records of `wal.ndjson` to the newest segment (those already there after a
    /// crash passed over), and syncs it. Reads the WAL `chunk` bytes at a time, so compaction
    /// takes little memory however much the WAL holds.
    fn move_to_segment(&self, disk: &mut Disk, chunk: usize) -> Result<usize, WorldError> {
        let mut wal = match File::open(&self.wal_path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(io_error("could not read", &self.wal_path, e)),
        };
        let segment = match &mut disk.segment {
            Some(segment) => segment,
            None => disk
                .segment
                .insert(Segment::open(&self.segments, disk.newest.as_deref())?),
        };
        let mut on_disk = disk.on_disk.as_mut();
        let liveness = &mut disk.liveness;
        let limit = disk.segment_bytes;
        let mut moved = 0;
        let lines = read_whole_lines(&mut wal, &self.wal_path, chunk, |bytes, base| {
            segment.roll_if_full(limit)?;
            moved += self.move_chunk(segment, on_disk.as_deref_mut(), liveness, bytes, base)?;
            Ok(())
        })?;
        if lines.torn() {
            return Err(WorldError::Internal(format!(
                "hybrid store: {} has an incomplete line at byte offset {} while open; not compacting",
                self.wal_path.display(),
                lines.end
            )));
        }
        segment.sync()?;
        Ok(moved)
    }

    /// Appends the records of `bytes` (whole lines of the WAL from offset `base`) to `segment`,
    /// passing over those `on_disk` says are there already, and counts each in `liveness`.
    /// Every record's checksum is verified; nothing but its run and `seq` is decoded (this
    /// process wrote and checked the events when they were appended, and the next open reads
    /// them whole).
    fn move_chunk(
        &self,
        segment: &mut Segment,
        on_disk: Option<&mut HashMap<String, u64>>,
        liveness: &mut Liveness,
        bytes: &[u8],
        base: usize,
    ) -> Result<usize, WorldError> {
        let number = segment.number;
        let Some(on_disk) = on_disk else {
            let scan = scan_headers_at(&self.wal_path, bytes, base, |offset, header| {
                let start = offset - base;
                let len = bytes[start..]
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(bytes.len() - start, |i| i + 1);
                liveness.record(number, &header.run_id, len as u64, header.removed);
                Ok(())
            })?;
            segment.write(bytes)?;
            return Ok(scan.count as usize);
        };
        // After a crash mid-compaction: only the records not in a segment yet, in order.
        let mut fresh = Vec::with_capacity(bytes.len());
        let mut moved = 0;
        fresh_records(
            &self.wal_path,
            bytes,
            base,
            on_disk,
            |_, _| false,
            |run_id, _, line| {
                let record = &bytes[line];
                let tombstone = is_tombstone(record);
                liveness.record(number, run_id, record.len() as u64, tombstone);
                fresh.extend_from_slice(record);
                moved += 1;
            },
        )?;
        segment.write(&fresh)?;
        Ok(moved)
    }
}

/// Compacts every [`COMPACT_EVERY`] until the store is dropped.
pub(super) async fn compact_loop(inner: std::sync::Weak<Inner>) {
    loop {
        tokio::time::sleep(COMPACT_EVERY).await;
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let round = tokio::task::spawn_blocking(move || {
            if let Err(e) = strong.compact() {
                tracing::warn!(error = %e, "hybrid store: compaction failed");
                return;
            }
            // Then at most one segment rewritten, so that a large sweep does not hold the
            // compaction lock for long: the next rounds do the rest.
            if let Err(e) = strong.collect_segment() {
                tracing::warn!(error = %e, "hybrid store: rewriting a segment failed");
            }
        })
        .await;
        if round.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::model::{Event, EventKind, QueuedRun, ResolveData, EVENT_FORMAT_VERSION};
    use crate::payload::Payload;
    use crate::store::{EventStore, HybridStore, RunStore};

    fn event(run_id: &str, n: u64, kind: EventKind) -> Event {
        Event {
            id: format!("evnt_{run_id}_{n}"),
            run_id: run_id.to_owned(),
            seq: 0,
            timestamp: 1,
            version: EVENT_FORMAT_VERSION,
            kind,
        }
    }

    fn queued(run_id: &str, input: Payload) -> Event {
        event(
            run_id,
            0,
            EventKind::WorkflowQueued(Box::new(QueuedRun::new("w", run_id, input))),
        )
    }

    /// Segments roll over at their size limit; every segment is read back in order.
    #[tokio::test]
    async fn full_segments_are_followed_by_new_ones() {
        let dir = tempfile::tempdir().unwrap();
        let store = HybridStore::open(dir.path()).unwrap();
        store.inner.disk.lock().segment_bytes = 600;
        let runs: Vec<String> = (0..8).map(|i| format!("wrun_roll{i}")).collect();
        for (i, run) in runs.iter().enumerate() {
            store
                .create_run(queued(run, Payload::null()))
                .await
                .unwrap();
            let started = EventKind::WorkflowStarted {
                attempt: 1,
                first_position: 0,
            };
            store
                .append(run, vec![event(run, 1, started)])
                .await
                .unwrap();
            if i % 2 == 1 {
                store.inner.compact_in_chunks(700).unwrap();
            }
        }
        let mut before = Vec::new();
        for run in &runs {
            before.push(store.history(run, 0).await.unwrap());
        }
        drop(store);
        let segments = crate::store::file::list_segments(&dir.path().join("segments")).unwrap();
        let sizes: Vec<u64> = segments
            .iter()
            .map(|p| std::fs::metadata(p).unwrap().len())
            .collect();
        assert!(segments.len() >= 3, "{segments:?} {sizes:?}");
        for path in &segments[..segments.len() - 1] {
            let len = std::fs::metadata(path).unwrap().len();
            assert!(len >= 600, "{} holds {len} bytes", path.display());
        }
        let reopened = HybridStore::open(dir.path()).unwrap();
        for (run, history) in runs.iter().zip(before) {
            assert_eq!(reopened.history(run, 0).await.unwrap(), history, "{run}");
        }
    }

    /// A WAL read a few lines at a time — runs whose events span many chunks, and a line
    /// longer than a chunk — lands in the run logs exactly as it was written.
    #[tokio::test]
    async fn compaction_in_small_chunks_moves_every_event_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = HybridStore::open(dir.path()).unwrap();
        let runs: Vec<String> = (0..5).map(|i| format!("wrun_chunk{i}")).collect();
        let big = Payload::from(serde_json::json!("x".repeat(3000)));
        for (i, run) in runs.iter().enumerate() {
            let input = if i == 2 { big.clone() } else { Payload::null() };
            store.create_run(queued(run, input)).await.unwrap();
        }
        for n in 1..=6 {
            for run in &runs {
                let kind = if n == 1 {
                    EventKind::WorkflowStarted {
                        attempt: 1,
                        first_position: 0,
                    }
                } else {
                    EventKind::TimerScheduled {
                        position: n as u32,
                        fire_at: 10,
                        timer_id: None,
                    }
                };
                store.append(run, vec![event(run, n, kind)]).await.unwrap();
            }
        }
        let wal = std::fs::metadata(dir.path().join("state/wal.ndjson"))
            .unwrap()
            .len();
        assert!(wal > 5_000, "{wal} bytes");
        let moved = store.inner.compact_in_chunks(1000).unwrap();
        assert_eq!(moved, runs.len() * 7);
        let mut before = Vec::new();
        for run in &runs {
            before.push(store.history(run, 0).await.unwrap());
        }
        drop(store);

        let reopened = HybridStore::open(dir.path()).unwrap();
        assert_eq!(
            std::fs::metadata(dir.path().join("state/wal.ndjson"))
                .unwrap()
                .len(),
            0,
            "nothing was left to compact"
        );
        for (run, history) in runs.iter().zip(before) {
            let now: Vec<Arc<Event>> = reopened.history(run, 0).await.unwrap();
            assert_eq!(now, history, "{run}");
            assert_eq!(now.len(), 7);
            let state = reopened.get_run(run, ResolveData::All).await.unwrap();
            assert_eq!(state.event_count, 7);
        }
    }
}
