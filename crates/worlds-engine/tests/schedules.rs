//! Schedules: cron and one-time firings on virtual time, pause and resume, catch-up after
//! downtime, restarts on a file directory, exactly-once firing with two worlds sharing one, and
//! a schedule that stops naming a last run a retention sweep removed.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::wrapped_store::WrappedStore;
use serde_json::{json, Value};
use worlds_engine::clock::{Millis, VirtualClock};
use worlds_engine::duration::Dur;
use worlds_engine::prelude::*;
use worlds_engine::schedule::ScheduleConfig;
use worlds_engine::schedule::{firing_workflow_id, CatchUp, Firing, Schedule};
use worlds_engine::store::{FileStore, HybridStore, MemoryStore, Store};
use worlds_engine::testing::{TestWorld, TestWorldOptions, DEFAULT_START as T0};
use worlds_engine::WorkflowState;
use worlds_engine::{ErrorKind, ResolveData};
use worlds_engine::{PruneReport, WorkflowQueryFilter};

const MIN: Millis = 60_000;
const HOUR: Millis = 60 * MIN;
const DAY: Millis = 24 * HOUR;

/// A workflow that returns its input.
fn report() -> Workflow<Value, Value> {
    workflow("report", |_ctx: WorkflowContext, input: Value| async move {
        Ok::<_, WorkflowError>(input)
    })
}

async fn world_on(store: Option<Arc<dyn Store>>, start: Millis, autostart: bool) -> TestWorld {
    let test = TestWorld::with_options(TestWorldOptions {
        initial_time: start,
        store,
        autostart: false,
        config: common::memory_config(),
        ..TestWorldOptions::default()
    })
    .await;
    test.register(report()).unwrap();
    if autostart {
        test.start().await.unwrap();
    }
    test
}

async fn started_world() -> TestWorld {
    world_on(None, T0, true).await
}

/// The runs of `report`, oldest first, with their inputs.
async fn runs(world: &World) -> Vec<WorkflowState> {
    let mut runs = world
        .query_workflows(
            WorkflowQueryFilter::new()
                .workflow_name("report")
                .resolve_data(ResolveData::All),
        )
        .await
        .unwrap();
    runs.reverse();
    runs
}

async fn workflow_ids(world: &World) -> Vec<String> {
    runs(world)
        .await
        .into_iter()
        .map(|r| r.workflow_id)
        .collect()
}

fn ids_at(schedule: &str, times: impl IntoIterator<Item = Millis>) -> Vec<String> {
    times
        .into_iter()
        .map(|at| firing_workflow_id(schedule, at))
        .collect()
}

#[tokio::test]
async fn a_daily_schedule_fires_every_day_at_nine() {
    let test = started_world().await;
    let stored = test
        .schedules()
        .cron(
            "daily-job",
            "report",
            json!({ "kind": "daily" }),
            "0 9 * * *",
        )
        .await
        .unwrap();
    assert_eq!(stored.next_execution, Some(T0 + 9 * HOUR));
    assert_eq!(stored.cron_expression.as_deref(), Some("0 9 * * *"));
    assert!(!stored.paused);

    test.advance("72h").await;
    let nine = |day: Millis| T0 + day * DAY + 9 * HOUR;
    assert_eq!(
        workflow_ids(&test).await,
        ids_at("daily-job", [nine(0), nine(1), nine(2)])
    );
    for run in runs(&test).await {
        assert_eq!(run.status, RunStatus::Completed, "{}", run.workflow_id);
        assert_eq!(run.output.unwrap().to_value(), json!({ "kind": "daily" }));
    }
    let config = test.schedules().get("daily-job").await.unwrap();
    assert_eq!(config.total_executions, 3);
    assert_eq!(config.last_execution, Some(nine(2)));
    assert_eq!(config.next_execution, Some(nine(3)));
    assert!(config.pending_firings.is_empty());
    let last = runs(&test).await.pop().unwrap();
    assert_eq!(config.last_run_id.as_deref(), Some(last.id.as_str()));
    assert_eq!(test.schedules().list().await.unwrap(), vec![config]);
}

