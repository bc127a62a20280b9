//! Compaction: moves the WAL's events into the per-run logs (every [`COMPACT_EVERY`], and on
//! close), and replays the WAL into memory when the store opens.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, OpenOptions};
use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use crate::error::WorldError;
use crate::store::file::{
    check_run_id, io_error, log_path, now, scan_events, sync_dir, truncate_torn,
    write_logs_unsynced_dir, LogWrite,
};
use crate::store::{MemoryStore, RunStore};

use super::Inner;

/// How often the background job compacts the WAL.
const COMPACT_EVERY: Duration = Duration::from_secs(5);

/// What compaction keeps between runs, behind a mutex that serializes compactions (WAL writes
/// go on meanwhile: they have their own).
pub(super) struct Disk {
    /// Events in each run's log on disk.
    pub(super) counts: HashMap<String, u64>,
    /// An earlier compaction failed part-way: compaction is off until the store is reopened (the
    /// WAL keeps everything, so nothing acknowledged is lost).
    pub(super) broken: Option<String>,
}

/// Applies the WAL's events that are not in their run's log yet to `memory`, truncating a
/// torn last line. `next` is each run's next `seq`, carried from one WAL file to the next.
pub(super) fn replay(
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

impl Inner {
    pub(super) fn compact(&self) -> Result<usize, WorldError> {
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
        // Only compaction (one at a time) creates or renames `next_path`.
        if !self.next_path.exists() {
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
                return Ok(0);
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
pub(super) async fn compact_loop(inner: std::sync::Weak<Inner>) {
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
