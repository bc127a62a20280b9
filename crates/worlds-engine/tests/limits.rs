//! Limits: the payload size limit on run inputs, step inputs, step outputs and run outputs;
//! and per-step cost that does not grow with history (checked structurally, by counting how
//! much history the engine reads from its store, not by timing).

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use common::wrapped_store::WrappedStore;
use common::{event_types, test_world_with, Counter, Mode};
use worlds_engine::clock::VirtualClock;
use worlds_engine::error::codes;
use worlds_engine::prelude::*;
use worlds_engine::testing::DEFAULT_START;
use worlds_engine::{ActivityStatus, RunStatus, WorkflowQueryFilter};

const LIMIT: usize = 1024;

fn small_limit() -> WorldConfig {
    let mut config = common::memory_config();
    config.max_payload_bytes = LIMIT;
    config
}

/// A string whose JSON form (with its two quotes) is `bytes` long.
fn json_string_of(bytes: usize) -> String {
    "x".repeat(bytes - 2)
}

#[tokio::test]
async fn run_input_over_the_limit_is_payload_too_large_413_naming_the_size() {
    let flow = workflow("echo", |_ctx: WorkflowContext, s: String| async move {
        Ok::<_, WorkflowError>(s.len())
    });
    let t = test_world_with(Mode::Cached, small_limit()).await;
    t.register(&flow).unwrap();

    let err = t
        .execute(&flow, json_string_of(2000), WorkflowOptions::default())
        .await
        .unwrap_err();
    match &err {
        WorldError::PayloadTooLarge { what, size, limit } => {
            assert_eq!(*size, 2000);
            assert_eq!(*limit, LIMIT);
            assert!(what.contains("echo"), "{what}");
        }
        other => panic!("expected PayloadTooLarge, got {other:?}"),
    }
    assert_eq!(err.http_status(), 413);
    let message = err.to_string();
    assert!(
        message.contains("2000") && message.contains("1024"),
        "{message}"
    );
    assert!(
        t.query_workflows(WorkflowQueryFilter::new())
            .await
            .unwrap()
            .is_empty(),
        "nothing was recorded"
    );

    // The limit is inclusive: exactly LIMIT bytes is accepted, one more is not.
    let run = t
        .execute(&flow, json_string_of(LIMIT), WorkflowOptions::default())
        .await
        .unwrap();
    t.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(run.result().await.unwrap(), LIMIT - 2);
    let err = t
        .execute(&flow, json_string_of(LIMIT + 1), WorkflowOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, WorldError::PayloadTooLarge { size, .. } if size == LIMIT + 1),
        "{err:?}"
    );
}

async fn step_output_over_the_limit_fails_the_step_without_retrying(mode: Mode) {
    let calls = Counter::default();
    let c = calls.clone();
    let bloat = activity("bloat", move |_ctx: ActivityContext, n: usize| {
        let c = c.clone();
        async move {
            c.bump();
            Ok::<_, StepError>(json_string_of(n))
        }
    });
    let b = bloat.clone();
    let flow = workflow("bloats", move |ctx: WorkflowContext, n: usize| {
        let b = b.clone();
        async move { Ok::<_, WorkflowError>(ctx.run(&b, n).await?.len()) }
    });
    let t = test_world_with(mode, small_limit()).await;
    t.register(&bloat).unwrap().register(&flow).unwrap();
    let run = t
        .execute(&flow, 5000usize, WorkflowOptions::default())
        .await
        .unwrap();
    // Retries would be due within seconds; a day is plenty for them to have happened.
    let state = t.run_until_complete(&run.id, "24h").await.unwrap();

    assert_eq!(calls.get(), 1, "an oversized result is not retried");
    assert_eq!(state.status, RunStatus::Failed);
    let step = &state.activities[0];
    assert_eq!(step.status, ActivityStatus::Failed);
    assert_eq!(step.attempt, 1);
    assert_eq!(step.output, None, "the oversized output was not stored");
    let error = step.error.as_ref().unwrap();
    assert_eq!(error.code.as_deref(), Some(codes::PAYLOAD_TOO_LARGE));
    assert!(error.message.contains("'bloat'"), "{}", error.message);
    assert!(error.message.contains("5000"), "{}", error.message);
    assert!(!event_types(&state).contains(&"activity_retry"));
    assert!(!event_types(&state).contains(&"activity_completed"));
    // The run failed because its step did, and says so with the same code.
    let run_error = state.error.as_ref().unwrap();
    assert_eq!(run_error.code.as_deref(), Some(codes::PAYLOAD_TOO_LARGE));
    assert!(run_error.message.contains("bloat"), "{}", run_error.message);
    match run.result().await.unwrap_err() {
        WorldError::RunFailed { error, .. } => {
            assert!(error.has_code(codes::PAYLOAD_TOO_LARGE))
        }
        other => panic!("expected RunFailed, got {other:?}"),
    }
}

