//! The directory's format version (`state/format.json`) and the migrations between versions.
//!
//! | format | layout |
//! |---|---|
//! | 1 | `state/format.json`, `workflows/{run_id}.events.ndjson` (hybrid: `state/wal.ndjson`, `state/lock`) |
//! | 2 | format 1 plus what processes sharing a directory need: `leases/`, `ids/`, `state/owners/`, `state/inbox/` |
//! | 3 | format 2; a hybrid compaction in progress may leave `state/wal.next.ndjson` |
//!
//! Opening a directory of an older format for writing migrates it step by step; every step is
//! idempotent and `format.json` is replaced (atomically) only after the step is done, so a crash
//! mid-migration is finished by the next open. A directory of a newer format is refused.

use std::fs::{self, File};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::WorldError;

use std::io::{BufRead, BufReader};

use crate::model::{Event, EventKind};

use super::lease::{member_dirs, reservation_name};
use super::log::{io_error, list_run_logs, log_path, sync_dir};

/// The on-disk layout version this build reads and writes.
pub(in crate::store) const STORE_FORMAT: u32 = 3;

#[derive(Serialize, Deserialize)]
struct FormatFile {
    format: u32,
}

/// A step from format `n` to format `n + 1`, given the store's root.
type Migration = fn(&Path) -> Result<(), WorldError>;

/// `MIGRATIONS[i]` takes format `i + 1` to format `i + 2`.
const MIGRATIONS: [Migration; (STORE_FORMAT - 1) as usize] = [v1_to_v2, v2_to_v3];

/// Format 3 lets a hybrid store's compaction leave a second write-ahead log,
/// `state/wal.next.ndjson`, which a format 2 build would not read: a format 2 directory holds
/// none, so nothing needs changing, and a format 2 build refuses format 3 instead of missing it.
fn v2_to_v3(_root: &Path) -> Result<(), WorldError> {
    Ok(())
}

/// Format 2 adds the directories of multi-process sharing. Runs of a format 1 directory have no
/// lease, which reads as "driven by no live process": the first process to open the migrated
/// directory takes them over.
///
/// Workflow ids chosen by the caller are reserved in `ids/` from format 2 on (so that two
/// processes cannot both take one); the migration reserves those of the existing runs.
fn v1_to_v2(root: &Path) -> Result<(), WorldError> {
    for dir in member_dirs(root) {
        fs::create_dir_all(&dir).map_err(|e| io_error("could not create", &dir, e))?;
    }
    let workflows = root.join("workflows");
    let ids = root.join("ids");
    if workflows.is_dir() {
        for run_id in list_run_logs(&workflows, true)? {
            let path = log_path(&workflows, &run_id);
            let file = File::open(&path).map_err(|e| io_error("could not open", &path, e))?;
            let mut first = String::new();
            BufReader::new(file)
                .read_line(&mut first)
                .map_err(|e| io_error("could not read", &path, e))?;
            // A log that does not start with a readable event is reported when it is loaded.
            let Ok(event) = serde_json::from_str::<Event>(&first) else {
                continue;
            };
            if let EventKind::WorkflowQueued(run) = &event.kind {
                let workflow_id = &run.workflow_id;
                if *workflow_id != run_id {
                    let reservation = ids.join(reservation_name(workflow_id));
                    fs::write(&reservation, format!("{run_id}\n\n{workflow_id}"))
                        .map_err(|e| io_error("could not write", &reservation, e))?;
                }
            }
        }
    }
    sync_dir(&ids)?;
    sync_dir(root)
}

