//! The file side of a world's logs: entries wait in memory and are appended, a batch at a
//! time, to one file per day (UTC) of the world's clock.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;

use super::date;
use super::LogError;
use crate::clock::Millis;

/// Entries held at most before a batch is written at once, whatever the flush interval, so a
/// burst cannot grow memory without bound.
pub(crate) const MAX_PENDING: usize = 10_000;

/// One serialized entry waiting to be written.
struct Pending {
    day: i64,
    line: String,
}

/// The buffered writer of one log directory.
pub(crate) struct LogFiles {
    dir: PathBuf,
    max_files: Option<usize>,
    pending: Mutex<Vec<Pending>>,
    /// Held while a batch is written, so that two flushes write their batches in order. Holds
    /// the newest day written, to notice rotation.
    writing: Mutex<Option<i64>>,
}

impl LogFiles {
    pub(crate) fn new(dir: PathBuf, max_files: Option<usize>) -> Self {
        Self {
            dir,
            max_files,
            pending: Mutex::new(Vec::new()),
            writing: Mutex::new(None),
        }
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Queues a line (without its newline) stamped `at`. Returns true when the queue is full
    /// and should be written now.
    pub(crate) fn push(&self, at: Millis, line: String) -> bool {
        let mut pending = self.pending.lock();
        pending.push(Pending {
            day: date::day_of(at),
            line,
        });
        pending.len() >= MAX_PENDING
    }

    /// Entries queued and not yet written.
    #[cfg(test)]
    fn pending(&self) -> usize {
        self.pending.lock().len()
    }

    /// Appends every queued entry to the file of its day, creating the directory and files as
    /// needed. A batch that cannot be written is dropped (the error says how many entries):
    /// keeping it would grow without bound while a disk stays full.
    pub(crate) fn flush(&self) -> Result<usize, LogError> {
        let mut newest = self.writing.lock();
        let batch = std::mem::take(&mut *self.pending.lock());
        if batch.is_empty() {
            return Ok(0);
        }
        let count = batch.len();
        let result = self.write(&batch, &mut newest);
        result.map(|()| count).map_err(|e| e.dropping(count))
    }

    fn write(&self, batch: &[Pending], newest: &mut Option<i64>) -> Result<(), LogError> {
        fs::create_dir_all(&self.dir).map_err(|e| LogError::io("create", &self.dir, e))?;
        let mut rotated = false;
        // Entries are queued in time order, so each day's lines are one run of the batch.
        for group in batch.chunk_by(|a, b| a.day == b.day) {
            let day = group[0].day;
            let path = self.dir.join(date::file_name(day));
            let mut text = String::with_capacity(group.iter().map(|p| p.line.len() + 1).sum());
            for pending in group {
                text.push_str(&pending.line);
                text.push('\n');
            }
            append(&path, text.as_bytes())?;
            // A new day (or the first write of this process) may leave too many files.
            if newest.is_none_or(|n| day > n) {
                rotated = true;
                *newest = Some(day);
            }
        }
        if rotated {
            self.remove_old_files()?;
        }
        Ok(())
    }

    /// Keeps the newest `max_files` day files.
    fn remove_old_files(&self) -> Result<(), LogError> {
        let Some(keep) = self.max_files else {
            return Ok(());
        };
        let mut days = super::query::day_files(&self.dir)?;
        if days.len() <= keep {
            return Ok(());
        }
        days.truncate(days.len() - keep);
        for (_, path) in days {
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(LogError::io("remove", &path, e)),
            }
        }
        Ok(())
    }
}

/// Appends `bytes` to `path` in one write under the file's advisory lock, so that processes
/// sharing a directory never interleave inside a line.
fn append(path: &Path, bytes: &[u8]) -> Result<(), LogError> {
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| LogError::io("open", path, e))?;
    file.lock().map_err(|e| LogError::io("lock", path, e))?;
    // A line cut short by a crash would swallow the next one: start on a line of our own.
    let len = file
        .metadata()
        .map_err(|e| LogError::io("read", path, e))?
        .len();
    let torn = len > 0 && !ends_with_newline(path, len)?;
    let written = if torn {
        file.write_all(b"\n").and_then(|()| file.write_all(bytes))
    } else {
        file.write_all(bytes)
    };
    written.map_err(|e| LogError::io("write", path, e))
}

fn ends_with_newline(path: &Path, len: u64) -> Result<bool, LogError> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = fs::File::open(path).map_err(|e| LogError::io("open", path, e))?;
    let mut last = [0u8; 1];
    file.seek(SeekFrom::Start(len - 1))
        .and_then(|_| file.read_exact(&mut last))
        .map_err(|e| LogError::io("read", path, e))?;
    Ok(last[0] == b'\n')
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Millis = 86_400_000;

    #[test]
    fn a_batch_spanning_midnight_goes_to_two_files_and_old_files_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let files = LogFiles::new(dir.path().join("logs"), Some(2));
        assert_eq!(
            files.flush().unwrap(),
            0,
            "nothing to write, nothing created"
        );
        assert!(!files.dir().exists());
        let midnight = 20_454 * DAY;
        files.push(midnight - 1, "a".into());
        files.push(midnight, "b".into());
        assert_eq!(files.pending(), 2);
        assert_eq!(files.flush().unwrap(), 2);
        let read = |day: i64| fs::read_to_string(files.dir().join(date::file_name(day))).ok();
        assert_eq!(read(20_453).as_deref(), Some("a\n"));
        assert_eq!(read(20_454).as_deref(), Some("b\n"));
        files.push(midnight + DAY, "c".into());
        files.flush().unwrap();
        assert_eq!(read(20_453), None, "only the newest two days are kept");
        assert_eq!(read(20_455).as_deref(), Some("c\n"));
    }

    #[test]
    fn a_torn_last_line_is_closed_before_appending() {
        let dir = tempfile::tempdir().unwrap();
        let files = LogFiles::new(dir.path().to_owned(), None);
        let path = dir.path().join(date::file_name(0));
        fs::write(&path, "{\"timest").unwrap();
        files.push(5, "x".into());
        files.flush().unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "{\"timest\nx\n");
    }
}
