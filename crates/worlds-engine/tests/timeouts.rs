//! Timeouts: per-attempt activity timeouts, heartbeat timeouts, run timeouts, and the duration
//! forms the API accepts.

mod common;

use std::time::Duration;

use common::{event_types, test_world, Counter, Mode};
use worlds_engine::clock::Clock;
use worlds_engine::duration::{parse_duration, DurationError, IntoDuration};
use worlds_engine::model::EventKind;
use worlds_engine::prelude::*;
use worlds_engine::retry::Backoff;
use worlds_engine::WorkflowState;
use worlds_engine::{ActivityStatus, Event, StructuredError};

/// Retry quickly and predictably, so the timeout under test is the only long wait.
fn one_second_retries() -> RetryConfig {
    RetryConfig::new()
        .backoff(Backoff::Constant)
        .initial_interval(Duration::from_secs(1))
}

/// A workflow that runs `step` once and returns its result.
fn single_step<O>(name: &str, step: &Activity<(), O>) -> Workflow<(), O>
where
    O: serde::Serialize + serde::de::DeserializeOwned + Send + 'static,
{
    let step = step.clone();
    workflow(name, move |ctx: WorkflowContext, _: ()| {
        let step = step.clone();
        async move { Ok::<_, WorkflowError>(ctx.run(&step, ()).await?) }
    })
}

fn first_started(state: &WorkflowState) -> &Event {
    state
        .history
        .iter()
        .find(|e| matches!(e.kind, EventKind::ActivityStarted { attempt: 1, .. }))
        .expect("the first attempt started")
}

/// Every `activity_failed` event with its error.
fn failures(state: &WorkflowState) -> Vec<(&Event, &StructuredError)> {
    state
        .history
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ActivityFailed { error, .. } => Some((e, error)),
            _ => None,
        })
        .collect()
}

async fn hung_attempt_times_out_and_the_retry_succeeds(mode: Mode) {
    let calls = Counter::default();
    let c = calls.clone();
    let step = activity("slow-once", move |ctx: ActivityContext, _: ()| {
        let c = c.clone();
        async move {
            c.bump();
            if ctx.attempt() == 1 {
                futures::future::pending::<()>().await;
            }
            Ok::<_, StepError>(ctx.attempt())
        }
    })
    .with_options(
        ActivityOptions::new()
            .timeout(Duration::from_secs(5))
            .retry(one_second_retries()),
    );
    let flow = single_step("times-out-once", &step);
    let t = test_world(mode).await;
    t.register(&step).unwrap().register(&flow).unwrap();
    let run = t
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    t.settle().await;
    // One millisecond short of the timeout the attempt is still alive.
    t.advance("4999ms").await;
    let state = run.query().await.unwrap();
    assert!(failures(&state).is_empty(), "{:?}", event_types(&state));
    assert_eq!(state.activities[0].status, ActivityStatus::Running);

    t.advance("1ms").await;
    let state = run.query().await.unwrap();
    let failed = failures(&state);
    assert_eq!(failed.len(), 1, "{:?}", event_types(&state));
    let (event, error) = failed[0];
    assert_eq!(error.code.as_deref(), Some("TIMEOUT"));
    assert!(
        matches!(
            event.kind,
            EventKind::ActivityFailed {
                attempt: 1,
                retrying: true,
                ..
            }
        ),
        "{event:?}"
    );
    assert_eq!(event.timestamp - first_started(&state).timestamp, 5_000);

    let state = t.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(run.result().await.unwrap(), 2);
    assert_eq!(calls.get(), 2);
}

