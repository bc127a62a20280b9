//! The hybrid store's durability: every acknowledged write is in the shared write-ahead log
//! (group-committed) and comes back after a crash, with or without compaction; a crash mid-
//! compaction leaves no duplicates; a torn WAL tail is cut off; the directory is locked.

mod common;

use common::crash_copy;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::store_events::{log_of, populate, snapshot, started, step, Maker};
use worlds_engine::prelude::*;
use worlds_engine::store::{EventStore, FileStore, HybridStore, RunStore};
use worlds_engine::{ErrorKind, Event, EventKind, ResolveData};

fn wal_of(dir: &Path) -> PathBuf {
    dir.join("state/wal.ndjson")
}

fn segment_of(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("segments/{number:010}.ndjson"))
}

fn assert_dense(history: &[Arc<Event>]) {
    for (i, event) in history.iter().enumerate() {
        assert_eq!(event.seq, i as u64, "{history:?}");
    }
}

#[tokio::test]
async fn the_wal_alone_brings_everything_back_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("live");
    let crashed = dir.path().join("crashed");
    let m = Maker::new();
    let store = HybridStore::open(&live).unwrap();
    let (a, b, c) = populate(&store, &m).await;
    let before = snapshot(&store, &[&a, &b, &c]).await;
    crash_copy(&live, &crashed);
    drop(store);
    // Nothing was compacted: the run logs do not exist yet, the WAL holds everything.
    assert!(!log_of(&crashed, &a).exists());
    assert!(fs::metadata(wal_of(&crashed)).unwrap().len() > 0);

    let reopened = HybridStore::open(&crashed).unwrap();
    assert_eq!(snapshot(&reopened, &[&a, &b, &c]).await, before);
    // Opening compacted the WAL into a segment (no file per run).
    assert_eq!(fs::metadata(wal_of(&crashed)).unwrap().len(), 0);
    assert!(!log_of(&crashed, &a).exists());
    assert!(fs::metadata(segment_of(&crashed, 1)).unwrap().len() > 0);
    drop(reopened);
    let again = HybridStore::open(&crashed).unwrap();
    assert_eq!(snapshot(&again, &[&a, &b, &c]).await, before);
}

#[tokio::test]
async fn everything_comes_back_after_compaction_and_more_writes() {
    let dir = tempfile::tempdir().unwrap();
    let m = Maker::new();
    let store = HybridStore::open(dir.path()).unwrap();
    let (a, b, c) = populate(&store, &m).await;
    assert_eq!(store.compact().unwrap(), 1 + 1 + 1 + 3 + 1 + 5);
    assert_eq!(fs::metadata(wal_of(dir.path())).unwrap().len(), 0);
    assert_eq!(store.compact().unwrap(), 0, "nothing left to move");
    // Writes after compaction go to the WAL, on top of the run logs.
    m.append(&store, &b, step(1)).await;
    let d = m.create(&store, "w", "wf-after").await;
    let before = snapshot(&store, &[&a, &b, &c, &d]).await;
    let crashed = tempfile::tempdir().unwrap();
    crash_copy(dir.path(), crashed.path());
    drop(store);

    let reopened = HybridStore::open(crashed.path()).unwrap();
    assert_eq!(snapshot(&reopened, &[&a, &b, &c, &d]).await, before);
    drop(reopened);
    // A clean drop compacts too.
    let reopened = HybridStore::open(dir.path()).unwrap();
    assert_eq!(fs::metadata(wal_of(dir.path())).unwrap().len(), 0);
    assert_eq!(snapshot(&reopened, &[&a, &b, &c, &d]).await, before);
}

