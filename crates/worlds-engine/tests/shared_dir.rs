//! Several worlds on one directory in `Persistence::File` mode.
//!
//! In-process worlds each open their own store, which behaves exactly like another process
//! (advisory locks belong to open files, not to processes). The takeover test uses a real
//! child process killed with SIGKILL: the test binary re-executes itself, and
//! `shared_child_entry` does nothing unless `WORLDS_SHARED_DIR` is set.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use worlds_engine::prelude::*;
use worlds_engine::ErrorKind;
use worlds_engine::WorkflowQueryFilter;

const DIR_VAR: &str = "WORLDS_SHARED_DIR";

fn config(dir: &Path) -> WorldConfig {
    let mut config = WorldConfig::default();
    config.persistence = Persistence::File;
    config.persistence_path = dir.to_path_buf();
    config.shared_poll_interval = Duration::from_millis(25).into();
    config.failure_strategy = FailureStrategy::Ignore;
    config
}

/// Step executions, shared by the worlds of one process, with a check that no step runs in
/// two places at once.
#[derive(Default, Clone)]
struct Ledger {
    executed: Arc<Mutex<HashMap<(String, String), u32>>>,
    running: Arc<Mutex<HashSet<(String, String)>>>,
    overlaps: Arc<Mutex<Vec<String>>>,
}

fn double(ledger: &Ledger, pause: Duration) -> Activity<u64, u64> {
    let ledger = ledger.clone();
    activity("shared-double", move |ctx: ActivityContext, n: u64| {
        let ledger = ledger.clone();
        async move {
            let key = (ctx.workflow_id().to_owned(), ctx.activity_id().to_owned());
            if !ledger.running.lock().insert(key.clone()) {
                ledger.overlaps.lock().push(format!("{key:?}"));
            }
            tokio::time::sleep(pause).await;
            *ledger.executed.lock().entry(key.clone()).or_default() += 1;
            ledger.running.lock().remove(&key);
            Ok::<_, StepError>(n * 2)
        }
    })
}

fn flow(step: &Activity<u64, u64>, steps: u32) -> Workflow<u64, u64> {
    let step = step.clone();
    workflow("shared-flow", move |ctx: WorkflowContext, n: u64| {
        let step = step.clone();
        async move {
            let mut value = n;
            for _ in 0..steps {
                value = ctx.run(&step, value).await?;
            }
            Ok::<_, WorkflowError>(value)
        }
    })
}

fn sleeper() -> Workflow<(), ()> {
    workflow("shared-sleeper", |ctx: WorkflowContext, _: ()| async move {
        ctx.sleep("1h").await?;
        Ok::<_, WorkflowError>(())
    })
}

async fn world(dir: &Path, ledger: &Ledger) -> World {
    let world = World::new(config(dir)).unwrap();
    let step = double(ledger, Duration::from_millis(2));
    world
        .register(&step)
        .unwrap()
        .register(flow(&step, 3))
        .unwrap()
        .register(sleeper())
        .unwrap();
    world.start().await.unwrap();
    world
}

async fn wait_for<T>(what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(value) = f().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_worlds_share_a_directory_without_running_a_step_twice() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::default();
    let a = world(dir.path(), &ledger).await;
    let b = world(dir.path(), &ledger).await;

    let mut runs = Vec::new();
    for n in 0..10u64 {
        let on = if n % 2 == 0 { &a } else { &b };
        let run = on
            .execute_by_name::<u64, u64>("shared-flow", n, WorkflowOptions::default())
            .await
            .unwrap();
        runs.push((n, run));
    }
    for (n, run) in &runs {
        assert_eq!(run.result().await.unwrap(), n * 8);
    }
    // Each world sees the other's runs, finished.
    for (_, run) in &runs {
        for w in [&a, &b] {
            assert_eq!(w.query(&run.id).await.unwrap().status, RunStatus::Completed);
        }
    }
    let listed = a
        .query_workflows(WorkflowQueryFilter::new().status([RunStatus::Completed]))
        .await
        .unwrap();
    assert_eq!(listed.len(), 10);
    let executed = ledger.executed.lock().clone();
    assert_eq!(executed.len(), 30, "{executed:?}");
    assert!(executed.values().all(|&n| n == 1), "{executed:?}");
    assert!(ledger.overlaps.lock().is_empty());

    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_driven_by_one_world_is_cancelled_from_another() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::default();
    let a = world(dir.path(), &ledger).await;
    let b = world(dir.path(), &ledger).await;

    let run = a
        .execute_by_name::<(), ()>("shared-sleeper", (), WorkflowOptions::default())
        .await
        .unwrap();
    wait_for("the run to sleep", async || {
        let state = b.query(&run.id).await.ok()?;
        (state.status == RunStatus::Running).then_some(())
    })
    .await;
    b.cancel(&run.id).await.unwrap();
    // World a, which drives the run, hears of it and lets go: its waiter returns.
    let err = tokio::time::timeout(Duration::from_secs(10), run.result())
        .await
        .expect("the driving world noticed the cancellation")
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RunCancelled, "{err}");
    assert_eq!(a.query(&run.id).await.unwrap().status, RunStatus::Cancelled);

    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_id_is_taken_once_across_worlds() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::default();
    let a = world(dir.path(), &ledger).await;
    let b = world(dir.path(), &ledger).await;
    let options = || WorkflowOptions::new().workflow_id("order-7");
    let first = a
        .execute_by_name::<u64, u64>("shared-flow", 1, options())
        .await
        .unwrap();
    let second = b
        .execute_by_name::<u64, u64>("shared-flow", 2, options())
        .await
        .unwrap_err();
    assert_eq!(second.kind(), ErrorKind::Conflict, "{second}");
    assert_eq!(first.result().await.unwrap(), 8);
    // The other world finds the run by its workflow id.
    assert_eq!(b.query("order-7").await.unwrap().id, first.id);
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

