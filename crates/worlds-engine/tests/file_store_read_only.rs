//! The file store's read-only mode: it loads what `open` loads, writes nothing, reports a torn
//! last line instead of cutting it off, and refuses writes.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};

use common::store_events::{log_of, started, Maker};
use worlds_engine::store::{EventStore, FileStore, RunStore};
use worlds_engine::{ErrorKind, EventKind, ResolveData, RunStatus, WorkflowQueryFilter};

/// A run that has started.
async fn create_started(store: &FileStore, m: &Maker, workflow_id: &str) -> String {
    let id = m.create(store, "w", workflow_id).await;
    m.append(store, &id, vec![started()]).await;
    id
}

/// Every file under `dir` with its contents.
fn tree(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                out.push((path.clone(), Vec::new()));
                stack.push(path);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                out.push((path, bytes));
            }
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn a_read_only_store_sees_every_run_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let m = Maker::new();
    let store = FileStore::open(dir.path()).unwrap();
    let run = create_started(&store, &m, "wf-1").await;
    let before = store.get_run(&run, ResolveData::All).await.unwrap();
    // The writer stays open: inspection works beside a running world.
    let files = tree(dir.path());

    let reader = FileStore::open_read_only(dir.path()).unwrap();
    assert!(reader.is_read_only());
    assert!(!store.is_read_only());
    assert!(reader.warnings().is_empty(), "{:?}", reader.warnings());
    assert_eq!(
        reader.get_run("wf-1", ResolveData::All).await.unwrap(),
        before
    );
    let page = reader.list_runs(&WorkflowQueryFilter::new()).await.unwrap();
    assert_eq!(page.data.len(), 1);
    assert_eq!(page.data[0].status, RunStatus::Running);

    let err = reader
        .append(
            &run,
            vec![m.event(&run, EventKind::TimerFired { position: 0 })],
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported);
    assert!(err.to_string().contains("read-only"), "{err}");
    let other = m.ids.run_id();
    let err = reader
        .create_run(m.queued(&other, "w", "wf-2"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported);
    assert!(err.to_string().contains("read-only"), "{err}");
    assert_eq!(tree(dir.path()), files);
}

#[test]
fn a_missing_directory_is_a_clear_error_and_is_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nothing-here");
    let err = FileStore::open_read_only(&missing).unwrap_err();
    assert!(
        err.to_string()
            .contains(&format!("no worlds-engine data in {}", missing.display())),
        "{err}"
    );
    assert!(!missing.exists());
    // An existing directory without a store is refused the same way, and left empty.
    let err = FileStore::open_read_only(dir.path()).unwrap_err();
    assert!(err.to_string().contains("no worlds-engine data"), "{err}");
    assert!(tree(dir.path()).is_empty());
}

#[tokio::test]
async fn a_torn_tail_is_reported_and_left_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let m = Maker::new();
    let store = FileStore::open(dir.path()).unwrap();
    let run = create_started(&store, &m, "wf-1").await;
    drop(store);
    let path = log_of(dir.path(), &run);
    let good_len = std::fs::metadata(&path).unwrap().len();
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    file.write_all(b"{\"id\":\"evnt_half").unwrap();
    drop(file);
    let torn = std::fs::read(&path).unwrap();

    let reader = FileStore::open_read_only(dir.path()).unwrap();
    let warnings = reader.warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains(&path.display().to_string()));
    assert!(warnings[0].contains(&format!("byte offset {good_len}")));
    assert_eq!(reader.history(&run, 0).await.unwrap().len(), 2);
    assert_eq!(std::fs::read(&path).unwrap(), torn);
    drop(reader);

    // Opening for writing still repairs it, and reports nothing afterwards.
    let store = FileStore::open(dir.path()).unwrap();
    assert!(store.warnings().is_empty());
    drop(store);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), good_len);
    assert!(FileStore::open_read_only(dir.path())
        .unwrap()
        .warnings()
        .is_empty());
}

#[tokio::test]
async fn corruption_is_refused_with_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let m = Maker::new();
    let store = FileStore::open(dir.path()).unwrap();
    let run = create_started(&store, &m, "wf-1").await;
    drop(store);
    let path = log_of(dir.path(), &run);
    let text = std::fs::read_to_string(&path).unwrap();
    let first_len = text.find('\n').unwrap() + 1;
    let corrupted = format!("{}garbage\n{}", &text[..first_len], &text[first_len..]);
    std::fs::write(&path, &corrupted).unwrap();

    let err = FileStore::open_read_only(dir.path()).unwrap_err();
    let message = err.to_string();
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(
        message.contains(&format!("byte offset {first_len}")),
        "{message}"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), corrupted);
}

#[tokio::test]
async fn a_missing_format_file_is_a_warning_and_a_newer_format_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let m = Maker::new();
    let store = FileStore::open(dir.path()).unwrap();
    create_started(&store, &m, "wf-1").await;
    drop(store);
    let format = dir.path().join("state/format.json");

    std::fs::remove_file(&format).unwrap();
    let reader = FileStore::open_read_only(dir.path()).unwrap();
    assert_eq!(reader.warnings().len(), 1);
    assert!(reader.warnings()[0].contains("format.json"));
    assert!(!format.exists());

    std::fs::write(&format, br#"{"format": 99}"#).unwrap();
    let err = FileStore::open_read_only(dir.path()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported);
}