#[tokio::test]
async fn a_crash_mid_compaction_leaves_no_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let m = Maker::new();
    let store = HybridStore::open(dir.path()).unwrap();
    let (a, b, c) = populate(&store, &m).await;
    let before = snapshot(&store, &[&a, &b, &c]).await;
    let crashed = tempfile::tempdir().unwrap();
    crash_copy(dir.path(), crashed.path());
    drop(store);

    // A compaction of a build before segments (which moved records into run logs) got
    // part-way: run a's log is complete, run b's has its first two events, run c's was never
    // written. The WAL was not truncated.
    let wal = fs::read_to_string(wal_of(crashed.path())).unwrap();
    let lines_of = |run: &str| -> Vec<String> {
        wal.lines()
            .filter(|l| serde_json::from_str::<Event>(l).unwrap().run_id == run)
            .map(|l| format!("{l}\n"))
            .collect()
    };
    fs::write(log_of(crashed.path(), &a), lines_of(&a).concat()).unwrap();
    fs::write(log_of(crashed.path(), &b), lines_of(&b)[..2].concat()).unwrap();

    let reopened = HybridStore::open(crashed.path()).unwrap();
    let after = snapshot(&reopened, &[&a, &b, &c]).await;
    assert_eq!(after, before);
    for (_, history) in &after {
        assert_dense(history);
    }
    // What the logs lacked went to a segment, once: the logs and the segment hold each
    // record exactly once between them.
    let log_b = fs::read_to_string(log_of(crashed.path(), &b)).unwrap();
    assert_eq!(log_b.lines().count(), 2);
    let segment = fs::read_to_string(segment_of(crashed.path(), 1)).unwrap();
    let expected: String = [&lines_of(&b)[2..], &lines_of(&c)[..]].concat().concat();
    let mut moved: Vec<&str> = segment.lines().collect();
    let mut want: Vec<&str> = expected.lines().collect();
    moved.sort_unstable();
    want.sort_unstable();
    assert_eq!(moved, want);
    drop(reopened);
    let again = HybridStore::open(crashed.path()).unwrap();
    assert_eq!(snapshot(&again, &[&a, &b, &c]).await, before);
}

#[tokio::test]
async fn a_crash_mid_copy_into_a_segment_leaves_no_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let m = Maker::new();
    let store = HybridStore::open(dir.path()).unwrap();
    let (a, b, c) = populate(&store, &m).await;
    let before = snapshot(&store, &[&a, &b, &c]).await;
    let crashed = tempfile::tempdir().unwrap();
    crash_copy(dir.path(), crashed.path());
    drop(store);

    // The compaction had copied the first half of the WAL and part of the next line into the
    // segment when the process died; the WAL still holds every line.
    let wal = fs::read(wal_of(crashed.path())).unwrap();
    let ends: Vec<usize> = wal
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .map(|(i, _)| i + 1)
        .collect();
    let half = ends[ends.len() / 2];
    let mut copied = wal[..half].to_vec();
    copied.extend_from_slice(&wal[half..half + 20]);
    fs::write(segment_of(crashed.path(), 1), &copied).unwrap();

    let reopened = HybridStore::open(crashed.path()).unwrap();
    let after = snapshot(&reopened, &[&a, &b, &c]).await;
    assert_eq!(after, before);
    for (_, history) in &after {
        assert_dense(history);
    }
    // The torn piece was cut off and the rest copied once: the segment is the WAL's lines.
    assert_eq!(fs::read(segment_of(crashed.path(), 1)).unwrap(), wal);
    assert_eq!(fs::metadata(wal_of(crashed.path())).unwrap().len(), 0);
    drop(reopened);
    let again = HybridStore::open(crashed.path()).unwrap();
    assert_eq!(snapshot(&again, &[&a, &b, &c]).await, before);
}

#[tokio::test]
async fn a_torn_line_in_an_older_segment_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let m = Maker::new();
    let store = HybridStore::open(dir.path()).unwrap();
    populate(&store, &m).await;
    store.compact().unwrap();
    drop(store);
    // Only the newest segment is ever appended to: a cut-short line in an older one is damage.
    let first = fs::read(segment_of(dir.path(), 1)).unwrap();
    fs::write(segment_of(dir.path(), 1), &first[..first.len() - 5]).unwrap();
    fs::write(segment_of(dir.path(), 2), b"").unwrap();
    let err = HybridStore::open(dir.path()).unwrap_err().to_string();
    assert!(err.contains("0000000001.ndjson"), "{err}");
    assert!(err.contains("incomplete line"), "{err}");
    // Nothing was changed: the damaged file is as it was.
    assert_eq!(
        fs::read(segment_of(dir.path(), 1)).unwrap().len(),
        first.len() - 5
    );
}