#[tokio::test]
async fn a_paused_schedule_does_not_fire_and_resumes_from_the_next_time() {
    let test = started_world().await;
    test.schedules()
        .cron("hourly", "report", json!(1), "0 * * * *")
        .await
        .unwrap();
    test.advance("1h").await;
    assert_eq!(workflow_ids(&test).await.len(), 1);

    let paused = test.schedules().pause("hourly").await.unwrap();
    assert!(paused.paused);
    test.advance("190m").await;
    assert_eq!(workflow_ids(&test).await.len(), 1, "paused: no firing");

    // Resumed at 04:10: the 02:00–04:00 firings are not made up for; the next is 05:00.
    let resumed = test.schedules().resume("hourly").await.unwrap();
    assert!(!resumed.paused);
    assert_eq!(resumed.next_execution, Some(T0 + 5 * HOUR));
    test.advance("1h").await;
    assert_eq!(
        workflow_ids(&test).await,
        ids_at("hourly", [T0 + HOUR, T0 + 5 * HOUR])
    );
    assert_eq!(
        test.schedules()
            .get("hourly")
            .await
            .unwrap()
            .total_executions,
        2
    );

    let missing = test.schedules().pause("nope").await.unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::NotFound);
}

#[tokio::test]
async fn a_one_time_schedule_fires_once_and_is_deleted() {
    let test = started_world().await;
    let at = T0 + 30 * MIN;
    let id = test
        .schedules()
        .once("report", json!("once"), at)
        .await
        .unwrap();
    assert!(id.starts_with("sched_"), "{id}");
    let stored = test.schedules().get(&id).await.unwrap();
    assert!(stored.is_once());
    assert_eq!(stored.next_execution, Some(at));

    test.advance("2h").await;
    let fired = runs(&test).await;
    assert_eq!(fired.len(), 1);
    assert_eq!(fired[0].workflow_id, firing_workflow_id(&id, at));
    assert_eq!(fired[0].status, RunStatus::Completed);
    assert_eq!(
        test.schedules().get(&id).await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert!(test.schedules().list().await.unwrap().is_empty());

    // A time already past fires at once.
    let past = test
        .schedules()
        .once("report", json!("late"), T0)
        .await
        .unwrap();
    test.settle().await;
    let ids = workflow_ids(&test).await;
    assert_eq!(ids.len(), 2);
    assert_eq!(ids[1], firing_workflow_id(&past, T0));
}

#[tokio::test]
async fn an_input_function_is_evaluated_at_each_firing() {
    let test = started_world().await;
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    test.schedules()
        .add(
            Schedule::cron("numbered", "report", "*/10 * * * *").input_fn(
                move |firing: &Firing| {
                    let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
                    json!({ "n": n, "at": firing.at, "schedule": firing.schedule_id })
                },
            ),
        )
        .await
        .unwrap();
    let stored = test.schedules().get("numbered").await.unwrap();
    assert!(stored.input_fn);
    assert_eq!(stored.input, None);

    test.advance("30m").await;
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    let inputs: Vec<Value> = runs(&test)
        .await
        .into_iter()
        .map(|r| r.input.unwrap().to_value())
        .collect();
    let expected: Vec<Value> = (1..=3)
        .map(|n| json!({ "n": n, "at": T0 + n * 10 * MIN, "schedule": "numbered" }))
        .collect();
    assert_eq!(inputs, expected);
}

#[tokio::test]
async fn a_time_zone_schedule_follows_daylight_saving_time() {
    // New York springs forward on 2026-03-08: 02:30 does not exist that night.
    let start = "2026-03-07T12:00:00Z"
        .parse::<jiff::Timestamp>()
        .unwrap()
        .as_millisecond();
    let test = world_on(None, start, true).await;
    test.schedules()
        .add(Schedule::cron("nightly", "report", "30 2 * * *").time_zone("America/New_York"))
        .await
        .unwrap();
    test.advance("72h").await;
    let utc = |text: &str| text.parse::<jiff::Timestamp>().unwrap().as_millisecond();
    assert_eq!(
        workflow_ids(&test).await,
        ids_at(
            "nightly",
            [
                utc("2026-03-08T07:00:00Z"), // 02:30 does not exist on the 8th: 03:00 EDT
                utc("2026-03-09T06:30:00Z"), // 02:30 EDT
                utc("2026-03-10T06:30:00Z"),
            ]
        )
    );
}

#[tokio::test]
async fn invalid_schedules_are_refused_with_what_was_wrong() {
    let test = started_world().await;
    let err = test
        .schedules()
        .cron("bad", "report", (), "0 9 32 * *")
        .await
        .unwrap_err();
    assert_eq!(err.http_status(), 400);
    assert!(
        err.to_string().contains("day-of-month field \"32\""),
        "{err}"
    );

    let err = test
        .schedules()
        .cron("bad", "report", (), "0 0 31 2 *")
        .await
        .unwrap_err();
    assert_eq!(err.http_status(), 400);
    assert!(err.to_string().contains("no date that exists"), "{err}");

    let err = test
        .schedules()
        .add(Schedule::cron("bad", "report", "0 9 * * *").time_zone("Nowhere/City"))
        .await
        .unwrap_err();
    assert!(err.to_string().starts_with("invalid time_zone"), "{err}");

    let err = test
        .schedules()
        .cron("bad", "no-such-workflow", (), "0 9 * * *")
        .await
        .unwrap_err();
    assert_eq!(err.http_status(), 404);

    let err = test
        .schedules()
        .cron("a/b", "report", (), "0 9 * * *")
        .await
        .unwrap_err();
    assert!(err.to_string().starts_with("invalid id"), "{err}");

    let err = test
        .schedules()
        .add(Schedule::cron("bad", "report", "* * * * *").catch_up(CatchUp::All { max: 0 }))
        .await
        .unwrap_err();
    assert!(err.to_string().starts_with("invalid catch_up"), "{err}");

    let typed = workflow("typed", |_ctx: WorkflowContext, n: u64| async move {
        Ok::<_, WorkflowError>(n)
    });
    test.register(typed).unwrap();
    let err = test
        .schedules()
        .cron("bad", "typed", "not a number", "0 9 * * *")
        .await
        .unwrap_err();
    assert!(err.to_string().starts_with("invalid input"), "{err}");
    assert!(test.schedules().list().await.unwrap().is_empty());
}

#[tokio::test]
async fn declaring_a_schedule_again_keeps_its_state() {
    let test = started_world().await;
    test.schedules()
        .cron("daily", "report", json!(1), "0 9 * * *")
        .await
        .unwrap();
    test.advance("24h").await;
    test.schedules().pause("daily").await.unwrap();
    let again = test
        .schedules()
        .cron("daily", "report", json!(2), "0 9 * * *")
        .await
        .unwrap();
    assert!(again.paused);
    assert_eq!(again.total_executions, 1);
    assert_eq!(again.input.unwrap().to_value(), json!(2));
    assert_eq!(again.next_execution, Some(T0 + DAY + 9 * HOUR));
    // A new expression starts from now.
    let changed = test
        .schedules()
        .cron("daily", "report", json!(2), "0 10 * * *")
        .await
        .unwrap();
    assert_eq!(changed.next_execution, Some(T0 + DAY + 10 * HOUR));
    test.schedules().delete("daily").await.unwrap();
    assert_eq!(
        test.schedules().delete("daily").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
}

/// A schedule made at T0 by one world; a second world on the same store starts at 05:30 (the
/// first was down from 00:00): `catch_up` decides what the missed 01:00–05:00 firings do.
async fn after_downtime(policy: CatchUp) -> (Vec<String>, ScheduleConfig) {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let schedule = Schedule::cron("hourly", "report", "0 * * * *").catch_up(policy);
    let first = world_on(Some(store.clone()), T0, true).await;
    first.schedules().add(schedule.clone()).await.unwrap();
    first.shutdown().await.unwrap();
    drop(first);

    let second = world_on(Some(store), T0 + 5 * HOUR + 30 * MIN, false).await;
    // A program declares its schedules at each start; that keeps the missed due time.
    second.schedules().add(schedule).await.unwrap();
    second.start().await.unwrap();
    second.settle().await;
    let fired = workflow_ids(&second).await;
    let config = second.schedules().get("hourly").await.unwrap();
    assert_eq!(config.next_execution, Some(T0 + 6 * HOUR), "{policy:?}");
    second.shutdown().await.unwrap();
    (fired, config)
}

#[tokio::test]
async fn catch_up_latest_starts_only_the_most_recent_missed_firing() {
    let (fired, config) = after_downtime(CatchUp::Latest).await;
    assert_eq!(fired, ids_at("hourly", [T0 + 5 * HOUR]));
    assert_eq!(config.total_executions, 1);
}

#[tokio::test]
async fn catch_up_skip_starts_none_of_the_missed_firings() {
    let (fired, config) = after_downtime(CatchUp::Skip).await;
    assert!(fired.is_empty(), "{fired:?}");
    assert_eq!(config.total_executions, 0);
}

#[tokio::test]
async fn catch_up_all_starts_the_missed_firings_up_to_its_cap() {
    let (fired, config) = after_downtime(CatchUp::All { max: 3 }).await;
    assert_eq!(
        fired,
        ids_at("hourly", [T0 + 3 * HOUR, T0 + 4 * HOUR, T0 + 5 * HOUR])
    );
    assert_eq!(config.total_executions, 3);
    let (fired, _) = after_downtime(CatchUp::All { max: 100 }).await;
    assert_eq!(fired, ids_at("hourly", (1..=5).map(|h| T0 + h * HOUR)));
}

fn file_store(dir: &Path) -> Arc<dyn Store> {
    Arc::new(FileStore::open(dir).unwrap())
}

#[tokio::test]
async fn schedules_survive_a_restart_on_a_file_directory() {
    let dir = tempfile::tempdir().unwrap();
    {
        let first = world_on(Some(file_store(dir.path())), T0, true).await;
        first
            .schedules()
            .cron("hourly", "report", json!("h"), "0 * * * *")
            .await
            .unwrap();
        first
            .schedules()
            .cron("sleepy", "report", json!("s"), "0 * * * *")
            .await
            .unwrap();
        first.schedules().pause("sleepy").await.unwrap();
        first.advance("1h").await;
        assert_eq!(workflow_ids(&first).await, ids_at("hourly", [T0 + HOUR]));
        first.shutdown().await.unwrap();
    }
    assert!(dir.path().join("schedules/hourly.json").is_file());

    // Back at 03:30: the schedules are read from disk, and the missed firing runs (latest).
    let second = world_on(Some(file_store(dir.path())), T0 + 3 * HOUR + 30 * MIN, true).await;
    second.settle().await;
    let hourly = second.schedules().get("hourly").await.unwrap();
    assert_eq!(hourly.total_executions, 2);
    assert_eq!(hourly.last_execution, Some(T0 + 3 * HOUR));
    assert_eq!(hourly.next_execution, Some(T0 + 4 * HOUR));
    assert!(second.schedules().get("sleepy").await.unwrap().paused);
    second.advance("30m").await;
    assert_eq!(
        workflow_ids(&second).await,
        ids_at("hourly", [T0 + HOUR, T0 + 3 * HOUR, T0 + 4 * HOUR])
    );
    second.shutdown().await.unwrap();
}

fn file_config(dir: &Path) -> WorldConfig {
    let mut config = WorldConfig::default();
    config.persistence = Persistence::File;
    config.persistence_path = dir.to_path_buf();
    config.shared_poll_interval = Duration::from_millis(25).into();
    config.failure_strategy = FailureStrategy::Ignore;
    config
}

/// Waits (in real time, bounded) until `check` holds.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !check().await {
        assert!(
            std::time::Instant::now() < deadline,
            "gave up waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_worlds_on_one_directory_start_each_firing_once() {
    let dir = tempfile::tempdir().unwrap();
    // One virtual clock for both: each jump wakes both worlds at the same firing.
    let clock = VirtualClock::new(T0);
    let open = || {
        let world = World::with_clock(file_config(dir.path()), Arc::new(clock.clone())).unwrap();
        world.register(report()).unwrap();
        world
    };
    let (a, b) = (open(), open());
    a.schedules()
        .cron("every-minute", "report", json!("tick"), "* * * * *")
        .await
        .unwrap();
    a.start().await.unwrap();
    b.start().await.unwrap();
    // Let b's poll see the schedule, so that both wait for the same firing.
    clock.advance(Duration::from_millis(30));

    const FIRINGS: i64 = 8;
    for i in 1..=FIRINGS {
        clock.set(T0 + i * MIN);
        eventually("the firing to be settled", || async {
            let s = a.schedules().get("every-minute").await.unwrap();
            s.total_executions == i as u64 && s.pending_firings.is_empty()
        })
        .await;
    }
    let expected = ids_at("every-minute", (1..=FIRINGS).map(|i| T0 + i * MIN));
    assert_eq!(workflow_ids(&a).await, expected);
    assert_eq!(workflow_ids(&b).await, expected);
    let config = b.schedules().get("every-minute").await.unwrap();
    assert_eq!(config.total_executions, FIRINGS as u64);
    assert_eq!(config.next_execution, Some(T0 + (FIRINGS + 1) * MIN));
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

// ---- two real processes catching up one schedule --------------------------------------------

const SHARED_DIR_VAR: &str = "WORLDS_SCHEDULE_CHILD_DIR";

fn real_now() -> Millis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as Millis
}

fn catching_up() -> Schedule {
    Schedule::cron("hourly-shared", "report", "0 * * * *").catch_up(CatchUp::All { max: 5 })
}

/// One process's part: open the directory on the real clock, declare the schedule (keeping
/// its stored state), run for a moment, stop.
async fn catch_up_in_this_process(dir: &Path) {
    let world = World::new(file_config(dir)).unwrap();
    world.register(report()).unwrap();
    world.schedules().add(catching_up()).await.unwrap();
    world.start().await.unwrap();
    // Until the five missed firings are started and settled, by this process or the other.
    eventually("the missed firings to be settled", || async {
        let s = world.schedules().get("hourly-shared").await.unwrap();
        s.total_executions == 5 && s.pending_firings.is_empty()
    })
    .await;
    world.shutdown().await.unwrap();
}

/// The child role of `two_processes_catch_up_each_missed_firing_once`.
#[test]
#[ignore = "child process of `two_processes_catch_up_each_missed_firing_once`; does nothing when run directly"]
fn schedules_child_entry() {
    let Ok(dir) = std::env::var(SHARED_DIR_VAR) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(catch_up_in_this_process(Path::new(&dir)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_catch_up_each_missed_firing_once() {
    let dir = tempfile::tempdir().unwrap();
    // The schedule was made six hours ago by a world that then stopped: five or six hourly
    // firings were missed, and `All { max: 5 }` asks for the last five of them.
    let made_at = real_now() - 6 * HOUR;
    {
        let past = world_on(Some(file_store(dir.path())), made_at, true).await;
        past.schedules().add(catching_up()).await.unwrap();
        past.shutdown().await.unwrap();
    }

    // Two processes come back at once and race for the same missed firings.
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "schedules_child_entry",
            "--nocapture",
            "--include-ignored",
        ])
        .env(SHARED_DIR_VAR, dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    catch_up_in_this_process(dir.path()).await;
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "the other process failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );

    let store = FileStore::open_read_only(dir.path()).unwrap();
    let runs = worlds_engine::store::RunStore::list_runs(
        &store,
        &WorkflowQueryFilter::new()
            .workflow_name("report")
            .limit(100),
    )
    .await
    .unwrap()
    .data;
    let mut ids: Vec<String> = runs.into_iter().map(|r| r.workflow_id).collect();
    ids.sort();
    let mut unique = ids.clone();
    unique.dedup();
    assert_eq!(ids.len(), 5, "{ids:?}");
    assert_eq!(unique, ids, "a firing started twice");
    assert!(
        ids.iter().all(|id| id.starts_with("sched:hourly-shared:")),
        "{ids:?}"
    );
}

// ---- retention: a schedule stops linking to a last run a sweep removed ----

/// Where a world on schedules and retention keeps its runs and schedules.
#[derive(Debug, Clone, Copy)]
enum Backend {
    Memory,
    File,
    Hybrid,
}

/// A started world on `backend` (in `dir` when durable) that keeps completed runs for a day
/// and sweeps only when asked.
async fn retention_world(backend: Backend, dir: &Path) -> TestWorld {
    let store: Option<Arc<dyn Store>> = match backend {
        Backend::Memory => None,
        Backend::File => Some(file_store(dir)),
        Backend::Hybrid => Some(Arc::new(HybridStore::open(dir).unwrap())),
    };
    retention_world_on(store).await
}

async fn retention_world_on(store: Option<Arc<dyn Store>>) -> TestWorld {
    let mut config = common::memory_config();
    config.retention.completed = Dur(Duration::from_millis(DAY as u64));
    config.retention.sweep_interval = Dur(Duration::from_millis(1000 * DAY as u64));
    let test = TestWorld::with_options(TestWorldOptions {
        initial_time: T0,
        store,
        autostart: false,
        config,
        ..TestWorldOptions::default()
    })
    .await;
    test.register(report()).unwrap();
    test.start().await.unwrap();
    test
}

/// Sweeps now, to the end.
async fn sweep(test: &TestWorld) -> PruneReport {
    let id = test.world().prune().await.unwrap();
    test.world().prune_report_when_done(&id).await.unwrap()
}

async fn is_gone(test: &TestWorld, run_id: &str) -> bool {
    matches!(test.query(run_id).await, Err(e) if e.kind() == ErrorKind::NotFound)
}

/// Waits until schedule `id` has started the run of its firing at `at` and has none pending.
async fn caught_up(test: &TestWorld, id: &str, at: Millis) {
    eventually(&format!("{id}'s firing at {at}"), || async {
        let schedule = test.schedules().get(id).await.unwrap();
        schedule.last_execution == Some(at) && schedule.pending_firings.is_empty()
    })
    .await;
}

/// `hourly` fires at 01:00 and is paused; two days later its run is old enough to go. Returns
/// that run's id and the schedule as it is then.
async fn paused_after_one_firing(test: &TestWorld) -> (String, ScheduleConfig) {
    test.schedules()
        .cron("hourly", "report", json!("h"), "0 * * * *")
        .await
        .unwrap();
    test.advance("1h").await;
    caught_up(test, "hourly", T0 + HOUR).await;
    test.schedules().pause("hourly").await.unwrap();
    test.advance("48h").await;
    let schedule = test.schedules().get("hourly").await.unwrap();
    let run = schedule.last_run_id.clone().expect("it fired");
    (run, schedule)
}

async fn a_sweep_unlinks_a_schedules_removed_last_run(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let test = retention_world(backend, dir.path()).await;
    // `early` fires at 00:30 and is paused; `often` fires every hour, so its last run is young.
    test.schedules()
        .cron("early", "report", json!("e"), "30 0 * * *")
        .await
        .unwrap();
    test.schedules()
        .cron("often", "report", json!("o"), "0 * * * *")
        .await
        .unwrap();
    test.advance("1h").await;
    // (A durable store's schedule loop may still be starting the firings.)
    caught_up(&test, "early", T0 + 30 * MIN).await;
    test.schedules().pause("early").await.unwrap();
    test.advance("48h").await;
    caught_up(&test, "often", T0 + 49 * HOUR).await;
    let early = test.schedules().get("early").await.unwrap();
    let often = test.schedules().get("often").await.unwrap();
    let removed = early.last_run_id.clone().expect("early fired");

    let report = sweep(&test).await;
    assert!(report.removed >= 2, "{backend:?}: {report:?}");
    assert!(is_gone(&test, &removed).await, "{backend:?}");
    let unlinked = test.schedules().get("early").await.unwrap();
    assert_eq!(unlinked.last_run_id, None, "{backend:?}");
    assert_eq!(
        unlinked.removed_last_run_id.as_deref(),
        Some(removed.as_str())
    );
    // Nothing else changes: still paused, its count, last and next times.
    let mut expected = early.clone();
    expected.last_run_id = None;
    expected.removed_last_run_id = Some(removed.clone());
    assert_eq!(unlinked, expected, "{backend:?}");
    assert_eq!(test.schedules().list().await.unwrap()[0], expected);
    // A last run the policy keeps stays linked.
    assert_eq!(test.schedules().get("often").await.unwrap(), often);
    test.query(often.last_run_id.as_deref().unwrap())
        .await
        .unwrap();

    if !matches!(backend, Backend::Memory) {
        let file = std::fs::read(dir.path().join("schedules/early.json")).unwrap();
        let stored: Value = serde_json::from_slice(&file).unwrap();
        assert_eq!(stored["schedule"]["last_run_id"], Value::Null, "{stored}");
        assert_eq!(stored["schedule"]["removed_last_run_id"], json!(removed));
    }

    // The next firing names its own run again.
    test.schedules().resume("early").await.unwrap();
    test.advance("24h").await;
    caught_up(&test, "early", T0 + 3 * DAY + 30 * MIN).await;
    let fired = test.schedules().get("early").await.unwrap();
    assert_eq!(fired.total_executions, 2);
    assert_eq!(fired.removed_last_run_id, None);
    let next = fired.last_run_id.expect("it fired again");
    assert_ne!(next, removed);
    test.query(&next).await.unwrap();
    test.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_sweep_unlinks_a_schedules_removed_last_run_in_memory() {
    a_sweep_unlinks_a_schedules_removed_last_run(Backend::Memory).await;
}

#[tokio::test]
async fn a_sweep_unlinks_a_schedules_removed_last_run_on_a_file_directory() {
    a_sweep_unlinks_a_schedules_removed_last_run(Backend::File).await;
}

#[tokio::test]
async fn a_sweep_unlinks_a_schedules_removed_last_run_on_a_hybrid_directory() {
    a_sweep_unlinks_a_schedules_removed_last_run(Backend::Hybrid).await;
}

/// The schedule as another process would store it after settling a newer firing: `run` as its
/// last run.
async fn fired_again(test: &TestWorld, schedule: &ScheduleConfig) -> (String, ScheduleConfig) {
    let run = test
        .execute(&report(), json!("newer"), WorkflowOptions::default())
        .await
        .unwrap()
        .id;
    let mut newer = schedule.clone();
    newer.last_run_id = Some(run.clone());
    newer.total_executions += 1;
    (run, newer)
}

#[tokio::test]
async fn a_newer_last_run_written_while_a_sweep_unlinks_is_kept() {
    let store = Arc::new(WrappedStore::default());
    let test = retention_world_on(Some(store.clone())).await;
    let (removed, schedule) = paused_after_one_firing(&test).await;
    let (_, newer) = fired_again(&test, &schedule).await;
    // Written once the sweep has removed runs and read the schedules, before it changes them.
    *store.put_after_removal.lock().unwrap() = Some(newer.clone());

    let report = sweep(&test).await;
    assert!(report.removed >= 1, "{report:?}");
    assert!(
        store.put_after_removal.lock().unwrap().is_none(),
        "the sweep read the schedules after removing runs"
    );
    assert!(is_gone(&test, &removed).await);
    assert_eq!(test.schedules().get("hourly").await.unwrap(), newer);
    test.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_file_directory_a_newer_last_run_written_meanwhile_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let test = retention_world(Backend::File, dir.path()).await;
    let (removed, schedule) = paused_after_one_firing(&test).await;
    let (_, newer) = fired_again(&test, &schedule).await;

    // Another process holds the schedules' lock, as while it settles a firing: the sweep
    // removes the run, reads the schedules, and waits for the lock to change `hourly`.
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.path().join("schedules/.lock"))
        .unwrap();
    lock.lock().unwrap();
    let sweep = test.world().prune().await.unwrap();
    // Watched on disk, so that nothing reads the run while the sweep removes it: its log goes
    // with it. Then time for the sweep to read the schedules and wait for the lock.
    let log = common::store_events::log_of(dir.path(), &removed);
    eventually("the run's removal", || async { !log.exists() }).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // It stores the newer firing and lets go.
    let path = dir.path().join("schedules/hourly.json");
    let next = dir.path().join("schedules/hourly.json.next");
    let record = json!({ "format": 1, "schedule": newer });
    std::fs::write(&next, serde_json::to_vec_pretty(&record).unwrap()).unwrap();
    std::fs::rename(&next, &path).unwrap();
    lock.unlock().unwrap();

    let report = test.world().prune_report_when_done(&sweep).await.unwrap();
    assert!(report.removed >= 1, "{report:?}");
    assert_eq!(test.schedules().get("hourly").await.unwrap(), newer);
    test.shutdown().await.unwrap();
}
