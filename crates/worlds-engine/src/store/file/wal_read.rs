//! Reading a hybrid store's compacted segments (`segments/{n}.ndjson`, by number) and then its
//! write-ahead logs (`state/wal.ndjson`, then `state/wal.next.ndjson`) into memory after the run
//! logs: when a hybrid store opens, and read-only when a directory is inspected, so that what
//! they hold beyond the run logs is seen either way.

use std::collections::HashMap;
use std::fs::{self, File};
use std::path::Path;

use crate::error::WorldError;
use crate::store::{EventStore, MemoryStore, RunStore};

use super::log::{
    check_run_id, io_error, now, read_whole_lines, scan_records_at, truncate_torn, Records, Scan,
};
use super::record::Line;

/// The contents of the WAL file at `path`, `None` if there is none.
pub(in crate::store) fn read_wal(path: &Path) -> Result<Option<Vec<u8>>, WorldError> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error("could not read", path, e)),
    }
}

/// Bytes of a segment read and replayed at a time.
pub(in crate::store) const SEGMENT_CHUNK: usize = 8 << 20;

/// The two WAL files under `state/`, in the order they are replayed.
pub(in crate::store) const WAL_FILES: [&str; 2] = ["wal.ndjson", "wal.next.ndjson"];

/// The directory under a store's root where a hybrid store compacts its WAL: segment files of
/// many runs' records each, named by a number that grows with every new segment.
pub(in crate::store) const SEGMENTS_DIR: &str = "segments";

/// Suffix of a segment's file name.
const SEGMENT_SUFFIX: &str = ".ndjson";

/// The path of segment `number` under `dir`.
pub(in crate::store) fn segment_path(dir: &Path, number: u64) -> std::path::PathBuf {
    dir.join(format!("{number:010}{SEGMENT_SUFFIX}"))
}

/// The segment files under `dir`, oldest first; none if `dir` does not exist. Other files are
/// left alone.
pub(in crate::store) fn list_segments(dir: &Path) -> Result<Vec<std::path::PathBuf>, WorldError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_error("could not list", dir, e)),
    };
    let mut numbered = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io_error("could not list", dir, e))?;
        let name = entry.file_name();
        let number = name
            .to_str()
            .and_then(|name| name.strip_suffix(SEGMENT_SUFFIX))
            .and_then(|stem| stem.parse::<u64>().ok());
        if let Some(number) = number {
            numbered.push(number);
        }
    }
    numbered.sort_unstable();
    Ok(numbered.into_iter().map(|n| segment_path(dir, n)).collect())
}

/// Suffix of the file a segment is rewritten into (by the hybrid store's segment collection)
/// before it is renamed over the segment: `{n}.ndjson.tmp`.
const REWRITE_SUFFIX: &str = ".tmp";

/// The file segment `path` is rewritten into.
pub(in crate::store) fn rewrite_path(path: &Path) -> std::path::PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(REWRITE_SUFFIX);
    std::path::PathBuf::from(name)
}

/// Deletes the files a rewrite a crash interrupted left under `dir` (`{n}.ndjson.tmp`): the
/// segment itself was not touched yet.
pub(in crate::store) fn remove_stale_rewrites(dir: &Path) -> Result<(), WorldError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_error("could not list", dir, e)),
    };
    let mut removed = false;
    for entry in entries {
        let entry = entry.map_err(|e| io_error("could not list", dir, e))?;
        let path = entry.path();
        let stale = path
            .file_name()
            .and_then(|name| name.to_str())
            .and_then(|name| name.strip_suffix(REWRITE_SUFFIX))
            .is_some_and(|stem| segment_number(Path::new(stem)).is_some());
        if stale {
            tracing::warn!(file = %path.display(), "hybrid store: removing a segment rewrite a crash interrupted");
            fs::remove_file(&path).map_err(|e| io_error("could not remove", &path, e))?;
            removed = true;
        }
    }
    if removed {
        super::log::sync_dir(dir)?;
    }
    Ok(())
}

/// The number in a segment's file name.
pub(in crate::store) fn segment_number(path: &Path) -> Option<u64> {
    path.file_name()?
        .to_str()?
        .strip_suffix(SEGMENT_SUFFIX)?
        .parse()
        .ok()
}

/// Under `state/`: where a compaction in progress noted the newest segment's number and length
/// before it began (`{"segment": n, "len": bytes}`), written atomically and removed once the
/// compaction finished. If a crash interrupts the compaction (`wal.next.ndjson` is still
/// there), whatever it appended to the segments is cut off again on open (see
/// [`undo_interrupted_compaction`]): the WAL still holds all of it, so it is read once, from
/// there, and a run removed in the WAL can never come back from a copy of its records.
pub(in crate::store) const COMPACTION_MARK: &str = "compacting.json";