async fn silent_attempt_fails_with_heartbeat_timeout(mode: Mode) {
    let t = test_world(mode).await;
    // Activities cannot read the world's clock; handing them the virtual clock lets this one
    // spend virtual time between beats.
    let clock = t.clock().clone();
    let step = activity("export", move |ctx: ActivityContext, _: ()| {
        let clock = clock.clone();
        async move {
            if ctx.attempt() == 1 {
                ctx.heartbeat("1/3");
                clock.sleep(Duration::from_secs(1)).await;
                ctx.heartbeat("2/3");
                futures::future::pending::<()>().await;
            }
            Ok::<_, StepError>("exported".to_owned())
        }
    })
    .with_options(
        ActivityOptions::new()
            .heartbeat_timeout(Duration::from_secs(2))
            .retry(one_second_retries()),
    );
    let flow = single_step("export-flow", &step);
    t.register(&step).unwrap().register(&flow).unwrap();
    let run = t
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    t.settle().await;
    t.advance("1s").await;

    let state = run.query().await.unwrap();
    let started_at = first_started(&state).timestamp;
    let step_state = &state.activities[0];
    assert_eq!(step_state.status, ActivityStatus::Running);
    assert_eq!(step_state.heartbeat_message.as_deref(), Some("2/3"));
    assert_eq!(step_state.last_heartbeat, Some(started_at + 1_000));
    let beats: Vec<(u32, Option<String>)> = state
        .history
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ActivityHeartbeat {
                attempt, message, ..
            } => Some((*attempt, message.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        beats,
        vec![(1, Some("1/3".to_owned())), (1, Some("2/3".to_owned()))]
    );

    let state = t.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(run.result().await.unwrap(), "exported");
    let failed = failures(&state);
    assert_eq!(failed.len(), 1, "{:?}", event_types(&state));
    let (event, error) = failed[0];
    assert_eq!(error.code.as_deref(), Some("HEARTBEAT_TIMEOUT"));
    // Two seconds after the last beat, not after the start: the beat reset the watch.
    assert_eq!(event.timestamp, started_at + 3_000);
}

async fn steady_heartbeats_keep_a_long_attempt_alive(mode: Mode) {
    let t = test_world(mode).await;
    let clock = t.clock().clone();
    let calls = Counter::default();
    let c = calls.clone();
    let step = activity("long-export", move |ctx: ActivityContext, _: ()| {
        let (clock, c) = (clock.clone(), c.clone());
        async move {
            c.bump();
            for i in 1..=10 {
                clock.sleep(Duration::from_secs(1)).await;
                ctx.heartbeat(format!("{i}/10"));
            }
            Ok::<_, StepError>(ctx.attempt())
        }
    })
    // No retries: a heartbeat timeout would fail the run.
    .with_options(
        ActivityOptions::new()
            .heartbeat_timeout(Duration::from_secs(2))
            .retry(RetryConfig::none()),
    );
    let flow = single_step("long-export-flow", &step);
    t.register(&step).unwrap().register(&flow).unwrap();
    let run = t
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    let state = t.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(run.result().await.unwrap(), 1);
    assert_eq!(calls.get(), 1);
    assert!(failures(&state).is_empty(), "{:?}", event_types(&state));
    let step_state = &state.activities[0];
    let took = step_state.completed_at.unwrap() - step_state.started_at.unwrap();
    assert_eq!(took, 10_000, "five times its heartbeat timeout");
}

/// Regression: beats were recorded from spawned tasks, so the last ones before a step returned
/// could land after its completion and be refused (9 of 10 beats, message "9/10").
async fn every_beat_before_a_step_returns_is_recorded_in_order(mode: Mode) {
    let t = test_world(mode).await;
    let step = activity("count", |ctx: ActivityContext, _: ()| async move {
        for i in 1..=10 {
            ctx.heartbeat(format!("{i}/10"));
        }
        Ok::<_, StepError>(10)
    });
    let flow = single_step("count-flow", &step);
    t.register(&step).unwrap().register(&flow).unwrap();
    let run = t
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    let state = t.run_until_complete(&run.id, "1m").await.unwrap();
    let beats: Vec<String> = state
        .history
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ActivityHeartbeat { message, .. } => message.clone(),
            _ => None,
        })
        .collect();
    let expected: Vec<String> = (1..=10).map(|i| format!("{i}/10")).collect();
    assert_eq!(beats, expected, "{:?}", event_types(&state));
    let completed = state
        .history
        .iter()
        .position(|e| matches!(e.kind, EventKind::ActivityCompleted { .. }))
        .unwrap();
    let last_beat = state
        .history
        .iter()
        .rposition(|e| matches!(e.kind, EventKind::ActivityHeartbeat { .. }))
        .unwrap();
    assert!(last_beat < completed, "{:?}", event_types(&state));
    assert_eq!(
        state.activities[0].heartbeat_message.as_deref(),
        Some("10/10")
    );
}

async fn run_timeout_fails_a_run_that_sleeps_too_long(mode: Mode) {
    let flow = workflow("oversleeper", |ctx: WorkflowContext, _: ()| async move {
        ctx.sleep("1h").await?;
        Ok::<_, WorkflowError>(())
    });
    let t = test_world(mode).await;
    t.register(&flow).unwrap();
    let run = t
        .execute(
            &flow,
            (),
            WorkflowOptions::new().timeout(Duration::from_secs(10)),
        )
        .await
        .unwrap();
    let state = t.run_until_complete(&run.id, "2h").await.unwrap();
    assert_eq!(state.status, RunStatus::Failed);
    assert_eq!(state.timeout_ms, Some(10_000));
    assert_eq!(state.completed_at, Some(state.created_at + 10_000));
    match run.result().await {
        Err(WorldError::RunFailed { error, .. }) => {
            assert_eq!(error.code.as_deref(), Some("TIMEOUT"));
        }
        other => panic!("expected RunFailed, got {other:?}"),
    }
    // Nothing more happens to it, not even the sleep it was in.
    let events = state.history.len();
    t.advance("2h").await;
    assert_eq!(run.query().await.unwrap().history.len(), events);
}

