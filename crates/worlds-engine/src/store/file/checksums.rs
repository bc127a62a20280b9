//! Format 4: every record carries a checksum. The migration from format 3 rewrites each run log
//! and the hybrid store's write-ahead logs, adding a checksum to every line (see
//! [`super::record`]).
//!
//! Each file is rewritten under a temporary name, all of them are synced together, then renamed
//! over the originals; a crash part-way leaves some files migrated and some not, and the next
//! open (still format 3) migrates again: lines that already carry a valid checksum are kept as
//! they are, files whose every line does are not rewritten. A line that is not an event stops
//! the migration with the file and offset, before anything is renamed. A last line without its
//! newline (an append a crash cut short, never acknowledged) is dropped, as opening the store
//! would do.

use std::fs;
use std::path::{Path, PathBuf};

use crate::error::WorldError;

use super::log::{corrupt, io_error, list_run_logs, log_path, sync_all_at_once, sync_dir};
use super::record;

/// Suffix of a file being migrated (removed or ignored like any other unfinished file).
const MIGRATING: &str = ".v4.tmp";

/// Adds checksums to every record under `root` (format 3 → 4).
pub(super) fn v3_to_v4(root: &Path) -> Result<(), WorldError> {
    let workflows = root.join("workflows");
    let state = root.join("state");
    let mut files: Vec<PathBuf> = Vec::new();
    if workflows.is_dir() {
        files.extend(
            list_run_logs(&workflows, true)?
                .iter()
                .map(|run_id| log_path(&workflows, run_id)),
        );
    }
    for wal in ["wal.ndjson", "wal.next.ndjson"] {
        let path = state.join(wal);
        if path.exists() {
            files.push(path);
        }
    }

    let mut rewritten = Vec::new();
    let mut tmps = Vec::new();
    let written = files.iter().try_for_each(|path| {
        if let Some(tmp) = rewrite(path)? {
            tmps.push(tmp.clone());
            rewritten.push((tmp, path.clone()));
        }
        Ok(())
    });
    if let Err(e) = written.and_then(|()| sync_all_at_once(&tmps)) {
        for tmp in &tmps {
            let _ = fs::remove_file(tmp);
        }
        return Err(e);
    }
    for (tmp, path) in &rewritten {
        fs::rename(tmp, path).map_err(|e| io_error("could not rename", tmp, e))?;
    }
    if !rewritten.is_empty() {
        sync_dir(&workflows)?;
        sync_dir(&state)?;
    }
    tracing::info!(
        dir = %root.display(),
        files = files.len(),
        rewritten = rewritten.len(),
        "file store: records now carry checksums (format 4)"
    );
    Ok(())
}

/// Writes `path`'s lines, each given its checksum, to a temporary file beside it, returning the
/// temporary file's path; `None` if every line already had a valid one.
fn rewrite(path: &Path) -> Result<Option<PathBuf>, WorldError> {
    let bytes = fs::read(path).map_err(|e| io_error("could not read", path, e))?;
    let mut out = Vec::with_capacity(bytes.len() + bytes.len() / 8);
    let mut changed = false;
    let mut offset = 0;
    while offset < bytes.len() {
        let rest = &bytes[offset..];
        let Some(newline) = rest.iter().position(|&b| b == b'\n') else {
            tracing::warn!(
                file = %path.display(),
                offset,
                dropped_bytes = rest.len(),
                "file store: dropping an incomplete last line left by a crash mid-write"
            );
            changed = true;
            break;
        };
        let line = &rest[..newline];
        let sealed = record::add_checksum(line).map_err(|why| corrupt(path, offset, why))?;
        changed |= sealed.len() != newline + 1;
        out.extend_from_slice(&sealed);
        offset += newline + 1;
    }
    if !changed {
        return Ok(None);
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(MIGRATING);
    let tmp = PathBuf::from(tmp);
    fs::write(&tmp, &out).map_err(|e| io_error("could not write", &tmp, e))?;
    Ok(Some(tmp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Event, EventKind, QueuedRun, EVENT_FORMAT_VERSION};
    use crate::payload::Payload;

    fn plain_line(run_id: &str, seq: u64, kind: EventKind) -> Vec<u8> {
        let event = Event {
            id: format!("evnt_{run_id}_{seq}"),
            run_id: run_id.into(),
            seq,
            timestamp: 7,
            version: EVENT_FORMAT_VERSION,
            kind,
        };
        let mut line = serde_json::to_vec(&event).unwrap();
        line.push(b'\n');
        line
    }

    fn format_3_log(run_id: &str) -> Vec<u8> {
        [
            plain_line(
                run_id,
                0,
                EventKind::WorkflowQueued(Box::new(QueuedRun::new("w", run_id, Payload::null()))),
            ),
            plain_line(
                run_id,
                1,
                EventKind::WorkflowStarted {
                    attempt: 1,
                    first_position: 0,
                },
            ),
        ]
        .concat()
    }

    #[test]
    fn every_line_gets_a_checksum_and_a_second_pass_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir_all(root.join("workflows")).unwrap();
        fs::create_dir_all(root.join("state")).unwrap();
        let log = log_path(&root.join("workflows"), "wrun_a");
        let mut bytes = format_3_log("wrun_a");
        bytes.extend_from_slice(b"{\"id\":\"torn");
        fs::write(&log, &bytes).unwrap();
        fs::write(root.join("state/wal.ndjson"), format_3_log("wrun_b")).unwrap();

        v3_to_v4(root).unwrap();
        for path in [log.clone(), root.join("state/wal.ndjson")] {
            let text = fs::read(&path).unwrap();
            let lines: Vec<&[u8]> = text
                .split(|&b| b == b'\n')
                .filter(|l| !l.is_empty())
                .collect();
            assert_eq!(lines.len(), 2, "{}", path.display());
            for line in lines {
                record::decode(line).unwrap();
            }
        }
        let migrated = fs::read(&log).unwrap();
        v3_to_v4(root).unwrap();
        assert_eq!(fs::read(&log).unwrap(), migrated);
        let leftovers: Vec<_> = fs::read_dir(root.join("workflows"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n.to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    #[test]
    fn a_line_that_is_not_an_event_stops_the_migration_before_any_rename() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir_all(root.join("workflows")).unwrap();
        let good = log_path(&root.join("workflows"), "wrun_a");
        let bad = log_path(&root.join("workflows"), "wrun_b");
        fs::write(&good, format_3_log("wrun_a")).unwrap();
        let mut broken = format_3_log("wrun_b");
        broken.extend_from_slice(b"{\"garbage\":1}\n");
        fs::write(&bad, &broken).unwrap();

        let err = v3_to_v4(root).unwrap_err().to_string();
        assert!(err.contains("wrun_b"), "{err}");
        assert!(
            err.contains(&format!("offset {}", format_3_log("wrun_b").len())),
            "{err}"
        );
        assert_eq!(fs::read(&good).unwrap(), format_3_log("wrun_a"));
        assert_eq!(fs::read(&bad).unwrap(), broken);
    }
}
