//! Logs: entries from tracing events, daily files on the world's clock, batched writes,
//! minimum level, categories, several worlds in one process, and reading back with filters.

use std::path::Path;
use std::time::Duration;

use tracing::subscriber::DefaultGuard;
use tracing_subscriber::layer::SubscriberExt;
use worlds_engine::prelude::*;
use worlds_engine::telemetry::logs::{
    read_logs, LogCategory, LogEntry, LogLevel, LogQuery, LogsConfig,
};
use worlds_engine::testing::{TestWorld, TestWorldOptions, DEFAULT_START};

const HOUR: i64 = 3_600_000;
const DAY: i64 = 24 * HOUR;

/// A test world (not started) writing its logs to `dir`.
async fn world_logging_to(dir: &Path, logs: LogsConfig, initial_time: i64) -> TestWorld {
    let mut config = WorldConfig::memory();
    config.logs = logs.dir(dir);
    TestWorld::with_options(TestWorldOptions {
        config,
        initial_time,
        autostart: false,
        ..TestWorldOptions::default()
    })
    .await
}

/// Makes the world's layer this thread's subscriber (the tests run on one thread).
fn capture(world: &World) -> DefaultGuard {
    tracing::subscriber::set_default(tracing_subscriber::registry().with(world.logs().layer()))
}

fn messages(entries: &[LogEntry]) -> Vec<&str> {
    entries.iter().map(|e| e.message.as_str()).collect()
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|listing| {
            listing
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[tokio::test]
async fn files_rotate_at_midnight_of_the_worlds_clock() {
    let dir = tempfile::tempdir().unwrap();
    // 2026-01-01T23:59:50Z, virtual.
    let t = world_logging_to(
        dir.path(),
        LogsConfig::default(),
        DEFAULT_START + DAY - 10_000,
    )
    .await;
    let _guard = capture(&t);
    t.start().await.unwrap();
    t.logs()
        .span()
        .in_scope(|| tracing::info!(category = "system", "before midnight"));
    t.advance("20s").await;
    t.logs()
        .span()
        .in_scope(|| tracing::info!(category = "system", "after midnight"));
    t.shutdown().await.unwrap();

    assert_eq!(files_in(dir.path()), ["2026-01-01.log", "2026-01-02.log"]);
    let day = |name: &str| {
        let text = std::fs::read_to_string(dir.path().join(name)).unwrap();
        text.lines()
            .map(|l| serde_json::from_str::<LogEntry>(l).unwrap().message)
            .collect::<Vec<_>>()
    };
    assert_eq!(day("2026-01-01.log"), ["world started", "before midnight"]);
    assert_eq!(day("2026-01-02.log"), ["after midnight", "world stopped"]);
}

#[tokio::test]
async fn entries_are_written_a_batch_per_flush_interval_and_on_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let logs = LogsConfig::default().flush_interval(Duration::from_secs(2));
    let t = world_logging_to(dir.path(), logs, DEFAULT_START).await;
    let _guard = capture(&t);
    t.start().await.unwrap();
    let span = t.logs().span();
    span.in_scope(|| tracing::warn!(category = "workflow", "first"));
    let written = || read_logs(dir.path(), &LogQuery::new()).unwrap();

    t.advance("1999ms").await;
    assert!(written().is_empty(), "nothing before the interval");
    t.advance("1ms").await;
    assert_eq!(messages(&written()), ["world started", "first"]);

    span.in_scope(|| tracing::warn!(category = "workflow", "second"));
    t.advance("1s").await;
    assert_eq!(written().len(), 2);
    t.shutdown().await.unwrap();
    assert_eq!(
        messages(&written()),
        ["world started", "first", "second", "world stopped"],
        "shutdown writes what waits, without waiting for the interval"
    );
}

#[tokio::test]
async fn the_minimum_level_filters_what_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let t = world_logging_to(
        dir.path(),
        LogsConfig::default().level(LogLevel::Warn),
        DEFAULT_START,
    )
    .await;
    let _guard = capture(&t);
    t.logs().span().in_scope(|| {
        tracing::trace!("t");
        tracing::debug!("d");
        tracing::info!("i");
        tracing::warn!("w");
        tracing::error!("e");
    });
    t.logs().flush().unwrap();
    let entries = t.logs().query(LogQuery::new()).await.unwrap();
    assert_eq!(messages(&entries), ["w", "e"]);
    assert_eq!(entries[0].level, LogLevel::Warn);
    assert_eq!(entries[1].level, LogLevel::Error);
}

