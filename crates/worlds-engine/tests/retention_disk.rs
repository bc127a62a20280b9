//! Retention on disk: a run removed from a file or hybrid store stays removed after a reopen,
//! its files go, the directory gives the space back, a crash part-way is finished by the next
//! open, and the runs that stay are untouched byte for byte.

mod common;

use std::path::Path;

use common::crash_copy;
use common::store_events::{completed, log_of, started, step, Maker};
use worlds_engine::store::{
    EventStore, FileStore, HybridStore, NewChunk, Removal, RetentionStore, RunStore, Store,
};
use worlds_engine::{ErrorKind, ResolveData};

/// Bytes of every file under `dir`.
fn bytes_under(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let meta = entry.metadata().unwrap();
        total += if meta.is_dir() {
            bytes_under(&entry.path())
        } else {
            meta.len()
        };
    }
    total
}

/// The file reserving a workflow id under `ids/`: its bytes in hex.
fn reservation(dir: &Path, workflow_id: &str) -> std::path::PathBuf {
    let hex: String = workflow_id.bytes().map(|b| format!("{b:02x}")).collect();
    dir.join("ids").join(hex)
}

/// A finished run with a workflow id of its own, a step and a stream.
async fn finished_run(store: &dyn Store, m: &Maker, workflow_id: &str) -> String {
    let run = m.create(store, "w", workflow_id).await;
    let mut kinds = vec![started()];
    kinds.extend(step(0));
    m.append(store, &run, kinds).await;
    store
        .write_chunk(
            &run,
            "progress",
            NewChunk {
                id: m.ids.event_id(),
                created_at: m.now(),
                key: None,
                data: bytes::Bytes::from_static(b"half way"),
            },
        )
        .await
        .unwrap();
    m.append(store, &run, vec![completed()]).await;
    run
}

async fn is_gone(store: &dyn Store, run: &str) -> bool {
    matches!(
        store.get_run(run, ResolveData::None).await,
        Err(e) if e.kind() == ErrorKind::NotFound
    )
}

async fn remove(store: &dyn Store, m: &Maker, run: &str) {
    let removed = store.remove_run(run, m.now() + 1).await.unwrap();
    assert!(matches!(removed, Removal::Removed { .. }), "{removed:?}");
}

#[tokio::test]
async fn file_a_removed_run_and_its_files_stay_gone_and_the_space_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let m = Maker::new();
    let store = FileStore::open(dir.path()).unwrap();
    let kept = finished_run(&store, &m, "wf-kept").await;
    let mut runs = Vec::new();
    for i in 0..20 {
        runs.push(finished_run(&store, &m, &format!("wf-{i}")).await);
    }
    let kept_log = std::fs::read(log_of(dir.path(), &kept)).unwrap();
    let kept_history = store.history(&kept, 0).await.unwrap();
    assert!(reservation(dir.path(), "wf-0").exists());
    assert!(dir.path().join("streams").join(&runs[0]).is_dir());
    let before = bytes_under(dir.path());

    for run in &runs {
        remove(&store, &m, run).await;
    }
    let after = bytes_under(dir.path());
    assert!(after * 4 < before, "{before} bytes before, {after} after");
    for (i, run) in runs.iter().enumerate() {
        assert!(is_gone(&store, run).await);
        assert!(!log_of(dir.path(), run).exists());
        assert!(!dir
            .path()
            .join("workflows")
            .join(format!("{run}.removed"))
            .exists());
        assert!(!reservation(dir.path(), &format!("wf-{i}")).exists());
        assert!(!dir.path().join("streams").join(run).exists());
        assert!(!dir.path().join("leases").join(run).exists());
    }
    drop(store);

    let store = FileStore::open(dir.path()).unwrap();
    for run in &runs {
        assert!(is_gone(&store, run).await, "{run} came back");
        assert_eq!(
            store.remove_run(run, m.now() + 1).await.unwrap(),
            Removal::Gone
        );
    }
    assert_eq!(std::fs::read(log_of(dir.path(), &kept)).unwrap(), kept_log);
    assert_eq!(store.history(&kept, 0).await.unwrap(), kept_history);
    // The workflow id is free again.
    let again = m.create(&store, "w", "wf-0").await;
    assert_eq!(
        store.get_run("wf-0", ResolveData::None).await.unwrap().id,
        again
    );
}