#[tokio::test]
async fn file_mode_moves_segments_and_the_wal_into_run_logs() {
    let dir = tempfile::tempdir().unwrap();
    let m = Maker::new();
    let store = HybridStore::open(dir.path()).unwrap();
    let (a, b, c) = populate(&store, &m).await;
    store.compact().unwrap();
    // More writes after the compaction: these are in the WAL only.
    m.append(&store, &b, step(1)).await;
    let before = snapshot(&store, &[&a, &b, &c]).await;
    let crashed = tempfile::tempdir().unwrap();
    crash_copy(dir.path(), crashed.path());
    drop(store);
    assert!(fs::metadata(wal_of(crashed.path())).unwrap().len() > 0);
    assert!(segment_of(crashed.path(), 1).exists());

    // Inspection sees everything and changes nothing.
    let inspected = FileStore::open_read_only(crashed.path()).unwrap();
    assert_eq!(snapshot(&inspected, &[&a, &b, &c]).await, before);
    drop(inspected);
    assert!(segment_of(crashed.path(), 1).exists());

    let file = FileStore::open(crashed.path()).unwrap();
    assert_eq!(snapshot(&file, &[&a, &b, &c]).await, before);
    drop(file);
    assert!(!segment_of(crashed.path(), 1).exists());
    assert!(!wal_of(crashed.path()).exists());
    for (run, (_, history)) in [&a, &b, &c].into_iter().zip(&before) {
        let lines = fs::read_to_string(log_of(crashed.path(), run)).unwrap();
        assert_eq!(lines.lines().count(), history.len(), "{run}");
    }
    // And back to hybrid mode: the run logs are read as they are.
    let hybrid = HybridStore::open(crashed.path()).unwrap();
    assert_eq!(snapshot(&hybrid, &[&a, &b, &c]).await, before);
}

#[tokio::test]
async fn a_crash_after_writes_moved_to_the_next_wal_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let m = Maker::new();
    let store = HybridStore::open(dir.path()).unwrap();
    let (a, b, c) = populate(&store, &m).await;
    let before = snapshot(&store, &[&a, &b, &c]).await;
    let crashed = tempfile::tempdir().unwrap();
    crash_copy(dir.path(), crashed.path());
    drop(store);

    // A compaction began: the writes after its start went to wal.next.ndjson, and run a's log
    // was written before the crash.
    let wal = fs::read_to_string(wal_of(crashed.path())).unwrap();
    let lines: Vec<String> = wal.lines().map(|l| format!("{l}\n")).collect();
    let (old, new) = lines.split_at(lines.len() / 2);
    fs::write(wal_of(crashed.path()), old.concat()).unwrap();
    fs::write(crashed.path().join("state/wal.next.ndjson"), new.concat()).unwrap();
    let of_a: Vec<&String> = old
        .iter()
        .filter(|l| serde_json::from_str::<Event>(l).unwrap().run_id == a)
        .collect();
    if !of_a.is_empty() {
        let of_a: String = of_a.into_iter().map(String::as_str).collect();
        fs::write(log_of(crashed.path(), &a), of_a).unwrap();
    }

    let reopened = HybridStore::open(crashed.path()).unwrap();
    let after = snapshot(&reopened, &[&a, &b, &c]).await;
    assert_eq!(after, before);
    for (_, history) in &after {
        assert_dense(history);
    }
    // Opening finished the compaction: the newer writes are the WAL now.
    assert!(!crashed.path().join("state/wal.next.ndjson").exists());
    assert_eq!(
        fs::read_to_string(wal_of(crashed.path())).unwrap(),
        new.concat()
    );
    // New writes land after them, and everything survives another crash.
    m.append(&reopened, &b, step(1)).await;
    let later = snapshot(&reopened, &[&a, &b, &c]).await;
    let again = tempfile::tempdir().unwrap();
    crash_copy(crashed.path(), again.path());
    drop(reopened);
    let reopened = HybridStore::open(again.path()).unwrap();
    assert_eq!(snapshot(&reopened, &[&a, &b, &c]).await, later);
}

