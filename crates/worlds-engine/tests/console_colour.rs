//! `world.logs().init()` writes plain text, without colour codes, when standard error is not a
//! terminal (a pipe, a file): what lands in a log file or a CI log reads as written.
//!
//! The test binary re-executes itself with its standard error piped: `console_child` is an
//! ignored test that does nothing unless `WORLDS_CONSOLE_CHILD` is set.

use std::process::{Command, Stdio};

use worlds_engine::prelude::*;

const CHILD_VAR: &str = "WORLDS_CONSOLE_CHILD";
const MESSAGE: &str = "the console line of the colour test";

#[test]
#[ignore = "child process of the console colour test; does nothing when run directly"]
fn console_child() {
    if std::env::var_os(CHILD_VAR).is_none() {
        return;
    }
    let mut config = WorldConfig::memory();
    config.logs.console = true;
    let world = World::new(config).expect("a memory world");
    assert!(world.logs().init(), "no subscriber was installed before");
    tracing::warn!(category = "system", "{MESSAGE}");
}

#[test]
fn console_lines_into_a_pipe_carry_no_colour_codes() {
    let output = Command::new(std::env::current_exe().expect("current exe"))
        .args([
            "--exact",
            "console_child",
            "--nocapture",
            "--include-ignored",
        ])
        .env(CHILD_VAR, "1")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("run the child");
    assert!(output.status.success(), "the child failed");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let line = stderr
        .lines()
        .find(|l| l.contains(MESSAGE))
        .unwrap_or_else(|| panic!("the warning is not on standard error:\n{stderr}"));
    assert!(
        !line.contains('\u{1b}'),
        "colour codes written into a pipe: {line:?}"
    );
    assert!(line.contains("WARN"), "{line}");
}