#[tokio::test]
async fn file_a_removal_a_crash_interrupted_is_finished_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let m = Maker::new();
    let store = FileStore::open(dir.path()).unwrap();
    let kept = finished_run(&store, &m, "wf-kept").await;
    let run = finished_run(&store, &m, "wf-gone").await;
    let kept_log = std::fs::read(log_of(dir.path(), &kept)).unwrap();
    drop(store);
    // The commit point passed, nothing else was deleted yet.
    let marker = dir.path().join("workflows").join(format!("{run}.removed"));
    std::fs::rename(log_of(dir.path(), &run), &marker).unwrap();

    let store = FileStore::open(dir.path()).unwrap();
    assert!(is_gone(&store, &run).await);
    assert!(!marker.exists());
    assert!(!reservation(dir.path(), "wf-gone").exists());
    assert!(!dir.path().join("streams").join(&run).exists());
    assert_eq!(std::fs::read(log_of(dir.path(), &kept)).unwrap(), kept_log);
    assert!(store.get_run("wf-kept", ResolveData::None).await.is_ok());
}

#[tokio::test]
async fn file_another_process_forgets_a_run_removed_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let m = Maker::new();
    let a = FileStore::open(dir.path()).unwrap();
    let b = FileStore::open(dir.path()).unwrap();
    let run = finished_run(&a, &m, "wf-shared").await;
    let other = finished_run(&a, &m, "wf-other").await;
    // B has both loaded.
    assert!(b.get_run(&run, ResolveData::None).await.is_ok());
    assert!(b.get_run(&other, ResolveData::None).await.is_ok());

    remove(&a, &m, &run).await;
    // A read by id finds it gone, and so does an append (which never reaches the file).
    assert!(is_gone(&b, &run).await);
    let err = b
        .append(&run, vec![m.event(&run, started())])
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    // An append racing the removal from the other process is refused the same way.
    let _ = b.get_run(&other, ResolveData::None).await.unwrap();
    remove(&a, &m, &other).await;
    let err = b
        .append(&other, vec![m.event(&other, started())])
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert_eq!(
        b.remove_run(&other, m.now() + 1).await.unwrap(),
        Removal::Gone
    );
    assert!(!log_of(dir.path(), &other).exists());
}

#[tokio::test]
async fn hybrid_a_removed_run_stays_gone_before_and_after_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let m = Maker::new();
    let store = HybridStore::open(dir.path()).unwrap();
    let kept = finished_run(&store, &m, "wf-kept").await;
    let early = finished_run(&store, &m, "wf-early").await;
    store.compact().unwrap();
    let late = finished_run(&store, &m, "wf-late").await;
    let kept_history = store.history(&kept, 0).await.unwrap();
    // One run's records in a segment, the other's in the WAL; both tombstones in the WAL.
    remove(&store, &m, &early).await;
    remove(&store, &m, &late).await;
    assert!(!dir.path().join("streams").join(&early).exists());
    assert!(!dir.path().join("streams").join(&late).exists());

    // Before compaction: a crash copy holds the tombstones in the WAL only.
    let crashed = tempfile::tempdir().unwrap();
    crash_copy(dir.path(), crashed.path());
    drop(store);
    for path in [dir.path(), crashed.path()] {
        let store = HybridStore::open(path).unwrap();
        assert!(is_gone(&store, &early).await);
        assert!(is_gone(&store, &late).await);
        assert_eq!(store.history(&kept, 0).await.unwrap(), kept_history);
        drop(store);
        // After the compaction of that open: the tombstones are in a segment.
        let store = HybridStore::open(path).unwrap();
        assert!(is_gone(&store, &early).await);
        assert!(is_gone(&store, &late).await);
        assert_eq!(store.history(&kept, 0).await.unwrap(), kept_history);
        drop(store);
        // A file store folding the directory gives them no log.
        let file = FileStore::open(path).unwrap();
        assert!(is_gone(&file, &early).await);
        assert!(is_gone(&file, &late).await);
        assert!(!log_of(path, &early).exists());
        assert!(!log_of(path, &late).exists());
        assert_eq!(file.history(&kept, 0).await.unwrap(), kept_history);
    }
}

