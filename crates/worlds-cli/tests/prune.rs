//! `worlds runs prune` as a user runs it: the built binary on directories written by the engine
//! (file and hybrid), a preview first, then the sweep, then nothing left to do.

mod common;

use common::{text, worlds};

use std::path::Path;
use std::sync::Arc;

use serde_json::json;
use worlds_engine::clock::{Clock, VirtualClock};
use worlds_engine::ids::IdGenerator;
use worlds_engine::model::EVENT_FORMAT_VERSION;
use worlds_engine::store::{FileStore, HybridStore, Store};
use worlds_engine::{Event, EventKind, Payload};

/// In a store under `dir` (hybrid if `hybrid`): `done` runs that completed in 2023, one failed
/// then, and one still pending. Returns (completed ids, failed id, pending id).
fn populate(dir: &Path, hybrid: bool, done: usize) -> (Vec<String>, String, String) {
    let store: Box<dyn Store> = if hybrid {
        Box::new(HybridStore::open(dir).unwrap())
    } else {
        Box::new(FileStore::open(dir).unwrap())
    };
    populate_in(store, done)
}

fn listed(dir: &Path) -> Vec<String> {
    let output = worlds(&["runs", "list", "--json", "--limit", "1000"], dir);
    assert!(output.status.success(), "{}", text(&output.stderr));
    text(&output.stdout)
        .lines()
        .map(|line| {
            let run: serde_json::Value = serde_json::from_str(line).unwrap();
            run["id"].as_str().unwrap().to_owned()
        })
        .collect()
}

