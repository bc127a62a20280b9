//! A step that crashes its own process every time it runs still runs out of attempts: its start
//! is on disk before its code runs, so each restart finds the attempt that was lost, counts it
//! (`WORKER_LOST`) against the retry policy, and after the last allowed attempt the run fails
//! instead of crashing the process forever. Real processes, aborted for real, on the file and
//! hybrid stores.
//!
//! The test binary re-executes itself as the child: `poison_child_entry` is an ignored test
//! that does nothing unless `WORLDS_POISON_DIR` is set.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use worlds_engine::model::ResolveData;
use worlds_engine::prelude::*;
use worlds_engine::store::{FileStore, HybridStore, Store};
use worlds_engine::EventKind;

const DIR_VAR: &str = "WORLDS_POISON_DIR";
const PERSISTENCE_VAR: &str = "WORLDS_POISON_PERSISTENCE";
const WORKFLOW_ID: &str = "poisoned";
/// Attempts the step's retry policy allows.
const ATTEMPTS: u32 = 3;

/// The child role. Does nothing unless the parent set `WORLDS_POISON_DIR`.
#[test]
#[ignore = "child process of the poison step tests; does nothing when run directly"]
fn poison_child_entry() {
    let Ok(dir) = std::env::var(DIR_VAR) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(child(PathBuf::from(dir)));
}

async fn child(dir: PathBuf) {
    let poison = activity("poison", |_ctx: ActivityContext, _: ()| async move {
        // A crash of the process, as a segfault in a native library or an out-of-memory kill
        // would be: nothing after this line runs, no destructor, no flush.
        std::process::abort();
        #[allow(unreachable_code)]
        Ok::<(), StepError>(())
    })
    .with_options(
        ActivityOptions::new().retry(
            RetryConfig::new()
                .max_attempts(ATTEMPTS)
                .initial_interval(Duration::from_millis(1))
                .max_interval(Duration::from_millis(1)),
        ),
    );
    let flow = {
        let poison = poison.clone();
        workflow("poisoned-flow", move |ctx: WorkflowContext, _: ()| {
            let poison = poison.clone();
            async move { Ok::<_, WorkflowError>(ctx.run(&poison, ()).await?) }
        })
    };
    let mut config = WorldConfig::default();
    config.persistence = match std::env::var(PERSISTENCE_VAR).as_deref() {
        Ok("hybrid") => Persistence::Hybrid,
        _ => Persistence::File,
    };
    config.persistence_path = dir;
    let world = World::new(config).expect("open world");
    world.register(&poison).unwrap().register(&flow).unwrap();
    world.start().await.expect("start world");
    // A failed run just fails (the default strategy would start the workflow over).
    let options = WorkflowOptions::new()
        .workflow_id(WORKFLOW_ID)
        .failure_strategy(FailureStrategy::Ignore);
    match world.execute(&flow, (), options).await {
        Ok(_) | Err(WorldError::Conflict { .. }) => {}
        Err(e) => panic!("execute: {e}"),
    }
    let finished = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let state = world.query(WORKFLOW_ID).await.expect("the run exists");
            if state.status.is_terminal() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    world.shutdown().await.expect("shutdown");
    std::process::exit(if finished.is_ok() { 0 } else { 3 });
}

fn run_child(dir: &Path, persistence: &str) -> Option<i32> {
    Command::new(std::env::current_exe().expect("current exe"))
        .args([
            "--exact",
            "poison_child_entry",
            "--nocapture",
            "--include-ignored",
        ])
        .env(DIR_VAR, dir)
        .env(PERSISTENCE_VAR, persistence)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("spawn child")
        .code()
}

fn poison_step_runs_out_of_attempts(persistence: &str) {
    let dir = tempfile::tempdir().unwrap();
    // Each attempt aborts its process; the restart after the last one fails the run.
    let mut aborted = 0;
    let mut finished = false;
    for _ in 0..ATTEMPTS + 2 {
        match run_child(dir.path(), persistence) {
            Some(0) => {
                finished = true;
                break;
            }
            Some(3) => panic!("the child gave up waiting for the run to finish"),
            _ => aborted += 1,
        }
    }
    assert!(finished, "the run never finished after {aborted} crashes");
    assert_eq!(aborted, ATTEMPTS, "one crash per allowed attempt");

    let rt = tokio::runtime::Runtime::new().unwrap();
    let store: Box<dyn Store> = match persistence {
        "hybrid" => Box::new(HybridStore::open(dir.path()).unwrap()),
        _ => Box::new(FileStore::open(dir.path()).unwrap()),
    };
    let state = rt
        .block_on(store.get_run(WORKFLOW_ID, ResolveData::All))
        .unwrap();
    assert_eq!(state.status, RunStatus::Failed, "{state:?}");
    let history = rt.block_on(store.history(&state.id, 0)).unwrap();
    let mut started = Vec::new();
    let mut lost = Vec::new();
    for event in &history {
        match &event.kind {
            EventKind::ActivityStarted { attempt, .. } => started.push(*attempt),
            EventKind::ActivityFailed { attempt, error, .. } => {
                assert_eq!(error.code.as_deref(), Some("WORKER_LOST"), "{error:?}");
                lost.push(*attempt);
            }
            _ => {}
        }
    }
    let all: Vec<u32> = (1..=ATTEMPTS).collect();
    assert_eq!(started, all, "every attempt's start is on record");
    assert_eq!(lost, all, "every attempt is counted as lost");
}

#[test]
fn a_step_that_crashes_its_process_runs_out_of_attempts_on_file() {
    poison_step_runs_out_of_attempts("file");
}

#[test]
fn a_step_that_crashes_its_process_runs_out_of_attempts_on_hybrid() {
    poison_step_runs_out_of_attempts("hybrid");
}