/// What a compaction noted before it began: the newest segment and its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(in crate::store) struct CompactionMark {
    /// The number of the segment it appended to.
    pub(in crate::store) segment: u64,
    /// That segment's length before it began.
    pub(in crate::store) len: u64,
}

impl CompactionMark {
    /// Notes, durably, where a compaction begins.
    pub(in crate::store) fn write(self, state: &Path) -> Result<(), WorldError> {
        let path = state.join(COMPACTION_MARK);
        let bytes = serde_json::to_vec(&self).expect("a mark serializes");
        crate::atomic_file::replace(&path, &bytes)
            .map_err(|e| io_error("could not write", &path, e))
    }

    /// The mark under `state`, if there is a readable one.
    pub(in crate::store) fn read(state: &Path) -> Result<Option<CompactionMark>, WorldError> {
        let path = state.join(COMPACTION_MARK);
        match fs::read(&path) {
            Ok(bytes) => Ok(serde_json::from_slice(&bytes).ok()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_error("could not read", &path, e)),
        }
    }

    /// Removes the mark (a compaction finished). Not synced: a mark without
    /// `wal.next.ndjson` beside it is stale and ignored.
    pub(in crate::store) fn clear(state: &Path) -> Result<(), WorldError> {
        let path = state.join(COMPACTION_MARK);
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_error("could not remove", &path, e)),
        }
    }
}

/// For the owner of a hybrid directory (a hybrid store opening it, a file store folding it):
/// if a compaction was interrupted (`state/wal.next.ndjson` exists) and noted where it began,
/// cuts what it appended off the segments (the segment it appended to back to its noted
/// length, later ones removed) and returns true; the WAL files still hold every record of it.
/// A stale mark (no compaction in progress) is removed. Returns false if there was nothing to
/// undo, or no mark (a compaction by a build before marks: its copies are passed over as
/// records already loaded).
pub(in crate::store) fn undo_interrupted_compaction(root: &Path) -> Result<bool, WorldError> {
    let state = root.join("state");
    if !state.join(WAL_FILES[1]).exists() {
        CompactionMark::clear(&state)?;
        return Ok(false);
    }
    let Some(mark) = CompactionMark::read(&state)? else {
        return Ok(false);
    };
    let dir = root.join(SEGMENTS_DIR);
    for path in list_segments(&dir)? {
        let Some(number) = segment_number(&path) else {
            continue;
        };
        if number > mark.segment {
            tracing::warn!(file = %path.display(), "hybrid store: removing a segment an interrupted compaction began");
            fs::remove_file(&path).map_err(|e| io_error("could not remove", &path, e))?;
        } else if number == mark.segment {
            let len = fs::metadata(&path)
                .map_err(|e| io_error("could not read", &path, e))?
                .len();
            if len > mark.len {
                tracing::warn!(file = %path.display(), from = mark.len, to = len, "hybrid store: cutting off what an interrupted compaction appended (the WAL holds it)");
                let file = fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(|e| io_error("could not open", &path, e))?;
                file.set_len(mark.len)
                    .and_then(|()| file.sync_all())
                    .map_err(|e| io_error("could not truncate", &path, e))?;
            }
        }
    }
    if dir.is_dir() {
        super::log::sync_dir(&dir)?;
    }
    Ok(true)
}

/// What a segment replay hands each record to (see [`WalReplay::replay_segment_tallied`]):
/// its run, its length in bytes (newline included), and whether it is a tombstone.
pub(in crate::store) type Tally<'t> = dyn FnMut(&str, u64, bool) + 't;

/// What [`WalReplay::replay`] found in one WAL file.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(in crate::store) struct Replayed {
    /// Records in the file.
    pub(in crate::store) records: u64,
    /// Of those, events not in their run's log yet (applied to memory).
    pub(in crate::store) pending: u64,
    /// A torn last line left in place (read-only replays only).
    pub(in crate::store) warning: Option<String>,
}

/// Replays WAL files over run logs already loaded into a memory store.
pub(in crate::store) struct WalReplay<'a> {
    memory: &'a MemoryStore,
    /// Events in each run's log on disk.
    counts: &'a HashMap<String, u64>,
    /// Each run's next `seq`, carried from one WAL file to the next.
    next: HashMap<String, u64>,
    records: Records,
    read_only: bool,
    /// Runs a tombstone removed, and not created again since.
    removed: std::collections::BTreeSet<String>,
    /// Runs met first past their creation (`seq` above 0): the tail of a removed run whose
    /// earlier records a segment rewrite dropped, as long as a tombstone of the run follows
    /// (see `hybrid/gc.rs`). Skipped; one still here at [`finish`](Self::finish) is
    /// corruption, reported with where it was met.
    orphans: HashMap<String, String>,
}

