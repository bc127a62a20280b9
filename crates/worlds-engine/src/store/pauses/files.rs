//! Pauses of the file and hybrid stores: one JSON file per target,
//! `pauses/{kind}-{digest of the name}.json`, holding `{"format": 1, "pause": {...}}`,
//! replaced atomically (a synced temporary file renamed over it) and removed to lift the
//! pause. Both stores write them here directly, outside the hybrid store's write-ahead log, so
//! a command can pause a directory a running world owns; the world reads them again within a
//! few seconds.

use std::fs;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use parking_lot::Mutex;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::atomic_file;
use crate::error::WorldError;
use crate::model::{Pause, PauseTarget};
use crate::store::file::{io_error, sync_dir};
use crate::store::{FileStore, HybridStore};

use super::PauseStore;

/// The format of a pause file; a newer one is refused.
const FORMAT: u32 = 1;
const SUFFIX: &str = ".json";

#[derive(Serialize)]
struct OnDisk<'a> {
    format: u32,
    pause: &'a Pause,
}

/// The `pauses/` directory of a world's data directory: the pauses in force of its file or
/// hybrid store.
#[derive(Debug)]
pub struct PauseFiles {
    dir: PathBuf,
    read_only: bool,
    /// Serializes this process's changes.
    local: Mutex<()>,
}

impl PauseFiles {
    /// The pauses of the data directory `root` (under `root/pauses`, created at the first
    /// pause).
    pub fn open(root: &Path) -> Self {
        Self::new(root, false)
    }

    /// The pauses under `root/pauses` (created at the first pause, unless `read_only`).
    pub(crate) fn new(root: &Path, read_only: bool) -> Self {
        Self {
            dir: root.join("pauses"),
            read_only,
            local: Mutex::new(()),
        }
    }

    /// The file of `target`: names may be long or hold any character, so the file is named by
    /// the name's digest, and the record inside says which target it is.
    fn path(&self, target: &PauseTarget) -> PathBuf {
        let digest = hex::encode(Sha256::digest(target.name().as_bytes()));
        self.dir
            .join(format!("{}-{}{SUFFIX}", target.kind(), &digest[..32]))
    }

    fn list(&self) -> Result<Vec<Pause>, WorldError> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_error("could not list", &self.dir, e)),
        };
        let mut pauses = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| io_error("could not list", &self.dir, e))?;
            let name = entry.file_name();
            // Temporary files of a replacement in progress end otherwise.
            if !name.to_str().is_some_and(|n| n.ends_with(SUFFIX)) {
                continue;
            }
            let path = entry.path();
            let bytes = match fs::read(&path) {
                Ok(bytes) => bytes,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_error("could not read", &path, e)),
            };
            pauses.push(parse(&path, &bytes)?);
        }
        pauses.sort_by(|a, b| a.target.cmp(&b.target));
        Ok(pauses)
    }

    fn writable(&self) -> Result<(), WorldError> {
        if self.read_only {
            return Err(WorldError::Unsupported(format!(
                "file store: {} was opened read-only; pauses cannot be changed",
                self.dir.display()
            )));
        }
        Ok(())
    }

    fn save(&self, pause: &Pause) -> Result<(), WorldError> {
        pause.check()?;
        self.writable()?;
        let _local = self.local.lock();
        fs::create_dir_all(&self.dir).map_err(|e| io_error("could not create", &self.dir, e))?;
        let path = self.path(&pause.target);
        let bytes = serde_json::to_vec_pretty(&OnDisk {
            format: FORMAT,
            pause,
        })
        .map_err(|e| WorldError::serde(format!("pause of {}", pause.target), e))?;
        atomic_file::replace(&path, &bytes).map_err(|e| io_error("could not write", &path, e))?;
        sync_dir(&self.dir)
    }

    fn remove(&self, target: &PauseTarget) -> Result<Option<Pause>, WorldError> {
        self.writable()?;
        let _local = self.local.lock();
        let path = self.path(target);
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error("could not read", &path, e)),
        };
        let pause = parse(&path, &bytes)?;
        fs::remove_file(&path).map_err(|e| io_error("could not remove", &path, e))?;
        sync_dir(&self.dir)?;
        Ok(Some(pause))
    }
}

fn parse(path: &Path, bytes: &[u8]) -> Result<Pause, WorldError> {
    crate::store::record_file::parse(
        path,
        bytes,
        "pause",
        FORMAT,
        "pause",
        "deleting it lifts the pause",
    )
}

macro_rules! file_pause_store {
    ($($store:ty),+) => {$(
        #[async_trait]
        impl PauseStore for $store {
            async fn list_pauses(&self) -> Result<Vec<Pause>, WorldError> {
                self.pauses.list()
            }

            async fn save_pause(&self, pause: &Pause) -> Result<(), WorldError> {
                self.pauses.save(pause)
            }

            async fn remove_pause(
                &self,
                target: &PauseTarget,
            ) -> Result<Option<Pause>, WorldError> {
                self.pauses.remove(target)
            }
        }
    )+};
}

file_pause_store!(FileStore, HybridStore);

#[async_trait]
impl PauseStore for PauseFiles {
    async fn list_pauses(&self) -> Result<Vec<Pause>, WorldError> {
        self.list()
    }

    async fn save_pause(&self, pause: &Pause) -> Result<(), WorldError> {
        self.save(pause)
    }

    async fn remove_pause(&self, target: &PauseTarget) -> Result<Option<Pause>, WorldError> {
        self.remove(target)
    }
}