#[tokio::test]
async fn a_torn_wal_tail_is_cut_off_and_corruption_elsewhere_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let m = Maker::new();
    let store = HybridStore::open(dir.path()).unwrap();
    let (a, b, c) = populate(&store, &m).await;
    let before = snapshot(&store, &[&a, &b, &c]).await;
    let crashed = tempfile::tempdir().unwrap();
    crash_copy(dir.path(), crashed.path());
    drop(store);
    let good = fs::read(wal_of(crashed.path())).unwrap();

    // Corruption in the middle: refused, naming the WAL and the offset, and left in place.
    let broken = tempfile::tempdir().unwrap();
    crash_copy(crashed.path(), broken.path());
    let mut bad = good.clone();
    let first_end = bad.iter().position(|&b| b == b'\n').unwrap();
    bad.splice(first_end + 1..first_end + 1, b"not json\n".iter().copied());
    fs::write(wal_of(broken.path()), &bad).unwrap();
    let err = HybridStore::open(broken.path()).unwrap_err().to_string();
    assert!(err.contains("wal.ndjson"), "{err}");
    assert!(err.contains(&format!("offset {}", first_end + 1)), "{err}");
    assert_eq!(fs::read(wal_of(broken.path())).unwrap(), bad);

    // A torn last line (a write cut short, never acknowledged) is cut off.
    let mut wal = fs::OpenOptions::new()
        .append(true)
        .open(wal_of(crashed.path()))
        .unwrap();
    wal.write_all(br#"{"id":"evt_torn","run_id":"#).unwrap();
    drop(wal);
    let reopened = HybridStore::open(crashed.path()).unwrap();
    assert_eq!(snapshot(&reopened, &[&a, &b, &c]).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_share_fsyncs_and_are_all_durable() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(HybridStore::open(dir.path()).unwrap());
    let m = Arc::new(Maker::new());
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let store = store.clone();
            let m = m.clone();
            tokio::spawn(async move {
                let id = m.create(&*store, "w", &format!("wf-{i}")).await;
                m.append(&*store, &id, vec![started()]).await;
                for position in 0..3 {
                    m.append(&*store, &id, step(position)).await;
                }
                id
            })
        })
        .collect();
    let mut ids = Vec::new();
    for task in tasks {
        ids.push(task.await.unwrap());
    }
    let (appends, fsyncs) = store.stats();
    eprintln!(
        "group commit: {appends} appends, {fsyncs} fsyncs ({:.1} appends per fsync)",
        appends as f64 / fsyncs as f64
    );
    assert_eq!(appends, 64 * 5);
    assert!(fsyncs < appends, "{fsyncs} fsyncs for {appends} appends");

    // Every acknowledged append is durable: a crash copy taken now has all of them.
    let refs: Vec<&String> = ids.iter().collect();
    let before = snapshot(&*store, &refs).await;
    let crashed = tempfile::tempdir().unwrap();
    crash_copy(dir.path(), crashed.path());
    let reopened = HybridStore::open(crashed.path()).unwrap();
    let after = snapshot(&reopened, &refs).await;
    assert_eq!(after, before);
    for (_, history) in &after {
        assert_eq!(history.len(), 1 + 1 + 3 * 3);
        assert_dense(history);
    }
}

