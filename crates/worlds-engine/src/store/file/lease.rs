//! Sharing one directory between processes: which process drives which run.
//!
//! Every open [`super::FileStore`] that may write is a *member* of its directory:
//! it holds an exclusive advisory lock on `state/owners/{member}.lock` for as long as it is
//! open. The operating system drops that lock the moment the process exits, however it exits
//! (SIGKILL included), so "is member X alive?" is answered by trying to take X's lock: if it
//! can be taken, X is gone.
//!
//! A run is *leased* to the member that drives it: `leases/{run_id}` names that member. The
//! creator of a run leases it to itself; a lease changes hands only when its holder is gone,
//! under the run log's lock, so at most one live process ever drives a run — no step runs in two
//! processes at once. A lease needs no renewal: it lasts exactly as long as its holder's process.
//!
//! A member that writes to a run leased to another live member leaves a note in the holder's
//! inbox, `state/inbox/{holder}/{run_id}`, so the holder re-reads the run (a cancellation from
//! the CLI, a child finishing in another process). The note is written before the events, under
//! the run log's lock, and the holder takes notes under that same lock, so a note is never
//! consumed before the write it announces is on disk.
//!
//! Workflow ids other than the run id are reserved across processes in `ids/`, one file each,
//! created exclusively.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use async_trait::async_trait;

use crate::error::WorldError;
use crate::model::ResolveData;
use crate::store::{LeaseStore, RunStore};

use super::dir_lock;
use super::log::{io_error, now, TMP_SUFFIX};
use super::{catch_up, locked, FileStore, Slot};

/// Longest workflow id written into a reservation file name as is (hex, two characters a byte).
const MAX_PLAIN_ID_BYTES: usize = 60;

/// This store's membership of its directory.
pub(super) struct Membership {
    /// The member id, unique for ever (never reused, so a dead member stays dead).
    pub(super) id: String,
    owners: PathBuf,
    leases: PathBuf,
    inbox: PathBuf,
    ids: PathBuf,
    /// Held exclusive while the store is open: the liveness of this member.
    _owner_lock: File,
    /// `state/lock`, held shared: keeps a hybrid store (which takes it exclusive) out.
    _dir_lock: File,
}

impl std::fmt::Debug for Membership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Membership").field("id", &self.id).finish()
    }
}

/// The member directories under `root` (created by [`Membership::join`] and by the format
/// migration).
pub(super) fn member_dirs(root: &Path) -> [PathBuf; 4] {
    [
        root.join("state").join("owners"),
        root.join("state").join("inbox"),
        root.join("leases"),
        root.join("ids"),
    ]
}

impl Membership {
    /// Joins the directory at `root` as a new member.
    ///
    /// Fails if a hybrid store holds the directory: that one keeps its state in memory and must
    /// be its directory's only user.
    pub(super) fn join(root: &Path) -> Result<Membership, WorldError> {
        let [owners, inbox_root, leases, ids] = member_dirs(root);
        for dir in [&owners, &inbox_root, &leases, &ids] {
            fs::create_dir_all(dir).map_err(|e| io_error("could not create", dir, e))?;
        }
        let Some(shared) = dir_lock::take(&root.join("state"), dir_lock::Mode::Shared)? else {
            return Err(WorldError::Unavailable(format!(
                "{} is held by a world in hybrid mode, which must be its directory's only user; stop that world, or run every process in file mode",
                root.display()
            )));
        };
        let id = format!("m{}-{:016x}", std::process::id(), rand::random::<u64>());
        let owner_path = owners.join(format!("{id}.lock"));
        // The lock file appears under its name already locked (created under another name,
        // locked, then renamed): another member sweeping `owners/` in between would otherwise
        // find it unlocked, take it for a dead member's and probe or remove it. (A crash
        // between the create and the rename leaves an empty `.new` file, which nothing reads;
        // probing it to clean it up would bring the race back.)
        let unlocked = owners.join(format!("{id}.new"));
        let owner_lock = OpenOptions::new()
            .create_new(true)
            .read(true)
            .write(true)
            .open(&unlocked)
            .map_err(|e| io_error("could not create", &unlocked, e))?;
        owner_lock.try_lock().map_err(|e| {
            WorldError::Internal(format!("could not lock {}: {e}", unlocked.display()))
        })?;
        fs::rename(&unlocked, &owner_path)
            .map_err(|e| io_error("could not rename", &unlocked, e))?;
        let inbox = inbox_root.join(&id);
        fs::create_dir_all(&inbox).map_err(|e| io_error("could not create", &inbox, e))?;
        Ok(Membership {
            id,
            owners,
            leases,
            inbox,
            ids,
            _owner_lock: owner_lock,
            _dir_lock: shared,
        })
    }

