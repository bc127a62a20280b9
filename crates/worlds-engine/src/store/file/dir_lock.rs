//! `state/lock`: the lock that keeps a hybrid store alone in its directory. A hybrid store
//! holds it exclusive for as long as it is open; file stores hold it shared; moving a hybrid
//! directory's records into run logs, or migrating the format, takes it exclusive for a moment.
//!
//! A lock that is taken is tried again for up to [`PATIENCE`]. A process being spawned anywhere
//! in the program shares every open file, this lock's too, until it has started its own program,
//! so a store reopened right after it was dropped can find its own old lock still held for a
//! moment. A lock that another store really holds is refused once the patience runs out.

use std::fs::{self, File, OpenOptions};
use std::path::Path;
use std::time::Duration;

use crate::error::WorldError;

use super::io_error;

/// How long [`take`] keeps trying a lock that is taken before it gives up.
pub(in crate::store) const PATIENCE: Duration = Duration::from_millis(500);
/// How long it waits between two tries.
const RETRY: Duration = Duration::from_millis(20);

/// How the lock is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::store) enum Mode {
    /// Alone: a hybrid store, a fold of its records, a migration.
    Exclusive,
    /// Beside other file stores.
    Shared,
}

/// Opens (creating if needed) `state/lock` under `state` and takes it. `Ok(None)` means another
/// holder kept it for all of [`PATIENCE`]: the caller says who that is likely to be.
pub(in crate::store) fn take(state: &Path, mode: Mode) -> Result<Option<File>, WorldError> {
    let path = state.join("lock");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| io_error("could not open", &path, e))?;
    let try_once = || match mode {
        Mode::Exclusive => file.try_lock(),
        Mode::Shared => file.try_lock_shared(),
    };
    let mut tries = PATIENCE.as_millis() / RETRY.as_millis();
    loop {
        match try_once() {
            Ok(()) => return Ok(Some(file)),
            Err(fs::TryLockError::WouldBlock) if tries > 0 => {
                // Opening a store is blocking I/O outside the engine's time: no `Clock` here.
                std::thread::sleep(RETRY);
                tries -= 1;
            }
            Err(fs::TryLockError::WouldBlock) => return Ok(None),
            Err(fs::TryLockError::Error(e)) => return Err(io_error("could not lock", &path, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_holders_coexist_and_keep_an_exclusive_one_out() {
        let dir = tempfile::tempdir().unwrap();
        let first = take(dir.path(), Mode::Shared).unwrap();
        let second = take(dir.path(), Mode::Shared).unwrap();
        assert!(first.is_some() && second.is_some());
        assert!(take(dir.path(), Mode::Exclusive).unwrap().is_none());
        drop((first, second));
        let alone = take(dir.path(), Mode::Exclusive).unwrap();
        assert!(alone.is_some());
        assert!(take(dir.path(), Mode::Shared).unwrap().is_none());
    }
}
