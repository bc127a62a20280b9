//! Several member processes on one PostgreSQL world, killed with SIGKILL, paused with SIGSTOP
//! (past their lease, then SIGCONT; also while they start), and cut off from the database
//! (`pg_terminate_backend` of every connection of theirs) at random while they run a workload;
//! each member also has a failure injected between a claim and the reading of what it claimed.
//! While it runs no run may stop progressing for long while a live member holds it; at the end
//! every run has completed with the right output, and no step whose completion was recorded
//! ran again: for each step the highest attempt any member executed is the recorded one.
//!
//! Also: a member paused right after recording a step's start, whose run another member took
//! over and finished meanwhile, does not run that step when it wakes.
//!
//! The test binary re-executes itself as the members: `member_entry` is an ignored test that
//! does nothing unless `WORLDS_MEMBER_SCHEMA` is set.

mod common;

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use sqlx::Connection;
use worlds_engine::clock::SystemClock;
use worlds_engine::prelude::*;
use worlds_engine::store::{EventStore, RunStore};
use worlds_engine::{EventKind, HookSecret, ResolveData, WorkflowQueryFilter};
use worlds_postgres::{PostgresOptions, PostgresStore};

const SCHEMA_VAR: &str = "WORLDS_MEMBER_SCHEMA";
const LOG_VAR: &str = "WORLDS_MEMBER_LOG";
/// Steps per run, passed to the members.
const STEPS_VAR: &str = "WORLDS_MEMBERS_STEPS";
/// Which failure a member injects between its first claim and what follows it.
const FAULT_VAR: &str = "WORLDS_MEMBER_FAULT";
/// Set for the member of `a_paused_member_does_not_start_a_step_another_member_recorded`.
const PAUSE_AFTER_START_VAR: &str = "WORLDS_MEMBER_PAUSE_AFTER_START";

