//! The inspection commands as a user runs them: the built `worlds` binary on a data directory
//! written by the engine.

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

use serde_json::json;
use worlds_engine::clock::{Clock, VirtualClock};
use worlds_engine::ids::IdGenerator;
use worlds_engine::model::EVENT_FORMAT_VERSION;
use worlds_engine::store::{FileStore, RunStore};
use worlds_engine::{Event, EventKind, Payload};

/// Two runs in a new store under `dir`: one completed (`wf-done`), one pending (`wf-pending`).
fn populate(dir: &Path) -> (String, String) {
    let clock = VirtualClock::new(1_700_000_000_000);
    let ids = IdGenerator::new(Arc::new(clock.clone()));
    let event = |run_id: &str, kind: EventKind| Event {
        id: ids.event_id(),
        run_id: run_id.to_owned(),
        seq: 0,
        timestamp: clock.now_ms(),
        version: EVENT_FORMAT_VERSION,
        kind,
    };
    let queued = |workflow_id: &str| {
        EventKind::WorkflowQueued(Box::new(worlds_engine::model::QueuedRun::new(
            "greet".to_owned(),
            workflow_id.to_owned(),
            Payload::from(json!("world")),
        )))
    };
    let store = FileStore::open(dir).unwrap();
    futures::executor::block_on(async {
        let done = ids.run_id();
        store
            .create_run(event(&done, queued("wf-done")))
            .await
            .unwrap();
        let rest = vec![
            event(
                &done,
                EventKind::WorkflowStarted {
                    attempt: 1,
                    first_position: 0,
                },
            ),
            event(
                &done,
                EventKind::WorkflowCompleted {
                    output: Payload::from(json!("hello")),
                },
            ),
        ];
        store.append(&done, rest).await.unwrap();
        let pending = ids.run_id();
        store
            .create_run(event(&pending, queued("wf-pending")))
            .await
            .unwrap();
        (done, pending)
    })
}

fn worlds(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_worlds"))
        .args(args)
        .arg("--dir")
        .arg(dir)
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[test]
fn runs_list_json_prints_one_run_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let (done, pending) = populate(dir.path());
    let output = worlds(&["runs", "list", "--json"], dir.path());
    assert!(output.status.success(), "{}", text(&output.stderr));
    let runs: Vec<serde_json::Value> = text(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["id"], pending.as_str());
    assert_eq!(runs[1]["id"], done.as_str());
    assert_eq!(runs[1]["status"], "completed");
    assert_eq!(runs[1]["output"], "hello");

    let output = worlds(
        &["runs", "list", "--json", "--status", "completed"],
        dir.path(),
    );
    assert_eq!(text(&output.stdout).lines().count(), 1);
}

#[test]
fn doctor_exits_zero_when_healthy_and_non_zero_on_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let (done, _) = populate(dir.path());
    let output = worlds(&["doctor"], dir.path());
    assert!(output.status.success(), "{}", text(&output.stderr));
    let report = text(&output.stdout);
    assert!(report.contains("runs: 2"), "{report}");
    assert!(report.contains("healthy"), "{report}");

    let log = dir
        .path()
        .join("workflows")
        .join(format!("{done}.events.ndjson"));
    let content = std::fs::read_to_string(&log).unwrap();
    std::fs::write(&log, format!("not json\n{content}")).unwrap();
    let output = worlds(&["doctor"], dir.path());
    assert!(!output.status.success());
    let error = text(&output.stderr);
    assert!(error.contains(&log.display().to_string()), "{error}");
    assert!(error.contains("byte offset 0"), "{error}");

    let output = worlds(&["doctor"], &dir.path().join("missing"));
    assert!(!output.status.success());
    assert!(text(&output.stderr).contains("no worlds-engine data in"));
}

#[test]
fn a_cancelled_run_is_shown_as_cancelled_not_completed() {
    let dir = tempfile::tempdir().unwrap();
    let (_, pending) = populate(dir.path());
    let store = FileStore::open(dir.path()).unwrap();
    let cancelled = Event {
        id: "evnt_cancel".to_owned(),
        run_id: pending.clone(),
        seq: 0,
        timestamp: 1_700_000_000_500,
        version: EVENT_FORMAT_VERSION,
        kind: EventKind::WorkflowCancelled {
            reason: Some("no longer needed".to_owned()),
        },
    };
    futures::executor::block_on(store.append(&pending, vec![cancelled])).unwrap();
    drop(store);

    let output = worlds(&["runs", "show", &pending], dir.path());
    assert!(output.status.success(), "{}", text(&output.stderr));
    let shown = text(&output.stdout);
    let header: Vec<&str> = shown.lines().take_while(|l| !l.is_empty()).collect();
    assert!(
        header
            .iter()
            .any(|l| l.starts_with("status") && l.ends_with("cancelled")),
        "{shown}"
    );
    assert!(
        !header.iter().any(|l| l.contains("completed")),
        "a cancelled run's header must not say completed:\n{shown}"
    );
    assert!(
        header.iter().any(|l| l.contains("no longer needed")),
        "{shown}"
    );
}