impl<'a> WalReplay<'a> {
    /// A replay into `memory`, whose run logs held `counts` events. Unless `read_only`, a torn
    /// last line is cut off.
    pub(in crate::store) fn new(
        memory: &'a MemoryStore,
        counts: &'a HashMap<String, u64>,
        records: Records,
        read_only: bool,
    ) -> Self {
        WalReplay {
            memory,
            counts,
            next: HashMap::new(),
            records,
            read_only,
            removed: std::collections::BTreeSet::new(),
            orphans: HashMap::new(),
        }
    }

    /// Checks, once every file is replayed, that each run met past its creation was removed
    /// later: if not, its first records are missing, which is corruption.
    pub(in crate::store) fn finish(&self) -> Result<(), WorldError> {
        match self.orphans.values().next() {
            Some(error) => Err(WorldError::Internal(format!("file store: {error}"))),
            None => Ok(()),
        }
    }

    /// The runs a tombstone removed (and that were not created again since): what of them
    /// may still lie outside the replayed files (a run log, streams) is left over from a
    /// removal a crash interrupted.
    pub(in crate::store) fn removed(&self) -> &std::collections::BTreeSet<String> {
        &self.removed
    }

    /// Applies the events of the WAL file at `wal_path` that are not in their run's log yet.
    /// A missing file holds nothing.
    pub(in crate::store) fn replay(&mut self, wal_path: &Path) -> Result<Replayed, WorldError> {
        match read_wal(wal_path)? {
            Some(bytes) => self.replay_bytes(wal_path, &bytes),
            None => Ok(Replayed::default()),
        }
    }

    /// Events of each run held before the files replayed so far, plus what they added: where
    /// the next record of each run belongs.
    pub(in crate::store) fn positions(&self) -> HashMap<String, u64> {
        let mut positions = self.counts.clone();
        positions.extend(self.next.iter().map(|(run, next)| (run.clone(), *next)));
        positions
    }

    /// Replays a segment file read [`SEGMENT_CHUNK`] bytes at a time (segments are large; their
    /// bytes need not be held at once), handing `tally` every whole record of it as it is
    /// applied: its run, its length in bytes (newline included) and whether it is a tombstone
    /// (the hybrid store counts the bytes of removed runs per segment). Only the newest segment
    /// (`newest`) may end in a line a crash cut short; in an older one such a line is
    /// corruption.
    pub(in crate::store) fn replay_segment_tallied(
        &mut self,
        path: &Path,
        newest: bool,
        tally: &mut Tally<'_>,
    ) -> Result<Replayed, WorldError> {
        let mut file = File::open(path).map_err(|e| io_error("could not read", path, e))?;
        self.replay_segment_with(&mut file, path, newest, SEGMENT_CHUNK, Some(tally))
    }

    /// A segment file replayed `chunk` bytes at a time.
    #[cfg(test)]
    fn replay_segment_in_chunks(
        &mut self,
        path: &Path,
        newest: bool,
        chunk: usize,
    ) -> Result<Replayed, WorldError> {
        let mut file = File::open(path).map_err(|e| io_error("could not read", path, e))?;
        self.replay_segment_from(&mut file, path, newest, chunk)
    }

    /// [`replay_segment_tallied`](Self::replay_segment_tallied) of what `reader` holds (the
    /// contents of `path`, perhaps read earlier), `chunk` bytes at a time, without a tally.
    pub(in crate::store) fn replay_segment_from(
        &mut self,
        reader: &mut impl std::io::Read,
        path: &Path,
        newest: bool,
        chunk: usize,
    ) -> Result<Replayed, WorldError> {
        self.replay_segment_with(reader, path, newest, chunk, None)
    }

    /// [`replay_segment_from`](Self::replay_segment_from), handing `tally` (if any) every
    /// record (see [`replay_segment_tallied`](Self::replay_segment_tallied)).
    fn replay_segment_with(
        &mut self,
        reader: &mut impl std::io::Read,
        path: &Path,
        newest: bool,
        chunk: usize,
        mut tally: Option<&mut Tally<'_>>,
    ) -> Result<Replayed, WorldError> {
        let mut replayed = Replayed::default();
        let lines = read_whole_lines(reader, path, chunk, |bytes, base| {
            let (scan, pending) = self.apply(path, bytes, base, tally.as_deref_mut())?;
            replayed.records += scan.count;
            replayed.pending += pending;
            Ok(())
        })?;
        if lines.torn() {
            if !newest {
                return Err(super::log::corrupt(
                    path,
                    lines.end,
                    "an incomplete line in a segment that later ones follow",
                ));
            }
            replayed.warning = self.torn(path, lines.end, lines.len)?;
        }
        Ok(replayed)
    }

