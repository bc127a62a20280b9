//! Creating runs: one at a time, in a batch that syncs the directory once, and once per
//! idempotency key across every process on the directory.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::clock::Millis;
use crate::error::WorldError;
use crate::model::{Event, EventKind};
use crate::store::IdempotencyStore;

use super::keys::KeyRecord;
use super::lease::Membership;
use super::log::{LOG_SUFFIX, TMP_SUFFIX};
use super::{check_run_id, encode, io_error, log_path, sync_dir, FileStore, RunLog, Slot};

impl FileStore {
    /// Creates a run: reserves its ids, applies its first event to memory, leases it to this
    /// member and writes its log. With `sync`, the directory is synced before returning, so the
    /// run survives a crash; without, the caller syncs it (once for a batch).
    pub(super) async fn create_one(&self, mut first: Event, sync: bool) -> Result<(), WorldError> {
        let member = self.writable()?;
        let run_id = first.run_id.clone();
        check_run_id(&run_id)?;
        let path = self.log_path(&run_id);
        let slot: Slot = Arc::new(tokio::sync::Mutex::new(RunLog {
            path: path.clone(),
            file: None,
            broken: false,
            len: 0,
            count: 0,
            finished: false,
            holder: Some(member.id.clone()),
        }));
        // Reserve the run id (appends to it wait on the slot until the file exists).
        let mut log = slot.clone().lock_owned().await;
        {
            let mut logs = self.logs.lock();
            if logs.contains_key(&run_id) {
                return Err(WorldError::conflict(format!(
                    "a run with id {run_id} already exists"
                )));
            }
            logs.insert(run_id.clone(), slot);
        }
        let workflow_id = match &first.kind {
            EventKind::WorkflowQueued(run) if run.workflow_id != run_id => {
                Some(run.workflow_id.clone())
            }
            _ => None,
        };
        if let Some(workflow_id) = &workflow_id {
            let workflows = &self.workflows;
            let reserved = member.reserve_workflow_id(workflow_id, &run_id, |held| {
                log_path(workflows, held).exists()
            });
            if let Err(refused) = reserved {
                self.logs.lock().remove(&run_id);
                return Err(refused);
            }
        }
        // Readers see the run only once its log is on disk (published below).
        let run = match self.memory.create_unpublished(first.clone()) {
            Ok(run) => run,
            Err(refused) => {
                self.logs.lock().remove(&run_id);
                if let Some(workflow_id) = &workflow_id {
                    member.release_workflow_id(workflow_id);
                }
                return Err(refused);
            }
        };
        first.seq = 0;
        let written = member.take_lease(&run_id).and_then(|()| {
            encode(&[Arc::new(first)]).and_then(|line| {
                let file = self.create_log(member, &path, &line, sync)?;
                Ok((file, line.len() as u64))
            })
        });
        match written {
            Ok((file, len)) => {
                log.file = Some(file);
                log.len = len;
                log.count = 1;
                self.memory.publish(&run, 1);
                Ok(())
            }
            Err(e) => {
                // Nothing reached the run's place (the log is written aside and linked in
                // whole): take the run back, so the id and workflow id are free for a retry.
                self.memory.discard_created(&run);
                self.logs.lock().remove(&run_id);
                if let Some(workflow_id) = &workflow_id {
                    member.release_workflow_id(workflow_id);
                }
                let _ = member.release_lease(&run_id);
                Err(e)
            }
        }
    }

    /// Creates runs one after another, then syncs the directory once for all of them: each new
    /// log's contents are synced on its own, but the directory entries that make them findable
    /// after a crash are made durable together, before any creation is acknowledged.
    pub(super) async fn create_many(&self, firsts: Vec<Event>) -> Vec<Result<(), WorldError>> {
        let mut results = Vec::with_capacity(firsts.len());
        let mut created = Vec::new();
        for (i, first) in firsts.into_iter().enumerate() {
            let run_id = first.run_id.clone();
            let result = self.create_one(first, false).await;
            if result.is_ok() {
                created.push((i, run_id));
            }
            results.push(result);
        }
        if created.is_empty() {
            return results;
        }
        if let Err(e) = sync_dir(&self.workflows) {
            for (i, run_id) in created {
                if let Some(slot) = self.slot(&run_id) {
                    let mut log = slot.lock().await;
                    log.broken = true;
                    results[i] = Err(Self::inconsistent(&run_id, &log.path, &e));
                }
            }
        }
        results
    }

