//! The directory's format version (`state/format.json`) and the migrations between versions.
//!
//! | format | layout |
//! |---|---|
//! | 1 | `state/format.json`, `workflows/{run_id}.events.ndjson` (hybrid: `state/wal.ndjson`, `state/lock`) |
//! | 2 | format 1 plus what processes sharing a directory need: `leases/`, `ids/`, `state/owners/`, `state/inbox/` |
//! | 3 | format 2; a hybrid compaction in progress may leave `state/wal.next.ndjson` |
//! | 4 | format 3; every record of a run log or write-ahead log ends with its checksum (see `record.rs`) |
//! | 5 | format 4; a hybrid store compacts its WAL into `segments/{n}.ndjson` (many runs per file) instead of the run logs |
//!
//! Opening a directory of an older format for writing migrates it step by step; every step is
//! idempotent and `format.json` is replaced (atomically) only after the step is done, so a crash
//! mid-migration is finished by the next open. A directory of a newer format is refused.

use std::fs::{self, File, OpenOptions};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::WorldError;

use std::io::{BufRead, BufReader};

use crate::model::{Event, EventKind};

use super::checksums::v3_to_v4;
use super::dir_lock;
use super::lease::{member_dirs, reservation_name};
use super::log::{io_error, list_run_logs, log_path, sync_dir, Records};

/// The on-disk layout version this build reads and writes.
pub(in crate::store) const STORE_FORMAT: u32 = 5;

#[derive(Serialize, Deserialize)]
struct FormatFile {
    format: u32,
}

/// A step from format `n` to format `n + 1`, given the store's root.
type Migration = fn(&Path) -> Result<(), WorldError>;

/// `MIGRATIONS[i]` takes format `i + 1` to format `i + 2`.
const MIGRATIONS: [Migration; (STORE_FORMAT - 1) as usize] =
    [v1_to_v2, v2_to_v3, v3_to_v4, v4_to_v5];