#[test]
fn a_hybrid_world_and_a_file_world_cannot_share_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let file = World::new(config(dir.path())).unwrap();
    let mut hybrid = config(dir.path());
    hybrid.persistence = Persistence::Hybrid;
    let err = World::new(hybrid.clone()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    drop(file);
    let held = World::new(hybrid).unwrap();
    let err = World::new(config(dir.path())).unwrap_err();
    assert!(err.to_string().contains("hybrid"), "{err}");
    drop(held);
}

// ---- takeover after a real process dies ----------------------------------------------------

fn append_line(path: &Path, line: &str) {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    file.write_all(line.as_bytes()).unwrap();
}

/// Logs every step execution as `start|done pid workflow_id activity_id attempt`.
fn logged_step(log: PathBuf, pause: Duration) -> Activity<u64, u64> {
    activity("shared-double", move |ctx: ActivityContext, n: u64| {
        let log = log.clone();
        async move {
            let me = format!(
                "{} {} {} {}",
                std::process::id(),
                ctx.workflow_id(),
                ctx.activity_id(),
                ctx.attempt()
            );
            append_line(&log, &format!("start {me}\n"));
            tokio::time::sleep(pause).await;
            append_line(&log, &format!("done {me}\n"));
            Ok::<_, StepError>(n * 2)
        }
    })
}

const CHILD_RUNS: u64 = 12;
const STEPS: u32 = 4;

/// The child role: starts runs on the shared directory and works on them until killed.
#[test]
#[ignore = "child process of `a_killed_process_runs_are_taken_over`; does nothing when run directly"]
fn shared_child_entry() {
    let Ok(dir) = std::env::var(DIR_VAR) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let world = World::new(config(&dir)).unwrap();
        let step = logged_step(dir.join("executions.log"), Duration::from_millis(40));
        world
            .register(&step)
            .unwrap()
            .register(flow(&step, STEPS))
            .unwrap();
        world.start().await.unwrap();
        for n in 0..CHILD_RUNS {
            let options = WorkflowOptions::new().workflow_id(format!("child-{n}"));
            world
                .execute_by_name::<u64, u64>("shared-flow", n, options)
                .await
                .unwrap();
        }
        println!("STARTED");
        std::io::stdout().flush().unwrap();
        // Work until killed.
        std::future::pending::<()>().await;
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_process_runs_are_taken_over() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("executions.log");

    // This process's world is on the directory from the start, alongside the child.
    let world = World::new(config(dir.path())).unwrap();
    let step = logged_step(log.clone(), Duration::from_millis(5));
    world
        .register(&step)
        .unwrap()
        .register(flow(&step, STEPS))
        .unwrap();
    world.start().await.unwrap();
    let own = world
        .execute_by_name::<u64, u64>("shared-flow", 100, WorkflowOptions::default())
        .await
        .unwrap();

    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "shared_child_entry",
            "--nocapture",
            "--include-ignored",
        ])
        .env(DIR_VAR, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Kill it once it has done some of its steps, but far from all.
    let done_lines = |text: &str| text.lines().filter(|l| l.starts_with("done ")).count();
    wait_for("the child to get going", async || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        (done_lines(&text) >= (CHILD_RUNS as usize) * 2).then_some(())
    })
    .await;
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    append_line(&log, "killed\n");

    // Every run of the dead process finishes here, with the right result.
    for n in 0..CHILD_RUNS {
        let id = format!("child-{n}");
        let state = wait_for("a taken-over run to finish", async || {
            let state = world.query(&id).await.ok()?;
            state.status.is_terminal().then_some(state)
        })
        .await;
        assert_eq!(
            state.status,
            RunStatus::Completed,
            "{id}: {:?}",
            state.error
        );
        assert_eq!(state.output.unwrap().decode::<u64>().unwrap(), n * 16);
    }
    assert_eq!(own.result().await.unwrap(), 1600);

    // No step of the child's runs ran here before the child was dead, none ran twice at one
    // attempt, and each step's recorded attempt is the last one that ran.
    let text = std::fs::read_to_string(&log).unwrap();
    let me = std::process::id().to_string();
    let mut killed = false;
    let mut starts: HashMap<(String, String, String), u32> = HashMap::new();
    for line in text.lines() {
        if line == "killed" {
            killed = true;
            continue;
        }
        let fields: Vec<&str> = line.split(' ').collect();
        let [kind, pid, workflow_id, activity_id, attempt] = fields[..] else {
            continue; // a line cut short by the kill
        };
        if kind == "start" {
            if workflow_id.starts_with("child-") && pid == me {
                assert!(killed, "{line}: a run of the live child ran here");
            }
            *starts
                .entry((workflow_id.into(), activity_id.into(), attempt.into()))
                .or_default() += 1;
        }
    }
    assert!(
        starts.values().all(|&n| n == 1),
        "an attempt ran twice: {starts:?}"
    );
    for n in 0..CHILD_RUNS {
        let run = world.query(&format!("child-{n}")).await.unwrap();
        for activity in &run.activities {
            let last_started = starts
                .keys()
                .filter(|(w, a, _)| *w == run.workflow_id && *a == activity.id)
                .map(|(_, _, attempt)| attempt.parse::<u32>().unwrap())
                .max();
            assert_eq!(last_started, Some(activity.attempt), "{}", activity.id);
        }
    }
    world.shutdown().await.unwrap();
}
