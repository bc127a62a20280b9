//! Shared helpers for the CLI tests: the built binary, its output as text, and a copy of a
//! data directory as a crash leaves it.
#![allow(dead_code, unreachable_pub)]

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

/// Runs `worlds ARGS --dir DIR` and waits for it.
pub fn worlds(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_worlds"))
        .args(args)
        .arg("--dir")
        .arg(dir)
        .output()
        .unwrap()
}

/// Output bytes as text (bytes that are not UTF-8 are replaced).
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Copies a directory as it is on disk right now: what a `kill -9` would leave behind.
pub fn crash_copy(src: &Path, dst: &Path) {
    fs::create_dir_all(dst).unwrap();
    for entry in fs::read_dir(src).unwrap() {
        let entry = entry.unwrap();
        let to = dst.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            crash_copy(&entry.path(), &to);
        } else {
            fs::copy(entry.path(), to).unwrap();
        }
    }
}
