//! `worlds doctor` and `worlds runs show` on a hybrid directory whose latest work is only in the
//! write-ahead log (a world killed before it compacted), or in its segments: they see that work,
//! and they refuse a damaged WAL instead of calling the directory healthy.

mod common;

use common::{crash_copy, text, worlds};

use std::fs;
use std::path::Path;
use std::sync::Arc;

use serde_json::json;
use worlds_engine::clock::{Clock, VirtualClock};
use worlds_engine::ids::IdGenerator;
use worlds_engine::model::{QueuedRun, EVENT_FORMAT_VERSION};
use worlds_engine::store::{EventStore, HybridStore, RunStore};
use worlds_engine::{Event, EventKind, Payload};

/// A hybrid directory at `dst` holding two acknowledged runs in its WAL only.
fn wal_only_directory(live: &Path, dst: &Path) -> [String; 2] {
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
    let store = HybridStore::open(live).unwrap();
    let runs = futures::executor::block_on(async {
        let mut runs = Vec::new();
        for workflow_id in ["order-1", "order-2"] {
            let run = ids.run_id();
            let queued = QueuedRun::new("checkout", workflow_id, Payload::from(json!(42)));
            store
                .create_run(event(&run, EventKind::WorkflowQueued(Box::new(queued))))
                .await
                .unwrap();
            let started = EventKind::WorkflowStarted {
                attempt: 1,
                first_position: 0,
            };
            store
                .append(&run, vec![event(&run, started)])
                .await
                .unwrap();
            runs.push(run);
        }
        runs
    });
    crash_copy(live, dst);
    drop(store);
    assert!(
        !dst.join("workflows")
            .join(format!("{}.events.ndjson", runs[0]))
            .exists(),
        "the copy should hold the runs in its WAL only"
    );
    [runs[0].clone(), runs[1].clone()]
}

#[test]
fn doctor_and_runs_show_see_acknowledged_work_that_only_the_wal_holds() {
    let dir = tempfile::tempdir().unwrap();
    let crashed = dir.path().join("crashed");
    let [first, second] = wal_only_directory(&dir.path().join("live"), &crashed);
    let wal = fs::read(crashed.join("state/wal.ndjson")).unwrap();

    let out = worlds(&["doctor"], &crashed);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    for expected in [
        "runs: 2 (4 events)",
        "  running: 2",
        "write-ahead log: 4 records, 4 not yet compacted",
        "healthy",
    ] {
        assert!(stdout.contains(expected), "{expected:?} in\n{stdout}");
    }

    let out = worlds(&["runs", "show", &second], &crashed);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains(&second), "{}", text(&out.stdout));
    let out = worlds(&["runs", "list", "--json"], &crashed);
    assert!(text(&out.stdout).contains(&first), "{}", text(&out.stdout));

    // Nothing was written: the WAL is as the crash left it.
    assert_eq!(fs::read(crashed.join("state/wal.ndjson")).unwrap(), wal);
}

#[test]
fn doctor_refuses_a_damaged_wal_naming_the_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let crashed = dir.path().join("crashed");
    wal_only_directory(&dir.path().join("live"), &crashed);
    let path = crashed.join("state/wal.ndjson");
    let mut wal = fs::read(&path).unwrap();
    // Change one byte of the last whole line, keeping its newline.
    let last = wal[..wal.len() - 1]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    let at = last + 10;
    wal[at] ^= 0x01;
    fs::write(&path, &wal).unwrap();

    let out = worlds(&["doctor"], &crashed);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{}", text(&out.stdout));
    assert!(
        !text(&out.stdout).contains("healthy"),
        "{}",
        text(&out.stdout)
    );
    assert!(stderr.contains("wal.ndjson"), "{stderr}");
    assert!(stderr.contains(&format!("byte offset {last}")), "{stderr}");
}

#[test]
fn doctor_and_cancel_read_compacted_segments() {
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("live");
    let [first, second] = wal_only_directory(&live, &dir.path().join("unused"));
    // Opening compacts the WAL into a segment.
    drop(HybridStore::open(&live).unwrap());
    assert!(live.join("segments/0000000001.ndjson").exists());

    let out = worlds(&["doctor"], &live);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    for expected in [
        "runs: 2 (4 events)",
        "segments: 1 files, 4 records",
        "healthy",
    ] {
        assert!(stdout.contains(expected), "{expected:?} in\n{stdout}");
    }
    // A write opens the directory in hybrid mode, which reads the segment as it is.
    let out = worlds(&["runs", "cancel", &first], &live);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(live.join("segments/0000000001.ndjson").exists());
    let out = worlds(&["runs", "show", &first], &live);
    assert!(
        text(&out.stdout).contains("cancelled"),
        "{}",
        text(&out.stdout)
    );
    let out = worlds(&["runs", "show", &second], &live);
    assert!(
        text(&out.stdout).contains("running"),
        "{}",
        text(&out.stdout)
    );
}
