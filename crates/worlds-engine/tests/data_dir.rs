//! `WORLDS_ENGINE_DIR` sets the default data directory; a directory set in the configuration
//! wins over it.
//!
//! Environment variables are global to the process and the tests of a binary run in parallel,
//! so the checks run in a child process (this same test binary, running only `child_checks`)
//! that has the variable set from the start.

use std::path::PathBuf;
use std::process::Command;

use worlds_engine::{Persistence, World, WorldConfig, DATA_DIR_ENV};

/// Tells `child_checks` it runs in the child, and where the variable points.
const CHILD: &str = "WORLDS_ENGINE_TEST_DATA_DIR_CHILD";

#[test]
fn the_environment_variable_sets_the_default_directory() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_checks", "--nocapture", "--test-threads=1"])
        .env(DATA_DIR_ENV, dir.path())
        .env(CHILD, dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{text}");
    assert!(text.contains("1 passed"), "the child ran no check: {text}");
}

#[test]
fn child_checks() {
    let Some(expected) = std::env::var_os(CHILD).map(PathBuf::from) else {
        return; // Run directly: only the child checks.
    };
    // The default follows the variable, and so does a deserialized config that names no
    // directory.
    assert_eq!(WorldConfig::default().persistence_path, expected);
    assert_eq!(WorldConfig::memory().persistence_path, expected);
    let from_file: WorldConfig = serde_json::from_str(r#"{"persistence":"file"}"#).unwrap();
    assert_eq!(from_file.persistence_path, expected);

    // A file world opened with the defaults keeps its data there.
    let mut config = WorldConfig::default();
    config.persistence = Persistence::File;
    let world = World::new(config).unwrap();
    assert_eq!(
        world.data_dir(),
        Some(std::fs::canonicalize(&expected).unwrap())
    );
    drop(world);

    // A directory set explicitly wins over the variable.
    let elsewhere = expected.join("elsewhere");
    let mut config = WorldConfig::default();
    config.persistence_path = elsewhere.clone();
    assert_eq!(config.persistence_path, elsewhere);
    let explicit: WorldConfig =
        serde_json::from_str(&format!(r#"{{"persistencePath":{:?}}}"#, elsewhere)).unwrap();
    assert_eq!(explicit.persistence_path, elsewhere);
}
