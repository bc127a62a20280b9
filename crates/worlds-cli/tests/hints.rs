//! The commands the CLI tells a user to run, run as the user would: pasted into a shell with
//! the installed `worlds` on PATH (the README's `cargo install --locked --path crates/worlds-cli`).

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Longest any command of this test may take.
const PATIENCE: Duration = Duration::from_secs(30);

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// Runs `command` to its end, failing the test if it takes longer than [`PATIENCE`].
fn run(command: &mut Command) -> Output {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + PATIENCE;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("{command:?} did not exit within {PATIENCE:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// `line` run by `sh` in `cwd`, with the directory of the built `worlds` first on PATH.
fn shell(line: &str, cwd: &Path) -> Output {
    let bin = Path::new(env!("CARGO_BIN_EXE_worlds")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    run(Command::new("sh")
        .arg("-c")
        .arg(line)
        .current_dir(cwd)
        .env("PATH", path))
}

/// The command between the backticks of `line` that starts with `worlds `.
fn quoted_command(line: &str) -> Option<&str> {
    line.split('`')
        .skip(1)
        .step_by(2)
        .find(|part| part.starts_with("worlds "))
}

#[test]
fn the_worlds_command_and_the_hints_it_prints_do_not_work_as_printed() {
    let readme = include_str!("../../../README.md");
    assert!(
        readme.contains("cargo install --locked --path crates/worlds-cli"),
        "the README does not say how to put `worlds` on PATH"
    );

    let tmp = tempfile::tempdir().unwrap();
    // A path a shell splits unless it is quoted, and storage other than the default.
    let dir = tmp.path().join("my world");
    let output = run(Command::new(env!("CARGO_BIN_EXE_worlds"))
        .args([
            "dev",
            "--runs",
            "2",
            "--speed",
            "50",
            "--persistence",
            "file",
        ])
        .arg("--dir")
        .arg(&dir)
        .current_dir(tmp.path()));
    let stdout = text(&output.stdout);
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");

    // The summary's "inspect them" lines.
    let hints: Vec<&str> = stdout
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("worlds "))
        .collect();
    assert_eq!(hints.len(), 2, "{stdout}");
    for hint in hints {
        let output = shell(hint, tmp.path());
        assert!(
            output.status.success(),
            "`{hint}` failed:\n{}",
            text(&output.stderr)
        );
        assert!(!text(&output.stdout).is_empty(), "`{hint}` printed nothing");
    }

    // "`worlds dev …` again resumes what is in flight" must reopen the same world the same way.
    let resume = stderr
        .lines()
        .find_map(quoted_command)
        .unwrap_or_else(|| panic!("no resume hint in\n{stderr}"));
    let output = shell(&format!("{resume} --runs 0"), tmp.path());
    let said = text(&output.stderr);
    assert!(output.status.success(), "`{resume}` failed:\n{said}");
    assert!(
        said.contains(&format!("file storage in {}", dir.display())),
        "`{resume}` did not reopen {} in file mode:\n{said}",
        dir.display()
    );
    assert!(
        !tmp.path().join(".worlds-engine").exists(),
        "`{resume}` opened the default directory"
    );
}
