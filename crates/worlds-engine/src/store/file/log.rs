//! The on-disk form of run histories: one ndjson log per run under `workflows/`, and the
//! helpers that write, scan, repair and load such logs (the hybrid store's WAL uses them too).

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::WorldError;
use crate::model::{Event, EVENT_FORMAT_VERSION};
use crate::store::{EventStore, MemoryStore, RunStore};

use super::record;

/// Extension of a run's event log.
pub(in crate::store) const LOG_SUFFIX: &str = ".events.ndjson";
/// Extension of a file being created (renamed into place once complete).
pub(in crate::store) const TMP_SUFFIX: &str = ".tmp";
/// Longest run id accepted as a file name.
const MAX_RUN_ID_LEN: usize = 200;

/// The error for a failed file operation: a full disk (`ENOSPC`, `EDQUOT`) and a failing one
/// (`EIO`) have kinds of their own, which the engine treats as passing.
pub(in crate::store) fn io_error(what: &str, path: &Path, err: std::io::Error) -> WorldError {
    use std::io::ErrorKind as Io;
    const EIO: i32 = 5;
    match err.kind() {
        Io::StorageFull | Io::QuotaExceeded => WorldError::StorageFull(format!(
            "file store: {what} {}: the disk is full ({err}); nothing was written: free space on it and the world goes on by itself",
            path.display()
        )),
        _ if err.raw_os_error() == Some(EIO) => WorldError::StorageIo(format!(
            "file store: {what} {}: the disk failed the operation ({err}); nothing was acknowledged: check the disk (dmesg) — the world tries again by itself",
            path.display()
        )),
        _ => WorldError::Internal(format!("file store: {what} {}: {err}", path.display())),
    }
}

/// Makes a rename or a new file in `dir` durable. Directories cannot be opened for syncing on
/// every platform; where they cannot, this is a no-op.
pub(in crate::store) fn sync_dir(dir: &Path) -> Result<(), WorldError> {
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
pub(in crate::store) fn check_run_id(run_id: &str) -> Result<(), WorldError> {
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

/// Serializes events as records (see [`super::record`]): one JSON object ending in its
/// checksum, and a newline, each.
pub(in crate::store) fn encode(events: &[Arc<Event>]) -> Result<Vec<u8>, WorldError> {
    let mut buf = Vec::with_capacity(events.len() * 256);
    for event in events {
        record::encode_into(&mut buf, event).map_err(|e| WorldError::serde("event", e))?;
    }
    Ok(buf)
}

/// Runs a [`MemoryStore`] future to completion from synchronous code. The memory store never
/// waits on I/O or on the runtime, so its futures finish on first poll; polling them directly
/// (rather than through an executor) also works inside any executor, including a
/// `futures::executor::block_on` further up the stack.
pub(in crate::store) fn now<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(value) = future.as_mut().poll(&mut cx) {
            return value;
        }
        // Not expected from the memory store; wait politely rather than fail.
        std::thread::yield_now();
    }
}

/// The path of a run's log under `workflows/`.
pub(in crate::store) fn log_path(workflows: &Path, run_id: &str) -> PathBuf {
    workflows.join(format!("{run_id}{LOG_SUFFIX}"))
}

/// The error for a corrupt file: names the file and the byte offset.
pub(in crate::store) fn corrupt(
    path: &Path,
    offset: usize,
    why: impl std::fmt::Display,
) -> WorldError {
    WorldError::Internal(format!(
        "file store: {} is corrupt at byte offset {offset}: {why}; the file was left untouched",
        path.display()
    ))
}

/// What [`scan_events_at`] found.
#[derive(Debug)]
pub(in crate::store) struct Scan {
    /// Byte offset just past the last complete, accepted event.
    pub(in crate::store) good_end: usize,
    /// The last line is incomplete (a crash mid-write, or a write in progress).
    pub(in crate::store) torn: bool,
    /// How many events were accepted.
    pub(in crate::store) count: u64,
}

/// Which records a file may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::store) enum Records {
    /// Every record carries its checksum (store format 4 on): what every writable store reads.
    Checksummed,
    /// Records of an older format, read (not migrated) by a read-only store: a checksum is
    /// verified where there is one (a migration a crash interrupted), and may be missing.
    Legacy,
}