    /// [`IdempotencyStore::create_run_once`]: the key's record in `ids/` is read and rewritten under
    /// its lock, and the run created before the lock is let go, so two processes starting with
    /// one key cannot both create a run. Nothing in between waits on the async runtime, so a
    /// second start in this process cannot hold up the one holding the lock.
    pub(super) async fn create_once(
        &self,
        first: Event,
        since: Millis,
    ) -> Result<Option<String>, WorldError> {
        let Some(key) = first.kind.idempotency_key().map(str::to_owned) else {
            return self.create_one(first, true).await.map(|()| None);
        };
        self.writable()?;
        let record = KeyRecord::lock(&self.root.join("ids"), &key)?;
        // This process's runs first (a keyed run created with plain `create_run` has no
        // record), then the record other processes write.
        if let Some(existing) = self.memory.find_by_idempotency_key(&key, since).await? {
            return Ok(Some(existing));
        }
        if let Some(existing) = self.live_key_run(record.read(), since)? {
            return Ok(Some(existing));
        }
        record.write(&first.run_id, first.timestamp)?;
        match self.create_one(first, true).await {
            Ok(()) => Ok(None),
            Err(refused) => {
                // The record would name a run that does not exist; readers treat that as no
                // record, but clearing it says so plainly.
                let _ = record.clear();
                Err(refused)
            }
        }
    }

    /// [`IdempotencyStore::find_by_idempotency_key`]: this process's runs first, then the key's record,
    /// which other processes write.
    pub(super) async fn find_key(
        &self,
        key: &str,
        since: Millis,
    ) -> Result<Option<String>, WorldError> {
        if let Some(found) = self.memory.find_by_idempotency_key(key, since).await? {
            return Ok(Some(found));
        }
        if self.member.is_none() {
            return Ok(None);
        }
        let held = KeyRecord::peek(&self.root.join("ids"), key)?;
        self.live_key_run(held, since)
    }

    /// The run a key record names, if it was started at or after `since` and exists (a record
    /// naming a run that was never created, by a process that died mid-way, counts for
    /// nothing). The run is loaded if another process created it.
    fn live_key_run(
        &self,
        held: Option<(String, Millis)>,
        since: Millis,
    ) -> Result<Option<String>, WorldError> {
        let Some((run_id, at)) = held else {
            return Ok(None);
        };
        if at < since || check_run_id(&run_id).is_err() {
            return Ok(None);
        }
        if self.slot(&run_id).is_none() && !self.log_path(&run_id).exists() {
            return Ok(None);
        }
        self.slot_or_load(&run_id)?;
        Ok(Some(run_id))
    }

    /// Writes a new run's log: a temporary file named for this member, synced, then linked into
    /// place (failing if the run exists) and, with `sync`, the directory synced, so a crash never
    /// leaves half a run and two processes cannot both create one.
    fn create_log(
        &self,
        member: &Membership,
        path: &Path,
        line: &[u8],
        sync: bool,
    ) -> Result<File, WorldError> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(format!(".{}{TMP_SUFFIX}", member.id));
        let tmp = PathBuf::from(tmp);
        let _ = fs::remove_file(&tmp);
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| io_error("could not create", &tmp, e))?;
        file.write_all(line)
            .and_then(|()| file.sync_all())
            .map_err(|e| io_error("could not write", &tmp, e))?;
        let linked = fs::hard_link(&tmp, path);
        let _ = fs::remove_file(&tmp);
        match linked {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(WorldError::conflict(format!(
                    "a run with id {} already exists",
                    path.file_name()
                        .and_then(|n| n.to_str())
                        .and_then(|n| n.strip_suffix(LOG_SUFFIX))
                        .unwrap_or("?")
                )))
            }
            Err(e) => return Err(io_error("could not link", path, e)),
        }
        if sync {
            sync_dir(&self.workflows)?;
        }
        Ok(file)
    }
}
