//! Options as users write them: the specification's camelCase names are read, an unknown key
//! is refused by name, and options stored in a history still load whatever keys they carry.

mod common;

use common::order_flow;

use std::sync::Arc;
use std::time::Duration;

use common::{add_one, Counter};
use worlds_engine::http::WebhookServerOptions;
use worlds_engine::prelude::*;
use worlds_engine::retry::{Backoff, RetryConfig};
use worlds_engine::store::{EventStore, MemoryStore, RunStore, Store};
use worlds_engine::telemetry::logs::LogsConfig;
use worlds_engine::testing::{TestWorld, TestWorldOptions, DEFAULT_START};
use worlds_engine::WorkflowQueryFilter;
use worlds_engine::{Event, EventKind, FailureStrategy, Persistence, RunStatus};

#[test]
fn the_world_config_reads_every_name_of_the_specification() {
    let config: WorldConfig = serde_json::from_str(
        r#"{"minWorkers":5,"maxWorkers":20,"scaleThreshold":0.8,"scaleDownThreshold":0.2,
            "persistence":"file","persistencePath":"/srv/flows","failureStrategy":"quarantine",
            "heartbeatInterval":1000,"heartbeatTimeout":"9s",
            "webhookBaseUrl":"https://example.com/hooks"}"#,
    )
    .unwrap();
    assert_eq!((config.min_workers, config.max_workers), (5, 20));
    assert_eq!(
        (config.scale_threshold, config.scale_down_threshold),
        (0.8, 0.2)
    );
    assert_eq!(config.persistence, Persistence::File);
    assert_eq!(config.persistence_path.to_str(), Some("/srv/flows"));
    assert_eq!(config.failure_strategy, FailureStrategy::Quarantine);
    assert_eq!(config.heartbeat_interval.0, Duration::from_secs(1));
    assert_eq!(config.heartbeat_timeout.0, Duration::from_secs(9));
    assert_eq!(config.webhook_base_url, "https://example.com/hooks");
}

#[test]
fn workflow_options_read_every_name_of_the_specification() {
    let opts: WorkflowOptions = serde_json::from_str(
        r#"{"workflowId":"order-42","taskQueue":"billing","priority":3,
            "failureStrategy":"compensate","maxRetries":7,"timeout":"1h",
            "idempotencyKey":"req-1","onConflict":"use_existing"}"#,
    )
    .unwrap();
    assert_eq!(opts.workflow_id.as_deref(), Some("order-42"));
    assert_eq!(opts.task_queue.as_deref(), Some("billing"));
    assert_eq!(opts.priority, Some(3));
    assert_eq!(opts.failure_strategy, Some(FailureStrategy::Compensate));
    assert_eq!(opts.max_retries, Some(7));
    assert_eq!(opts.timeout.map(|d| d.0), Some(Duration::from_secs(3600)));
    assert_eq!(opts.idempotency_key.as_deref(), Some("req-1"));
    assert_eq!(
        opts.on_conflict,
        Some(worlds_engine::OnConflict::UseExisting)
    );
}

#[test]
fn activity_options_read_every_name_of_the_specification() {
    let opts: ActivityOptions = serde_json::from_str(
        r#"{"retry":{"maxAttempts":5,"backoff":"linear","initialInterval":100,
                     "maxInterval":1000,"multiplier":3},
            "timeout":"5s","heartbeatTimeout":2000,"taskQueue":"slow"}"#,
    )
    .unwrap();
    let retry = opts.retry.unwrap();
    assert_eq!((retry.max_attempts, retry.backoff), (5, Backoff::Linear));
    assert_eq!(retry.initial_interval.0, Duration::from_millis(100));
    assert_eq!(retry.max_interval.0, Duration::from_millis(1000));
    assert_eq!(retry.multiplier, 3.0);
    assert_eq!(opts.timeout.map(|d| d.0), Some(Duration::from_secs(5)));
    assert_eq!(
        opts.heartbeat_timeout.map(|d| d.0),
        Some(Duration::from_secs(2))
    );
    assert_eq!(opts.task_queue.as_deref(), Some("slow"));
}