/// Format 5 lets a hybrid store compact into `segments/`, which a format 4 build would not
/// read: a format 4 directory has no segments, so nothing needs changing, and a format 4 build
/// refuses format 5 instead of missing them.
fn v4_to_v5(_root: &Path) -> Result<(), WorldError> {
    Ok(())
}

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
            let Ok(event) = serde_json::from_str::<Event>(first.trim_end()) else {
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

/// What [`check_format`] found.
#[derive(Debug)]
pub(in crate::store) struct FormatCheck {
    /// A read-only check's findings: an older format, a missing format file.
    pub(in crate::store) warnings: Vec<String>,
    /// Which records the directory's files hold.
    pub(in crate::store) records: Records,
}

/// Reads `state/format.json` under `root`, migrating an older format or writing the file for a
/// new store. Read-only, nothing is written: an older format and a missing file are returned as
/// warnings instead. `dir_lock_held` says the caller holds `state/lock` exclusive (a hybrid
/// store); a migration needs the directory to itself and takes that lock otherwise.
pub(in crate::store) fn check_format(
    root: &Path,
    read_only: bool,
    dir_lock_held: bool,
) -> Result<FormatCheck, WorldError> {
    let state = root.join("state");
    let path = state.join("format.json");
    let current = FormatCheck {
        warnings: Vec::new(),
        records: Records::Checksummed,
    };
    let Some(found) = read_format(&path)? else {
        if read_only {
            return Ok(FormatCheck {
                warnings: vec![format!(
                    "{} is missing (the store was never opened for writing by this format)",
                    path.display()
                )],
                ..current
            });
        }
        write_format(&state, STORE_FORMAT)?;
        return Ok(current);
    };
    if found == STORE_FORMAT {
        return Ok(current);
    }
    if read_only {
        return Ok(FormatCheck {
            warnings: vec![format!(
                "{} says format {found}; opening the store for writing migrates it to format {STORE_FORMAT}",
                path.display()
            )],
            records: Records::of_format(found),
        });
    }
    migrate(root, dir_lock_held)?;
    Ok(current)
}

/// The format `path` names, `None` if the file is missing; a newer format than this build's, or
/// format 0, is an error.
fn read_format(path: &Path) -> Result<Option<u32>, WorldError> {
    let found = match fs::read(path) {
        Ok(bytes) => {
            let found: FormatFile = serde_json::from_slice(&bytes).map_err(|e| {
                WorldError::Internal(format!(
                    "file store: {} is not a valid format file (expected {{\"format\": {STORE_FORMAT}}}): {e}",
                    path.display()
                ))
            })?;
            found.format
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error("could not read", path, e)),
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
    Ok(Some(found))
}

/// Migrates the directory under `root` to [`STORE_FORMAT`], one step at a time. One process
/// migrates at a time (`state/migrate.lock`); the others wait, then find the work done. A
/// migration may rewrite files that a running store appends to, so it also needs `state/lock`
/// exclusive: a directory open in another process (perhaps an older build) is refused.
fn migrate(root: &Path, dir_lock_held: bool) -> Result<(), WorldError> {
    let state = root.join("state");
    let path = state.join("format.json");
    let guard_path = state.join("migrate.lock");
    let guard = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&guard_path)
        .map_err(|e| io_error("could not open", &guard_path, e))?;
    guard
        .lock()
        .map_err(|e| io_error("could not lock", &guard_path, e))?;
    let Some(found) = read_format(&path)? else {
        return Err(WorldError::Internal(format!(
            "file store: {} disappeared during the migration",
            path.display()
        )));
    };
    if found == STORE_FORMAT {
        return Ok(());
    }
    let _dir_lock = if dir_lock_held {
        None
    } else {
        let Some(lock) = dir_lock::take(&state, dir_lock::Mode::Exclusive)? else {
            return Err(WorldError::Unavailable(format!(
                "file store: {} is format {found} and must be migrated to format {STORE_FORMAT}, which needs the directory to itself, but another process has it open (it holds {}); stop the other processes (they may run an older worlds-engine), then open it again",
                root.display(),
                state.join("lock").display()
            )));
        };
        Some(lock)
    };
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
    Ok(())
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
        assert!(check_format(dir.path(), false, false)
            .unwrap()
            .warnings
            .is_empty());
        assert_eq!(format_of(dir.path()), STORE_FORMAT);
    }

    #[test]
    fn format_1_is_migrated_to_2_and_read_only_only_warns() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("state")).unwrap();
        write_format(&dir.path().join("state"), 1).unwrap();

        let warnings = check_format(dir.path(), true, false).unwrap().warnings;
        assert!(warnings[0].contains("format 1"), "{warnings:?}");
        assert_eq!(format_of(dir.path()), 1);
        assert!(!dir.path().join("leases").exists());

        assert!(check_format(dir.path(), false, false)
            .unwrap()
            .warnings
            .is_empty());
        assert_eq!(format_of(dir.path()), STORE_FORMAT);
        for d in member_dirs(dir.path()) {
            assert!(d.is_dir(), "{} missing", d.display());
        }
        // Idempotent: opening again changes nothing.
        assert!(check_format(dir.path(), false, false)
            .unwrap()
            .warnings
            .is_empty());
    }

    #[test]
    fn newer_and_nonsense_formats_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("state")).unwrap();
        write_format(&dir.path().join("state"), STORE_FORMAT + 1).unwrap();
        let err = check_format(dir.path(), false, false).unwrap_err();
        assert!(err.to_string().contains("newer worlds-engine"), "{err}");
        write_format(&dir.path().join("state"), 0).unwrap();
        assert!(check_format(dir.path(), false, false).is_err());
        fs::write(dir.path().join("state/format.json"), b"{nope").unwrap();
        let err = check_format(dir.path(), true, false).unwrap_err();
        assert!(err.to_string().contains("format.json"), "{err}");
    }

    #[test]
    fn a_migration_needs_the_directory_to_itself() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        fs::create_dir_all(&state).unwrap();
        write_format(&state, 3).unwrap();
        let other = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(state.join("lock"))
            .unwrap();
        other.try_lock_shared().unwrap();
        let err = check_format(dir.path(), false, false).unwrap_err();
        assert!(
            err.to_string().contains("another process has it open"),
            "{err}"
        );
        assert_eq!(format_of(dir.path()), 3);
        drop(other);
        check_format(dir.path(), false, false).unwrap();
        assert_eq!(format_of(dir.path()), STORE_FORMAT);
    }
}