/// A written append is in the WAL file the moment it returns (what a crash of the process
/// leaves behind holds it), without waiting for a sync; a queued one gets there on its own
/// shortly after, or with the sync of the next waited write, whichever comes first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn written_appends_are_in_the_file_on_return_and_queued_ones_follow() {
    let dir = tempfile::tempdir().unwrap();
    let store = HybridStore::open(dir.path()).unwrap();
    let m = Maker::new();
    let id = m.create(&store, "w", "wf").await;
    let [scheduled, start, done] = <[EventKind; 3]>::try_from(step(0)).unwrap();
    store
        .append_nowait(&id, vec![m.event(&id, started()), m.event(&id, scheduled)])
        .await
        .unwrap();
    let (_, fsyncs) = store.stats();
    store
        .append_written(&id, vec![m.event(&id, start)])
        .await
        .unwrap();
    // In the file: the start and the queued records before it.
    let crashed = tempfile::tempdir().unwrap();
    crash_copy(dir.path(), crashed.path());
    let reopened = HybridStore::open(crashed.path()).unwrap();
    let history = reopened.history(&id, 0).await.unwrap();
    assert_eq!(history.len(), 4, "{history:?}");
    assert!(matches!(
        history[3].kind,
        EventKind::ActivityStarted { attempt: 1, .. }
    ));
    drop(reopened);
    // A queued record is synced and readable without anyone waiting for it.
    store
        .append_nowait(&id, vec![m.event(&id, done)])
        .await
        .unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(5), async {
        while store.history(&id, 0).await.unwrap().len() < 5 {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("the queued record became durable on its own");
    assert!(store.stats().1 > fsyncs, "a sync made it durable");
}

#[tokio::test]
async fn a_second_open_is_refused_naming_hybrid_and_the_alternatives() {
    let dir = tempfile::tempdir().unwrap();
    let store = HybridStore::open(dir.path()).unwrap();
    let err = HybridStore::open(dir.path()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    let message = err.to_string();
    assert!(message.contains("hybrid mode"), "{message}");
    assert!(message.contains("Persistence::File"), "{message}");
    assert!(message.contains("PostgreSQL"), "{message}");
    drop(store);
    HybridStore::open(dir.path()).unwrap();
}

/// A child process being spawned holds a copy of every open file until it runs its program, so
/// a store dropped and reopened at that moment finds its own old lock held for a while: the
/// reopen waits for it instead of failing.
#[test]
fn a_reopen_waits_out_a_lock_held_for_a_moment() {
    let dir = tempfile::tempdir().unwrap();
    drop(HybridStore::open(dir.path()).unwrap());
    let lock = fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join("state/lock"))
        .unwrap();
    lock.try_lock()
        .expect("nobody holds the lock after the drop");
    let holder = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(20));
        drop(lock);
    });
    HybridStore::open(dir.path()).expect("the lock was free again within a moment");
    holder.join().unwrap();
}

#[tokio::test]
async fn a_world_resumes_on_a_hybrid_store() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = WorldConfig::default();
    config.persistence = Persistence::Hybrid;
    config.persistence_path = dir.path().to_path_buf();
    let double = activity("double", |_ctx: ActivityContext, n: u64| async move {
        Ok::<_, StepError>(n * 2)
    });
    let step = double.clone();
    let flow = workflow("double", move |ctx: WorkflowContext, n: u64| {
        let step = step.clone();
        async move { Ok::<_, WorkflowError>(ctx.run(&step, n).await?) }
    });
    let run_id = {
        let world = World::new(config.clone()).unwrap();
        world.register(&double).unwrap().register(&flow).unwrap();
        world.start().await.unwrap();
        let handle = world
            .execute(&flow, 21, WorkflowOptions::default())
            .await
            .unwrap();
        assert_eq!(handle.result().await.unwrap(), 42);
        world.shutdown().await.unwrap();
        handle.id.clone()
    };
    let store = HybridStore::open(dir.path()).unwrap();
    let state = store.get_run(&run_id, ResolveData::All).await.unwrap();
    assert_eq!(state.status, worlds_engine::RunStatus::Completed);
}