fn sweeps_on(hybrid: bool) {
    let dir = tempfile::tempdir().unwrap();
    let (completed, failed, pending) = populate(dir.path(), hybrid, 30);

    // The doctor sees finished runs piling up with no sweep ever run.
    let output = worlds(&["doctor"], dir.path());
    assert!(output.status.success(), "{}", text(&output.stderr));
    let said = text(&output.stdout);
    assert!(
        said.contains("note: 31 finished run(s) ended over 30 days ago"),
        "{said}"
    );
    assert!(said.contains("grows without bound"), "{said}");

    // No policy, or one that keeps everything: refused, with what to say instead.
    let output = worlds(&["runs", "prune"], dir.path());
    assert!(!output.status.success());
    let error = text(&output.stderr);
    assert!(error.contains("--keep-completed"), "{error}");
    let output = worlds(&["runs", "prune", "--keep-completed", "0s"], dir.path());
    assert!(!output.status.success());
    assert!(text(&output.stderr).contains("for ever"));

    // The preview removes nothing and says how much would go.
    let output = worlds(
        &["runs", "prune", "--keep-completed", "7d", "--dry-run"],
        dir.path(),
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    let said = text(&output.stdout);
    assert!(said.contains("would remove 30 run(s)"), "{said}");
    assert!(said.contains("KiB") || said.contains("bytes"), "{said}");
    assert_eq!(listed(dir.path()).len(), 32);

    // The sweep: completed runs go; the failed (kept for ever) and the pending stay.
    let output = worlds(
        &["runs", "prune", "--keep-completed", "7d", "--json"],
        dir.path(),
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    let report: serde_json::Value = serde_json::from_str(text(&output.stdout).trim()).unwrap();
    assert_eq!(report["removed"], 30, "{report}");
    assert_eq!(report["events"], 90, "{report}");
    assert_eq!(report["done"], true);
    let left = listed(dir.path());
    assert!(
        left.contains(&failed) && left.contains(&pending),
        "{left:?}"
    );
    assert!(!completed.iter().any(|id| left.contains(id)), "{left:?}");
    let output = worlds(&["runs", "show", &completed[0]], dir.path());
    assert!(!output.status.success());
    let said = text(&worlds(&["doctor"], dir.path()).stdout);
    assert!(said.contains("retention: last sweep wrun_"), "{said}");
    assert!(!said.contains("grows without bound"), "{said}");

    // Nothing left to do; the failed run goes once its own class has a duration.
    let output = worlds(
        &["runs", "prune", "--keep-completed", "7d", "--json"],
        dir.path(),
    );
    let report: serde_json::Value = serde_json::from_str(text(&output.stdout).trim()).unwrap();
    assert_eq!(report["removed"], 0, "{report}");
    let output = worlds(
        &["runs", "prune", "--keep-failed", "30d", "--json"],
        dir.path(),
    );
    let report: serde_json::Value = serde_json::from_str(text(&output.stdout).trim()).unwrap();
    // The failed run, and the first sweep (a completed run of the built-in workflow) is kept:
    // only failed runs have a duration here.
    assert_eq!(report["removed"], 1, "{report}");
    let left = listed(dir.path());
    assert!(
        !left.contains(&failed) && left.contains(&pending),
        "{left:?}"
    );
}

#[test]
fn prune_previews_then_sweeps_a_file_directory() {
    sweeps_on(false);
}

#[test]
fn prune_previews_then_sweeps_a_hybrid_directory() {
    sweeps_on(true);
}

/// Counts the tombstones (one per removed run) in a hybrid directory's WAL files and segments.
fn tombstones(dir: &Path) -> usize {
    let mut files: Vec<std::path::PathBuf> = ["wal.ndjson", "wal.next.ndjson"]
        .iter()
        .map(|name| dir.join("state").join(name))
        .collect();
    if let Ok(segments) = std::fs::read_dir(dir.join("segments")) {
        files.extend(segments.flatten().map(|entry| entry.path()));
    }
    files
        .iter()
        .filter_map(|path| std::fs::read(path).ok())
        .map(|bytes| {
            bytes
                .split(|b| *b == b'\n')
                .filter(|line| line.starts_with(b"{\"removed\":"))
                .count()
        })
        .sum()
}

/// A sweep killed with SIGKILL halfway through loses nothing unfinished, and the next one
/// finishes the job: every completed run removed exactly once (one tombstone each).
#[test]
fn a_sweep_killed_halfway_is_finished_by_the_next_and_removes_each_run_once() {
    const DONE: usize = 2_000;
    let dir = tempfile::tempdir().unwrap();
    let (completed, failed, pending) = populate(dir.path(), true, DONE);

    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_worlds"))
        .args(["runs", "prune", "--keep-completed", "7d", "--json", "--dir"])
        .arg(dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let mut seen = 0;
    while started.elapsed() < std::time::Duration::from_secs(120) {
        seen = tombstones(dir.path());
        if seen >= 200 || child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let before = tombstones(dir.path());
    assert!(before >= 200, "the sweep got going: {seen} tombstones");
    assert!(before < DONE, "killed halfway, not at the end: {before}");

    // The next sweep (it also resumes the killed one) finishes the job.
    let output = worlds(
        &["runs", "prune", "--keep-completed", "7d", "--json"],
        dir.path(),
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    let left = listed(dir.path());
    assert!(
        left.contains(&failed) && left.contains(&pending),
        "{left:?}"
    );
    let completed_left = completed.iter().filter(|id| left.contains(id)).count();
    assert_eq!(completed_left, 0);
    // One tombstone per completed run, and one for the first (killed) sweep's run if the
    // second sweep found it finished and old enough (it is not: it ended just now).
    assert_eq!(tombstones(dir.path()), DONE, "each run removed once");
}

/// [`populate`]'s runs in `store`: created and ended concurrently, so that a hybrid store
/// groups their writes into few syncs.
fn populate_in(store: Box<dyn Store>, done: usize) -> (Vec<String>, String, String) {
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
    let queued = |name: &str| {
        EventKind::WorkflowQueued(Box::new(worlds_engine::model::QueuedRun::new(
            name.to_owned(),
            ids.run_id(),
            Payload::from(json!("world")),
        )))
    };
    let completed: Vec<String> = (0..done).map(|_| ids.run_id()).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (failed, pending) = runtime.block_on(async {
        for chunk in completed.chunks(500) {
            let firsts = chunk.iter().map(|id| event(id, queued("greet"))).collect();
            for created in store.create_runs(firsts).await {
                created.unwrap();
            }
            let ends = chunk.iter().map(|id| {
                let events = vec![
                    event(
                        id,
                        EventKind::WorkflowStarted {
                            attempt: 1,
                            first_position: 0,
                        },
                    ),
                    event(
                        id,
                        EventKind::WorkflowCompleted {
                            output: Payload::from(json!("hello")),
                        },
                    ),
                ];
                store.append(id, events)
            });
            for ended in futures::future::join_all(ends).await {
                ended.unwrap();
            }
        }
        let failed = ids.run_id();
        store
            .create_run(event(&failed, queued("greet")))
            .await
            .unwrap();
        let end = EventKind::WorkflowFailed {
            error: worlds_engine::StructuredError::new("boom"),
        };
        store
            .append(&failed, vec![event(&failed, end)])
            .await
            .unwrap();
        let pending = ids.run_id();
        store
            .create_run(event(&pending, queued("greet")))
            .await
            .unwrap();
        (failed, pending)
    });
    drop(store);
    (completed, failed, pending)
}

/// Runs `worlds ARGS` (no `--dir` added) with extra environment variables.
fn worlds_env(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_worlds"));
    command
        .args(args)
        .env_remove("WORLDS_ENGINE_ENCRYPTION_KEYS");
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().unwrap()
}

/// The archive file a sweep wrote in `dir`.
fn archive_in(dir: &Path) -> std::path::PathBuf {
    let files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|entry| entry.path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(files[0].to_string_lossy().ends_with(".ndjson.gz"));
    files[0].clone()
}

/// A sweep with an archive directory writes every run it removes there first (sealed when the
/// world has keys); the archive lists and shows them, and imports them into another world.
#[test]
fn swept_runs_are_archived_shown_and_imported_back() {
    let dir = tempfile::tempdir().unwrap();
    let archive = tempfile::tempdir().unwrap();
    let (completed, _, _) = populate(dir.path(), true, 12);
    let keys = format!("k1:{}", "ab".repeat(32));
    let with_keys = [("WORLDS_ENGINE_ENCRYPTION_KEYS", keys.as_str())];
    let dir_arg = dir.path().to_str().unwrap();
    let archive_arg = archive.path().to_str().unwrap();
    let output = worlds_env(
        &[
            "runs",
            "prune",
            "--keep-completed",
            "7d",
            "--archive-dir",
            archive_arg,
            "--json",
            "--dir",
            dir_arg,
        ],
        &with_keys,
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    let report: serde_json::Value = serde_json::from_str(text(&output.stdout).trim()).unwrap();
    assert_eq!(
        (report["removed"].as_u64(), report["archived"].as_u64()),
        (Some(12), Some(12))
    );
    let file = archive_in(archive.path());
    let file_arg = file.to_str().unwrap();

    // Sealed: without the keys nothing shows (a warning says why), with them every run.
    let output = worlds_env(&["runs", "show", "--archive", file_arg, "--json"], &[]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(text(&output.stdout).trim().is_empty());
    assert!(
        text(&output.stderr).contains("sealed"),
        "{}",
        text(&output.stderr)
    );
    let output = worlds_env(
        &["runs", "show", "--archive", file_arg, "--json"],
        &with_keys,
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(text(&output.stdout).lines().count(), 12);
    let output = worlds_env(
        &["runs", "show", "--archive", file_arg, &completed[3]],
        &with_keys,
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    let shown = text(&output.stdout);
    assert!(
        shown.contains("completed") && shown.contains("archived in"),
        "{shown}"
    );
    let output = worlds_env(
        &["runs", "show", "--archive", file_arg, "wrun_nope"],
        &with_keys,
    );
    assert!(!output.status.success());

    // Imported into a new world: every run back, with its history; a second import adds none.
    let other = tempfile::tempdir().unwrap();
    let other_arg = other.path().to_str().unwrap();
    let import = [
        "runs",
        "import",
        "--archive",
        file_arg,
        "--json",
        "--dir",
        other_arg,
    ];
    let output = worlds_env(&import, &with_keys);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let done: serde_json::Value = serde_json::from_str(text(&output.stdout).trim()).unwrap();
    assert_eq!(done["imported"], 12, "{done}");
    let output = worlds_env(&import, &with_keys);
    let done: serde_json::Value = serde_json::from_str(text(&output.stdout).trim()).unwrap();
    assert_eq!(
        (done["imported"].as_u64(), done["already_there"].as_u64()),
        (Some(0), Some(12))
    );
    let output = worlds_env(
        &["runs", "show", &completed[3], "--json", "--dir", other_arg],
        &with_keys,
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    let run: serde_json::Value = serde_json::from_str(&text(&output.stdout)).unwrap();
    assert_eq!(run["status"], "completed");
    assert_eq!(run["history"].as_array().unwrap().len(), 3);
    assert_eq!(run["output"], "hello");
}
