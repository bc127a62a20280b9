//! No file of the repository names a place on one particular machine: a path under a user's
//! home or a machine's work folder means nothing on a reader's machine (and says something
//! about the one it was written on). Paths in the repository are relative to it; a folder next
//! to it is `../name`.
//!
//! The files are those git tracks; outside a git checkout (a packaged crate) the test has
//! nothing to read and says so.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The folders a machine path starts with. Spelled in pieces so that this file does not name
/// them itself.
fn machine_roots() -> Vec<String> {
    ["work", "root", "home"]
        .iter()
        .map(|dir| format!("/{dir}/"))
        .collect()
}

/// True if `before` (the byte before a match) can start a path: the match is not the middle
/// of a URL or of a longer path segment (`example.com/home/`, `my/work/`).
fn starts_a_path(before: Option<u8>) -> bool {
    match before {
        None => true,
        Some(b) => !(b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'~' | b'/')),
    }
}

/// Each line of `text` naming a machine path: (line number from 1, the line).
fn machine_paths(text: &[u8], roots: &[String]) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (number, line) in text.split(|&b| b == b'\n').enumerate() {
        let hit = roots.iter().any(|root| {
            let root = root.as_bytes();
            line.windows(root.len()).enumerate().any(|(at, window)| {
                window == root && starts_a_path(at.checked_sub(1).map(|i| line[i]))
            })
        });
        if hit {
            found.push((number + 1, String::from_utf8_lossy(line).trim().to_owned()));
        }
    }
    found
}

fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("the crate sits at crates/<name> of the workspace")
        .to_path_buf()
}

/// The files git tracks under `root`, or `None` outside a checkout.
fn tracked_files(root: &Path) -> Option<Vec<PathBuf>> {
    let output = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["ls-files", "-z"])
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    Some(
        output
            .stdout
            .split(|&b| b == 0)
            .filter(|name| !name.is_empty())
            .map(|name| root.join(String::from_utf8_lossy(name).as_ref()))
            .collect(),
    )
}

#[test]
fn no_tracked_file_names_a_path_of_one_machine() {
    let root = repository_root();
    let Some(files) = tracked_files(&root) else {
        eprintln!(
            "{} is not a git checkout (or git is missing): nothing to check",
            root.display()
        );
        return;
    };
    assert!(
        !files.is_empty(),
        "git lists no file under {}",
        root.display()
    );
    let roots = machine_roots();
    let mut offences = Vec::new();
    for file in files {
        // Deleted in the work tree but not yet in the index: nothing to read.
        let Ok(text) = std::fs::read(&file) else {
            continue;
        };
        for (line, content) in machine_paths(&text, &roots) {
            let name = file.strip_prefix(&root).unwrap_or(&file);
            offences.push(format!("{}:{line}: {content}", name.display()));
        }
    }
    assert!(
        offences.is_empty(),
        "paths of one machine in the repository (make them relative to it):\n{}",
        offences.join("\n")
    );
}

#[test]
fn machine_paths_are_found_where_a_path_can_start() {
    let roots = machine_roots();
    let home = format!("cp -r {}me/peers .", roots[2]);
    assert_eq!(machine_paths(home.as_bytes(), &roots).len(), 1);
    let quoted = format!("(`{}shared/bench`)", roots[0]);
    assert_eq!(
        machine_paths(quoted.as_bytes(), &roots),
        vec![(1, quoted.clone())]
    );
    let second_line = format!("first\nPATH={}x", roots[1]);
    assert_eq!(machine_paths(second_line.as_bytes(), &roots)[0].0, 2);
    // Not a path of this machine: the middle of a URL or of a relative path.
    let url = format!("https://example.com{}page", roots[2]);
    assert!(machine_paths(url.as_bytes(), &roots).is_empty());
    let relative = format!("../shared{}x and my{}y", roots[0], roots[1]);
    assert!(machine_paths(relative.as_bytes(), &roots).is_empty());
}
