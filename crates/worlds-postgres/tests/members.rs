//! Several member processes on one PostgreSQL world, killed with SIGKILL and paused with
//! SIGSTOP (past their lease, then SIGCONT) at random while they run a workload. At the end
//! every run has completed with the right output, and no step whose completion was recorded
//! ran again: for each step the highest attempt any member executed is the recorded one.
//!
//! The test binary re-executes itself as the members: `member_entry` is an ignored test that
//! does nothing unless `WORLDS_MEMBER_SCHEMA` is set.

mod common;

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use worlds_engine::clock::SystemClock;
use worlds_engine::prelude::*;
use worlds_engine::store::{EventStore, RunStore};
use worlds_engine::{EventKind, HookSecret, ResolveData, WorkflowQueryFilter};
use worlds_postgres::{PostgresOptions, PostgresStore};

const SCHEMA_VAR: &str = "WORLDS_MEMBER_SCHEMA";
const LOG_VAR: &str = "WORLDS_MEMBER_LOG";

/// Runs in the workload (`WORLDS_MEMBERS_RUNS` overrides).
const RUNS: u64 = 1000;
/// Sequential steps per run.
const STEPS: u64 = 10;
/// Member processes alive at once.
const MEMBERS: usize = 3;
/// How long a member's lease lasts without a heartbeat.
const LEASE: Duration = Duration::from_millis(1500);
/// The whole workload must finish within this.
const DEADLINE: Duration = Duration::from_secs(600);

fn options(schema: &str) -> PostgresOptions {
    PostgresOptions {
        pool_size: 8,
        lease_duration: LEASE,
        heartbeat_interval: Some(LEASE / 5),
        ..common::options(schema)
    }
}

fn config(schema: &str) -> WorldConfig {
    let mut config = WorldConfig::postgres(common::url());
    config.database.schema = schema.to_owned();
    config.shared_poll_interval = Duration::from_millis(200).into();
    config.hook_secret = Some(HookSecret("members-test".into()));
    config.min_workers = 8;
    config.max_workers = 8;
    config
}

/// The workload: `STEPS` steps, each adding one; every execution is logged as
/// `run step-id attempt pid` before it returns.
fn definitions(log: Option<PathBuf>) -> (Activity<u64, u64>, Workflow<u64, u64>) {
    let add = activity("add", move |ctx: ActivityContext, n: u64| {
        let log = log.clone();
        async move {
            if let Some(log) = &log {
                append_line(
                    log,
                    &format!(
                        "{} {} {} {}\n",
                        ctx.run_id(),
                        ctx.activity_id(),
                        ctx.attempt(),
                        std::process::id()
                    ),
                );
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
            Ok::<_, StepError>(n + 1)
        }
    });
    let chain = common::chain(&add, STEPS);
    (add, chain)
}

fn append_line(path: &Path, line: &str) {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open the execution log");
    file.write_all(line.as_bytes())
        .expect("write the execution log");
}

/// The member role. Does nothing unless the parent set `WORLDS_MEMBER_SCHEMA`.
#[test]
#[ignore = "member process of `members_survive_kills_and_pauses`; does nothing when run directly"]
fn member_entry() {
    let Ok(schema) = std::env::var(SCHEMA_VAR) else {
        return;
    };
    let log = PathBuf::from(std::env::var(LOG_VAR).expect("the execution log's path"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let store = PostgresStore::connect(&common::url(), options(&schema))
            .await
            .expect("connect");
        let world = World::with_store(
            config(&schema),
            Arc::new(SystemClock),
            Arc::new(store.clone()),
        );
        let (add, chain) = definitions(Some(log));
        world.register(&add).unwrap();
        world.register(&chain).unwrap();
        world.start().await.unwrap();
        // Until every run has finished.
        loop {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let open = store
                .list_runs(
                    &WorkflowQueryFilter::default()
                        .status(vec![RunStatus::Pending, RunStatus::Running]),
                )
                .await;
            if open.is_ok_and(|page| page.data.is_empty()) {
                break;
            }
        }
        world.shutdown().await.unwrap();
        store.close().await.unwrap();
    });
}

fn spawn_member(schema: &str, log: &Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "member_entry", "--ignored", "--nocapture"])
        .env(SCHEMA_VAR, schema)
        .env(LOG_VAR, log)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn a member")
}

fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .args([format!("-{name}"), child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{name} {}", child.id());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_survive_kills_and_pauses() {
    if !common::database_up().await {
        return;
    }
    let env = |name: &str, default: u64| -> u64 {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let runs = env("WORLDS_MEMBERS_RUNS", RUNS);
    let faults = env("WORLDS_MEMBERS_FAULTS", 12) as u32;
    let deadline = Duration::from_secs(env("WORLDS_MEMBERS_DEADLINE_S", DEADLINE.as_secs()));
    let schema = common::fresh_schema();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("executions.log");

    // The runs, created by a process that then lets go of them.
    {
        let store = PostgresStore::connect(&common::url(), options(&schema))
            .await
            .unwrap();
        let world = World::with_store(
            config(&schema),
            Arc::new(SystemClock),
            Arc::new(store.clone()),
        );
        let (add, chain) = definitions(None);
        world.register(&add).unwrap();
        world.register(&chain).unwrap();
        let items = (0..runs).map(|n| (n * 100, WorkflowOptions::default()));
        for started in world.execute_batch(&chain, items).await.unwrap() {
            started.unwrap();
        }
        store.close().await.unwrap();
    }

    let mut members: Vec<Child> = (0..MEMBERS).map(|_| spawn_member(&schema, &log)).collect();
    let mut rng = StdRng::seed_from_u64(
        std::env::var("WORLDS_MEMBERS_SEED")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(7),
    );
    let (mut kills, mut pauses) = (0u32, 0u32);
    let reader = PostgresStore::connect(&common::url(), options(&schema))
        .await
        .unwrap();
    let started = Instant::now();
    let unfinished = || async {
        reader
            .list_runs(
                &WorkflowQueryFilter::default()
                    .status(vec![RunStatus::Pending, RunStatus::Running])
                    .limit(1),
            )
            .await
            .map(|page| page.data.len())
            .unwrap_or(1)
    };
    while unfinished().await > 0 {
        assert!(
            started.elapsed() < deadline,
            "the workload did not finish in {deadline:?} ({kills} kills, {pauses} pauses)"
        );
        tokio::time::sleep(Duration::from_millis(rng.random_range(700..1500))).await;
        // Faults only while there is work left to disturb, and a few of each (the soak,
        // `scripts/kill-soak`, asks for more with WORLDS_MEMBERS_FAULTS).
        if kills + pauses >= faults {
            continue;
        }
        let victim = rng.random_range(0..members.len());
        if rng.random_bool(0.5) {
            signal(&members[victim], "KILL");
            let _ = members[victim].wait();
            members[victim] = spawn_member(&schema, &log);
            kills += 1;
        } else {
            signal(&members[victim], "STOP");
            // Past its lease: another member takes its runs over meanwhile.
            tokio::time::sleep(LEASE + Duration::from_millis(800)).await;
            signal(&members[victim], "CONT");
            pauses += 1;
        }
    }
    for mut member in members {
        // Members exit once every run has finished; make sure of it.
        let deadline = Instant::now() + Duration::from_secs(20);
        while member.try_wait().unwrap().is_none() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = member.kill();
        let _ = member.wait();
    }

    // Every run completed with the right output.
    let mut max_executed: HashMap<(String, String), u32> = HashMap::new();
    let text = std::fs::read_to_string(&log).unwrap();
    let mut executions = 0u64;
    for line in text.lines() {
        let parts: Vec<&str> = line.split(' ').collect();
        if parts.len() != 4 {
            continue; // a line torn by a kill
        }
        executions += 1;
        let key = (parts[0].to_owned(), parts[1].to_owned());
        let attempt = parts[2].parse::<u32>().unwrap();
        let max = max_executed.entry(key).or_default();
        *max = (*max).max(attempt);
    }
    let page = reader
        .list_runs(&WorkflowQueryFilter::default().limit(runs as usize + 1))
        .await
        .unwrap();
    assert_eq!(page.data.len() as u64, runs, "every run is in the store");
    let mut lost_attempts = 0u64;
    for run in &page.data {
        let state = reader.get_run(&run.id, ResolveData::All).await.unwrap();
        assert_eq!(state.status, RunStatus::Completed, "run {}", run.id);
        let input: u64 = state.input.as_ref().unwrap().decode().unwrap();
        let output: u64 = state.output.as_ref().unwrap().decode().unwrap();
        assert_eq!(output, input + STEPS, "run {}", run.id);
        let history = reader.history(&run.id, 0).await.unwrap();
        let mut completed = 0;
        let mut step_ids = HashMap::new();
        for event in &history {
            if let EventKind::ActivityScheduled {
                position,
                activity_id,
                ..
            } = &event.kind
            {
                step_ids.insert(*position, activity_id.clone());
            }
            if let EventKind::ActivityCompleted {
                position, attempt, ..
            } = &event.kind
            {
                completed += 1;
                lost_attempts += u64::from(attempt - 1);
                let executed = max_executed
                    .get(&(run.id.clone(), step_ids[position].clone()))
                    .copied()
                    .unwrap_or(0);
                assert_eq!(
                    executed, *attempt,
                    "run {} step {position}: recorded attempt {attempt}, but attempt {executed} ran (a recorded step ran again, or its execution was not logged)",
                    run.id
                );
            }
        }
        assert_eq!(completed, STEPS, "run {}", run.id);
    }
    let takeovers: i64 =
        sqlx::query_scalar("SELECT coalesce(sum(greatest(epoch - 2, 0)), 0)::bigint FROM runs")
            .fetch_one(reader.pool())
            .await
            .unwrap();
    eprintln!(
        "members: {runs} runs × {STEPS} steps on {MEMBERS} members in {:.1} s: {kills} SIGKILLs, {pauses} SIGSTOP/SIGCONT, {takeovers} takeovers (claims after a run's first), {lost_attempts} lost attempts, {executions} step executions; 0 recorded steps re-executed, 0 runs lost",
        started.elapsed().as_secs_f64()
    );
    reader.close().await.unwrap();
    common::drop_schema(&schema).await;
}