#[tokio::test]
async fn query_logs_filters_by_category_level_time_and_keeps_the_newest() {
    let dir = tempfile::tempdir().unwrap();
    let logs = LogsConfig::default().level(LogLevel::Debug);
    let t = world_logging_to(dir.path(), logs, DEFAULT_START).await;
    let _guard = capture(&t);
    let span = t.logs().span();
    let log = |f: &dyn Fn()| span.in_scope(f);
    log(&|| tracing::debug!(category = "worker", n = 1, "worker detail"));
    t.advance("1h").await;
    log(&|| tracing::error!(category = "workflow", run_id = "wrun_1", "run broke"));
    t.advance("1h").await;
    log(&|| tracing::warn!(category = "worker", "worker slow"));
    log(&|| tracing::info!(category = "activity", "step done"));
    t.logs().flush().unwrap();

    let q = |query: LogQuery| {
        let dir = dir.path().to_owned();
        async move { read_logs(&dir, &query).unwrap() }
    };
    let workers = t
        .logs()
        .query(LogQuery::new().category(LogCategory::Worker))
        .await
        .unwrap();
    assert_eq!(messages(&workers), ["worker detail", "worker slow"]);
    assert_eq!(workers[0].metadata["n"], 1);
    assert_eq!(workers[0].level, LogLevel::Debug);

    let serious = q(LogQuery::new().level(LogLevel::Warn)).await;
    assert_eq!(messages(&serious), ["run broke", "worker slow"]);
    assert_eq!(serious[0].metadata["run_id"], "wrun_1");
    assert_eq!(serious[0].timestamp, DEFAULT_START + HOUR);

    let recent = q(LogQuery::new().since(DEFAULT_START + HOUR)).await;
    assert_eq!(messages(&recent), ["run broke", "worker slow", "step done"]);
    let serious_workers = q(LogQuery::new()
        .category(LogCategory::Worker)
        .level(LogLevel::Warn))
    .await;
    assert_eq!(messages(&serious_workers), ["worker slow"]);
    let newest = q(LogQuery::new().limit(2)).await;
    assert_eq!(messages(&newest), ["worker slow", "step done"]);
}

#[tokio::test]
async fn engine_events_and_code_in_steps_and_workflows_get_categories() {
    let dir = tempfile::tempdir().unwrap();
    let t = world_logging_to(dir.path(), LogsConfig::default(), DEFAULT_START).await;
    let _guard = capture(&t);
    let charge = activity("charge", |_ctx: ActivityContext, cents: u64| async move {
        tracing::info!(cents, "charging");
        Ok::<_, StepError>(cents)
    });
    let step = charge.clone();
    let checkout = workflow("checkout", move |ctx: WorkflowContext, cents: u64| {
        let step = step.clone();
        async move {
            tracing::info!("checking out");
            Ok::<_, WorkflowError>(ctx.run(&step, cents).await?)
        }
    });
    t.register(&charge).unwrap().register(&checkout).unwrap();
    t.start().await.unwrap();
    let run = t
        .execute(&checkout, 250, WorkflowOptions::default())
        .await
        .unwrap();
    t.run_until_complete(&run.id, "1m").await.unwrap();
    t.shutdown().await.unwrap();

    let entries = t.logs().query(LogQuery::new()).await.unwrap();
    let category = |message: &str| {
        entries
            .iter()
            .find(|e| e.message == message)
            .unwrap_or_else(|| panic!("no entry '{message}' in {entries:?}"))
            .category
    };
    assert_eq!(category("world started"), LogCategory::World);
    assert_eq!(category("checking out"), LogCategory::Workflow);
    assert_eq!(category("charging"), LogCategory::Activity);
    let charging = entries.iter().find(|e| e.message == "charging").unwrap();
    assert_eq!(charging.metadata["cents"], 250);
}

#[tokio::test]
async fn each_world_of_a_process_writes_its_own_events() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut own_only = LogsConfig::default();
    own_only.capture_unattributed = false;
    let a = world_logging_to(dir_a.path(), own_only.clone(), DEFAULT_START).await;
    let b = world_logging_to(dir_b.path(), own_only, DEFAULT_START).await;
    let subscriber = tracing_subscriber::registry()
        .with(a.logs().layer())
        .with(b.logs().layer());
    let _guard = tracing::subscriber::set_default(subscriber);
    let say = activity("say", |_ctx: ActivityContext, word: String| async move {
        tracing::info!("{word}");
        Ok::<_, StepError>(())
    });
    let step = say.clone();
    let speak = workflow("speak", move |ctx: WorkflowContext, word: String| {
        let step = step.clone();
        async move { Ok::<_, WorkflowError>(ctx.run(&step, word).await?) }
    });
    for (world, word) in [(&a, "alpha"), (&b, "beta")] {
        world.register(&say).unwrap().register(&speak).unwrap();
        world.start().await.unwrap();
        let run = world
            .execute(&speak, word.to_owned(), WorkflowOptions::default())
            .await
            .unwrap();
        world.run_until_complete(&run.id, "1m").await.unwrap();
    }
    tracing::info!("belongs to no world");
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();

    let said = |dir: &Path| {
        read_logs(dir, &LogQuery::new().category(LogCategory::Activity))
            .unwrap()
            .into_iter()
            .map(|e| e.message)
            .collect::<Vec<_>>()
    };
    assert_eq!(said(dir_a.path()), ["alpha"]);
    assert_eq!(said(dir_b.path()), ["beta"]);
    let all_a = read_logs(dir_a.path(), &LogQuery::new()).unwrap();
    assert!(all_a.iter().all(|e| e.message != "belongs to no world"));
    assert_eq!(
        all_a
            .iter()
            .filter(|e| e.message == "world started")
            .count(),
        1
    );
}

#[tokio::test]
async fn a_memory_world_without_a_log_directory_writes_no_files() {
    let t = TestWorld::new().await;
    let _guard = capture(&t);
    t.logs()
        .span()
        .in_scope(|| tracing::error!("only on the console"));
    assert_eq!(t.logs().dir(), None);
    t.logs().flush().unwrap();
    assert!(t.logs().query(LogQuery::new()).await.unwrap().is_empty());
}

#[test]
fn a_durable_world_logs_under_its_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = WorldConfig::default();
    config.persistence = Persistence::File;
    config.persistence_path = dir.path().to_owned();
    let world = World::new(config).unwrap();
    assert_eq!(world.logs().dir(), Some(dir.path().join("logs").as_path()));
}
