//! Replacing or creating a small file in one step, so that a reader sees the old contents or the
//! new, never a mix.
//!
//! The bytes go to a temporary file beside the target and are synced before the file is renamed
//! (or linked) into place. Every temporary name is unique — process id, a per-process counter
//! and a random suffix — because several threads or processes may write the same target at once
//! (two processes opening a fresh directory both write `state/format.json`): with a shared name
//! one writer would rename or delete the file the other is still writing.
//!
//! A crash can leave a temporary file behind. Its name ends in [`TEMP_SUFFIX`] and never in the
//! suffix readers list (`.json`, `.ndjson`), so it is ignored; directories whose writers hold an
//! exclusive lock remove such leftovers under it.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// How every temporary file name ends.
pub(crate) const TEMP_SUFFIX: &str = ".tmp";

/// Temporary files made by this process so far: keeps names unique between its threads.
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A name beside `path` that no other writer uses: `{file name}.{pid}-{n}-{random}.tmp`.
pub(crate) fn temp_path(path: &Path) -> PathBuf {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let random: u32 = rand::random();
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(
        ".{}-{n}-{random:08x}{TEMP_SUFFIX}",
        std::process::id()
    ));
    path.with_file_name(name)
}

/// True if `name` is a temporary file [`temp_path`] made for the file named `target`.
pub(crate) fn is_temp_for(name: &str, target: &str) -> bool {
    let Some(unique) = name
        .strip_prefix(target)
        .and_then(|rest| rest.strip_prefix('.'))
        .and_then(|rest| rest.strip_suffix(TEMP_SUFFIX))
    else {
        return false;
    };
    let parts: Vec<&str> = unique.split('-').collect();
    matches!(parts.as_slice(), [pid, n, random]
        if !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit())
            && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
            && random.len() == 8 && random.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Replaces `path` with `bytes`: a uniquely named temporary file, synced, renamed over `path`,
/// then the directory synced.
pub(crate) fn replace(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = temp_path(path);
    let written = write_synced(&tmp, bytes, false).and_then(|()| fs::rename(&tmp, path));
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written?;
    sync_parent(path)
}

/// Creates `path` holding `bytes` unless it exists: a uniquely named temporary file, synced,
/// linked to `path` (which fails if `path` exists), removed. Returns false if `path` existed;
/// its contents are then left alone. With `private`, the file is readable by its owner only.
pub(crate) fn create_new(path: &Path, bytes: &[u8], private: bool) -> std::io::Result<bool> {
    let tmp = temp_path(path);
    let linked = write_synced(&tmp, bytes, private).and_then(|()| fs::hard_link(&tmp, path));
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(()) => sync_parent(path).map(|()| true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

fn write_synced(tmp: &Path, bytes: &[u8], private: bool) -> std::io::Result<()> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = private;
    let mut file = options.open(tmp)?;
    file.write_all(bytes)?;
    file.sync_all()
}

fn sync_parent(path: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        File::open(dir)?.sync_all()?;
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporary_names_are_unique_and_recognized() {
        let path = Path::new("/d/format.json");
        let a = temp_path(path);
        let b = temp_path(path);
        assert_ne!(a, b);
        assert_eq!(a.parent(), path.parent());
        let name = a.file_name().unwrap().to_str().unwrap();
        assert!(is_temp_for(name, "format.json"));
        assert!(!is_temp_for("format.json", "format.json"));
        assert!(!is_temp_for(name, "format"));
    }

    #[test]
    fn replace_and_create_new_leave_no_temporary_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.json");
        replace(&path, b"1").unwrap();
        replace(&path, b"2").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"2");
        let key = dir.path().join("key");
        assert!(create_new(&key, b"a", true).unwrap());
        assert!(!create_new(&key, b"b", true).unwrap());
        assert_eq!(fs::read(&key).unwrap(), b"a");
        let names: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 2);
    }

    #[test]
    fn concurrent_replacements_of_one_file_all_succeed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("format.json");
        std::thread::scope(|s| {
            for i in 0..8 {
                let path = &path;
                s.spawn(move || {
                    for _ in 0..50 {
                        replace(path, format!("{i}").as_bytes()).unwrap();
                    }
                });
            }
        });
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