impl Records {
    /// What a directory of store format `format` holds.
    pub(in crate::store) fn of_format(format: u32) -> Records {
        if format >= record::FIRST_CHECKSUMMED_FORMAT {
            Records::Checksummed
        } else {
            Records::Legacy
        }
    }

    fn decode(self, line: &[u8]) -> Result<Event, record::BadRecord> {
        match self {
            Records::Checksummed => record::decode(line),
            Records::Legacy => record::decode_legacy(line),
        }
    }
}

/// Reads records from `bytes` (the part of `path` that starts at byte `base`), handing each
/// event with its byte offset in the file to `each`, which may refuse it with a reason; offsets
/// named in errors are offsets in the file, `good_end` is relative to `bytes`. A last line
/// without its newline stops the scan and is reported as torn: only such a line can be an
/// append a crash cut short. Everything else that is wrong is a corruption error naming the
/// file and offset: a whole line whose checksum fails or that is not an event (even the last
/// one), an event of a newer format, or a refused event.
pub(in crate::store) fn scan_events_at(
    path: &Path,
    bytes: &[u8],
    base: usize,
    records: Records,
    mut each: impl FnMut(usize, Event) -> Result<(), String>,
) -> Result<Scan, WorldError> {
    scan_lines_at(
        path,
        bytes,
        base,
        |line| {
            let event = records.decode(line).map_err(|why| why.to_string())?;
            if event.version > EVENT_FORMAT_VERSION {
                return Err(format!(
                    "event format version {} is newer than this build's {EVENT_FORMAT_VERSION}",
                    event.version
                ));
            }
            Ok(event)
        },
        &mut each,
    )
}

