//! The file store's durability: everything comes back on reopen, a torn last line is cut off,
//! corruption elsewhere and newer formats are refused loudly, and a world resumes on it.

mod common;

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use common::store_events::{completed, log_of, populate, snapshot, Maker};
use common::{add_one, Counter};
use serde_json::json;
use worlds_engine::clock::Millis;
use worlds_engine::prelude::*;
use worlds_engine::store::{EventStore, FileStore, RunStore, Store};
use worlds_engine::testing::{TestWorld, TestWorldOptions, DEFAULT_START};
use worlds_engine::{ErrorKind, ResolveData, RunStatus, WorkflowQueryFilter};

#[tokio::test]
async fn everything_comes_back_after_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let m = Maker::new();
    let store = FileStore::open(dir.path()).unwrap();
    let (pending, running, done) = populate(&store, &m).await;
    let ids = [&pending, &running, &done];
    let before = snapshot(&store, &ids).await;
    let listed_before = store.list_runs(&WorkflowQueryFilter::new()).await.unwrap();
    let unfinished_before = store.unfinished_runs().await.unwrap();
    drop(store);

    let store = FileStore::open(dir.path()).unwrap();
    assert_eq!(snapshot(&store, &ids).await, before);
    assert_eq!(
        store.list_runs(&WorkflowQueryFilter::new()).await.unwrap(),
        listed_before
    );
    assert_eq!(store.unfinished_runs().await.unwrap(), unfinished_before);
    assert_eq!(unfinished_before, vec![pending.clone(), running.clone()]);
    let by_workflow_id = store
        .get_run("wf-running", ResolveData::None)
        .await
        .unwrap();
    assert_eq!(by_workflow_id.id, running);
    assert_eq!(by_workflow_id.status, RunStatus::Running);

    // Workflow ids stay unique across the reopen, and writes keep going where they stopped.
    let dup = m.ids.run_id();
    let queued = store.history(&pending, 0).await.unwrap()[0].kind.clone();
    let err = store.create_run(m.event(&dup, queued)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert!(!log_of(dir.path(), &dup).exists());
    m.append(&store, &running, vec![completed()]).await;
    let history = store.history(&running, 0).await.unwrap();
    assert_eq!(history.last().unwrap().seq, 5);
    drop(store);

    let store = FileStore::open(dir.path()).unwrap();
    let state = store.get_run(&running, ResolveData::None).await.unwrap();
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(store.history(&running, 0).await.unwrap(), history);
    // One JSON event per line, readable by anything.
    let text = std::fs::read_to_string(log_of(dir.path(), &running)).unwrap();
    assert_eq!(text.lines().count(), 6);
    for (seq, line) in text.lines().enumerate() {
        let value: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(value["seq"], seq);
    }
}

#[tokio::test]
async fn a_torn_last_line_is_truncated_and_the_run_keeps_its_good_events() {
    let dir = tempfile::tempdir().unwrap();
    let m = Maker::new();
    let store = FileStore::open(dir.path()).unwrap();
    let (_, running, _) = populate(&store, &m).await;
    let history = store.history(&running, 0).await.unwrap();
    drop(store);

    let path = log_of(dir.path(), &running);
    let good_len = std::fs::metadata(&path).unwrap().len();
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    file.write_all(br#"{"id":"evnt_01","run_id":"#).unwrap();
    drop(file);

    let store = FileStore::open(dir.path()).unwrap();
    assert_eq!(store.history(&running, 0).await.unwrap(), history);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), good_len);
    // The store goes on writing after the cut.
    m.append(&store, &running, vec![completed()]).await;
    drop(store);

    let store = FileStore::open(dir.path()).unwrap();
    let state = store.get_run(&running, ResolveData::None).await.unwrap();
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(
        store.history(&running, 0).await.unwrap().len(),
        history.len() + 1
    );
}

#[tokio::test]
async fn corruption_before_the_last_line_fails_open_naming_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let m = Maker::new();
    let store = FileStore::open(dir.path()).unwrap();
    let (_, running, _) = populate(&store, &m).await;
    drop(store);

    let path = log_of(dir.path(), &running);
    let original = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = original.lines().collect();
    let offset = lines[0].len() + 1;
    let mut corrupted = String::new();
    for (i, line) in lines.iter().enumerate() {
        corrupted.push_str(if i == 1 { "{not json" } else { line });
        corrupted.push('\n');
    }
    std::fs::write(&path, &corrupted).unwrap();

    let err = FileStore::open(dir.path()).unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains(&format!("{running}.events.ndjson")),
        "{message}"
    );
    assert!(message.contains(&format!("offset {offset}")), "{message}");
    // Nothing was cut: the file is as the corruption left it.
    assert_eq!(std::fs::read_to_string(&path).unwrap(), corrupted);

    // A gap in seq is refused the same way.
    let mut gapped = String::new();
    for (i, line) in lines.iter().enumerate() {
        if i != 1 {
            gapped.push_str(line);
            gapped.push('\n');
        }
    }
    std::fs::write(&path, &gapped).unwrap();
    let message = FileStore::open(dir.path()).unwrap_err().to_string();
    assert!(message.contains(&format!("offset {offset}")), "{message}");
    assert!(message.contains("seq"), "{message}");
}

