//! `WORLDS_ENGINE_DIR` is the default `--dir`, as it is the library's default directory.

use std::process::Command;

use worlds_engine::prelude::*;
use worlds_engine::telemetry::logs::LogsConfig;
use worlds_engine::testing::{TestWorld, TestWorldOptions};

#[tokio::test]
async fn the_environment_variable_is_the_default_dir() {
    let data = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    // A world that starts and stops writes its own records, with no subscriber installed.
    let mut config = WorldConfig::memory();
    config.logs = LogsConfig::default().dir(data.path().join("logs"));
    let world = TestWorld::with_options(TestWorldOptions {
        config,
        ..TestWorldOptions::default()
    })
    .await;
    world.shutdown().await.unwrap();

    let output = Command::new(env!("CARGO_BIN_EXE_worlds"))
        .args(["logs", "--json"])
        .current_dir(elsewhere.path())
        .env("WORLDS_ENGINE_DIR", data.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("\"world started\""), "{stdout}");
    assert!(stdout.contains("\"world stopped\""), "{stdout}");
}
