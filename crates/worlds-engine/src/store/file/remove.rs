//! Removing a finished run from a file store directory (retention), durably and crash-safe.
//!
//! Under the run log's exclusive lock (the one every append takes, so no process can append
//! meanwhile), the run is read up to date from disk and checked once more (another process
//! may have reopened it); then its log is renamed to `workflows/{run_id}.removed` and the
//! directory synced: that rename is the removal's one commit point. Then memory forgets the
//! run, and its other files go: its workflow-id reservation (`ids/{hex}`) if it names this run,
//! its idempotency key record (`ids/key-{hex}`, emptied under its lock if it names this run:
//! a file another process may be waiting to lock is never unlinked), its lease, the notes about
//! it in every inbox, its streams directory, and last the marker. A crash after the rename
//! leaves the marker: the next open finishes the removal and never loads the run.
//!
//! Another process that still has the run in memory finds its log gone: an append to it (which
//! checks, under the log's lock, that the file it holds is still the run's log) and a read of
//! the run by id forget it there, and answer that it does not exist. Until then, queries over
//! all runs there may still list it.

use std::fs::{self, File};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use crate::clock::Millis;
use crate::error::WorldError;
use crate::model::{Event, EventKind};
use crate::store::{Removal, RemoveRun, RetentionStore};

use super::keys::KeyRecord;
use super::lease::reservation_name;
use super::log::{io_error, sync_dir};
use super::{catch_up, locked, FileStore};

/// Removals of one batch in flight at once.
const REMOVALS_AT_ONCE: usize = 16;

/// Suffix of a removed run's log while its removal finishes.
pub(super) const REMOVED_SUFFIX: &str = ".removed";

/// The marker of `run_id`'s removal under `workflows/`.
pub(super) fn marker_path(workflows: &Path, run_id: &str) -> PathBuf {
    workflows.join(format!("{run_id}{REMOVED_SUFFIX}"))
}

/// What identifies a removed run's other files: its workflow id (if not its run id) and its
/// idempotency key.
#[derive(Debug, Default)]
struct Owned {
    workflow_id: Option<String>,
    key: Option<String>,
}

impl Owned {
    /// Read from the first record of the run's log (or its marker).
    fn of_log(path: &Path, run_id: &str) -> Owned {
        let Ok(file) = File::open(path) else {
            return Owned::default();
        };
        let mut first = String::new();
        if BufReader::new(file).read_line(&mut first).is_err() {
            return Owned::default();
        }
        match serde_json::from_str::<Event>(first.trim_end()) {
            Ok(Event {
                kind: EventKind::WorkflowQueued(run),
                ..
            }) => Owned {
                workflow_id: (run.workflow_id != run_id).then(|| run.workflow_id.clone()),
                key: run.idempotency_key.clone(),
            },
            _ => Owned::default(),
        }
    }
}

/// True if `file`, the log of a run this process opened, is no longer the file at `path`:
/// another process removed the run (renamed its log away) since.
pub(super) fn log_gone(file: &File, path: &Path) -> bool {
    let there = match fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) => return e.kind() == std::io::ErrorKind::NotFound,
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match file.metadata() {
            Ok(held) => held.ino() != there.ino() || held.dev() != there.dev(),
            Err(_) => false,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (file, there);
        false
    }
}

impl FileStore {
    /// [`RetentionStore::remove_runs`] of one run (see the module docs).
    pub(super) async fn remove_one(
        &self,
        run_id: &str,
        ended_before: Millis,
    ) -> Result<Removal, WorldError> {
        self.writable()?;
        let slot = match self.slot_or_load(run_id) {
            Ok(slot) => slot,
            Err(WorldError::NotFound { .. }) => return Ok(Removal::Gone),
            Err(e) => return Err(e),
        };
        let mut guard = slot.lock().await;
        let log = &mut *guard;
        let Some(file) = log.file.as_ref() else {
            return Ok(Removal::Gone);
        };
        let file = file
            .try_clone()
            .map_err(|e| io_error("could not open", &log.path, e))?;
        let path = log.path.clone();
        let marker = marker_path(&self.workflows, run_id);
        let removal = locked(&file, &path, || {
            if log_gone(&file, &path) {
                // Another process removed it first.
                self.memory.forget_run(run_id);
                return Ok(Removal::Gone);
            }
            catch_up(&self.memory, run_id, log, true)?;
            self.memory.remove_ended_with(run_id, ended_before, |_| {
                fs::rename(&path, &marker).map_err(|e| io_error("could not rename", &path, e))?;
                sync_dir(&self.workflows)
            })
        })?;
        drop(guard);
        if let Removal::Removed { .. } = removal {
            self.logs.lock().remove(run_id);
            self.finish_removal(run_id)?;
        } else if removal == Removal::Gone {
            self.logs.lock().remove(run_id);
        }
        Ok(removal)
    }

