//! Several threads and processes opening one fresh directory in file mode at the same moment
//! all succeed: no two writers share a temporary file.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Barrier;

use worlds_engine::store::FileStore;

const DIR_VAR: &str = "WORLDS_CONCURRENT_OPEN_DIR";
const THREADS: usize = 8;

/// Opens `dir` from `THREADS` threads released together; returns the errors.
fn open_together(dir: &Path) -> Vec<String> {
    let barrier = Barrier::new(THREADS);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    FileStore::open(dir).err().map(|e| e.to_string())
                })
            })
            .collect();
        handles
            .into_iter()
            .filter_map(|h| h.join().unwrap())
            .collect()
    })
}

#[test]
fn threads_opening_a_fresh_directory_at_once_all_succeed() {
    for _ in 0..40 {
        let dir = tempfile::tempdir().unwrap();
        let errors = open_together(&dir.path().join("store"));
        assert!(errors.is_empty(), "opens failed: {errors:?}");
    }
}

/// The child role: opens the directory from several threads at once and reports failures.
#[test]
#[ignore = "child process of `processes_opening_a_fresh_directory_at_once_all_succeed`"]
fn concurrent_open_child_entry() {
    let Ok(dir) = std::env::var(DIR_VAR) else {
        return;
    };
    let errors = open_together(Path::new(&dir));
    assert!(errors.is_empty(), "opens failed: {errors:?}");
}

#[test]
fn processes_opening_a_fresh_directory_at_once_all_succeed() {
    for _ in 0..6 {
        let dir = tempfile::tempdir().unwrap();
        let store: PathBuf = dir.path().join("store");
        let children: Vec<_> = (0..3)
            .map(|_| {
                Command::new(std::env::current_exe().unwrap())
                    .args([
                        "--exact",
                        "concurrent_open_child_entry",
                        "--include-ignored",
                        "--test-threads=1",
                    ])
                    .env(DIR_VAR, &store)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "a child failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}