/// Reads `state/format.json` under `root`, migrating an older format or writing the file for a
/// new store. Read-only, nothing is written: an older format and a missing file are returned as
/// warnings instead.
pub(in crate::store) fn check_format(
    root: &Path,
    read_only: bool,
) -> Result<Vec<String>, WorldError> {
    let state = root.join("state");
    let path = state.join("format.json");
    let found = match fs::read(&path) {
        Ok(bytes) => {
            let found: FormatFile = serde_json::from_slice(&bytes).map_err(|e| {
                WorldError::Internal(format!(
                    "file store: {} is not a valid format file (expected {{\"format\": {STORE_FORMAT}}}): {e}",
                    path.display()
                ))
            })?;
            found.format
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && read_only => {
            return Ok(vec![format!(
                "{} is missing (the store was never opened for writing by this format)",
                path.display()
            )])
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            write_format(&state, STORE_FORMAT)?;
            return Ok(Vec::new());
        }
        Err(e) => return Err(io_error("could not read", &path, e)),
    };
    if found > STORE_FORMAT {
        return Err(WorldError::Unsupported(format!(
            "file store: {} says format {found}, but this build only knows formats up to {STORE_FORMAT}; open it with a newer worlds-engine",
            path.display()
        )));
    }
    if found == 0 {
        return Err(WorldError::Internal(format!(
            "file store: {} says format 0, which never existed; the file is damaged",
            path.display()
        )));
    }
    if found == STORE_FORMAT {
        return Ok(Vec::new());
    }
    if read_only {
        return Ok(vec![format!(
            "{} says format {found}; opening the store for writing migrates it to format {STORE_FORMAT}",
            path.display()
        )]);
    }
    for version in found..STORE_FORMAT {
        tracing::info!(
            dir = %root.display(),
            from = version,
            to = version + 1,
            "file store: migrating the directory's format"
        );
        MIGRATIONS[(version - 1) as usize](root)?;
        write_format(&state, version + 1)?;
    }
    Ok(Vec::new())
}

/// Replaces `state/format.json` atomically (a uniquely named temporary file, synced, renamed,
/// the directory synced): processes opening a fresh directory together all write it.
fn write_format(state: &Path, format: u32) -> Result<(), WorldError> {
    let path = state.join("format.json");
    let bytes = serde_json::to_vec(&FormatFile { format })
        .map_err(|e| WorldError::serde("format file", e))?;
    crate::atomic_file::replace(&path, &bytes).map_err(|e| io_error("could not write", &path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn format_of(root: &Path) -> u32 {
        let bytes = fs::read(root.join("state/format.json")).unwrap();
        serde_json::from_slice::<FormatFile>(&bytes).unwrap().format
    }

    #[test]
    fn a_new_store_gets_the_current_format() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("state")).unwrap();
        assert!(check_format(dir.path(), false).unwrap().is_empty());
        assert_eq!(format_of(dir.path()), STORE_FORMAT);
    }

    #[test]
    fn format_1_is_migrated_to_2_and_read_only_only_warns() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("state")).unwrap();
        write_format(&dir.path().join("state"), 1).unwrap();

        let warnings = check_format(dir.path(), true).unwrap();
        assert!(warnings[0].contains("format 1"), "{warnings:?}");
        assert_eq!(format_of(dir.path()), 1);
        assert!(!dir.path().join("leases").exists());

        assert!(check_format(dir.path(), false).unwrap().is_empty());
        assert_eq!(format_of(dir.path()), STORE_FORMAT);
        for d in member_dirs(dir.path()) {
            assert!(d.is_dir(), "{} missing", d.display());
        }
        // Idempotent: opening again changes nothing.
        assert!(check_format(dir.path(), false).unwrap().is_empty());
    }

    #[test]
    fn newer_and_nonsense_formats_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("state")).unwrap();
        write_format(&dir.path().join("state"), STORE_FORMAT + 1).unwrap();
        let err = check_format(dir.path(), false).unwrap_err();
        assert!(err.to_string().contains("newer worlds-engine"), "{err}");
        write_format(&dir.path().join("state"), 0).unwrap();
        assert!(check_format(dir.path(), false).is_err());
        fs::write(dir.path().join("state/format.json"), b"{nope").unwrap();
        let err = check_format(dir.path(), true).unwrap_err();
        assert!(err.to_string().contains("format.json"), "{err}");
    }
}
