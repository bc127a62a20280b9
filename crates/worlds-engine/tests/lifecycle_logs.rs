//! A durable world's own records reach `logs/` in its directory with no subscriber installed:
//! runs created, failed, quarantined and resumed after a restart, and the start of the world
//! with the absolute path of its data and how many runs it resumed.

use std::path::Path;
use std::sync::Arc;

use worlds_engine::clock::VirtualClock;
use worlds_engine::prelude::*;
use worlds_engine::telemetry::logs::{LogCategory, LogEntry, LogLevel, LogQuery};
use worlds_engine::testing::DEFAULT_START;
use worlds_engine::Persistence;

fn file_world(dir: &Path) -> World {
    let mut config = WorldConfig::default();
    config.persistence = Persistence::File;
    config.persistence_path = dir.to_owned();
    World::with_clock(config, Arc::new(VirtualClock::new(DEFAULT_START))).unwrap()
}

fn breaks() -> Workflow<u64, u64> {
    workflow("breaks", |_ctx: WorkflowContext, _n: u64| async move {
        Err::<u64, _>(WorkflowError::msg("the order is gone"))
    })
    .with_options(WorkflowOptions::new().failure_strategy(FailureStrategy::Quarantine))
}

fn naps() -> Workflow<u64, u64> {
    workflow("naps", |ctx: WorkflowContext, n: u64| async move {
        ctx.sleep("1h").await?;
        Ok::<_, WorkflowError>(n)
    })
}

fn with_message<'a>(entries: &'a [LogEntry], message: &str) -> Vec<&'a LogEntry> {
    entries.iter().filter(|e| e.message == message).collect()
}

#[tokio::test]
async fn a_file_world_logs_its_runs_and_its_restart_without_a_subscriber() {
    let dir = tempfile::tempdir().unwrap();

    let first = file_world(dir.path());
    first.register(breaks()).unwrap().register(naps()).unwrap();
    first.start().await.unwrap();
    let broken = first
        .execute(&breaks(), 1, WorkflowOptions::new())
        .await
        .unwrap();
    assert!(broken.result().await.is_err());
    let napping = first
        .execute(&naps(), 2, WorkflowOptions::new())
        .await
        .unwrap();
    first.shutdown().await.unwrap();
    drop(first);

    // A restart in the same directory: the napping run is still unfinished.
    let second = file_world(dir.path());
    second.register(breaks()).unwrap().register(naps()).unwrap();
    second.start().await.unwrap();
    second.logs().flush().unwrap();
    let entries = second.logs().query(LogQuery::new()).await.unwrap();
    let dump = || format!("{entries:#?}");

    let created = with_message(&entries, "run created");
    assert_eq!(created.len(), 2, "{}", dump());
    assert_eq!(created[0].metadata["run_id"], broken.id.as_str());
    assert_eq!(created[0].metadata["workflow"], "breaks");
    assert_eq!(created[1].category, LogCategory::Workflow);

    let failed = with_message(&entries, "run failed");
    assert_eq!(failed.len(), 1, "{}", dump());
    assert_eq!(failed[0].level, LogLevel::Warn);
    assert_eq!(failed[0].metadata["run_id"], broken.id.as_str());
    assert!(failed[0].metadata["error"]
        .as_str()
        .unwrap()
        .contains("the order is gone"));
    let quarantined = entries
        .iter()
        .filter(|e| e.message.starts_with("run quarantined"))
        .collect::<Vec<_>>();
    assert_eq!(quarantined.len(), 1, "{}", dump());
    assert_eq!(quarantined[0].level, LogLevel::Error);

    let resumed = with_message(&entries, "run resumed from its history");
    assert_eq!(resumed.len(), 1, "{}", dump());
    assert_eq!(resumed[0].metadata["run_id"], napping.id.as_str());
    assert_eq!(resumed[0].metadata["workflow"], "naps");
    let summary = with_message(&entries, "resumed unfinished runs");
    assert_eq!(summary.len(), 1, "{}", dump());
    assert_eq!(summary[0].metadata["runs"], 1);

    // Both starts logged where the data lives, in full, and what they resumed.
    let started = with_message(&entries, "world started");
    assert_eq!(started.len(), 2, "{}", dump());
    let absolute = std::fs::canonicalize(dir.path()).unwrap();
    for entry in &started {
        assert_eq!(entry.category, LogCategory::World);
        assert_eq!(entry.metadata["dir"], absolute.to_str().unwrap());
    }
    assert_eq!(started[0].metadata["resumed_runs"], 0);
    assert_eq!(started[1].metadata["resumed_runs"], 1);
    assert_eq!(second.data_dir(), Some(absolute));
    assert_eq!(
        with_message(&entries, "world stopped").len(),
        1,
        "{}",
        dump()
    );
    second.shutdown().await.unwrap();
}

/// With the world's layer installed as well, each record is still written once.
#[tokio::test]
async fn installing_the_log_layer_does_not_double_the_records() {
    use tracing_subscriber::layer::SubscriberExt;

    let dir = tempfile::tempdir().unwrap();
    let world = file_world(dir.path());
    let subscriber = tracing_subscriber::registry().with(world.logs().layer());
    let _guard = tracing::subscriber::set_default(subscriber);
    world.register(breaks()).unwrap();
    world.start().await.unwrap();
    let run = world
        .execute(&breaks(), 1, WorkflowOptions::new())
        .await
        .unwrap();
    assert!(run.result().await.is_err());
    world.shutdown().await.unwrap();
    let entries = world.logs().query(LogQuery::new()).await.unwrap();
    for message in [
        "world started",
        "run created",
        "run failed",
        "world stopped",
    ] {
        assert_eq!(
            with_message(&entries, message).len(),
            1,
            "{message}: {entries:#?}"
        );
    }
}
