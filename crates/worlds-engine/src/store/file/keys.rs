//! Idempotency keys shared between processes: `ids/key-{hex of key}` holds the run the key
//! last started and when (`{run_id}\n{created_at ms}\n{key}`), read and rewritten under an
//! exclusive advisory lock on the file itself.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::clock::Millis;
use crate::error::WorldError;

use super::io_error;
use super::lease::reservation_name;

/// A key's record file, locked exclusively until dropped.
pub(super) struct KeyRecord {
    file: File,
    path: PathBuf,
    key: String,
}

impl KeyRecord {
    fn path(ids: &Path, key: &str) -> PathBuf {
        ids.join(format!("key-{}", reservation_name(key)))
    }

    /// Opens (creating if needed) and locks the record of `key`, waiting for another process
    /// that holds it.
    pub(super) fn lock(ids: &Path, key: &str) -> Result<KeyRecord, WorldError> {
        let path = Self::path(ids, key);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| io_error("could not open", &path, e))?;
        file.lock()
            .map_err(|e| io_error("could not lock", &path, e))?;
        Ok(KeyRecord {
            file,
            path,
            key: key.to_owned(),
        })
    }

    /// The record of `key` as it stands, read under a shared lock; `None` if there is none.
    pub(super) fn peek(ids: &Path, key: &str) -> Result<Option<(String, Millis)>, WorldError> {
        let path = Self::path(ids, key);
        let mut file = match File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error("could not open", &path, e)),
        };
        file.lock_shared()
            .map_err(|e| io_error("could not lock", &path, e))?;
        let held = read_record(&mut file, key);
        let _ = file.unlock();
        Ok(held)
    }

    /// The run the key last started and when, if the record names one.
    pub(super) fn read(&self) -> Option<(String, Millis)> {
        read_record(&mut &self.file, &self.key)
    }

    /// Records that the key started `run_id` at `at`.
    pub(super) fn write(&self, run_id: &str, at: Millis) -> Result<(), WorldError> {
        let record = format!("{run_id}\n{at}\n{}", self.key);
        let mut file = &self.file;
        file.set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)))
            .and_then(|_| file.write_all(record.as_bytes()))
            .map_err(|e| io_error("could not write", &self.path, e))
    }

    /// Empties the record.
    pub(super) fn clear(&self) -> Result<(), WorldError> {
        self.file
            .set_len(0)
            .map_err(|e| io_error("could not write", &self.path, e))
    }
}

impl Drop for KeyRecord {
    fn drop(&mut self) {
        let _ = self.file.unlock();
    }
}

/// Parses a record; one for another key (a hash collision of long keys) or a damaged one is
/// no record.
fn read_record(mut file: impl Read + Seek, key: &str) -> Option<(String, Millis)> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    file.read_to_string(&mut text).ok()?;
    let mut lines = text.splitn(3, '\n');
    let run_id = lines.next()?.to_owned();
    let at = lines.next()?.parse().ok()?;
    (lines.next()? == key && !run_id.is_empty()).then_some((run_id, at))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_clear() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(KeyRecord::peek(dir.path(), "req-1").unwrap(), None);
        {
            let record = KeyRecord::lock(dir.path(), "req-1").unwrap();
            assert_eq!(record.read(), None);
            record.write("wrun_1", 1000).unwrap();
            assert_eq!(record.read(), Some(("wrun_1".into(), 1000)));
            record.write("wrun_2", 2000).unwrap();
        }
        assert_eq!(
            KeyRecord::peek(dir.path(), "req-1").unwrap(),
            Some(("wrun_2".into(), 2000))
        );
        KeyRecord::lock(dir.path(), "req-1")
            .unwrap()
            .clear()
            .unwrap();
        assert_eq!(KeyRecord::peek(dir.path(), "req-1").unwrap(), None);
    }
}