    /// Whether member `id` still has its directory open.
    pub(super) fn is_alive(&self, id: &str) -> bool {
        if id == self.id {
            return true;
        }
        let path = self.owners.join(format!("{id}.lock"));
        let Ok(file) = File::open(&path) else {
            return false;
        };
        match file.try_lock_shared() {
            Ok(()) => false,
            Err(fs::TryLockError::WouldBlock) => true,
            // Cannot tell: assume alive, so that a run is never driven twice.
            Err(fs::TryLockError::Error(_)) => true,
        }
    }

    /// The member a run is leased to, if any.
    pub(super) fn lease_of(&self, run_id: &str) -> Option<String> {
        fs::read_to_string(self.leases.join(run_id))
            .ok()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
    }

    /// Leases a run to this member. Called under the run log's lock (or before the run's log
    /// exists). Not synced: a lease matters only while its holder lives, and a host crash ends
    /// every holder at once.
    pub(super) fn take_lease(&self, run_id: &str) -> Result<(), WorldError> {
        let path = self.leases.join(run_id);
        let tmp = self
            .leases
            .join(format!("{run_id}.{}{TMP_SUFFIX}", self.id));
        fs::write(&tmp, self.id.as_bytes()).map_err(|e| io_error("could not write", &tmp, e))?;
        fs::rename(&tmp, &path).map_err(|e| io_error("could not rename", &tmp, e))
    }

    /// Gives up the lease of `run_id`, whoever held it: the run is nobody's until a member
    /// claims it (a finished run reopened by hand).
    pub(super) fn release_lease(&self, run_id: &str) -> Result<(), WorldError> {
        let path = self.leases.join(run_id);
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_error("could not remove", &path, e)),
        }
    }

    /// Leaves a note for member `holder` that run `run_id` changed.
    pub(super) fn notify(&self, holder: &str, run_id: &str) -> Result<(), WorldError> {
        let dir = self.inbox.with_file_name(holder);
        let path = dir.join(run_id);
        match OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
        {
            Ok(_) => Ok(()),
            // The holder is gone (its inbox was cleaned up): whoever takes the run over reads
            // it from disk anyway.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_error("could not write", &path, e)),
        }
    }

    /// Run ids with a note in this member's inbox.
    pub(super) fn notes(&self) -> Result<Vec<String>, WorldError> {
        let entries =
            fs::read_dir(&self.inbox).map_err(|e| io_error("could not list", &self.inbox, e))?;
        let mut runs = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| io_error("could not list", &self.inbox, e))?;
            if let Some(name) = entry.file_name().to_str() {
                runs.push(name.to_owned());
            }
        }
        runs.sort();
        Ok(runs)
    }

    /// Removes a note (under the run log's lock, see the module docs).
    pub(super) fn clear_note(&self, run_id: &str) -> Result<(), WorldError> {
        let path = self.inbox.join(run_id);
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_error("could not remove", &path, e)),
        }
    }

    /// Reserves `workflow_id` for `run_id` across every process on the directory. A
    /// reservation whose run never came to exist, made by a member that is gone, is stale and
    /// taken over.
    pub(super) fn reserve_workflow_id(
        &self,
        workflow_id: &str,
        run_id: &str,
        run_exists: impl Fn(&str) -> bool,
    ) -> Result<(), WorldError> {
        let path = self.ids.join(reservation_name(workflow_id));
        let record = format!("{run_id}\n{}\n{workflow_id}", self.id);
        for _ in 0..2 {
            match OpenOptions::new().create_new(true).write(true).open(&path) {
                Ok(mut file) => {
                    return file
                        .write_all(record.as_bytes())
                        .map_err(|e| io_error("could not write", &path, e));
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let held = fs::read_to_string(&path).unwrap_or_default();
                    let mut lines = held.lines();
                    let (held_run, held_by) =
                        (lines.next().unwrap_or(""), lines.next().unwrap_or(""));
                    let stale = !held_run.is_empty()
                        && !run_exists(held_run)
                        && !held_by.is_empty()
                        && !self.is_alive(held_by);
                    if !stale {
                        return Err(WorldError::conflict(format!(
                            "a run with workflow id {workflow_id} already exists"
                        )));
                    }
                    let _ = fs::remove_file(&path);
                }
                Err(e) => return Err(io_error("could not create", &path, e)),
            }
        }
        Err(WorldError::conflict(format!(
            "a run with workflow id {workflow_id} already exists"
        )))
    }

    /// Gives up a reservation made by [`reserve_workflow_id`](Self::reserve_workflow_id) for a
    /// run that was then refused.
    pub(super) fn release_workflow_id(&self, workflow_id: &str) {
        let _ = fs::remove_file(self.ids.join(reservation_name(workflow_id)));
    }

    /// Removes the files of members that are gone (their lock and inbox). Leases naming them
    /// stay until taken over; a note in a dead inbox is not needed, since whoever takes a run
    /// over reads it from disk.
    pub(super) fn sweep_dead_members(&self) {
        let Ok(entries) = fs::read_dir(&self.owners) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(member) = name.to_str().and_then(|n| n.strip_suffix(".lock")) else {
                continue;
            };
            if !self.is_alive(member) {
                let _ = fs::remove_dir_all(self.inbox.with_file_name(member));
                let _ = fs::remove_file(entry.path());
            }
        }
    }
}

