//! Opening in file mode a directory last written in hybrid mode: the hybrid store keeps its
//! compacted records in shared segment files and its newest ones in the write-ahead log, which
//! processes sharing a directory do not read. Before a file store joins such a directory, every
//! record found there is appended to its run's own log and the hybrid files are removed.
//!
//! A crash part-way is finished by the next open: a record whose `seq` its run's log already
//! holds is passed over, so folding twice writes nothing twice.
//!
//! A run removed by the hybrid store (its tombstone, see `record.rs`) gets no log: every record
//! before its last tombstone is passed over, and a log a file-mode world left for it goes; a
//! run created again with the same id after that tombstone gets a log of its new records. What
//! a compaction a crash interrupted appended to the segments is cut off first (the write-ahead
//! log holds it), so no record is read twice.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::ops::Range;
use std::path::{Path, PathBuf};

use crate::error::WorldError;

use super::dir_lock;
use super::log::{
    fresh_records, io_error, list_run_logs, log_path, read_whole_lines, scan_headers_at, sync_dir,
    truncate_torn, LogBatch,
};
use super::wal_read::{list_segments, SEGMENTS_DIR, WAL_FILES};

/// Bytes of a source file read and moved at a time.
const CHUNK: usize = 8 << 20;

/// The hybrid files under `root` that hold records, in the order they were written: segments
/// by number, then the write-ahead logs (empty ones left out). Each comes with whether it may
/// end in a line a crash cut short: only the newest segment and the write-ahead logs can (such
/// a line was never acknowledged).
fn hybrid_sources(root: &Path) -> Result<Vec<(PathBuf, bool)>, WorldError> {
    let segments = list_segments(&root.join(SEGMENTS_DIR))?;
    let newest = segments.len().saturating_sub(1);
    let mut sources: Vec<(PathBuf, bool)> = segments
        .into_iter()
        .enumerate()
        .map(|(i, path)| (path, i == newest))
        .collect();
    for name in WAL_FILES {
        let path = root.join("state").join(name);
        match fs::metadata(&path) {
            Ok(meta) if meta.len() > 0 => sources.push((path, true)),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error("could not read", &path, e)),
        }
    }
    Ok(sources)
}

/// Moves every record of a hybrid directory's segments and write-ahead logs into the per-run
/// logs under `root/workflows` (synced), then removes those files. Does nothing, cheaply, when
/// there are none. Needs the directory to itself: fails if any other store has it open.
pub(in crate::store) fn fold_hybrid_files(root: &Path) -> Result<(), WorldError> {
    if hybrid_sources(root)?.is_empty() {
        return Ok(());
    }
    let Some(lock) = dir_lock::take(&root.join("state"), dir_lock::Mode::Exclusive)? else {
        return Err(WorldError::Unavailable(format!(
            "{} holds records of a world in hybrid mode and another process has it open; stop that world, or open the directory in hybrid mode",
            root.display()
        )));
    };
    super::wal_read::undo_interrupted_compaction(root)?;
    super::wal_read::remove_stale_rewrites(&root.join(SEGMENTS_DIR))?;
    // Listed again under the lock: a hybrid world may have compacted until it closed.
    let sources = hybrid_sources(root)?;
    let workflows = root.join("workflows");
    let last_removed = tombstones(&sources)?;
    for run_id in last_removed.keys() {
        // Its records in the log (written before the hybrid world removed it) are dead, and
        // so are those of an earlier fold a crash cut short: the sources hold the rest.
        let path = log_path(&workflows, run_id);
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error("could not remove", &path, e)),
        }
    }
    let mut counts = log_counts(&workflows)?;
    tracing::info!(
        dir = %root.display(),
        files = sources.len(),
        "file store: moving a hybrid world's records into per-run logs"
    );
    let mut batch = LogBatch::default();
    for (i, (source, may_be_torn)) in sources.iter().enumerate() {
        let dead = |run_id: &str, offset: usize| {
            last_removed
                .get(run_id)
                .is_some_and(|&last| (i, offset) <= last)
        };
        move_records(
            source,
            &workflows,
            &mut counts,
            &mut batch,
            *may_be_torn,
            &dead,
        )?;
    }
    if batch.finish(&workflows)? {
        sync_dir(&workflows)?;
    }
    for (source, _) in &sources {
        fs::remove_file(source).map_err(|e| io_error("could not remove", source, e))?;
    }
    super::wal_read::CompactionMark::clear(&root.join("state"))?;
    sync_dir(&root.join("state"))?;
    let segments = root.join(SEGMENTS_DIR);
    if segments.is_dir() {
        sync_dir(&segments)?;
    }
    drop(lock);
    Ok(())
}