#[tokio::test]
async fn hybrid_streams_left_by_a_crash_after_the_tombstone_go_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let m = Maker::new();
    let store = HybridStore::open(dir.path()).unwrap();
    let run = finished_run(&store, &m, "wf-gone").await;
    let streams = dir.path().join("streams").join(&run);
    let saved = tempfile::tempdir().unwrap();
    crash_copy(&streams, saved.path());
    store.compact().unwrap();
    remove(&store, &m, &run).await;
    // The crash: the tombstone is in the WAL, the run's records in a segment, its streams
    // still on disk.
    let crashed = tempfile::tempdir().unwrap();
    crash_copy(dir.path(), crashed.path());
    crash_copy(saved.path(), &crashed.path().join("streams").join(&run));
    drop(store);

    let store = HybridStore::open(crashed.path()).unwrap();
    assert!(is_gone(&store, &run).await);
    assert!(!crashed.path().join("streams").join(&run).exists());
}

#[tokio::test]
async fn hybrid_an_interrupted_compaction_is_cut_off_so_a_removed_run_stays_gone() {
    let dir = tempfile::tempdir().unwrap();
    let m = Maker::new();
    let store = HybridStore::open(dir.path()).unwrap();
    let kept = finished_run(&store, &m, "wf-kept").await;
    store.compact().unwrap();
    let run = finished_run(&store, &m, "wf-gone").await;
    remove(&store, &m, &run).await;
    let kept_history = store.history(&kept, 0).await.unwrap();
    let crashed = tempfile::tempdir().unwrap();
    crash_copy(dir.path(), crashed.path());
    drop(store);

    // What a crash mid-compaction leaves: the mark, the WAL's records (the run's and its
    // tombstone) appended to the segment, and the second WAL file.
    let root = crashed.path();
    let segment = root.join("segments").join(format!("{:010}.ndjson", 1));
    let len = std::fs::metadata(&segment).unwrap().len();
    std::fs::write(
        root.join("state/compacting.json"),
        format!(r#"{{"segment":1,"len":{len}}}"#),
    )
    .unwrap();
    let wal = std::fs::read(root.join("state/wal.ndjson")).unwrap();
    assert!(String::from_utf8_lossy(&wal).contains("\"removed\""));
    let mut copied = std::fs::read(&segment).unwrap();
    copied.extend_from_slice(&wal);
    std::fs::write(&segment, copied).unwrap();
    std::fs::write(root.join("state/wal.next.ndjson"), b"").unwrap();

    let store = HybridStore::open(root).unwrap();
    assert!(is_gone(&store, &run).await);
    assert_eq!(store.history(&kept, 0).await.unwrap(), kept_history);
    drop(store);
    let store = HybridStore::open(root).unwrap();
    assert!(is_gone(&store, &run).await);
    assert!(!root.join("state/compacting.json").exists());
    assert!(!root.join("state/wal.next.ndjson").exists());
}

#[tokio::test]
async fn hybrid_a_run_id_removed_and_created_again_is_the_new_run_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let m = Maker::new();
    let store = HybridStore::open(dir.path()).unwrap();
    let run = finished_run(&store, &m, "wf-first").await;
    store.compact().unwrap();
    remove(&store, &m, &run).await;
    store
        .create_run(m.queued(&run, "w", "wf-second"))
        .await
        .unwrap();
    m.append(&store, &run, vec![started()]).await;
    let history = store.history(&run, 0).await.unwrap();
    drop(store);
    let store = HybridStore::open(dir.path()).unwrap();
    assert_eq!(store.history(&run, 0).await.unwrap(), history);
    assert!(is_gone(&store, "wf-first").await);
    drop(store);
    let file = FileStore::open(dir.path()).unwrap();
    assert_eq!(file.history(&run, 0).await.unwrap(), history);
}