async fn run_finishing_in_time_is_untouched_by_its_timeout(mode: Mode) {
    // Set on the definition this time, as a default for every run.
    let flow = workflow("punctual", |ctx: WorkflowContext, _: ()| async move {
        ctx.sleep("5s").await?;
        Ok::<_, WorkflowError>("on time".to_owned())
    })
    .with_options(WorkflowOptions::new().timeout(Duration::from_secs(10)));
    let t = test_world(mode).await;
    t.register(&flow).unwrap();
    let run = t
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    let state = t.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(state.timeout_ms, Some(10_000));
    assert_eq!(state.status, RunStatus::Completed);
    t.advance("1m").await;
    let state = run.query().await.unwrap();
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(run.result().await.unwrap(), "on time");
}

async fn sleep_accepts_unit_strings_milliseconds_and_durations(mode: Mode) {
    let flow = workflow("naps", |ctx: WorkflowContext, _: ()| async move {
        let start = ctx.now();
        ctx.sleep("250ms").await?;
        ctx.sleep("5s").await?;
        ctx.sleep("2m").await?;
        ctx.sleep("1h").await?;
        ctx.sleep(1_500).await?;
        ctx.sleep(Duration::from_millis(42)).await?;
        Ok::<_, WorkflowError>(ctx.now() - start)
    });
    let t = test_world(mode).await;
    t.register(&flow).unwrap();
    let run = t
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    let state = t.run_until_complete(&run.id, "2h").await.unwrap();
    let lengths: Vec<i64> = state
        .history
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::TimerScheduled { fire_at, .. } => Some(fire_at - e.timestamp),
            _ => None,
        })
        .collect();
    let expected = [250, 5_000, 120_000, 3_600_000, 1_500, 42];
    assert_eq!(lengths, expected);
    assert_eq!(run.result().await.unwrap(), expected.iter().sum::<i64>());
}

async fn bad_sleep_duration_is_an_invalid_argument(mode: Mode) {
    let flow = workflow("bad-naps", |ctx: WorkflowContext, _: ()| async move {
        let mut refusals = Vec::new();
        for result in [ctx.sleep("5x").await, ctx.sleep(-5_i64).await] {
            match result {
                Err(ContextError::InvalidArgument { call, message }) => {
                    refusals.push(format!("{call}: {message}"))
                }
                other => return Err(WorkflowError::msg(format!("not refused: {other:?}"))),
            }
        }
        // The run goes on after a refused call, on replay too.
        ctx.sleep("1s").await?;
        Ok::<_, WorkflowError>(refusals)
    });
    let t = test_world(mode).await;
    t.register(&flow).unwrap();
    let run = t
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    let state = t.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(state.status, RunStatus::Completed, "{:?}", state.error);
    let refusals = run.result().await.unwrap();
    assert_eq!(refusals.len(), 2);
    assert!(refusals[0].starts_with("ctx.sleep: "), "{}", refusals[0]);
    assert!(refusals[0].contains("\"5x\""), "{}", refusals[0]);
    assert!(refusals[1].contains("-5"), "{}", refusals[1]);
    // Refused calls are not recorded: the only timer is the valid one.
    let timers = event_types(&state)
        .into_iter()
        .filter(|t| *t == "timer_scheduled")
        .count();
    assert_eq!(timers, 1);
}

in_both_modes!(
    hung_attempt_times_out_and_the_retry_succeeds,
    silent_attempt_fails_with_heartbeat_timeout,
    steady_heartbeats_keep_a_long_attempt_alive,
    every_beat_before_a_step_returns_is_recorded_in_order,
    run_timeout_fails_a_run_that_sleeps_too_long,
    run_finishing_in_time_is_untouched_by_its_timeout,
    sleep_accepts_unit_strings_milliseconds_and_durations,
    bad_sleep_duration_is_an_invalid_argument,
);

#[test]
fn parse_duration_accepts_exactly_the_spec_format() {
    let ms = Duration::from_millis;
    let good = [
        ("0ms", ms(0)),
        ("250ms", ms(250)),
        ("5s", ms(5_000)),
        ("2m", ms(120_000)),
        ("1h", ms(3_600_000)),
        ("2d", ms(172_800_000)),
        ("007s", ms(7_000)),
        ("18446744073709551615ms", ms(u64::MAX)),
    ];
    for (text, expected) in good {
        assert_eq!(parse_duration(text), Ok(expected), "{text:?}");
    }
    let bad = [
        "", "5", "ms", "5x", "5w", "5D", "5S", "5Ms", " 5s", "5s ", "5 s", "1.5s", "-5s", "+5s",
        "5sms", "٣s",
    ];
    for text in bad {
        assert_eq!(
            parse_duration(text),
            Err(DurationError::Invalid {
                input: text.to_owned()
            }),
            "{text:?}"
        );
    }
    for text in ["18446744073709551616ms", "18446744073709551615s"] {
        assert!(
            matches!(parse_duration(text), Err(DurationError::Overflow { .. })),
            "{text:?}"
        );
    }
    assert_eq!(
        (-1_i64).into_duration(),
        Err(DurationError::Negative { value: -1 })
    );
    assert_eq!(1_500_u32.into_duration(), Ok(ms(1_500)));
}