/// Where the last tombstone of each removed run is: the index of its source and its offset
/// there.
fn tombstones(sources: &[(PathBuf, bool)]) -> Result<HashMap<String, (usize, usize)>, WorldError> {
    let mut last = HashMap::new();
    for (i, (source, _)) in sources.iter().enumerate() {
        let mut file = File::open(source).map_err(|e| io_error("could not read", source, e))?;
        read_whole_lines(&mut file, source, CHUNK, |bytes, base| {
            scan_headers_at(source, bytes, base, |offset, header| {
                if header.removed {
                    last.insert(header.run_id.into_owned(), (i, offset));
                }
                Ok(())
            })?;
            Ok(())
        })?;
    }
    Ok(last)
}

/// Events in each run's log under `workflows`; a torn last line is cut off first, so that
/// records appended after it start on a line of their own.
fn log_counts(workflows: &Path) -> Result<HashMap<String, u64>, WorldError> {
    let mut counts = HashMap::new();
    if !workflows.is_dir() {
        return Ok(counts);
    }
    for run_id in list_run_logs(workflows, false)? {
        let path = log_path(workflows, &run_id);
        let bytes = fs::read(&path).map_err(|e| io_error("could not read", &path, e))?;
        let scan = scan_headers_at(&path, &bytes, 0, |_, _| Ok(()))?;
        if scan.torn {
            truncate_torn(&path, scan.good_end, bytes.len())?;
        }
        counts.insert(run_id, scan.count);
    }
    Ok(counts)
}

/// Appends the records of `source` that are not in their run's log yet (nor `dead`: before
/// their run's last tombstone) to the logs, through `batch`, reading `source` [`CHUNK`] bytes
/// at a time. `counts` holds the events of each log
/// and is advanced by what is added.
fn move_records(
    source: &Path,
    workflows: &Path,
    counts: &mut HashMap<String, u64>,
    batch: &mut LogBatch,
    may_be_torn: bool,
    dead: &dyn Fn(&str, usize) -> bool,
) -> Result<(), WorldError> {
    let mut file = File::open(source).map_err(|e| io_error("could not read", source, e))?;
    let lines = read_whole_lines(&mut file, source, CHUNK, |bytes, base| {
        move_chunk(source, workflows, counts, batch, bytes, base, dead)
    })?;
    if lines.torn() && !may_be_torn {
        return Err(super::log::corrupt(
            source,
            lines.end,
            "an incomplete line in a segment that later ones follow",
        ));
    }
    Ok(())
}

/// Appends the records of `bytes` (whole lines of `source` from offset `base`) that are not in
/// their run's log yet, run by run.
fn move_chunk(
    source: &Path,
    workflows: &Path,
    counts: &mut HashMap<String, u64>,
    batch: &mut LogBatch,
    bytes: &[u8],
    base: usize,
    dead: &dyn Fn(&str, usize) -> bool,
) -> Result<(), WorldError> {
    // Each run's new lines, as byte ranges of `bytes`, and whether the run has a log already: a
    // record is the same line in every file that holds it, so only its checksum, run and `seq`
    // are read (the file store's open reads every event whole afterwards).
    let mut fresh: BTreeMap<String, (bool, Vec<Range<usize>>)> = BTreeMap::new();
    fresh_records(source, bytes, base, counts, dead, |run_id, seq, line| {
        fresh
            .entry(run_id.to_owned())
            .or_insert_with(|| (seq > 0, Vec::new()))
            .1
            .push(line);
    })?;
    let mut lines = Vec::new();
    for (run_id, (has_log, ranges)) in fresh {
        lines.clear();
        for range in ranges {
            lines.extend_from_slice(&bytes[range]);
        }
        batch.append(workflows, &run_id, has_log, &lines)?;
    }
    Ok(())
}
