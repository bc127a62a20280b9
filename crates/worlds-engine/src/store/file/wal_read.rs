//! Reading a hybrid store's compacted segments (`segments/{n}.ndjson`, by number) and then its
//! write-ahead logs (`state/wal.ndjson`, then `state/wal.next.ndjson`) into memory after the run
//! logs: when a hybrid store opens, and read-only when a directory is inspected, so that what
//! they hold beyond the run logs is seen either way.

use std::collections::HashMap;
use std::fs;
use std::path::Path;

use crate::error::WorldError;
use crate::store::{EventStore, MemoryStore, RunStore};

use super::log::{check_run_id, io_error, now, scan_events, truncate_torn, Records};

/// The contents of the WAL file at `path`, `None` if there is none.
pub(in crate::store) fn read_wal(path: &Path) -> Result<Option<Vec<u8>>, WorldError> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error("could not read", path, e)),
    }
}

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

/// The number in a segment's file name.
pub(in crate::store) fn segment_number(path: &Path) -> Option<u64> {
    path.file_name()?
        .to_str()?
        .strip_suffix(SEGMENT_SUFFIX)?
        .parse()
        .ok()
}

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
        }
    }

    /// Applies the events of the WAL file at `wal_path` that are not in their run's log yet.
    /// A missing file holds nothing.
    pub(in crate::store) fn replay(&mut self, wal_path: &Path) -> Result<Replayed, WorldError> {
        match read_wal(wal_path)? {
            Some(bytes) => self.replay_bytes(wal_path, &bytes),
            None => Ok(Replayed::default()),
        }
    }

    /// [`replay_bytes`](Self::replay_bytes) of a segment's contents. Only the newest segment
    /// (`newest`) may end in a line a crash cut short (compaction was copying into it, and the
    /// WAL still holds that line); in an older one such a line is corruption.
    pub(in crate::store) fn replay_segment(
        &mut self,
        path: &Path,
        bytes: &[u8],
        newest: bool,
    ) -> Result<Replayed, WorldError> {
        if !newest && !bytes.is_empty() && bytes.last() != Some(&b'\n') {
            let start = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            return Err(super::log::corrupt(
                path,
                start,
                "an incomplete line in a segment that later ones follow",
            ));
        }
        self.replay_bytes(path, bytes)
    }

    /// Events of each run held before the files replayed so far, plus what they added: where
    /// the next record of each run belongs.
    pub(in crate::store) fn positions(&self) -> HashMap<String, u64> {
        let mut positions = self.counts.clone();
        positions.extend(self.next.iter().map(|(run, next)| (run.clone(), *next)));
        positions
    }

    /// [`replay`](Self::replay) of `bytes`, read from `wal_path` earlier.
    pub(in crate::store) fn replay_bytes(
        &mut self,
        wal_path: &Path,
        bytes: &[u8],
    ) -> Result<Replayed, WorldError> {
        let (memory, counts, next) = (self.memory, self.counts, &mut self.next);
        let mut pending = 0;
        let scan = scan_events(wal_path, bytes, self.records, |_, event| {
            check_run_id(&event.run_id).map_err(|e| e.to_string())?;
            let expected = next
                .entry(event.run_id.clone())
                .or_insert_with(|| counts.get(&event.run_id).copied().unwrap_or(0));
            if event.seq < *expected {
                // Already compacted into the run's log before a crash: it must be the same
                // event.
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
            pending += 1;
            Ok(())
        })?;
        let mut warning = None;
        if scan.torn && self.read_only {
            warning = Some(format!(
                "{}: incomplete last line at byte offset {} ({} bytes), left by a crash mid-write or a write in progress; opening the store for writing cuts it off",
                wal_path.display(),
                scan.good_end,
                bytes.len() - scan.good_end
            ));
        } else if scan.torn {
            truncate_torn(wal_path, scan.good_end, bytes.len())?;
        }
        Ok(Replayed {
            records: scan.count,
            pending,
            warning,
        })
    }
}
