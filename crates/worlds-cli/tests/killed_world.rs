//! A hybrid world killed with SIGKILL right after acknowledging its runs, then inspected with
//! the `worlds` binary: its runs are only in the write-ahead log, and every read command sees
//! them without writing anything to the directory.
//!
//! The test binary re-executes itself as the world's process: `killed_world_child` is an
//! ignored test that does nothing unless `WORLDS_KILLED_DIR` is set.

mod common;

use common::{text, worlds};

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use worlds_engine::prelude::*;

const DIR_VAR: &str = "WORLDS_KILLED_DIR";
/// How many runs the child starts.
const RUNS: usize = 3;
/// What the child prints before each acknowledged run id.
const PREFIX: &str = "acknowledged run ";
/// Longest any process of this test may take to do its part.
const PATIENCE: Duration = Duration::from_secs(60);

/// The child role: opens a hybrid world on the directory, starts [`RUNS`] runs that sleep for
/// a day, prints each id once `execute` returned, then waits to be killed.
#[test]
#[ignore = "child process of the killed-world test; does nothing when run directly"]
fn killed_world_child() {
    let Ok(dir) = std::env::var(DIR_VAR) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let sleeper = workflow("sleeper", |ctx: WorkflowContext, n: u32| async move {
            ctx.sleep("1d").await?;
            Ok::<_, WorkflowError>(n)
        });
        let mut config = WorldConfig::default();
        config.persistence = Persistence::Hybrid;
        config.persistence_path = PathBuf::from(dir);
        let world = World::new(config).expect("open world");
        world.register(&sleeper).unwrap();
        world.start().await.expect("start world");
        for n in 0..RUNS {
            let options = WorkflowOptions::new().workflow_id(format!("nap-{n}"));
            let run = world
                .execute(&sleeper, n as u32, options)
                .await
                .expect("execute");
            let mut out = std::io::stdout().lock();
            writeln!(out, "{PREFIX}{}", run.id).unwrap();
            out.flush().unwrap();
        }
        // Killed here: the runs are acknowledged, not yet compacted into run logs.
        std::future::pending::<()>().await;
    });
}

/// Starts the child on `dir`, collects the ids it acknowledges, and kills it with SIGKILL.
fn start_and_kill(dir: &Path) -> Vec<String> {
    let mut child = Command::new(std::env::current_exe().expect("current exe"))
        .args([
            "--exact",
            "killed_world_child",
            "--nocapture",
            "--include-ignored",
        ])
        .env(DIR_VAR, dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn child");
    let stdout = child.stdout.take().unwrap();
    let (send, receive) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if let Some(id) = line.strip_prefix(PREFIX) {
                if send.send(id.to_owned()).is_err() {
                    return;
                }
            }
        }
    });
    let deadline = Instant::now() + PATIENCE;
    let mut ids = Vec::new();
    while ids.len() < RUNS {
        let left = deadline.saturating_duration_since(Instant::now());
        match receive.recv_timeout(left) {
            Ok(id) => ids.push(id),
            Err(_) => {
                child.kill().unwrap();
                panic!("the child acknowledged {} of {RUNS} runs", ids.len());
            }
        }
    }
    // SIGKILL: no shutdown, no compaction, no flush of anything not already on disk.
    child.kill().unwrap();
    child.wait().unwrap();
    ids
}

/// Every file under `dir` with its content, and every directory.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut found = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                found.insert(path.clone(), None);
                stack.push(path);
            } else {
                found.insert(path.clone(), Some(std::fs::read(&path).unwrap()));
            }
        }
    }
    found
}

#[test]
fn a_killed_hybrid_world_looks_misconfigured_to_the_cli() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("world");
    let ids = start_and_kill(&dir);
    let before = snapshot(&dir);

    for id in &ids {
        let output = worlds(&["runs", "show", id], &dir);
        let shown = text(&output.stdout);
        assert!(output.status.success(), "{}", text(&output.stderr));
        assert!(shown.contains(id), "{shown}");
        assert!(
            shown.lines().any(|l| l.starts_with("waiting on")),
            "{shown}"
        );
    }

    let output = worlds(&["runs", "list"], &dir);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let listed = text(&output.stdout);
    for id in &ids {
        assert!(listed.contains(id), "{id} not in\n{listed}");
    }

    let output = worlds(&["doctor"], &dir);
    let report = text(&output.stdout);
    assert!(
        output.status.success(),
        "{report}\n{}",
        text(&output.stderr)
    );
    let wal = report
        .lines()
        .find(|l| l.starts_with("write-ahead log:"))
        .unwrap_or_else(|| panic!("no write-ahead log line in\n{report}"));
    assert!(
        wal.contains("not yet compacted") && !wal.contains(" 0 not yet"),
        "{wal}"
    );
    assert!(report.contains(&format!("runs: {RUNS}")), "{report}");

    // No log records yet is not a misconfiguration: say so, and how to get some.
    let output = worlds(&["logs"], &dir);
    let said = text(&output.stderr);
    assert!(output.status.success(), "{said}");
    assert_eq!(text(&output.stdout), "");
    assert!(said.contains("no log records"), "{said}");
    assert!(!said.contains("no log directory"), "{said}");

    assert!(
        before == snapshot(&dir),
        "the read commands changed the directory"
    );
}
