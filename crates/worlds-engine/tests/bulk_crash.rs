//! A bulk retry over 1 000 failed runs, interrupted by SIGKILL at three points and resumed by
//! a new process each time: every run is reopened by the operation exactly once and completes
//! exactly once, and the retried step runs again only for runs whose step was in flight at a
//! kill.
//!
//! The test binary re-executes itself as the child: `bulk_crash_child` is an ignored test that
//! does nothing unless `WORLDS_BULK_CRASH_DIR` is set.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use worlds_engine::prelude::*;
use worlds_engine::store::{HybridStore, Store};
use worlds_engine::{BulkAction, BulkRequest, EventKind, WorkflowQueryFilter};

const DIR_VAR: &str = "WORLDS_BULK_CRASH_DIR";
const PHASE_VAR: &str = "WORLDS_BULK_CRASH_PHASE";
const RUNS: u64 = 1_000;
/// The operation's name: every child submits it, and all but the first get the same one back.
const OPERATION: &str = "retry-all";

fn append_line(path: &Path, line: &str) {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open log");
    file.write_all(line.as_bytes()).expect("write log");
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The child role. Does nothing unless the parent set `WORLDS_BULK_CRASH_DIR`.
#[test]
#[ignore = "child process of `a_bulk_retry_survives_sigkill`; does nothing when run directly"]
fn bulk_crash_child() {
    let Ok(dir) = std::env::var(DIR_VAR) else {
        return;
    };
    let failing = std::env::var(PHASE_VAR).as_deref() == Ok("fail");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let code = runtime.block_on(child(PathBuf::from(dir), failing));
    std::process::exit(code);
}

async fn child(dir: PathBuf, failing: bool) -> i32 {
    let charges = dir.join("charges.log");
    let reserve = activity("reserve", |_ctx: ActivityContext, n: u64| async move {
        Ok::<_, StepError>(n)
    });
    let charge = activity("charge", move |_ctx: ActivityContext, n: u64| {
        let charges = charges.clone();
        async move {
            // The side effect, then a pause: a kill can land between it and its record.
            append_line(
                &charges,
                &format!("{n} {}\n", if failing { "down" } else { "ok" }),
            );
            tokio::time::sleep(Duration::from_micros(rand::random_range(0..2000))).await;
            if failing {
                return Err(StepError::fatal("the payment provider is down"));
            }
            Ok::<_, StepError>(n)
        }
    });
    let flow = {
        let (reserve, charge) = (reserve.clone(), charge.clone());
        workflow("bulk-order", move |ctx: WorkflowContext, n: u64| {
            let (reserve, charge) = (reserve.clone(), charge.clone());
            async move {
                let r = ctx.run(&reserve, n).await?;
                Ok::<_, WorkflowError>(ctx.run(&charge, r).await?)
            }
        })
    };
    let mut config = WorldConfig::default();
    config.persistence = Persistence::Hybrid;
    config.persistence_path = dir.clone();
    config.failure_strategy = FailureStrategy::Ignore;
    config.min_workers = 4;
    config.max_workers = 8;
    let world = World::new(config).expect("open world");
    world
        .register(&reserve)
        .unwrap()
        .register(&charge)
        .unwrap()
        .register(&flow)
        .unwrap();
    world.start().await.expect("start world");
    let unfinished = || {
        world.query_workflows(
            WorkflowQueryFilter::new()
                .status([RunStatus::Pending, RunStatus::Running])
                .workflow_name("bulk-order"),
        )
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    if failing {
        for n in 0..RUNS {
            let options = WorkflowOptions::new().workflow_id(format!("order-{n}"));
            world.execute(&flow, n, options).await.expect("execute");
        }
    } else {
        let failed = WorkflowQueryFilter::new()
            .status(RunStatus::Failed)
            .workflow_name("bulk-order");
        let request = BulkRequest::new(BulkAction::Retry, failed)
            .by("bulk-crash")
            .name(OPERATION);
        let op = world.bulk(request).await.expect("submit");
        loop {
            let progress = world.bulk_progress(&op).await.expect("progress");
            if progress.done {
                break;
            }
            if Instant::now() > deadline {
                eprintln!("the operation did not finish: {progress:?}");
                return 3;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    loop {
        if unfinished().await.expect("query").is_empty() {
            world.shutdown().await.expect("shutdown");
            return 0;
        }
        if Instant::now() > deadline {
            return 3;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn spawn(dir: &Path, phase: &str) -> Child {
    Command::new(std::env::current_exe().expect("current exe"))
        .args([
            "--exact",
            "bulk_crash_child",
            "--nocapture",
            "--include-ignored",
        ])
        .env(DIR_VAR, dir)
        .env(PHASE_VAR, phase)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn child")
}

fn wait(mut child: Child, within: Duration) -> i32 {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status.code().unwrap_or(-1);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the child did not finish within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_bulk_retry_survives_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let charges = dir.path().join("charges.log");
    assert_eq!(wait(spawn(dir.path(), "fail"), Duration::from_secs(180)), 0);
    let failed_charges = lines(&charges).len();
    assert_eq!(failed_charges as u64, RUNS, "every run failed once");

    // Kill the retrying process after 150, 450 and 750 retried charges; each new process
    // submits the same named operation and carries it on.
    let mut kills = 0;
    for at in [150, 450, 750] {
        let mut child = spawn(dir.path(), "retry");
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let retried = lines(&charges).len() - failed_charges;
            if retried >= at {
                break;
            }
            if child.try_wait().expect("wait").is_some() {
                break;
            }
            assert!(Instant::now() < deadline, "no progress to {at}");
            std::thread::sleep(Duration::from_millis(2));
        }
        if child.try_wait().expect("wait").is_none() {
            child.kill().expect("SIGKILL");
            kills += 1;
        }
        let _ = child.wait();
    }
    assert!(kills >= 2, "the kills landed mid-operation ({kills})");
    assert_eq!(
        wait(spawn(dir.path(), "retry"), Duration::from_secs(180)),
        0
    );

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store: std::sync::Arc<dyn Store> =
            std::sync::Arc::new(HybridStore::open(dir.path()).unwrap());
        let all = |name: &'static str| {
            let store = store.clone();
            async move {
                store
                    .list_runs(
                        &WorkflowQueryFilter::new()
                            .workflow_name(name)
                            .limit(usize::MAX - 1),
                    )
                    .await
                    .unwrap()
                    .data
            }
        };
        let runs = all("bulk-order").await;
        assert_eq!(runs.len() as u64, RUNS);
        let ops = all("worlds.bulk").await;
        assert_eq!(
            ops.len(),
            1,
            "one operation, however often it was submitted"
        );
        let op = &ops[0];
        assert_eq!(op.status, RunStatus::Completed, "{:?}", op.error);
        for run in &runs {
            assert_eq!(
                run.status,
                RunStatus::Completed,
                "{}: {:?}",
                run.id,
                run.error
            );
            let history = store.history(&run.id, 0).await.unwrap();
            let reopened: Vec<_> = history
                .iter()
                .filter_map(|e| match &e.kind {
                    EventKind::RunReopened { operation, .. } => Some(operation.clone()),
                    _ => None,
                })
                .collect();
            assert_eq!(reopened, vec![Some(op.id.clone())], "{}", run.id);
            let completions = history
                .iter()
                .filter(|e| matches!(e.kind, EventKind::WorkflowCompleted { .. }))
                .count();
            assert_eq!(completions, 1, "{}", run.id);
        }
        // Retried charges: at least one per run; a second only where a kill caught one in
        // flight (at most the workers busy at each kill).
        let mut retried: HashMap<String, usize> = HashMap::new();
        for line in lines(&charges).iter().filter(|l| l.ends_with(" ok")) {
            *retried.entry(line.clone()).or_default() += 1;
        }
        assert_eq!(retried.len() as u64, RUNS);
        let again: usize = retried.values().map(|n| n - 1).sum();
        assert!(again <= 3 * 8, "{again} charges ran twice");
    });
}