#[tokio::test]
async fn a_newer_store_format_is_refused_with_both_versions() {
    let dir = tempfile::tempdir().unwrap();
    drop(FileStore::open(dir.path()).unwrap());
    let format = dir.path().join("state/format.json");
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&format).unwrap()).unwrap();
    assert_eq!(written, json!({ "format": 5 }));

    std::fs::write(&format, r#"{"format": 7}"#).unwrap();
    let err = FileStore::open(dir.path()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported);
    let message = err.to_string();
    assert!(message.contains("format.json"), "{message}");
    assert!(
        message.contains('7') && message.contains("up to 5"),
        "{message}"
    );
}

fn order_flow(reserve: &Activity<u64, u64>, charge: &Activity<u64, u64>) -> Workflow<u64, u64> {
    let (reserve, charge) = (reserve.clone(), charge.clone());
    workflow("file-order", move |ctx: WorkflowContext, n: u64| {
        let (reserve, charge) = (reserve.clone(), charge.clone());
        async move {
            let reserved = ctx.run(&reserve, n).await?;
            ctx.sleep("1h").await?;
            let charged = ctx.run(&charge, reserved).await?;
            Ok::<_, WorkflowError>(charged)
        }
    })
}

/// A test world on a file store in `dir`, not started yet: on a directory other processes may
/// share, a world takes over only the runs of workflows it has registered, so register first.
async fn world_on(dir: &Path, start: Millis) -> TestWorld {
    let store: Arc<dyn Store> = Arc::new(FileStore::open(dir).unwrap());
    TestWorld::with_options(TestWorldOptions {
        store: Some(store),
        initial_time: start,
        autostart: false,
        ..TestWorldOptions::default()
    })
    .await
}

#[tokio::test]
async fn a_world_resumes_a_sleeping_run_from_a_reopened_file_store() {
    let dir = tempfile::tempdir().unwrap();
    let (reserved_1, charged_1) = (Counter::default(), Counter::default());
    let first = world_on(dir.path(), DEFAULT_START).await;
    let (reserve, charge) = (
        add_one("reserve", &reserved_1),
        add_one("charge", &charged_1),
    );
    first.register(&reserve).unwrap().register(&charge).unwrap();
    let flow = order_flow(&reserve, &charge);
    first.register(&flow).unwrap();
    first.world().start().await.unwrap();
    let run = first
        .execute(&flow, 1, WorkflowOptions::default())
        .await
        .unwrap();
    first.settle().await;
    assert_eq!(reserved_1.get(), 1);
    assert_eq!(run.query().await.unwrap().status, RunStatus::Running);
    let asleep_at = first.now();
    first.shutdown().await.unwrap();
    // Everything holding the first store goes, as when its process exits: a store still open
    // (even only through a handle) still drives its runs, and no other world takes them over.
    let run_id = run.id.clone();
    drop(run);
    drop(first);

    // A new store read back from disk, and a new world on it.
    let (reserved_2, charged_2) = (Counter::default(), Counter::default());
    let second = world_on(dir.path(), asleep_at + 10).await;
    let (reserve, charge) = (
        add_one("reserve", &reserved_2),
        add_one("charge", &charged_2),
    );
    second
        .register(&reserve)
        .unwrap()
        .register(&charge)
        .unwrap();
    second.register(order_flow(&reserve, &charge)).unwrap();
    second.world().start().await.unwrap();
    let state = second.run_until_complete(&run_id, "2h").await.unwrap();
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(state.output.unwrap().decode::<u64>().unwrap(), 3);
    assert_eq!(reserved_2.get(), 0, "the recorded step must not run again");
    assert_eq!((charged_1.get(), charged_2.get()), (0, 1));
    second.shutdown().await.unwrap();
    drop(second);

    // And the completion is on disk too.
    let store = FileStore::open(dir.path()).unwrap();
    let state = store.get_run(&run_id, ResolveData::None).await.unwrap();
    assert_eq!(state.status, RunStatus::Completed);
}
