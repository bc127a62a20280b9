//! Damage on disk never passes silently: every record of a run log and of the hybrid store's
//! write-ahead log carries a checksum, only a last line without its newline counts as a torn
//! write, and directories written before checksums existed are migrated.

mod common;

use common::crash_copy;

use std::fs;
use std::path::{Path, PathBuf};

use common::store_events::{completed, log_of, populate, snapshot, step, Maker};
use serde_json::json;
use worlds_engine::store::{EventStore, FileStore, HybridStore, RunStore};
use worlds_engine::{Event, ResolveData, RunStatus};

fn wal_of(dir: &Path) -> PathBuf {
    dir.join("state/wal.ndjson")
}

/// Byte offset where the last line of `bytes` starts.
fn last_line_start(bytes: &[u8]) -> usize {
    let body = &bytes[..bytes.len() - 1];
    body.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1)
}

/// Replaces the first `from` in the last line of the file with `to` (same length), keeping the
/// newline; returns where that line starts.
fn edit_last_line(path: &Path, from: &str, to: &str) -> usize {
    assert_eq!(from.len(), to.len());
    let mut bytes = fs::read(path).unwrap();
    let start = last_line_start(&bytes);
    let line = String::from_utf8(bytes[start..].to_vec()).unwrap();
    let at = line
        .find(from)
        .unwrap_or_else(|| panic!("{from:?} not in {line}"));
    bytes[start + at..start + at + from.len()].copy_from_slice(to.as_bytes());
    fs::write(path, &bytes).unwrap();
    start
}

fn assert_refused(message: &str, path: &Path, offset: usize, why: &str) {
    let name = path.file_name().unwrap().to_string_lossy();
    assert!(message.contains(name.as_ref()), "{message}");
    assert!(
        message.contains(&format!("byte offset {offset}")),
        "{message}"
    );
    assert!(message.contains(why), "{message}");
}

#[tokio::test]
async fn a_changed_byte_in_the_last_line_of_a_run_log_is_corruption_not_a_torn_write() {
    let dir = tempfile::tempdir().unwrap();
    let m = Maker::new();
    let store = FileStore::open(dir.path()).unwrap();
    let (_, _, done) = populate(&store, &m).await;
    drop(store);

    let path = log_of(dir.path(), &done);
    let before = fs::read(&path).unwrap();
    // The last event is `workflow_completed` with output "done".
    let start = edit_last_line(&path, "done", "dome");
    let edited = fs::read(&path).unwrap();

    let message = FileStore::open(dir.path()).unwrap_err().to_string();
    assert_refused(&message, &path, start, "checksum");
    let message = FileStore::open_read_only(dir.path())
        .unwrap_err()
        .to_string();
    assert_refused(&message, &path, start, "checksum");
    // Left untouched, so the damage can be looked at and repaired.
    assert_eq!(fs::read(&path).unwrap(), edited);
    assert_ne!(edited, before);
}