    /// Deletes what is left of a removed run whose marker `workflows/{run_id}.removed` is there
    /// (after the rename, or on open after a crash), the marker last.
    fn finish_removal(&self, run_id: &str) -> Result<(), WorldError> {
        let marker = marker_path(&self.workflows, run_id);
        let owned = Owned::of_log(&marker, run_id);
        let ids = self.root.join("ids");
        if let Some(workflow_id) = &owned.workflow_id {
            let path = ids.join(reservation_name(workflow_id));
            let names_run =
                fs::read_to_string(&path).is_ok_and(|held| held.lines().next() == Some(run_id));
            if names_run {
                remove_file(&path)?;
            }
        }
        if let Some(key) = &owned.key {
            if KeyRecord::peek(&ids, key)?.is_some_and(|(held, _)| held == run_id) {
                let record = KeyRecord::lock(&ids, key)?;
                if record.read().is_some_and(|(held, _)| held == run_id) {
                    record.clear()?;
                }
            }
        }
        remove_file(&self.root.join("leases").join(run_id))?;
        let inbox = self.root.join("state").join("inbox");
        if let Ok(members) = fs::read_dir(&inbox) {
            for member in members.flatten() {
                remove_file(&member.path().join(run_id))?;
            }
        }
        self.streams.remove_run(run_id)?;
        remove_file(&marker)?;
        sync_dir(&self.workflows)
    }

    /// Finishes the removals a crash interrupted: every marker under `workflows/`. A marker
    /// beside a log of the same run (created again since, with the same id) only goes itself.
    pub(super) fn finish_removals(&self) -> Result<(), WorldError> {
        let entries = fs::read_dir(&self.workflows)
            .map_err(|e| io_error("could not list", &self.workflows, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| io_error("could not list", &self.workflows, e))?;
            let name = entry.file_name();
            let Some(run_id) = name.to_str().and_then(|n| n.strip_suffix(REMOVED_SUFFIX)) else {
                continue;
            };
            if self.log_path(run_id).exists() {
                remove_file(&entry.path())?;
                continue;
            }
            tracing::warn!(
                run_id,
                "file store: finishing the removal of a run a crash interrupted"
            );
            self.finish_removal(run_id)?;
        }
        Ok(())
    }
}

/// Removes a file; one already gone is fine.
fn remove_file(path: &Path) -> Result<(), WorldError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_error("could not remove", path, e)),
    }
}

/// Retention on disk: a removed run is gone for every process and after a restart (see the
/// module docs).
#[async_trait::async_trait]
impl RetentionStore for FileStore {
    async fn ended_runs(
        &self,
        before: Millis,
        after: Option<&crate::store::EndedCursor>,
        limit: usize,
    ) -> Result<Vec<crate::store::EndedRun>, WorldError> {
        self.refresh_all().await?;
        Ok(self.memory.list_ended(before, after, limit))
    }

    async fn remove_runs(&self, runs: &[RemoveRun]) -> Result<Vec<Removal>, WorldError> {
        // Several at once: each removal syncs the directory, and the syncs overlap.
        let mut answers = Vec::with_capacity(runs.len());
        for group in runs.chunks(REMOVALS_AT_ONCE) {
            let mut removals = Vec::with_capacity(group.len());
            for run in group {
                removals.push(self.remove_one(&run.run_id, run.ended_before));
            }
            for removal in futures::future::join_all(removals).await {
                answers.push(removal?);
            }
        }
        Ok(answers)
    }
}
