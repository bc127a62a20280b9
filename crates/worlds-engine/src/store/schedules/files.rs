//! Schedules of the file and hybrid stores: one JSON file per schedule,
//! `schedules/{id}.json`, holding `{"format": 1, "schedule": {...}}`.
//!
//! A change is made under an exclusive advisory lock on `schedules/.lock` (and, inside the
//! process, a mutex in front of it, so threads queue on the mutex rather than on the file):
//! the record is read, the change computed, and the new record written to a uniquely named
//! temporary file, synced, renamed over `{id}.json` and the directory synced, so a crash leaves the old record
//! or the new one, never a mix. Reads take no lock: a rename replaces the file at once.
//!
//! Both stores write schedules here directly, outside the hybrid store's write-ahead log:
//! schedules change rarely, and one layout lets the `worlds` command read and change them the
//! same way in both modes.

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::atomic_file;
use crate::error::WorldError;
use crate::model::schedule::{check_id, ScheduleConfig};
use crate::store::file::{io_error, sync_dir};
use crate::store::{FileStore, HybridStore};

use super::{apply, ScheduleStore, ScheduleUpdate};

/// The format of a schedule file; a newer one is refused.
const FORMAT: u32 = 1;
const SUFFIX: &str = ".json";
const LOCK: &str = ".lock";

/// A schedule file's contents.
#[derive(Serialize)]
struct OnDisk<'a> {
    format: u32,
    schedule: &'a ScheduleConfig,
}

#[derive(Deserialize)]
struct Head {
    format: u32,
}

#[derive(Deserialize)]
struct Loaded {
    schedule: ScheduleConfig,
}

/// The `schedules/` directory of a store.
#[derive(Debug)]
pub(crate) struct FileSchedules {
    dir: PathBuf,
    read_only: bool,
    /// Serializes this process's changes before they queue on the file lock.
    local: Mutex<()>,
}

impl FileSchedules {
    /// The schedules under `root/schedules` (created at the first change, unless `read_only`).
    pub(crate) fn new(root: &Path, read_only: bool) -> Self {
        Self {
            dir: root.join("schedules"),
            read_only,
            local: Mutex::new(()),
        }
    }

    fn path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}{SUFFIX}"))
    }

    fn list(&self) -> Result<Vec<ScheduleConfig>, WorldError> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_error("could not list", &self.dir, e)),
        };
        let mut ids = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| io_error("could not list", &self.dir, e))?;
            let name = entry.file_name();
            let Some(id) = name.to_str().and_then(|n| n.strip_suffix(SUFFIX)) else {
                continue;
            };
            if check_id(id).is_ok() {
                ids.push(id.to_owned());
            }
        }
        ids.sort();
        let mut schedules = Vec::with_capacity(ids.len());
        for id in ids {
            // Deleted since the listing: skip it.
            if let Some(schedule) = self.read(&id)? {
                schedules.push(schedule);
            }
        }
        Ok(schedules)
    }

    fn read(&self, id: &str) -> Result<Option<ScheduleConfig>, WorldError> {
        if check_id(id).is_err() {
            return Ok(None);
        }
        let path = self.path(id);
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error("could not read", &path, e)),
        };
        parse(&path, &bytes).map(Some)
    }

    fn update(
        &self,
        id: &str,
        change: &mut ScheduleUpdate<'_>,
    ) -> Result<Option<ScheduleConfig>, WorldError> {
        check_id(id)?;
        if self.read_only {
            return Err(WorldError::Unsupported(format!(
                "file store: {} was opened read-only; schedules cannot be changed",
                self.dir.display()
            )));
        }
        let _local = self.local.lock();
        fs::create_dir_all(&self.dir).map_err(|e| io_error("could not create", &self.dir, e))?;
        let lock_path = self.dir.join(LOCK);
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| io_error("could not open", &lock_path, e))?;
        lock_exclusive(&lock).map_err(|e| io_error("could not lock", &lock_path, e))?;
        let result = self.update_locked(id, change);
        let _ = lock.unlock();
        result
    }

    fn update_locked(
        &self,
        id: &str,
        change: &mut ScheduleUpdate<'_>,
    ) -> Result<Option<ScheduleConfig>, WorldError> {
        let (after, changed) = apply(id, self.read(id)?, change)?;
        if !changed {
            return Ok(after);
        }
        let path = self.path(id);
        self.remove_leftovers(id);
        match &after {
            Some(record) => {
                let bytes = serde_json::to_vec_pretty(&OnDisk {
                    format: FORMAT,
                    schedule: record,
                })
                .map_err(|e| WorldError::serde(format!("schedule '{id}'"), e))?;
                atomic_file::replace(&path, &bytes)
                    .map_err(|e| io_error("could not write", &path, e))?;
            }
            None => match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_error("could not remove", &path, e)),
            },
        }
        sync_dir(&self.dir)?;
        Ok(after)
    }

    /// Removes temporary files of schedule `id` that a crashed writer left. Called under the
    /// lock, so no writer is midway through one.
    fn remove_leftovers(&self, id: &str) {
        let target = format!("{id}{SUFFIX}");
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            if name
                .to_str()
                .is_some_and(|n| atomic_file::is_temp_for(n, &target))
            {
                let _ = fs::remove_file(entry.path());
            }
        }
    }
}