#[tokio::test]
async fn an_edited_step_output_is_refused_by_its_checksum() {
    let dir = tempfile::tempdir().unwrap();
    let m = Maker::new();
    let store = FileStore::open(dir.path()).unwrap();
    let run = m.create(&store, "w", "wf").await;
    let mut kinds = vec![common::store_events::started()];
    kinds.extend(step(21));
    m.append(&store, &run, kinds).await;
    m.append(&store, &run, vec![completed()]).await;
    drop(store);

    // The step's output {"out":21} is on the line before the last.
    let path = log_of(dir.path(), &run);
    let text = fs::read_to_string(&path).unwrap();
    let line_start = text.find(r#"{"out":21}"#).unwrap();
    let line_start = text[..line_start].rfind('\n').map_or(0, |i| i + 1);
    fs::write(&path, text.replacen(r#"{"out":21}"#, r#"{"out":31}"#, 1)).unwrap();

    let message = FileStore::open(dir.path()).unwrap_err().to_string();
    assert_refused(&message, &path, line_start, "checksum mismatch");
}

#[tokio::test]
async fn damage_in_the_hybrid_wal_is_refused_and_only_a_line_without_newline_is_torn() {
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("live");
    let m = Maker::new();
    let store = HybridStore::open(&live).unwrap();
    let (_, running, done) = populate(&store, &m).await;
    m.append(&store, &running, vec![completed()]).await;
    let before = snapshot(&store, &[&running, &done]).await;

    // A whole last line with one byte changed: refused, naming the WAL and the offset.
    let edited = dir.path().join("edited");
    crash_copy(&live, &edited);
    let start = edit_last_line(&wal_of(&edited), "done", "dome");
    let message = HybridStore::open(&edited).unwrap_err().to_string();
    assert_refused(&message, &wal_of(&edited), start, "checksum");
    // The read-only view refuses it too.
    let message = FileStore::open_read_only(&edited).unwrap_err().to_string();
    assert_refused(&message, &wal_of(&edited), start, "checksum");

    // The same last line without its newline is a torn write: dropped, the rest comes back.
    let torn = dir.path().join("torn");
    crash_copy(&live, &torn);
    let wal = fs::read(wal_of(&torn)).unwrap();
    fs::write(wal_of(&torn), &wal[..wal.len() - 1]).unwrap();
    let reopened = HybridStore::open(&torn).unwrap();
    let state = reopened.get_run(&running, ResolveData::None).await.unwrap();
    assert_eq!(state.status, RunStatus::Running, "the completion was torn");
    assert_eq!(snapshot(&reopened, &[&done]).await[0], before[1]);
    drop(store);
}

/// A line as store format 3 wrote it: the event's JSON, no checksum.
fn format_3_line(event: &Event) -> String {
    serde_json::to_string(event).unwrap() + "\n"
}

#[tokio::test]
async fn a_format_3_directory_is_read_as_it_is_and_migrated_when_opened_for_writing() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    fs::create_dir_all(root.join("workflows")).unwrap();
    fs::create_dir_all(root.join("state")).unwrap();
    fs::write(root.join("state/format.json"), r#"{"format":3}"#).unwrap();
    let m = Maker::new();
    let run = m.ids.run_id();
    let mut events = vec![m.queued(&run, "w", "order-7")];
    for kind in [common::store_events::started()].into_iter().chain(step(0)) {
        events.push(m.event(&run, kind));
    }
    for (seq, event) in events.iter_mut().enumerate() {
        event.seq = seq as u64;
    }
    let log: String = events.iter().map(format_3_line).collect();
    fs::write(log_of(root, &run), &log).unwrap();
    // A second run only in a format 3 WAL (a hybrid world that stopped before compacting).
    let in_wal = m.ids.run_id();
    let mut queued = m.queued(&in_wal, "w", "order-8");
    queued.seq = 0;
    fs::write(wal_of(root), format_3_line(&queued)).unwrap();

    // Read-only: read as it is (no checksums to check), nothing written, a warning given.
    let store = FileStore::open_read_only(root).unwrap();
    assert!(
        store.warnings().iter().any(|w| w.contains("format 3")),
        "{:?}",
        store.warnings()
    );
    assert_eq!(store.history(&run, 0).await.unwrap().len(), events.len());
    assert_eq!(store.wal_summary().pending, 1);
    assert_eq!(fs::read_to_string(log_of(root, &run)).unwrap(), log);
    drop(store);

    // Opened for writing: migrated, every line given its checksum, nothing else changed.
    let store = HybridStore::open(root).unwrap();
    let history = store.history(&run, 0).await.unwrap();
    assert_eq!(
        history.iter().map(|e| (**e).clone()).collect::<Vec<_>>(),
        events
    );
    assert_eq!(store.history(&in_wal, 0).await.unwrap()[0].id, queued.id);
    drop(store);
    let format: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(root.join("state/format.json")).unwrap()).unwrap();
    assert_eq!(format, json!({ "format": 5 }));
    let checksummed = |path: &Path| {
        let text = fs::read_to_string(path).unwrap();
        assert!(!text.is_empty(), "{}", path.display());
        for line in text.lines() {
            let value: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(value["crc"].as_str().map(str::len), Some(8), "{line}");
        }
    };
    // The WAL's run was compacted into a segment; the run log stayed where it was.
    checksummed(&root.join("segments/0000000001.ndjson"));
    checksummed(&log_of(root, &run));
    // In file mode the segment's records move into run logs of their own.
    let store = FileStore::open(root).unwrap();
    assert_eq!(store.history(&in_wal, 0).await.unwrap()[0].id, queued.id);
    assert!(!root.join("segments/0000000001.ndjson").exists());
    checksummed(&log_of(root, &in_wal));
}

#[tokio::test]
async fn a_record_without_its_checksum_is_refused_in_a_format_4_directory() {
    let dir = tempfile::tempdir().unwrap();
    let m = Maker::new();
    let store = FileStore::open(dir.path()).unwrap();
    let run = m.create(&store, "w", "wf").await;
    drop(store);
    let path = log_of(dir.path(), &run);
    let text = fs::read_to_string(&path).unwrap();
    let line = text.lines().next().unwrap();
    let event: Event = serde_json::from_str(line).unwrap();
    let mut stripped = serde_json::to_string(&event).unwrap();
    stripped.push('\n');
    fs::write(&path, &stripped).unwrap();
    let message = FileStore::open(dir.path()).unwrap_err().to_string();
    assert_refused(&message, &path, 0, "no checksum");
}
