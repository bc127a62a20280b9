//! The inspection commands as a user runs them: the built `worlds` binary on a data directory
//! written by the engine.

mod common;

use common::{text, worlds};

use std::path::Path;
use std::sync::Arc;

use serde_json::json;
use worlds_engine::clock::{Clock, VirtualClock};
use worlds_engine::ids::IdGenerator;
use worlds_engine::model::EVENT_FORMAT_VERSION;
use worlds_engine::store::{EventStore, FileStore, RunStore};
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
    assert!(text(&output.stderr).contains("does not exist"));
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

/// Milliseconds since the Unix epoch now.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[test]
fn runs_show_does_not_say_what_happened_and_what_the_run_waits_for() {
    let dir = tempfile::tempdir().unwrap();
    let (done, _) = populate(dir.path());
    let store = FileStore::open(dir.path()).unwrap();
    let now = now_ms();
    let mut seq = 0;
    let mut event = |run_id: &str, kind: EventKind| {
        seq += 1;
        Event {
            id: format!("evnt_{seq}"),
            run_id: run_id.to_owned(),
            seq: 0,
            timestamp: now,
            version: EVENT_FORMAT_VERSION,
            kind,
        }
    };
    let queued = |workflow_id: &str| {
        EventKind::WorkflowQueued(Box::new(worlds_engine::model::QueuedRun::new(
            "order".to_owned(),
            workflow_id.to_owned(),
            Payload::from(json!({ "order": 7 })),
        )))
    };
    let scheduled = |position: u32, name: &str| EventKind::ActivityScheduled {
        position,
        activity_id: format!("step_{position}"),
        name: name.to_owned(),
        input: Payload::from(json!(null)),
        options: None,
        inline: false,
    };
    let started = EventKind::WorkflowStarted {
        attempt: 1,
        first_position: 0,
    };
    // As recovery leaves a run whose step was running when its process was killed: the attempt
    // is recorded as lost and run again; then the run sleeps for an hour.
    let sleeping = "wrun_sleeping";
    let lost = worlds_engine::StructuredError::new(
        "attempt 1 of activity 'charge' was lost: the process running it stopped",
    )
    .with_code(worlds_engine::error::codes::WORKER_LOST);
    let events = vec![
        started.clone(),
        scheduled(0, "charge"),
        EventKind::ActivityStarted {
            position: 0,
            attempt: 1,
        },
        EventKind::ActivityFailed {
            position: 0,
            attempt: 1,
            error: lost,
            retrying: true,
        },
        EventKind::ActivityRetry {
            position: 0,
            attempt: 2,
            delay_ms: 0,
        },
        EventKind::ActivityStarted {
            position: 0,
            attempt: 2,
        },
        EventKind::ActivityCompleted {
            position: 0,
            attempt: 2,
            output: Payload::from(json!("charged")),
        },
        EventKind::TimerScheduled {
            position: 1,
            fire_at: now + 3_600_000,
            timer_id: None,
        },
    ];
    // A run whose step is running in this process (the store that created it leases it).
    let busy = "wrun_busy";
    futures::executor::block_on(async {
        store
            .create_run(event(sleeping, queued("wf-sleeping")))
            .await
            .unwrap();
        let events = events.into_iter().map(|k| event(sleeping, k)).collect();
        store.append(sleeping, events).await.unwrap();
        store
            .create_run(event(busy, queued("wf-busy")))
            .await
            .unwrap();
        let events = vec![
            started,
            scheduled(0, "ship"),
            EventKind::ActivityStarted {
                position: 0,
                attempt: 1,
            },
        ];
        let events = events.into_iter().map(|k| event(busy, k)).collect();
        store.append(busy, events).await.unwrap();
        // A run whose timer was due two hours ago and never fired: nothing drives it.
        store
            .create_run(event("wrun_stuck", queued("wf-stuck")))
            .await
            .unwrap();
        let events = vec![
            EventKind::WorkflowStarted {
                attempt: 1,
                first_position: 0,
            },
            EventKind::TimerScheduled {
                position: 0,
                fire_at: now - 7_200_000,
                timer_id: None,
            },
        ];
        let events = events.into_iter().map(|k| event("wrun_stuck", k)).collect();
        store.append("wrun_stuck", events).await.unwrap();
    });

    let show = |id: &str| {
        let output = worlds(&["runs", "show", id], dir.path());
        assert!(output.status.success(), "{}", text(&output.stderr));
        text(&output.stdout)
    };
    let shown = show("wf-sleeping");
    let has = |line_start: &str, part: &str| {
        shown
            .lines()
            .any(|l| l.starts_with(line_start) && l.contains(part))
    };
    assert!(has("input", r#"{"order":7}"#), "{shown}");
    assert!(has("resumed", "after a restart or takeover"), "{shown}");
    assert!(has("waiting on", "a timer"), "{shown}");
    assert!(has("waiting on", "(in 59m"), "{shown}");
    // Attempts per step, with the one lost to the restart.
    assert!(
        shown
            .lines()
            .any(|l| l.contains("charge") && l.contains("completed") && l.contains("2 (1 lost)")),
        "{shown}"
    );
    // The timeline marks the resumption.
    assert!(
        shown
            .lines()
            .any(|l| l.contains("activity_failed") && l.contains("resumed after a restart")),
        "{shown}"
    );

    let shown = show("wf-busy");
    let pid = std::process::id().to_string();
    assert!(
        shown.lines().any(|l| l.starts_with("waiting on")
            && l.contains("\"ship\"")
            && l.contains("attempt 1 running since")
            && l.contains(&format!("process {pid}"))),
        "{shown}"
    );

    // A wait that looks stuck is flagged, with the question to ask.
    let shown = show("wf-stuck");
    assert!(
        shown.lines().any(|l| l.starts_with("concern")
            && l.contains("the timer was due 2 h ago")
            && l.contains("is a process driving this run?")),
        "{shown}"
    );
    assert!(
        !show("wf-sleeping").contains("concern"),
        "a timer not yet due is no concern"
    );

    let shown = show(&done);
    assert!(shown.contains("input       \"world\""), "{shown}");
    assert!(shown.contains("output      \"hello\""), "{shown}");
    assert!(!shown.contains("waiting on"), "{shown}");
    drop(store);

    // No runs: stdout stays empty, stderr says so and how to start one.
    let empty = tempfile::tempdir().unwrap();
    drop(FileStore::open(empty.path()).unwrap());
    let output = worlds(&["runs", "list"], empty.path());
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(text(&output.stdout), "");
    let said = text(&output.stderr);
    assert!(
        said.contains("no runs") && said.contains("worlds dev"),
        "{said}"
    );
}
