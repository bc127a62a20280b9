//! Compaction: moves the WAL's events into the per-run logs (every [`COMPACT_EVERY`], and on
//! close). Replaying the WAL into memory when the store opens is `store/file/wal_read.rs`.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::ops::Range;
use std::time::Duration;

use crate::error::WorldError;
use crate::store::file::{io_error, scan_headers_at, sync_dir, LogBatch};

use super::Inner;

/// How often the background job compacts the WAL.
const COMPACT_EVERY: Duration = Duration::from_secs(5);

/// Bytes of the WAL compaction reads and moves at a time.
const CHUNK: usize = 8 << 20;

/// What compaction keeps between runs, behind a mutex that serializes compactions (WAL writes
/// go on meanwhile: they have their own).
pub(super) struct Disk {
    /// Events in each run's log on disk.
    pub(super) counts: HashMap<String, u64>,
    /// An earlier compaction failed part-way: compaction is off until the store is reopened (the
    /// WAL keeps everything, so nothing acknowledged is lost).
    pub(super) broken: Option<String>,
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
        if let Err(e) = &result {
            disk.broken = Some(e.to_string());
        }
        result
    }

    /// Points the writer at `wal.next.ndjson` (unless a crash left it in use already), moves
    /// the events of `wal.ndjson` into the run logs, then renames `wal.next.ndjson` over it.
    fn compact_locked(&self, disk: &mut Disk, chunk: usize) -> Result<usize, WorldError> {
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
        let moved = self.move_to_logs(disk, chunk)?;
        // Every event of `wal.ndjson` is in its run's log and synced: it can go. The writer
        // keeps appending to the renamed file.
        fs::rename(&self.next_path, &self.wal_path)
            .map_err(|e| io_error("could not rename", &self.next_path, e))?;
        sync_dir(state)?;
        Ok(moved)
    }

    /// Appends the events of `wal.ndjson` that are not in their run's log yet to the logs, and
    /// syncs them. Reads the WAL `chunk` bytes at a time, so compaction takes little memory
    /// however much the WAL holds; every log touched is synced once, at the end.
    fn move_to_logs(&self, disk: &mut Disk, chunk: usize) -> Result<usize, WorldError> {
        let mut wal = match File::open(&self.wal_path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(io_error("could not read", &self.wal_path, e)),
        };
        let mut buf = Vec::with_capacity(chunk);
        // The WAL offset of `buf[0]`.
        let mut base = 0;
        let mut batch = LogBatch::default();
        // Events written to each run's log by this compaction so far.
        let mut written: HashMap<String, u64> = HashMap::new();
        loop {
            let want = chunk.saturating_sub(buf.len()).max(chunk / 8).max(1);
            let read = (&mut wal)
                .take(want as u64)
                .read_to_end(&mut buf)
                .map_err(|e| io_error("could not read", &self.wal_path, e))?;
            let last = read == 0;
            // Whole lines only, but for the last chunk (where an incomplete line is an error).
            let end = if last {
                buf.len()
            } else {
                match buf.iter().rposition(|&b| b == b'\n') {
                    Some(i) => i + 1,
                    None => continue, // a line longer than a chunk: read on
                }
            };
            if end > 0 {
                self.move_chunk(&disk.counts, &mut written, &mut batch, &buf[..end], base)?;
            }
            if last {
                break;
            }
            buf.drain(..end);
            base += end;
        }
        drop(buf);
        if batch.finish(&self.workflows)? {
            sync_dir(&self.workflows)?;
        }
        let mut moved = 0;
        for (run_id, count) in written {
            moved += count as usize;
            *disk.counts.entry(run_id).or_insert(0) += count;
        }
        Ok(moved)
    }

    /// Writes the events of `bytes` (whole lines of the WAL from offset `base`) that are not in
    /// their run's log yet to the logs, through `batch`; `counts` are the events each log held
    /// before this compaction, `written` those this compaction added.
    fn move_chunk(
        &self,
        counts: &HashMap<String, u64>,
        written: &mut HashMap<String, u64>,
        batch: &mut LogBatch,
        bytes: &[u8],
        base: usize,
    ) -> Result<(), WorldError> {
        // Lines of the events not yet in each run's log, in order, as byte ranges of `bytes`:
        // a WAL line is the run log's line byte for byte, so only each record's checksum, run
        // and `seq` are read (this process wrote and checked the events when they were
        // appended, and the next open reads them whole).
        let mut fresh: BTreeMap<String, Vec<Range<usize>>> = BTreeMap::new();
        let scan = scan_headers_at(&self.wal_path, bytes, base, |offset, event| {
            let run_id: &str = &event.run_id;
            let have = counts.get(run_id).copied().unwrap_or(0)
                + written.get(run_id).copied().unwrap_or(0);
            let batched = fresh.get(run_id).map_or(0, Vec::len);
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
            let start = offset - base;
            let end = bytes[start..]
                .iter()
                .position(|&b| b == b'\n')
                .map_or(bytes.len(), |i| start + i + 1);
            let line = start..end;
            match fresh.get_mut(run_id) {
                Some(lines) => lines.push(line),
                None => {
                    fresh.insert(run_id.to_owned(), vec![line]);
                }
            }
            Ok(())
        })?;
        if scan.torn {
            return Err(WorldError::Internal(format!(
                "hybrid store: {} has an incomplete line at byte offset {} while open; not compacting",
                self.wal_path.display(),
                base + scan.good_end
            )));
        }
        let mut lines = Vec::new();
        for (run_id, ranges) in fresh {
            lines.clear();
            for range in &ranges {
                lines.extend_from_slice(&bytes[range.clone()]);
            }
            batch.append(
                &self.workflows,
                &run_id,
                counts.contains_key(&run_id),
                &lines,
            )?;
            *written.entry(run_id).or_insert(0) += ranges.len() as u64;
        }
        Ok(())
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