    /// [`replay`](Self::replay) of `bytes`, read from `wal_path` earlier.
    pub(in crate::store) fn replay_bytes(
        &mut self,
        wal_path: &Path,
        bytes: &[u8],
    ) -> Result<Replayed, WorldError> {
        let (scan, pending) = self.apply(wal_path, bytes, 0, None)?;
        let warning = if scan.torn {
            self.torn(wal_path, scan.good_end, bytes.len())?
        } else {
            None
        };
        Ok(Replayed {
            records: scan.count,
            pending,
            warning,
        })
    }

    /// A torn last line from `good_end` to `len` in `path`: cut off, or, read-only, left in
    /// place and described.
    fn torn(&self, path: &Path, good_end: usize, len: usize) -> Result<Option<String>, WorldError> {
        if self.read_only {
            return Ok(Some(format!(
                "{}: incomplete last line at byte offset {good_end} ({} bytes), left by a crash mid-write or a write in progress; opening the store for writing cuts it off",
                path.display(),
                len - good_end
            )));
        }
        truncate_torn(path, good_end, len)?;
        Ok(None)
    }

    /// Applies the records of `bytes` (from byte `base` of `path`) that are not in memory yet;
    /// returns the scan and how many were applied. `tally`, if any, is handed every record.
    fn apply(
        &mut self,
        path: &Path,
        bytes: &[u8],
        base: usize,
        mut tally: Option<&mut Tally<'_>>,
    ) -> Result<(Scan, u64), WorldError> {
        let (memory, counts, next) = (self.memory, self.counts, &mut self.next);
        let removed = &mut self.removed;
        let orphans = &mut self.orphans;
        let mut pending = 0;
        let scan = scan_records_at(path, bytes, base, self.records, |offset, line| {
            if let Some(tally) = tally.as_deref_mut() {
                let start = offset - base;
                let len = bytes[start..]
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(bytes.len() - start, |i| i + 1);
                match &line {
                    Line::Event(event) => tally(&event.run_id, len as u64, false),
                    Line::Removed(run_id) => tally(run_id, len as u64, true),
                }
            }
            let event = match line {
                Line::Event(event) => *event,
                Line::Removed(run_id) => {
                    // Everything of the run so far goes; what follows belongs to a run created
                    // again with the same id.
                    check_run_id(&run_id).map_err(|e| e.to_string())?;
                    orphans.remove(&run_id);
                    memory.forget_run(&run_id);
                    next.insert(run_id.clone(), 0);
                    removed.insert(run_id);
                    return Ok(());
                }
            };
            check_run_id(&event.run_id).map_err(|e| e.to_string())?;
            if event.seq == 0 {
                removed.remove(&event.run_id);
            }
            let expected = match next.get_mut(event.run_id.as_str()) {
                Some(expected) => expected,
                None => {
                    let held = counts.get(&event.run_id).copied().unwrap_or(0);
                    next.entry(event.run_id.clone()).or_insert(held)
                }
            };
            if event.seq < *expected {
                // Already loaded from an earlier file (a crash mid-compaction): it must be the
                // same event.
                let stored =
                    now(memory.history(&event.run_id, event.seq)).map_err(|e| e.to_string())?;
                return match stored.first() {
                    Some(first) if first.id == event.id => Ok(()),
                    _ => Err(format!(
                        "event {} of run {} at seq {} differs from the one loaded before",
                        event.id, event.run_id, event.seq
                    )),
                };
            }
            if orphans.contains_key(&event.run_id) {
                if event.seq == 0 {
                    return Err(format!(
                        "run {} is created after records of it that follow its creation",
                        event.run_id
                    ));
                }
                return Ok(());
            }
            if event.seq > *expected && *expected == 0 {
                // The tail of a run whose first records a segment rewrite dropped: its
                // tombstone must follow (checked by `finish`).
                orphans.insert(
                    event.run_id.clone(),
                    format!(
                        "{} is corrupt at byte offset {offset}: event seq {} of run {} where seq 0 was expected, and no later tombstone removes the run",
                        path.display(),
                        event.seq,
                        event.run_id
                    ),
                );
                return Ok(());
            }
            if event.seq > *expected {
                return Err(format!(
                    "event seq {} of run {} where seq {expected} was expected",
                    event.seq, event.run_id
                ));
            }
            *expected += 1;
            let stored = if event.seq == 0 {
                now(memory.create_run(event))
            } else {
                let run_id = event.run_id.clone();
                now(memory.append(&run_id, vec![event])).map(|_| ())
            };
            stored.map_err(|e| format!("the history refuses this event: {e}"))?;
            pending += 1;
            Ok(())
        })?;
        Ok((scan, pending))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::{Event, EventKind, QueuedRun, EVENT_FORMAT_VERSION};
    use crate::payload::Payload;
    use crate::store::HybridStore;

    fn event(run_id: &str, seq: u64, kind: EventKind) -> Event {
        Event {
            id: format!("evnt_{run_id}_{seq}"),
            run_id: run_id.to_owned(),
            seq: 0,
            timestamp: 1,
            version: EVENT_FORMAT_VERSION,
            kind,
        }
    }

    /// A compacted segment of five runs, one with an input longer than the chunks below.
    async fn segment() -> (tempfile::TempDir, std::path::PathBuf, Vec<String>) {
        let dir = tempfile::tempdir().unwrap();
        let store = HybridStore::open(dir.path()).unwrap();
        let runs: Vec<String> = (0..5).map(|i| format!("wrun_seg{i}")).collect();
        for (i, run) in runs.iter().enumerate() {
            let input = if i == 3 {
                Payload::from(serde_json::json!("x".repeat(2000)))
            } else {
                Payload::null()
            };
            let queued = QueuedRun::new("w", run, input);
            let first = event(run, 0, EventKind::WorkflowQueued(Box::new(queued)));
            store.create_run(first).await.unwrap();
            let started = EventKind::WorkflowStarted {
                attempt: 1,
                first_position: 0,
            };
            store
                .append(run, vec![event(run, 1, started)])
                .await
                .unwrap();
        }
        store.compact().unwrap();
        drop(store);
        let path = segment_path(&dir.path().join(SEGMENTS_DIR), 1);
        (dir, path, runs)
    }

    async fn histories(memory: &MemoryStore, runs: &[String]) -> Vec<Vec<Arc<Event>>> {
        let mut all = Vec::new();
        for run in runs {
            all.push(memory.history(run, 0).await.unwrap());
        }
        all
    }

    /// Read a little at a time (lines longer than a chunk, chunks ending mid-line), a segment
    /// replays exactly as it does whole.
    #[tokio::test]
    async fn a_segment_read_in_small_chunks_replays_as_a_whole_one() {
        let (_dir, path, runs) = segment().await;
        let counts = HashMap::new();
        let whole = MemoryStore::new();
        let bytes = fs::read(&path).unwrap();
        WalReplay::new(&whole, &counts, Records::Checksummed, false)
            .replay_bytes(&path, &bytes)
            .unwrap();
        for chunk in [64, 333, 1 << 20] {
            let chunked = MemoryStore::new();
            let replayed = WalReplay::new(&chunked, &counts, Records::Checksummed, false)
                .replay_segment_in_chunks(&path, true, chunk)
                .unwrap();
            assert_eq!(replayed.records, 10, "chunk {chunk}");
            assert_eq!(
                histories(&chunked, &runs).await,
                histories(&whole, &runs).await
            );
        }
    }

    /// A cut-short last line is cut off in the newest segment and refused in an older one.
    #[tokio::test]
    async fn a_torn_segment_tail_is_cut_off_only_in_the_newest_segment() {
        let (_dir, path, runs) = segment().await;
        let bytes = fs::read(&path).unwrap();
        let whole_len = bytes.len();
        fs::write(&path, &bytes[..whole_len - 7]).unwrap();
        let counts = HashMap::new();
        let memory = MemoryStore::new();
        let err = WalReplay::new(&memory, &counts, Records::Checksummed, false)
            .replay_segment_in_chunks(&path, false, 100)
            .unwrap_err()
            .to_string();
        assert!(err.contains("incomplete line"), "{err}");
        assert_eq!(fs::metadata(&path).unwrap().len() as usize, whole_len - 7);

        let memory = MemoryStore::new();
        let replayed = WalReplay::new(&memory, &counts, Records::Checksummed, false)
            .replay_segment_in_chunks(&path, true, 100)
            .unwrap();
        assert_eq!(replayed.records, 9);
        let last_line = bytes[..whole_len - 1]
            .iter()
            .rposition(|&b| b == b'\n')
            .unwrap()
            + 1;
        assert_eq!(fs::metadata(&path).unwrap().len() as usize, last_line);
        assert_eq!(histories(&memory, &runs[..4]).await.len(), 4);
    }
}
