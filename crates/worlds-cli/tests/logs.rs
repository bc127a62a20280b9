//! `worlds logs` as a user runs it: the built binary on log files a test world wrote.

use std::path::Path;
use std::process::{Command, Output};

use tracing_subscriber::layer::SubscriberExt;
use worlds_engine::prelude::*;
use worlds_engine::telemetry::logs::{LogEntry, LogsConfig};
use worlds_engine::testing::{TestWorld, TestWorldOptions, DEFAULT_START};

/// A test world's log files under `dir/logs`: a world start, a worker warning an hour later,
/// a workflow error and an activity entry two hours later, and the world's stop.
async fn write_logs(dir: &Path) {
    let mut config = WorldConfig::memory();
    config.logs = LogsConfig::default().dir(dir.join("logs"));
    let t = TestWorld::with_options(TestWorldOptions {
        config,
        autostart: false,
        ..TestWorldOptions::default()
    })
    .await;
    let subscriber = tracing_subscriber::registry().with(t.logs().layer());
    let _guard = tracing::subscriber::set_default(subscriber);
    t.start().await.unwrap();
    let span = t.logs().span();
    t.advance("1h").await;
    span.in_scope(|| tracing::warn!(category = "worker", worker = "worker-1", "worker slow"));
    t.advance("1h").await;
    span.in_scope(|| tracing::error!(category = "workflow", run_id = "wrun_1", "run broke"));
    span.in_scope(|| tracing::info!(category = "activity", "step done"));
    t.shutdown().await.unwrap();
}

fn worlds(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_worlds"))
        .arg("logs")
        .args(args)
        .arg("--dir")
        .arg(dir)
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

fn entries(output: &Output) -> Vec<LogEntry> {
    assert!(output.status.success(), "{}", text(&output.stderr));
    text(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn messages(entries: &[LogEntry]) -> Vec<&str> {
    entries.iter().map(|e| e.message.as_str()).collect()
}

#[tokio::test]
async fn logs_filters_by_category_level_time_and_count() {
    let dir = tempfile::tempdir().unwrap();
    write_logs(dir.path()).await;

    let all = entries(&worlds(&["--json"], dir.path()));
    assert_eq!(
        messages(&all),
        [
            "world started",
            "worker slow",
            "run broke",
            "step done",
            "world stopped"
        ]
    );
    assert_eq!(all[1].timestamp, DEFAULT_START + 3_600_000);
    assert_eq!(all[1].metadata["worker"], "worker-1");

    let workers = entries(&worlds(&["--json", "--category", "worker"], dir.path()));
    assert_eq!(messages(&workers), ["worker slow"]);
    let serious = entries(&worlds(&["--json", "--level", "warn"], dir.path()));
    assert_eq!(messages(&serious), ["worker slow", "run broke"]);
    let later = entries(&worlds(
        &["--json", "--since", "2026-01-01T01:30:00Z"],
        dir.path(),
    ));
    assert_eq!(
        messages(&later),
        ["run broke", "step done", "world stopped"]
    );

    let newest = worlds(&["--json", "--limit", "2"], dir.path());
    assert_eq!(messages(&entries(&newest)), ["step done", "world stopped"]);
    assert!(text(&newest.stderr).contains("raise --limit"));
}

#[tokio::test]
async fn logs_prints_lines_for_people_and_explains_a_missing_directory() {
    let dir = tempfile::tempdir().unwrap();
    write_logs(dir.path()).await;
    let output = worlds(&["--level", "error"], dir.path());
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(
        text(&output.stdout),
        "2026-01-01T02:00:00.000Z ERROR workflow run broke {\"run_id\":\"wrun_1\"}\n"
    );

    let empty = tempfile::tempdir().unwrap();
    let output = worlds(&[], empty.path());
    assert!(output.status.success());
    assert_eq!(text(&output.stdout), "");
    assert!(text(&output.stderr).contains("no log records were written"));
    let output = worlds(&[], &empty.path().join("missing"));
    assert!(!output.status.success());
    assert!(text(&output.stderr).contains("does not exist"));

    let bad = worlds(&["--category", "planets"], dir.path());
    assert!(!bad.status.success());
    assert!(text(&bad.stderr).contains("unknown log category"));
}