/// Reads a schedule file, refusing a newer format or a damaged file with its path.
fn parse(path: &Path, bytes: &[u8]) -> Result<ScheduleConfig, WorldError> {
    let damaged = |e: serde_json::Error| {
        WorldError::Internal(format!(
            "schedule file {} is damaged ({e}); fix or delete it",
            path.display()
        ))
    };
    let head: Head = serde_json::from_slice(bytes).map_err(damaged)?;
    if head.format > FORMAT {
        return Err(WorldError::Unsupported(format!(
            "schedule file {} has format {}, newer than this build knows ({FORMAT}); upgrade worlds-engine",
            path.display(),
            head.format
        )));
    }
    let loaded: Loaded = serde_json::from_slice(bytes).map_err(damaged)?;
    Ok(loaded.schedule)
}

macro_rules! file_schedule_store {
    ($($store:ty),+) => {$(
        #[async_trait]
        impl ScheduleStore for $store {
            async fn list_schedules(&self) -> Result<Vec<ScheduleConfig>, WorldError> {
                self.schedules.list()
            }

            async fn get_schedule(&self, id: &str) -> Result<Option<ScheduleConfig>, WorldError> {
                self.schedules.read(id)
            }

            async fn update_schedule(
                &self,
                id: &str,
                change: &mut ScheduleUpdate<'_>,
            ) -> Result<Option<ScheduleConfig>, WorldError> {
                self.schedules.update(id, change)
            }
        }
    )+};
}

file_schedule_store!(FileStore, HybridStore);

/// Takes `file`'s exclusive lock. Another process may hold it for a while (it settles a
/// firing): on a multi-threaded runtime the wait tells the runtime this thread blocks, so the
/// runtime's other tasks and its timers go on meanwhile.
fn lock_exclusive(file: &File) -> std::io::Result<()> {
    match file.try_lock() {
        Ok(()) => return Ok(()),
        Err(std::fs::TryLockError::WouldBlock) => {}
        Err(std::fs::TryLockError::Error(e)) => return Err(e),
    }
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) if runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(|| file.lock())
        }
        _ => file.lock(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::schedule::CatchUp;
    use crate::store::schedules::ScheduleChange;

    fn record(id: &str) -> ScheduleConfig {
        ScheduleConfig {
            id: id.into(),
            workflow_name: "w".into(),
            input: Some(crate::Payload::encode(&serde_json::json!({ "a": [1, 2] })).unwrap()),
            input_fn: false,
            cron_expression: Some("0 9 * * *".into()),
            time_zone: Some("Europe/Paris".into()),
            paused: false,
            total_executions: 3,
            last_execution: Some(1),
            next_execution: Some(2),
            catch_up: CatchUp::All { max: 4 },
            created_at: 0,
            last_run_id: None,
            removed_last_run_id: None,
            last_error: None,
            pending_firings: vec![1],
        }
    }

    #[test]
    fn records_round_trip_through_files_and_leave_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let schedules = FileSchedules::new(dir.path(), false);
        assert!(schedules.list().unwrap().is_empty(), "no directory yet");
        let stored = schedules
            .update("daily", &mut |_| Ok(ScheduleChange::Put(record("daily"))))
            .unwrap();
        assert_eq!(stored, Some(record("daily")));
        assert_eq!(schedules.read("daily").unwrap(), Some(record("daily")));
        let names: Vec<String> = fs::read_dir(dir.path().join("schedules"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n != LOCK)
            .collect();
        assert_eq!(names, ["daily.json"]);
        let text = fs::read_to_string(dir.path().join("schedules/daily.json")).unwrap();
        assert!(text.contains("\"format\": 1"), "{text}");
    }

    #[test]
    fn a_newer_format_or_a_damaged_file_is_refused_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let schedules = FileSchedules::new(dir.path(), false);
        fs::create_dir_all(dir.path().join("schedules")).unwrap();
        fs::write(dir.path().join("schedules/new.json"), r#"{"format": 9}"#).unwrap();
        let err = schedules.read("new").unwrap_err();
        assert!(err.to_string().contains("format 9"), "{err}");
        fs::write(dir.path().join("schedules/bad.json"), "{").unwrap();
        let err = schedules.read("bad").unwrap_err();
        assert!(err.to_string().contains("bad.json"), "{err}");
    }

    #[test]
    fn a_read_only_store_refuses_changes() {
        let dir = tempfile::tempdir().unwrap();
        let schedules = FileSchedules::new(dir.path(), true);
        let err = schedules
            .update("x", &mut |_| Ok(ScheduleChange::Delete))
            .unwrap_err();
        assert_eq!(err.http_status(), 501);
        assert!(!dir.path().join("schedules").exists());
    }
}