async fn step_input_over_the_limit_fails_without_running_the_step(mode: Mode) {
    let calls = Counter::default();
    let c = calls.clone();
    let consume = activity("consume", move |_ctx: ActivityContext, s: String| {
        let c = c.clone();
        async move {
            c.bump();
            Ok::<_, StepError>(s.len())
        }
    });
    let k = consume.clone();
    // The workflow's own input is small; it builds the oversized step input itself.
    let flow = workflow("feeds-too-much", move |ctx: WorkflowContext, n: usize| {
        let k = k.clone();
        async move {
            match ctx.run(&k, json_string_of(n)).await {
                Ok(len) => Ok::<_, WorkflowError>(format!("ran:{len}")),
                Err(ContextError::ActivityFailed { error, .. }) => {
                    Ok(format!("refused:{}", error.code.unwrap_or_default()))
                }
                Err(other) => Err(other.into()),
            }
        }
    });
    let t = test_world_with(mode, small_limit()).await;
    t.register(&consume).unwrap().register(&flow).unwrap();
    let run = t
        .execute(&flow, 3000usize, WorkflowOptions::default())
        .await
        .unwrap();
    let state = t.run_until_complete(&run.id, "24h").await.unwrap();
    assert_eq!(
        run.result().await.unwrap(),
        format!("refused:{}", codes::PAYLOAD_TOO_LARGE)
    );
    assert_eq!(calls.get(), 0, "the step never ran");
    assert!(!event_types(&state).contains(&"activity_started"));
    let step = &state.activities[0];
    assert_eq!(step.status, ActivityStatus::Failed);
    let error = step.error.as_ref().unwrap();
    assert_eq!(error.code.as_deref(), Some(codes::PAYLOAD_TOO_LARGE));
    assert!(error.message.contains("'consume'"), "{}", error.message);
}

async fn workflow_output_over_the_limit_fails_the_run(mode: Mode) {
    let flow = workflow("big-result", |_ctx: WorkflowContext, n: usize| async move {
        Ok::<_, WorkflowError>(json_string_of(n))
    });
    let t = test_world_with(mode, small_limit()).await;
    t.register(&flow).unwrap();
    let run = t
        .execute(&flow, 4096usize, WorkflowOptions::default())
        .await
        .unwrap();
    let state = t.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(state.status, RunStatus::Failed);
    assert_eq!(state.output, None);
    let error = state.error.as_ref().unwrap();
    assert_eq!(error.code.as_deref(), Some(codes::PAYLOAD_TOO_LARGE));
    assert!(error.message.contains("4096"), "{}", error.message);
    match run.result().await.unwrap_err() {
        WorldError::RunFailed { error, .. } => {
            assert!(error.has_code(codes::PAYLOAD_TOO_LARGE))
        }
        other => panic!("expected RunFailed, got {other:?}"),
    }
}

in_both_modes!(
    step_output_over_the_limit_fails_the_step_without_retrying,
    step_input_over_the_limit_fails_without_running_the_step,
    workflow_output_over_the_limit_fails_the_run,
);

/// Runs `steps` one-step-at-a-time in a cached world on a counting store; returns
/// (whole-history reads, events read in total, events in the history).
async fn run_long_workflow(steps: u64) -> (u64, u64, u64) {
    let store = Arc::new(WrappedStore::default());
    let clock = Arc::new(VirtualClock::new(DEFAULT_START));
    let world = World::with_store(common::memory_config(), clock, store.clone());
    let calls = Counter::default();
    let step = common::add_one("add-one", &calls);
    let s = step.clone();
    let flow = workflow("long", move |ctx: WorkflowContext, n: u64| {
        let s = s.clone();
        async move {
            let mut v = n;
            for _ in 0..n {
                v = ctx.run(&s, v).await?;
            }
            Ok::<_, WorkflowError>(v)
        }
    });
    world.register(&step).unwrap().register(&flow).unwrap();
    world.start().await.unwrap();
    let run = world
        .execute(&flow, steps, WorkflowOptions::default())
        .await
        .unwrap();
    assert_eq!(run.result().await.unwrap(), 2 * steps);
    assert_eq!(calls.get() as u64, steps);
    // Read the counters before querying: the query itself reads the whole history once.
    let full_reads = store.full_reads.load(Ordering::SeqCst);
    let events_read = store.events_read.load(Ordering::SeqCst);
    let state = world.query(&run.id).await.unwrap();
    let events = state.history.len() as u64;
    assert!(events >= 3 * steps, "{events}");
    world.shutdown().await.unwrap();
    (full_reads, events_read, events)
}

/// Per-step cost must not grow with history. Timing would be flaky, so this checks the cause
/// instead: a cached run of 2 000 steps reads its whole history from the store only when it
/// is first loaded (a fixed number of times, whatever the length) and afterwards only the
/// events it has not seen, so the events read in total stay proportional to the history, not
/// to its square (which re-reading per step would give: ~2 000 × 6 000 / 2 events).
#[tokio::test]
async fn long_cached_run_reads_each_event_about_once_not_the_whole_history_per_step() {
    let (short_full_reads, _, _) = run_long_workflow(10).await;
    let (full_reads, events_read, events) = run_long_workflow(2_000).await;
    assert_eq!(
        full_reads, short_full_reads,
        "whole-history reads do not grow with the number of steps"
    );
    assert!(full_reads <= 2, "{full_reads}");
    assert!(
        events_read <= 2 * events,
        "read {events_read} events for a history of {events}: history is re-read per step"
    );
}

/// When a run is (re)loaded, its history should be read once. The executor reads it in
/// `load` and then again from seq 0 in the first `catch_up`, doubling the cost of every
/// resume of a long history (after eviction or restart).
#[tokio::test]
async fn loading_a_run_reads_its_history_once() {
    let (full_reads, _, _) = run_long_workflow(10).await;
    assert_eq!(full_reads, 1);
}