/// The file name reserving a workflow id: its bytes in hex, and for long ids a prefix of them
/// plus a 64-bit FNV-1a hash of the whole id.
pub(super) fn reservation_name(workflow_id: &str) -> String {
    let bytes = workflow_id.as_bytes();
    let hex = |b: &[u8]| b.iter().map(|b| format!("{b:02x}")).collect::<String>();
    if bytes.len() <= MAX_PLAIN_ID_BYTES {
        return hex(bytes);
    }
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{}-{hash:016x}", hex(&bytes[..MAX_PLAIN_ID_BYTES]))
}

// Leases: each unfinished run is driven by one live process; a process whose lease holder is
// gone takes the run over, and processes tell the holder of a run they wrote to.
#[async_trait]
impl LeaseStore for FileStore {
    fn is_shared(&self) -> bool {
        self.member.is_some()
    }

    async fn claim_runs(
        &self,
        can_run: &crate::store::CanRun<'_>,
    ) -> Result<Vec<String>, WorldError> {
        let member = self.writable()?;
        self.load_new_runs()?;
        let slots: Vec<(String, Slot)> = self
            .logs
            .lock()
            .iter()
            .map(|(id, slot)| (id.clone(), slot.clone()))
            .collect();
        let mut alive: HashMap<String, bool> = HashMap::new();
        let mut is_alive = |holder: &str| {
            *alive
                .entry(holder.to_owned())
                .or_insert_with(|| member.is_alive(holder))
        };
        let mut claimed = Vec::new();
        for (run_id, slot) in slots {
            let mut guard = slot.lock().await;
            let log = &mut *guard;
            if log.finished || log.broken {
                continue;
            }
            match log.holder.as_deref() {
                Some(holder) if holder == member.id => continue,
                Some(holder) if is_alive(holder) => continue,
                _ => {}
            }
            let Some(file) = log.file.as_ref() else {
                continue;
            };
            let file = file
                .try_clone()
                .map_err(|e| io_error("could not open", &log.path, e))?;
            let path = log.path.clone();
            let took = locked(&file, &path, || {
                // Read again under the lock: another process may have claimed it meanwhile.
                log.holder = member.lease_of(&run_id);
                if let Some(holder) = log.holder.as_deref() {
                    if holder == member.id || member.is_alive(holder) {
                        return Ok(false);
                    }
                }
                catch_up(&self.memory, &run_id, log, true)?;
                if log.finished {
                    return Ok(false);
                }
                let state = now(self.memory.get_run(&run_id, ResolveData::None))?;
                if !can_run(&state.name, state.code_version.as_deref()) {
                    return Ok(false);
                }
                member.take_lease(&run_id)?;
                log.holder = Some(member.id.clone());
                Ok(true)
            })?;
            if took {
                claimed.push(run_id);
            }
        }
        if !claimed.is_empty() {
            member.sweep_dead_members();
        }
        Ok(claimed)
    }