/// [`scan_events_at`] reading only each record's run id and `seq` (every checksum is still
/// verified): for compaction, which moves lines this process wrote without looking inside.
pub(in crate::store) fn scan_headers_at(
    path: &Path,
    bytes: &[u8],
    base: usize,
    mut each: impl FnMut(usize, record::Header<'_>) -> Result<(), String>,
) -> Result<Scan, WorldError> {
    scan_lines_at(
        path,
        bytes,
        base,
        |line| record::decode_header(line).map_err(|why| why.to_string()),
        &mut each,
    )
}

/// The records of a chunk of `path` (`bytes`, starting at byte `base` of the file) that are not
/// on disk yet, for moving them there after a crash interrupted an earlier move. `on_disk`
/// holds how many records of each run are there already: a record below its run's count is
/// skipped; one at it is handed to `fresh` (its run, its `seq` and its line, newline included,
/// as a range of `bytes`) and counted; one above it is corruption, since a record before it is
/// missing. A record for which `dead` (given its run and file offset) says yes is passed over
/// whatever its `seq`: one of a run removed later. A tombstone that is not dead is handed over
/// and starts its run's count again (a run created again with the same id starts at `seq` 0).
/// Each checksum is verified; events are not decoded.
pub(in crate::store) fn fresh_records(
    path: &Path,
    bytes: &[u8],
    base: usize,
    on_disk: &mut HashMap<String, u64>,
    dead: impl Fn(&str, usize) -> bool,
    mut fresh: impl FnMut(&str, u64, Range<usize>),
) -> Result<(), WorldError> {
    scan_headers_at(path, bytes, base, |offset, header| {
        let run_id: &str = &header.run_id;
        if dead(run_id, offset) {
            return Ok(());
        }
        let start = offset - base;
        let end = bytes[start..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(bytes.len(), |i| start + i + 1);
        if header.removed {
            on_disk.remove(run_id);
            fresh(run_id, 0, start..end);
            return Ok(());
        }
        let have = on_disk.get(run_id).copied().unwrap_or(0);
        if header.seq < have {
            return Ok(());
        }
        if header.seq > have {
            return Err(format!(
                "event seq {} of run {run_id} where seq {have} was expected",
                header.seq
            ));
        }
        match on_disk.get_mut(run_id) {
            Some(count) => *count += 1,
            None => {
                on_disk.insert(run_id.to_owned(), 1);
            }
        }
        fresh(run_id, header.seq, start..end);
        Ok(())
    })?;
    Ok(())
}

/// [`scan_events_at`] for a write-ahead log or segment, whose records are events or
/// tombstones (see `record.rs`).
pub(in crate::store) fn scan_records_at(
    path: &Path,
    bytes: &[u8],
    base: usize,
    records: Records,
    mut each: impl FnMut(usize, record::Line) -> Result<(), String>,
) -> Result<Scan, WorldError> {
    scan_lines_at(
        path,
        bytes,
        base,
        |line| {
            let line = match records {
                Records::Checksummed => record::decode_line(line),
                Records::Legacy => {
                    record::decode_legacy(line).map(|event| record::Line::Event(Box::new(event)))
                }
            }
            .map_err(|why| why.to_string())?;
            if let record::Line::Event(event) = &line {
                if event.version > EVENT_FORMAT_VERSION {
                    return Err(format!(
                        "event format version {} is newer than this build's {EVENT_FORMAT_VERSION}",
                        event.version
                    ));
                }
            }
            Ok(line)
        },
        &mut each,
    )
}

/// Splits `bytes` into lines, decoding each whole one with `decode` and handing it to `each`;
/// stops at a last line without its newline (torn). A line `decode` or `each` refuses is
/// corruption at its offset.
fn scan_lines_at<'b, T>(
    path: &Path,
    bytes: &'b [u8],
    base: usize,
    decode: impl Fn(&'b [u8]) -> Result<T, String>,
    mut each: impl FnMut(usize, T) -> Result<(), String>,
) -> Result<Scan, WorldError> {
    let mut offset = 0;
    let mut scan = Scan {
        good_end: 0,
        torn: false,
        count: 0,
    };
    while offset < bytes.len() {
        let rest = &bytes[offset..];
        let Some(newline) = rest.iter().position(|&b| b == b'\n') else {
            // No newline: the append was cut short, so it was never acknowledged.
            scan.torn = true;
            break;
        };
        let next = offset + newline + 1;
        let item = decode(&rest[..newline]).map_err(|why| corrupt(path, base + offset, why))?;
        each(base + offset, item).map_err(|why| corrupt(path, base + offset, why))?;
        scan.count += 1;
        offset = next;
        scan.good_end = next;
    }
    Ok(scan)
}

/// Where [`read_whole_lines`] stopped: the complete lines end at `end`, the file at `len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::store) struct LinesEnd {
    pub(in crate::store) end: usize,
    pub(in crate::store) len: usize,
}

impl LinesEnd {
    /// The file ends in a line without its newline (from `end` to `len`).
    pub(in crate::store) fn torn(&self) -> bool {
        self.end < self.len
    }
}

/// Reads `file` (the contents of `path`) about `chunk` bytes at a time and hands `each` its complete lines,
/// a run of them at a time with the file offset they start at, so that a file of any size is
/// read with little memory; a line longer than a chunk is read whole. An incomplete last line
/// is not handed over: the result says where it starts.
pub(in crate::store) fn read_whole_lines(
    file: &mut impl Read,
    path: &Path,
    chunk: usize,
    mut each: impl FnMut(&[u8], usize) -> Result<(), WorldError>,
) -> Result<LinesEnd, WorldError> {
    let mut buf = Vec::with_capacity(chunk);
    // The file offset of `buf[0]`.
    let mut base = 0;
    loop {
        let want = chunk.saturating_sub(buf.len()).max(chunk / 8).max(1);
        let read = (&mut *file)
            .take(want as u64)
            .read_to_end(&mut buf)
            .map_err(|e| io_error("could not read", path, e))?;
        let end = match buf.iter().rposition(|&b| b == b'\n') {
            Some(i) => i + 1,
            None if read == 0 => 0,
            None => continue, // a line longer than a chunk: read on
        };
        if end > 0 {
            each(&buf[..end], base)?;
        }
        if read == 0 {
            return Ok(LinesEnd {
                end: base + end,
                len: base + buf.len(),
            });
        }
        buf.drain(..end);
        base += end;
    }
}

/// Cuts off an incomplete last line at `good_end` (of `len` bytes) and syncs the file.
pub(in crate::store) fn truncate_torn(
    path: &Path,
    good_end: usize,
    len: usize,
) -> Result<(), WorldError> {
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
pub(in crate::store) fn list_run_logs(
    workflows: &Path,
    read_only: bool,
) -> Result<Vec<String>, WorldError> {
    list_run_logs_removing(workflows, |_| !read_only)
}

/// [`list_run_logs`], removing the leftover temporary files for which `remove` (given the file
/// name) says yes.
pub(in crate::store) fn list_run_logs_removing(
    workflows: &Path,
    remove: impl Fn(&str) -> bool,
) -> Result<Vec<String>, WorldError> {
    let entries = fs::read_dir(workflows).map_err(|e| io_error("could not list", workflows, e))?;
    let mut run_ids = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io_error("could not list", workflows, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        if name.ends_with(TMP_SUFFIX) {
            if !remove(name) {
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
pub(in crate::store) struct LoadedRun {
    /// Events in the log (and now in memory).
    pub(in crate::store) count: u64,
    /// A torn last line left in place (read-only loads only).
    pub(in crate::store) warning: Option<String>,
}

/// Loads one run log into `memory`, checking every event (run id, dense `seq`, the history's
/// rules). A torn last line is truncated, or, read-only, reported as a warning.
pub(in crate::store) fn load_run_log(
    path: &Path,
    run_id: &str,
    memory: &MemoryStore,
    read_only: bool,
    records: Records,
) -> Result<LoadedRun, WorldError> {
    let bytes = fs::read(path).map_err(|e| io_error("could not read", path, e))?;
    let scan = apply_events(path, run_id, &bytes, 0, 0, memory, records)?;
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

/// Applies the complete events in `bytes` — run `run_id`'s log from byte `base` on, where the
/// event with `seq == first_seq` must start — to `memory`, checking each (run id, dense `seq`,
/// the history's rules). The first event of a log creates the run.
pub(in crate::store) fn apply_events(
    path: &Path,
    run_id: &str,
    bytes: &[u8],
    base: usize,
    first_seq: u64,
    memory: &MemoryStore,
    records: Records,
) -> Result<Scan, WorldError> {
    let mut count = first_seq;
    scan_events_at(path, bytes, base, records, |_, event| {
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
    })
}

/// Threads that sync files at once in [`LogBatch::finish`]. A file system commits the
/// syncs waiting at the same moment together (one journal commit for many files), so syncing
/// from several threads costs little more than one sync, where one thread pays a commit each.
const SYNC_THREADS: usize = 16;

/// Lines added to many runs' logs, durable together: each [`append`](LogBatch::append) writes
/// at once (a new log under a temporary name, so a crash never leaves half a run), and
/// [`finish`](LogBatch::finish) syncs every file touched, once, from [`SYNC_THREADS`] threads
/// (a file system commits syncs waiting at the same moment together), then renames the new logs
/// into place. The caller syncs the directory if a log was created. Until `finish` returns, some
/// logs may hold part of the lines: the caller must keep them elsewhere (the hybrid store's WAL
/// does).
#[derive(Default)]
pub(in crate::store) struct LogBatch {
    /// Each run touched: the file its lines went to, and whether that is a new log's
    /// temporary file.
    files: HashMap<String, (PathBuf, bool)>,
}

impl LogBatch {
    /// Appends `lines` to the log of `run_id` under `workflows`, creating it if `exists` is
    /// false and this batch has not created it already.
    pub(in crate::store) fn append(
        &mut self,
        workflows: &Path,
        run_id: &str,
        exists: bool,
        lines: &[u8],
    ) -> Result<(), WorldError> {
        let (path, create) = match self.files.get(run_id) {
            Some((path, _)) => (path.clone(), false),
            None if exists => (log_path(workflows, run_id), false),
            None => {
                let mut tmp = log_path(workflows, run_id).into_os_string();
                tmp.push(TMP_SUFFIX);
                let tmp = PathBuf::from(tmp);
                let _ = fs::remove_file(&tmp);
                (tmp, true)
            }
        };
        let mut file = OpenOptions::new()
            .append(true)
            .create_new(create)
            .open(&path)
            .map_err(|e| io_error("could not open", &path, e))?;
        file.write_all(lines)
            .map_err(|e| io_error("could not write", &path, e))?;
        self.files
            .entry(run_id.to_owned())
            .or_insert((path, !exists));
        Ok(())
    }

    /// Syncs every file written, then renames the new logs into place. Returns whether a log
    /// was created.
    pub(in crate::store) fn finish(self, workflows: &Path) -> Result<bool, WorldError> {
        let mut paths = Vec::with_capacity(self.files.len());
        let mut renames = Vec::new();
        for (run_id, (path, created)) in self.files {
            if created {
                renames.push((path.clone(), log_path(workflows, &run_id)));
            }
            paths.push(path);
        }
        sync_all_at_once(&paths)?;
        for (tmp, path) in &renames {
            fs::rename(tmp, path).map_err(|e| io_error("could not rename", tmp, e))?;
        }
        Ok(!renames.is_empty())
    }
}

/// Syncs the files from [`SYNC_THREADS`] threads.
pub(in crate::store) fn sync_all_at_once(paths: &[PathBuf]) -> Result<(), WorldError> {
    let chunk = paths.len().div_ceil(SYNC_THREADS).max(1);
    std::thread::scope(|scope| {
        let syncers: Vec<_> = paths
            .chunks(chunk)
            .map(|paths| {
                scope.spawn(move || {
                    for path in paths {
                        OpenOptions::new()
                            .append(true)
                            .open(path)
                            .and_then(|file| file.sync_all())
                            .map_err(|e| io_error("could not sync", path, e))?;
                    }
                    Ok::<(), WorldError>(())
                })
            })
            .collect();
        for syncer in syncers {
            syncer.join().map_err(|_| {
                WorldError::Internal("file store: a thread syncing logs panicked".into())
            })??;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{EventKind, EVENT_FORMAT_VERSION};
    use crate::payload::Payload;

    fn line(seq: u64) -> Vec<u8> {
        line_of("wrun_x", seq)
    }

    fn line_of(run_id: &str, seq: u64) -> Vec<u8> {
        let event = Event {
            id: format!("evnt_{seq}"),
            run_id: run_id.into(),
            seq,
            timestamp: -5,
            version: EVENT_FORMAT_VERSION,
            kind: EventKind::ActivityCompleted {
                position: 3,
                attempt: 1,
                output: Payload::encode(&serde_json::json!({"a": [1, "x\"y"]})).unwrap(),
            },
        };
        encode(&[Arc::new(event)]).unwrap()
    }

    fn scan(bytes: &[u8]) -> Result<Scan, WorldError> {
        scan_events_at(Path::new("log"), bytes, 0, Records::Checksummed, |_, _| {
            Ok(())
        })
    }

    #[test]
    fn fresh_records_are_those_past_each_runs_count_on_disk() {
        let lines = [
            line_of("wrun_a", 0),
            line_of("wrun_a", 1),
            line_of("wrun_b", 0),
            line_of("wrun_a", 2),
            line_of("wrun_b", 1),
        ];
        let bytes = lines.concat();
        let mut on_disk = HashMap::from([("wrun_a".to_owned(), 2)]);
        let mut fresh = Vec::new();
        fresh_records(
            Path::new("wal"),
            &bytes,
            0,
            &mut on_disk,
            |_, _| false,
            |run, seq, range| {
                fresh.push((run.to_owned(), seq, bytes[range].to_vec()));
            },
        )
        .unwrap();
        let expected = [("wrun_b", 0, 2), ("wrun_a", 2, 3), ("wrun_b", 1, 4)];
        assert_eq!(fresh.len(), expected.len());
        for ((run, seq, line), (want_run, want_seq, i)) in fresh.iter().zip(expected) {
            assert_eq!((run.as_str(), *seq), (want_run, want_seq));
            assert_eq!(line, &lines[i], "the whole line, newline included");
        }
        assert_eq!(
            on_disk,
            HashMap::from([("wrun_a".to_owned(), 3), ("wrun_b".to_owned(), 2)])
        );

        // A record past its run's count: one before it is missing.
        let mut behind = HashMap::from([("wrun_a".to_owned(), 0)]);
        let gap = [line_of("wrun_a", 1)].concat();
        let err = fresh_records(
            Path::new("wal"),
            &gap,
            0,
            &mut behind,
            |_, _| false,
            |_, _, _| {},
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("seq 1 of run wrun_a where seq 0 was expected"),
            "{err}"
        );
    }

    #[test]
    fn only_a_last_line_without_its_newline_is_torn() {
        let mut bytes = [line(0), line(1)].concat();
        let whole = bytes.len();
        let third = line(2);
        bytes.extend_from_slice(&third[..third.len() - 1]);
        let found = scan(&bytes).unwrap();
        assert!(found.torn);
        assert_eq!((found.count, found.good_end), (2, whole));

        // A whole last line that was changed is corruption, not a torn write.
        let mut edited = [line(0), line(1)].concat();
        let at = edited.len() - 30;
        edited[at] ^= 0x01;
        let err = scan(&edited).unwrap_err().to_string();
        assert!(
            err.contains(&format!("byte offset {}", line(0).len())),
            "{err}"
        );
        assert!(err.contains("checksum"), "{err}");
    }
}