#[test]
fn the_other_configuration_types_read_camel_case_names() {
    let logs: LogsConfig =
        serde_json::from_str(r#"{"flushInterval":"1s","maxFiles":3,"captureUnattributed":false}"#)
            .unwrap();
    assert_eq!(logs.max_files, Some(3));
    assert!(!logs.capture_unattributed);
    let server: WebhookServerOptions =
        serde_json::from_str(r#"{"maxConnections":8,"bodyDeadline":"2s"}"#).unwrap();
    assert_eq!(server.max_connections, 8);
    let filter: WorkflowQueryFilter =
        serde_json::from_str(r#"{"workflowName":"checkout","startedAfter":5}"#).unwrap();
    assert_eq!(filter.workflow_name.as_deref(), Some("checkout"));
    assert_eq!(filter.started_after, Some(5));
}

/// The error of deserializing `json` as `T`, which must name `key`.
fn refused<T: serde::de::DeserializeOwned + std::fmt::Debug>(json: &str, key: &str) {
    let error = serde_json::from_str::<T>(json).expect_err(json).to_string();
    assert!(
        error.contains(&format!("unknown field `{key}`")),
        "{json}: {error}"
    );
}

#[test]
fn an_unknown_key_is_refused_by_name_in_every_options_type() {
    refused::<WorldConfig>(r#"{"minWorker":5}"#, "minWorker");
    refused::<WorldConfig>(r#"{"logs":{"levle":"debug"}}"#, "levle");
    refused::<WorldConfig>(r#"{"webhook_server":{"max_conns":1}}"#, "max_conns");
    refused::<WorldConfig>(r#"{"workflow_retry":{"retries":1}}"#, "retries");
    refused::<WorkflowOptions>(r#"{"workflowID":"x"}"#, "workflowID");
    refused::<ActivityOptions>(r#"{"heartbeat":1000}"#, "heartbeat");
    refused::<ActivityOptions>(r#"{"retry":{"attempts":2}}"#, "attempts");
    refused::<RetryConfig>(r#"{"max_attempt":2}"#, "max_attempt");
    refused::<LogsConfig>(r#"{"directory":"/tmp"}"#, "directory");
    refused::<WebhookServerOptions>(r#"{"timeout":1}"#, "timeout");
    refused::<WorkflowQueryFilter>(r#"{"name":"x"}"#, "name");
}

/// A recorded history whose step options carry keys this version does not know (as one written
/// by another version would) loads, and the run finishes from it.
#[tokio::test]
async fn a_recorded_history_with_options_still_loads() {
    let text = include_str!("fixtures/histories/fixture_order_v1.json");
    let mut events: Vec<serde_json::Value> = serde_json::from_str(text).unwrap();
    let scheduled = events
        .iter_mut()
        .find(|e| e["type"] == "activity_scheduled")
        .unwrap();
    scheduled["options"] = serde_json::json!({
        "retry": {"max_attempts": 2, "initial_interval": 100, "jitter": 0.1},
        "timeout": 5000,
        "sticky_worker": true,
    });
    let events: Vec<Event> = serde_json::from_value(serde_json::Value::Array(events))
        .expect("a history with options loads");
    let options = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::ActivityScheduled { options, .. } => options.clone(),
            _ => None,
        })
        .unwrap();
    assert_eq!(options.retry.as_ref().unwrap().max_attempts, 2);
    assert_eq!(options.timeout.map(|d| d.0), Some(Duration::from_secs(5)));

    let store = MemoryStore::new();
    let mut events = events.into_iter();
    let first = events.next().unwrap();
    let run_id = first.run_id.clone();
    store.create_run(first).await.unwrap();
    store.append(&run_id, events.collect()).await.unwrap();
    let store: Arc<dyn Store> = Arc::new(store);
    let world = TestWorld::with_options(TestWorldOptions {
        store: Some(store),
        initial_time: DEFAULT_START + 60_000,
        autostart: false,
        ..TestWorldOptions::default()
    })
    .await;
    let (reserved, charged) = (Counter::default(), Counter::default());
    let (reserve, charge) = (add_one("reserve", &reserved), add_one("charge", &charged));
    world.register(&reserve).unwrap().register(&charge).unwrap();
    world.register(order_flow(&reserve, &charge)).unwrap();
    world.start().await.unwrap();
    let state = world.run_until_complete(&run_id, "2h").await.unwrap();
    assert_eq!(state.status, RunStatus::Completed, "{:?}", state.error);
    let step = state.activities[0].options.as_ref().unwrap();
    assert_eq!(step.retry.as_ref().unwrap().max_attempts, 2);
    // The run state as JSON (what `worlds inspect` reads back) loads too.
    let json = serde_json::to_string(&state).unwrap();
    let back: worlds_engine::WorkflowState = serde_json::from_str(&json).unwrap();
    assert_eq!(back.activities[0].options, state.activities[0].options);
}
