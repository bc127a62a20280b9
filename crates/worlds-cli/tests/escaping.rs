//! Ids, names and errors holding escape sequences and newlines reach the terminal escaped in
//! human output, and exact in JSON output.

mod common;

use common::{text, worlds};

use std::path::Path;
use std::sync::Arc;

use serde_json::json;
use worlds_engine::clock::{Clock, VirtualClock};
use worlds_engine::ids::IdGenerator;
use worlds_engine::model::EVENT_FORMAT_VERSION;
use worlds_engine::store::{EventStore, FileStore, RunStore};
use worlds_engine::{Event, EventKind, Payload, StructuredError};

const WORKFLOW_ID: &str = "order\u{1b}[2J\nrun wrun_FORGED completed";
const NAME: &str = "greet\u{1b}]0;title\u{7}";
const ERROR: &str = "boom\u{1b}[31m\nsecond line";

/// A failed run and a pending run, both with the hostile workflow id prefix; returns their ids.
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
            NAME.to_owned(),
            workflow_id.to_owned(),
            Payload::from(json!("world")),
        )))
    };
    let store = FileStore::open(dir).unwrap();
    futures::executor::block_on(async {
        let failed = ids.run_id();
        store
            .create_run(event(&failed, queued(WORKFLOW_ID)))
            .await
            .unwrap();
        let rest = vec![
            event(
                &failed,
                EventKind::WorkflowStarted {
                    attempt: 1,
                    first_position: 0,
                },
            ),
            event(
                &failed,
                EventKind::WorkflowFailed {
                    error: StructuredError::new(ERROR),
                },
            ),
        ];
        store.append(&failed, rest).await.unwrap();
        let pending = ids.run_id();
        store
            .create_run(event(&pending, queued(&format!("{WORKFLOW_ID} 2"))))
            .await
            .unwrap();
        (failed, pending)
    })
}

/// No raw control character in `out`, and every line is one the command meant to print.
fn assert_escaped(out: &str) {
    assert!(!out.contains('\u{1b}'), "raw ESC in {out:?}");
    assert!(!out.contains('\u{7}'), "raw BEL in {out:?}");
    assert!(
        !out.lines()
            .any(|l| l.starts_with("run wrun_FORGED") || l.starts_with("second line")),
        "a forged line in {out:?}"
    );
    assert!(out.contains("order\\u{1b}[2J\\nrun wrun_FORGED"), "{out:?}");
}

#[test]
fn runs_list_and_show_escape_ids_names_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (failed, _) = populate(dir.path());

    let output = worlds(&["runs", "list"], dir.path());
    assert!(output.status.success(), "{}", text(&output.stderr));
    let list = text(&output.stdout);
    assert_escaped(&list);
    assert_eq!(list.lines().count(), 3, "a header and two runs: {list:?}");

    let output = worlds(&["runs", "show", &failed], dir.path());
    assert!(output.status.success(), "{}", text(&output.stderr));
    let show = text(&output.stdout);
    assert_escaped(&show);
    assert!(show.contains("greet\\u{1b}]0;title\\u{7}"), "{show:?}");
    assert!(show.contains("boom\\u{1b}[31m\\nsecond line"), "{show:?}");
}

#[test]
fn json_output_keeps_the_exact_ids() {
    let dir = tempfile::tempdir().unwrap();
    let (failed, _) = populate(dir.path());
    let output = worlds(&["runs", "list", "--json"], dir.path());
    assert!(output.status.success(), "{}", text(&output.stderr));
    let runs: Vec<serde_json::Value> = text(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(runs.len(), 2);
    let run = runs.iter().find(|r| r["id"] == failed.as_str()).unwrap();
    assert_eq!(run["workflow_id"], WORKFLOW_ID);
    assert_eq!(run["name"], NAME);
    assert_eq!(run["error"]["message"], ERROR);

    let output = worlds(&["runs", "show", &failed, "--json"], dir.path());
    let shown: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(shown["workflow_id"], WORKFLOW_ID);
}

#[test]
fn runs_cancel_escapes_the_run_it_reports() {
    let dir = tempfile::tempdir().unwrap();
    let (_, pending) = populate(dir.path());
    let output = worlds(&["runs", "cancel", &pending], dir.path());
    assert!(output.status.success(), "{}", text(&output.stderr));
    let said = text(&output.stdout);
    assert_escaped(&said);
    assert_eq!(said.lines().count(), 1, "{said:?}");
    assert!(said.contains("is cancelled"), "{said:?}");
    // A one-off command needs no hook key, so it leaves none in the directory.
    assert!(!dir.path().join("state/hook-key").exists());

    let dir = tempfile::tempdir().unwrap();
    let (_, pending) = populate(dir.path());
    let output = worlds(&["runs", "cancel", &pending, "--json"], dir.path());
    assert!(output.status.success(), "{}", text(&output.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(summary["workflow_id"], format!("{WORKFLOW_ID} 2"));
}