/// Runs in the workload (`WORLDS_MEMBERS_RUNS` overrides).
const RUNS: u64 = 1000;
/// Sequential steps per run (`WORLDS_MEMBERS_STEPS` overrides).
const STEPS: u64 = 10;
/// A run that makes no progress for this long while one live member holds it is stuck
/// (`WORLDS_MEMBERS_STUCK_S` overrides). Longer than a step's longest retry backoff (30 s) and
/// than a member's round through the runs it holds.
const STUCK: Duration = Duration::from_secs(60);
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

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The workload: `steps` steps, each adding one; every execution is logged as
/// `run step-id attempt pid` before it returns.
fn definitions(log: Option<PathBuf>, steps: u64) -> (Activity<u64, u64>, Workflow<u64, u64>) {
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
    let chain = common::chain(&add, steps);
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
#[ignore = "member process of the tests in this file; does nothing when run directly"]
fn member_entry() {
    let Ok(schema) = std::env::var(SCHEMA_VAR) else {
        return;
    };
    let log = PathBuf::from(std::env::var(LOG_VAR).expect("the execution log's path"));
    let steps = env_u64(STEPS_VAR, STEPS);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let store = PostgresStore::connect(&common::url(), options(&schema))
            .await
            .expect("connect");
        match std::env::var(FAULT_VAR).as_deref() {
            // The first claim commits and its answer is lost.
            Ok("lose-claim") => store.faults().lose_next_claim_answers(1),
            // The first claim commits and the reading back of its first runs fails.
            Ok("fail-reads") => store.faults().fail_reads_after_next_claim(3),
            _ => {}
        }
        let pause_after_start = std::env::var_os(PAUSE_AFTER_START_VAR).is_some();
        if pause_after_start {
            // Stops this very process right after a step's start is committed and before the
            // step's code is called: the window a paused member can wake up in.
            let once = AtomicBool::new(false);
            store.faults().after_step_start(move || {
                if !once.swap(true, Ordering::SeqCst) {
                    let _ = Command::new("kill")
                        .args(["-STOP", &std::process::id().to_string()])
                        .status();
                    // The stop is not synchronous for this thread: `kill` returns once the
                    // signal is pending, and the process stops when one of its threads takes
                    // it, which on a loaded machine can be after this thread has gone on into
                    // the step's code. Sleeping lets the stop catch this thread here, before
                    // the step; once woken (long after), the loop ends at once.
                    let since = Instant::now();
                    while since.elapsed() < Duration::from_millis(500) {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
            });
        }
        let world = World::with_store(
            config(&schema),
            Arc::new(SystemClock),
            Arc::new(store.clone()),
        );
        let (add, chain) = definitions(Some(log), steps);
        world.register(&add).unwrap();
        world.register(&chain).unwrap();
        // As a program that keeps running would: a start whose claim failed goes on, and the
        // member claims at its next poll.
        if let Err(e) = world.start().await {
            eprintln!("member {}: World::start: {e}", store.member_id());
        }
        if pause_after_start {
            world
                .execute(&chain, 0, WorkflowOptions::default())
                .await
                .unwrap();
        }
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

fn spawn_member(schema: &str, log: &Path, steps: u64, extra: &[(&str, &str)]) -> Child {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args(["--exact", "member_entry", "--ignored", "--nocapture"])
        .env(SCHEMA_VAR, schema)
        .env(LOG_VAR, log)
        .env(STEPS_VAR, steps.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (name, value) in extra {
        command.env(name, value);
    }
    command.spawn().expect("spawn a member")
}

fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .args([format!("-{name}"), child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{name} {}", child.id());
}

/// The member processes, killed when the test ends, also when it fails.
struct Members(Vec<Child>);

impl Drop for Members {
    fn drop(&mut self) {
        for member in &mut self.0 {
            let _ = member.kill();
            let _ = member.wait();
        }
    }
}

/// True once the process is stopped (SIGSTOP): its state in `/proc` is `T`.
fn is_stopped(child: &Child) -> bool {
    std::fs::read_to_string(format!("/proc/{}/stat", child.id())).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('T'))
    })
}

/// Cuts every database connection of the world's members (and of this test's reader, which
/// reconnects): what a failover or a network blip does to them.
async fn storm(schema: &str) -> u64 {
    let Ok(mut conn) = sqlx::PgConnection::connect(&common::url()).await else {
        return 0;
    };
    let cut: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE application_name = $1 AND pid <> pg_backend_pid()",
    )
    .bind(format!("worlds-engine {schema}"))
    .fetch_all(&mut conn)
    .await
    .unwrap_or_default();
    let _ = conn.close().await;
    cut.len() as u64
}

/// Watches every unfinished run's progress: a run whose `next_seq` and holder stay the same
/// while that holder is live is stuck (a live member holds it and does not drive it, so no
/// other member ever takes it) once that lasts `limit`, or, for a holder with a backlog, five
/// times as long as the holder takes to go once through the runs it holds (by the events it
/// wrote since the last look: a member that gathered most runs, the one never killed, takes
/// long rounds). A holder that wrote nothing since the last look gets `limit`.
struct StuckWatch {
    limit: Duration,
    runs: HashMap<String, (i64, Option<String>, Instant)>,
    last: Option<Instant>,
    /// Events per second each holder wrote to its runs, smoothed.
    rates: HashMap<String, f64>,
}

/// Events a run's step writes (scheduled, started, completed).
const EVENTS_PER_STEP: f64 = 3.0;

impl StuckWatch {
    /// `reader`: the test's own pool on the world's schema.
    async fn look(&mut self, reader: &sqlx::PgPool) -> Result<(), String> {
        let Ok(rows) = sqlx::query_as::<_, (String, i64, Option<String>, bool)>(
            "SELECT r.run_id, r.next_seq, r.owner,
                    coalesce(m.heartbeat_at > now() - make_interval(secs => $1), false)
             FROM runs r LEFT JOIN members m ON m.member_id = r.owner
             WHERE NOT r.finished",
        )
        .bind(LEASE.as_secs_f64())
        .fetch_all(reader)
        .await
        else {
            // The reader's connection was cut by a storm: the next look counts.
            return Ok(());
        };
        let now = Instant::now();
        let elapsed = self.last.map(|last| (now - last).as_secs_f64());
        self.last = Some(now);
        // Each holder's runs, and the events it wrote to them since the last look.
        let mut held: HashMap<String, (u64, i64)> = HashMap::new();
        for (run_id, next_seq, owner, _) in &rows {
            let Some(owner) = owner else { continue };
            let entry = held.entry(owner.clone()).or_default();
            entry.0 += 1;
            if let Some((seq, Some(was), _)) = self.runs.get(run_id) {
                if was == owner {
                    entry.1 += next_seq - seq;
                }
            }
        }
        if let Some(elapsed) = elapsed.filter(|e| *e > 0.0) {
            for (owner, (_, wrote)) in &held {
                let rate = *wrote as f64 / elapsed;
                let smoothed = self.rates.entry(owner.clone()).or_insert(rate);
                *smoothed = 0.7 * *smoothed + 0.3 * rate;
            }
            self.rates.retain(|owner, _| held.contains_key(owner));
        }
        let limit_of = |owner: &Option<String>| -> Duration {
            let Some(owner) = owner else {
                return self.limit;
            };
            match (held.get(owner), self.rates.get(owner)) {
                (Some((runs, _)), Some(rate)) if *rate > 0.0 => {
                    let round = *runs as f64 * EVENTS_PER_STEP / rate;
                    self.limit.max(Duration::from_secs_f64(5.0 * round))
                }
                _ => self.limit,
            }
        };
        let mut seen = HashMap::with_capacity(rows.len());
        let mut stuck = Vec::new();
        for (run_id, next_seq, owner, live) in rows {
            let since = match self.runs.remove(&run_id) {
                Some((seq, was, since)) if seq == next_seq && was == owner && live => since,
                _ => now,
            };
            let limit = limit_of(&owner);
            if now - since > limit {
                stuck.push(format!(
                    "{run_id} (held by {owner:?}, {next_seq} events, no progress for {:.0} s, allowed {:.0} s)",
                    (now - since).as_secs_f64(),
                    limit.as_secs_f64()
                ));
            }
            seen.insert(run_id, (next_seq, owner, since));
        }
        self.runs = seen;
        if stuck.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{} run(s) made no progress for over {:?} (or five rounds of their holder through its runs) while a live member held them: {}",
                stuck.len(),
                self.limit,
                stuck.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
            ))
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_survive_kills_and_pauses() {
    if !common::database_up().await {
        return;
    }
    let runs = env_u64("WORLDS_MEMBERS_RUNS", RUNS);
    let steps = env_u64(STEPS_VAR, STEPS);
    let faults = env_u64("WORLDS_MEMBERS_FAULTS", 16) as u32;
    let deadline = Duration::from_secs(env_u64("WORLDS_MEMBERS_DEADLINE_S", DEADLINE.as_secs()));
    let stuck_limit = Duration::from_secs(env_u64("WORLDS_MEMBERS_STUCK_S", STUCK.as_secs()));
    // The first member is spared kills and pauses unless `WORLDS_MEMBERS_SPARE_FIRST=0` (the
    // soak at scale, where a spared member gathers nearly every run).
    let spare_first = env_u64("WORLDS_MEMBERS_SPARE_FIRST", 1) != 0;
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
        let (add, chain) = definitions(None, steps);
        world.register(&add).unwrap();
        world.register(&chain).unwrap();
        let items = (0..runs).map(|n| (n * 100, WorkflowOptions::default()));
        for started in world.execute_batch(&chain, items).await.unwrap() {
            started.unwrap();
        }
        store.close().await.unwrap();
    }

    let mut rng = StdRng::seed_from_u64(env_u64("WORLDS_MEMBERS_SEED", 7));
    // Each member injects a failure between its first claim that takes runs and what follows
    // it: the claim's answer lost, or its first reads failing.
    let spawn = |rng: &mut StdRng| {
        let fault = if rng.random_bool(0.5) {
            "lose-claim"
        } else {
            "fail-reads"
        };
        spawn_member(&schema, &log, steps, &[(FAULT_VAR, fault)])
    };
    // The first member is never killed or paused (connection storms cut it too): the runs its
    // lost claim leased to it are driven by it or by nobody, as for a member that survives
    // the faults of its peers.
    let mut members = Members(vec![spawn_member(
        &schema,
        &log,
        steps,
        &[(FAULT_VAR, "lose-claim")],
    )]);
    members.0.extend((1..MEMBERS).map(|_| spawn(&mut rng)));
    let members = &mut members.0;
    let (mut kills, mut pauses, mut start_pauses, mut storms, mut cut) =
        (0u32, 0u32, 0u32, 0u32, 0u64);
    let reader = PostgresStore::connect(&common::url(), options(&schema))
        .await
        .unwrap();
    let mut watch = StuckWatch {
        limit: stuck_limit,
        runs: HashMap::new(),
        last: None,
        rates: HashMap::new(),
    };
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
            "the workload did not finish in {deadline:?} ({kills} kills, {pauses} pauses, {start_pauses} pauses while starting, {storms} storms)"
        );
        if let Err(stuck) = watch.look(&common::sql(&schema)).await {
            panic!("{stuck} ({kills} kills, {pauses} pauses, {start_pauses} pauses while starting, {storms} storms so far)");
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(700..1500))).await;
        // Faults only while there is work left to disturb, and a few of each (the soak,
        // `scripts/kill-soak`, asks for more with WORLDS_MEMBERS_FAULTS).
        if kills + pauses + start_pauses + storms >= faults {
            continue;
        }
        let victim = rng.random_range(usize::from(spare_first)..members.len());
        match rng.random_range(0..4) {
            0 => {
                signal(&members[victim], "KILL");
                let _ = members[victim].wait();
                members[victim] = spawn(&mut rng);
                kills += 1;
            }
            1 => {
                signal(&members[victim], "STOP");
                // Past its lease: another member takes its runs over meanwhile.
                tokio::time::sleep(LEASE + Duration::from_millis(800)).await;
                signal(&members[victim], "CONT");
                pauses += 1;
            }
            2 => {
                // Killed, restarted, and paused past its lease while it starts (connecting,
                // claiming, reading back what it claimed).
                signal(&members[victim], "KILL");
                let _ = members[victim].wait();
                members[victim] = spawn(&mut rng);
                tokio::time::sleep(Duration::from_millis(rng.random_range(20..400))).await;
                signal(&members[victim], "STOP");
                tokio::time::sleep(LEASE + Duration::from_millis(800)).await;
                signal(&members[victim], "CONT");
                start_pauses += 1;
            }
            _ => {
                cut += storm(&schema).await;
                storms += 1;
            }
        }
    }
    for member in members.iter_mut() {
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
        assert_eq!(output, input + steps, "run {}", run.id);
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
        assert_eq!(completed, steps, "run {}", run.id);
    }
    let takeovers: i64 =
        sqlx::query_scalar("SELECT coalesce(sum(greatest(epoch - 2, 0)), 0)::bigint FROM runs")
            .fetch_one(&common::sql(&schema))
            .await
            .unwrap();
    eprintln!(
        "members: {runs} runs × {steps} steps on {MEMBERS} members in {:.1} s: {} faults ({kills} SIGKILLs, {pauses} SIGSTOP/SIGCONT, {start_pauses} SIGSTOP/SIGCONT while starting, {storms} connection storms cutting {cut} connections), {takeovers} takeovers (claims after a run's first), {lost_attempts} lost attempts, {executions} step executions; 0 runs stuck for {stuck_limit:?} under a live member, 0 recorded steps re-executed, 0 runs lost",
        started.elapsed().as_secs_f64(),
        kills + pauses + start_pauses + storms
    );
    reader.close().await.unwrap();
    common::drop_schema(&schema).await;
}