    async fn external_changes(&self) -> Result<Vec<String>, WorldError> {
        let Some(member) = &self.member else {
            return Ok(Vec::new());
        };
        let mut changed = Vec::new();
        for run_id in member.notes()? {
            let slot = match self.slot_or_load(&run_id) {
                Ok(slot) => slot,
                Err(WorldError::NotFound { .. }) => {
                    member.clear_note(&run_id)?;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let mut guard = slot.lock().await;
            let log = &mut *guard;
            let Some(file) = log.file.as_ref() else {
                continue;
            };
            let file = file
                .try_clone()
                .map_err(|e| io_error("could not open", &log.path, e))?;
            let path = log.path.clone();
            locked(&file, &path, || {
                member.clear_note(&run_id)?;
                catch_up(&self.memory, &run_id, log, true)?;
                if !log.finished {
                    // A finished run reopened elsewhere is nobody's now: claimable.
                    log.holder = member.lease_of(&run_id);
                }
                Ok(())
            })?;
            changed.push(run_id);
        }
        Ok(changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservation_names_are_file_names_of_bounded_length() {
        assert_eq!(reservation_name("order-1"), "6f726465722d31");
        assert_eq!(reservation_name("a/b"), "612f62");
        let long = "x".repeat(1000);
        let name = reservation_name(&long);
        assert!(name.len() < 200, "{}", name.len());
        assert_ne!(name, reservation_name(&"x".repeat(999)));
    }

    #[test]
    fn a_member_is_alive_while_open_and_gone_after() {
        let dir = tempfile::tempdir().unwrap();
        let a = Membership::join(dir.path()).unwrap();
        let b = Membership::join(dir.path()).unwrap();
        assert!(b.is_alive(&a.id));
        assert!(a.is_alive(&b.id));
        let a_id = a.id.clone();
        drop(a);
        assert!(!b.is_alive(&a_id));
        assert!(!b.is_alive("never-existed"));
        b.sweep_dead_members();
        assert!(!dir
            .path()
            .join("state/owners")
            .join(format!("{a_id}.lock"))
            .exists());
    }

    #[test]
    fn leases_and_notes_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let a = Membership::join(dir.path()).unwrap();
        let b = Membership::join(dir.path()).unwrap();
        assert_eq!(a.lease_of("wrun_1"), None);
        a.take_lease("wrun_1").unwrap();
        assert_eq!(b.lease_of("wrun_1").as_deref(), Some(a.id.as_str()));
        b.notify(&a.id, "wrun_1").unwrap();
        assert_eq!(a.notes().unwrap(), vec!["wrun_1".to_owned()]);
        a.clear_note("wrun_1").unwrap();
        assert!(a.notes().unwrap().is_empty());
    }

    #[test]
    fn workflow_ids_are_reserved_once_and_stale_reservations_are_taken_over() {
        let dir = tempfile::tempdir().unwrap();
        let a = Membership::join(dir.path()).unwrap();
        let b = Membership::join(dir.path()).unwrap();
        a.reserve_workflow_id("order-1", "wrun_1", |_| true)
            .unwrap();
        let err = b
            .reserve_workflow_id("order-1", "wrun_2", |_| false)
            .unwrap_err();
        assert!(err.to_string().contains("order-1"), "{err}");
        // The reserving member dies before its run exists: the reservation is stale.
        drop(a);
        b.reserve_workflow_id("order-1", "wrun_2", |_| false)
            .unwrap();
        // ...but not if the run exists.
        let c = Membership::join(dir.path()).unwrap();
        drop(b);
        assert!(c
            .reserve_workflow_id("order-1", "wrun_3", |_| true)
            .is_err());
    }

    #[test]
    fn a_hybrid_lock_keeps_members_out() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("state")).unwrap();
        let lock = File::create(dir.path().join("state/lock")).unwrap();
        lock.try_lock().unwrap();
        let err = Membership::join(dir.path()).unwrap_err();
        assert!(err.to_string().contains("hybrid"), "{err}");
    }
}
