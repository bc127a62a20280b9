//! Key records of the file and hybrid stores: one JSON file per key, `keys/{id}.json`, holding
//! `{"format": 1, "key": {...}}`, replaced atomically (a synced temporary file renamed over
//! it). Both stores write them here directly, outside the hybrid store's write-ahead log, so
//! the `worlds keys` command can create and revoke keys of a directory a running world owns.
//! The files hold digests only, and are made readable by their owner alone.

use std::fs;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use parking_lot::Mutex;
use serde::Serialize;

use crate::atomic_file;
use crate::error::WorldError;
use crate::model::keys::{check_key_id, ApiKeyRecord};
use crate::store::file::{io_error, sync_dir};
use crate::store::{FileStore, HybridStore};

use super::KeyStore;

/// The format of a key file; a newer one is refused.
const FORMAT: u32 = 1;
const SUFFIX: &str = ".json";

#[derive(Serialize)]
struct OnDisk<'a> {
    format: u32,
    key: &'a ApiKeyRecord,
}

/// The `keys/` directory of a world's data directory: the key records of its file or hybrid
/// store. It can be written while a world holds the directory (even in hybrid mode): each
/// record is its own file, replaced atomically, outside the write-ahead log, and servers read
/// the records again within a second. This is how the `worlds keys` command changes keys.
#[derive(Debug)]
pub struct KeyFiles {
    dir: PathBuf,
    read_only: bool,
    /// Serializes this process's saves.
    local: Mutex<()>,
}

impl KeyFiles {
    /// The key records of the data directory `root` (under `root/keys`, created at the first
    /// save).
    pub fn open(root: &Path) -> Self {
        Self::new(root, false)
    }

    /// The key records under `root/keys` (created at the first save, unless `read_only`).
    pub(crate) fn new(root: &Path, read_only: bool) -> Self {
        Self {
            dir: root.join("keys"),
            read_only,
            local: Mutex::new(()),
        }
    }

    fn list(&self) -> Result<Vec<ApiKeyRecord>, WorldError> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_error("could not list", &self.dir, e)),
        };
        let mut records = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| io_error("could not list", &self.dir, e))?;
            let name = entry.file_name();
            let Some(id) = name.to_str().and_then(|n| n.strip_suffix(SUFFIX)) else {
                continue;
            };
            if check_key_id(id).is_err() {
                continue;
            }
            let path = entry.path();
            let bytes = match fs::read(&path) {
                Ok(bytes) => bytes,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_error("could not read", &path, e)),
            };
            records.push(parse(&path, &bytes)?);
        }
        records.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(records)
    }

    fn save(&self, record: &ApiKeyRecord) -> Result<(), WorldError> {
        check_key_id(&record.id)?;
        if self.read_only {
            return Err(WorldError::Unsupported(format!(
                "file store: {} was opened read-only; keys cannot be saved",
                self.dir.display()
            )));
        }
        let _local = self.local.lock();
        create_private_dir(&self.dir)?;
        let path = self.dir.join(format!("{}{SUFFIX}", record.id));
        let bytes = serde_json::to_vec_pretty(&OnDisk {
            format: FORMAT,
            key: record,
        })
        .map_err(|e| WorldError::serde(format!("key '{}'", record.id), e))?;
        atomic_file::replace(&path, &bytes).map_err(|e| io_error("could not write", &path, e))?;
        sync_dir(&self.dir)
    }
}

/// Creates the keys directory, readable by its owner only.
fn create_private_dir(dir: &Path) -> Result<(), WorldError> {
    fs::create_dir_all(dir).map_err(|e| io_error("could not create", dir, e))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .map_err(|e| io_error("could not restrict", dir, e))?;
    }
    Ok(())
}

fn parse(path: &Path, bytes: &[u8]) -> Result<ApiKeyRecord, WorldError> {
    crate::store::record_file::parse(
        path,
        bytes,
        "key",
        FORMAT,
        "key",
        "the key it held is then refused",
    )
}

macro_rules! file_key_store {
    ($($store:ty),+) => {$(
        #[async_trait]
        impl KeyStore for $store {
            async fn list_keys(&self) -> Result<Vec<ApiKeyRecord>, WorldError> {
                self.keys.list()
            }

            async fn save_key(&self, record: &ApiKeyRecord) -> Result<(), WorldError> {
                self.keys.save(record)
            }
        }
    )+};
}

file_key_store!(FileStore, HybridStore);

#[async_trait]
impl KeyStore for KeyFiles {
    async fn list_keys(&self) -> Result<Vec<ApiKeyRecord>, WorldError> {
        self.list()
    }

    async fn save_key(&self, record: &ApiKeyRecord) -> Result<(), WorldError> {
        self.save(record)
    }
}