/// A member records a step's start and is paused (SIGSTOP) before it calls the step's code;
/// its lease expires, another member takes the run over, runs the step and finishes the run.
/// When the paused member wakes (SIGCONT) it must not run the step: another member recorded it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_member_does_not_start_a_step_another_member_recorded() {
    if !common::database_up().await {
        return;
    }
    let schema = common::fresh_schema();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("executions.log");
    let mut paused = Members(vec![spawn_member(
        &schema,
        &log,
        1,
        &[(PAUSE_AFTER_START_VAR, "1")],
    )]);
    let paused = &mut paused.0[0];
    // The member starts a one-step run and stops itself once the step's start is committed.
    let waited = Instant::now();
    while !is_stopped(paused) {
        assert!(
            waited.elapsed() < Duration::from_secs(60),
            "the member never reached the step"
        );
        assert!(
            paused.try_wait().unwrap().is_none(),
            "the member exited before it reached the step"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Another member takes the run over once the paused one's lease expires, and finishes it.
    let store = PostgresStore::connect(&common::url(), options(&schema))
        .await
        .unwrap();
    let world = World::with_store(
        config(&schema),
        Arc::new(SystemClock),
        Arc::new(store.clone()),
    );
    let (add, chain) = definitions(Some(log.clone()), 1);
    world.register(&add).unwrap();
    world.register(&chain).unwrap();
    world.start().await.unwrap();
    let run_id: String = loop {
        let page = store
            .list_runs(&WorkflowQueryFilter::default().limit(1))
            .await
            .unwrap();
        if let Some(run) = page.data.first() {
            break run.id.clone();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let run = world.handle::<u64>(&run_id).await.unwrap();
    let output = tokio::time::timeout(Duration::from_secs(60), run.result())
        .await
        .expect("the other member finishes the run")
        .unwrap();
    assert_eq!(output, 1);

    // The paused member wakes, finds the run gone and exits.
    signal(paused, "CONT");
    let waited = Instant::now();
    while paused.try_wait().unwrap().is_none() {
        assert!(
            waited.elapsed() < Duration::from_secs(60),
            "the woken member did not exit"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let executions: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    let mine = std::process::id().to_string();
    assert_eq!(
        executions.len(),
        1,
        "the step ran once, on the member that recorded it; the woken member ran it too: {executions:?}"
    );
    assert!(
        executions[0].ends_with(&format!(" {mine}")),
        "{executions:?}"
    );

    world.shutdown().await.unwrap();
    store.close().await.unwrap();
    common::drop_schema(&schema).await;
}
