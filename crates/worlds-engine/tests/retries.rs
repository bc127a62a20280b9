//! Retries: backoff delays through the engine on virtual time, fatal and retryable errors,
//! exhausted attempts, panics, the ready-made policies and the retry helpers outside workflows.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{add_one, test_world, test_world_with, Counter, Mode};
use worlds_engine::clock::{Clock, VirtualClock};
use worlds_engine::model::EventKind;
use worlds_engine::prelude::*;
use worlds_engine::retry::should_retry::{
    is_network_error_message, is_rate_limit_error_message, is_server_error_message,
    is_transient_error_message,
};
use worlds_engine::retry::Backoff;
use worlds_engine::retry::{retryable_on, with_retry_on};
use worlds_engine::WorkflowState;
use worlds_engine::{ActivityStatus, StructuredError, WorkerStatus};

/// An activity that fails its first `failures` attempts, then returns the attempt number.
fn flaky(name: &str, failures: u32, calls: &Counter) -> Activity<(), u32> {
    let calls = calls.clone();
    activity(name, move |ctx: ActivityContext, _: ()| {
        let calls = calls.clone();
        async move {
            calls.bump();
            if ctx.attempt() <= failures {
                return Err(StepError::msg(format!("attempt {} failed", ctx.attempt())));
            }
            Ok(ctx.attempt())
        }
    })
}

/// A workflow that runs `step` once with `policy` and returns its result.
fn run_with_policy(step: &Activity<(), u32>, policy: RetryConfig) -> Workflow<(), u32> {
    let step = step.clone();
    workflow("with-policy", move |ctx: WorkflowContext, _: ()| {
        let (step, policy) = (step.clone(), policy.clone());
        async move {
            let options = ActivityOptions::new().retry(policy);
            Ok::<_, WorkflowError>(ctx.run_with(&step, (), options).await?)
        }
    })
}

/// Virtual times at which each attempt started, in order.
fn attempt_starts(state: &WorkflowState) -> Vec<i64> {
    state
        .history
        .iter()
        .filter(|e| matches!(e.kind, EventKind::ActivityStarted { .. }))
        .map(|e| e.timestamp)
        .collect()
}

/// `(next attempt, delay_ms)` of every `activity_retry` event.
fn retries(state: &WorkflowState) -> Vec<(u32, u64)> {
    state
        .history
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::ActivityRetry {
                attempt, delay_ms, ..
            } => Some((attempt, delay_ms)),
            _ => None,
        })
        .collect()
}

/// `(attempt, error, retrying)` of every `activity_failed` event.
fn failures(state: &WorkflowState) -> Vec<(u32, StructuredError, bool)> {
    state
        .history
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ActivityFailed {
                attempt,
                error,
                retrying,
                ..
            } => Some((*attempt, error.clone(), *retrying)),
            _ => None,
        })
        .collect()
}

/// Runs a step that fails once per entry of `spec_bases_ms` and checks each recorded delay
/// against the spec's base delay for that attempt plus at most 10% jitter, and that the next
/// attempt really started that much virtual time later.
async fn check_backoff(mode: Mode, policy: RetryConfig, spec_bases_ms: &[u64]) {
    let failures_wanted = spec_bases_ms.len() as u32;
    let calls = Counter::default();
    let step = flaky("flaky", failures_wanted, &calls);
    let flow = run_with_policy(&step, policy);
    let t = test_world(mode).await;
    t.register(&step).unwrap().register(&flow).unwrap();
    let run = t
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    let state = t.run_until_complete(&run.id, "1h").await.unwrap();
    assert_eq!(run.result().await.unwrap(), failures_wanted + 1);
    assert_eq!(calls.get(), failures_wanted as usize + 1);

    let failed = failures(&state);
    assert_eq!(failed.len(), spec_bases_ms.len(), "{failed:?}");
    for (attempt, (failed_attempt, _, retrying)) in (1..).zip(&failed) {
        assert_eq!((*failed_attempt, *retrying), (attempt, true));
    }

    let retries = retries(&state);
    let next_attempts: Vec<u32> = retries.iter().map(|(a, _)| *a).collect();
    assert_eq!(next_attempts, (2..=failures_wanted + 1).collect::<Vec<_>>());
    let delays: Vec<u64> = retries.iter().map(|(_, d)| *d).collect();
    for (attempt, (delay, base)) in (1..).zip(delays.iter().zip(spec_bases_ms)) {
        assert!(
            *delay >= *base && *delay as f64 <= *base as f64 * 1.1,
            "delay after attempt {attempt} is {delay} ms, spec base {base} ms (+10% jitter at most)"
        );
    }

    let starts = attempt_starts(&state);
    let gaps: Vec<u64> = starts.windows(2).map(|w| (w[1] - w[0]) as u64).collect();
    assert_eq!(
        gaps, delays,
        "virtual time between attempts is the recorded delay"
    );
}

// Expected bases below are the spec formulas worked by hand, not RetryConfig::base_delay, so
// a wrong formula in the engine cannot agree with itself.

async fn exponential_backoff_delays_follow_the_spec(mode: Mode) {
    // 1000 * 2^(attempt-1), below the 30 s cap.
    let policy = RetryConfig::new()
        .max_attempts(5)
        .backoff(Backoff::Exponential)
        .initial_interval(Duration::from_millis(1000))
        .multiplier(2.0)
        .max_interval(Duration::from_secs(30));
    check_backoff(mode, policy, &[1000, 2000, 4000, 8000]).await;
}

async fn exponential_backoff_is_capped_at_max_interval(mode: Mode) {
    // 1000 * 2^(attempt-1) = 1000, 2000, 4000, 8000, 16000, capped at 5000.
    let policy = RetryConfig::new()
        .max_attempts(6)
        .backoff(Backoff::Exponential)
        .initial_interval(Duration::from_millis(1000))
        .multiplier(2.0)
        .max_interval(Duration::from_secs(5));
    check_backoff(mode, policy, &[1000, 2000, 4000, 5000, 5000]).await;
}

async fn linear_backoff_delays_follow_the_spec(mode: Mode) {
    // 1500 * attempt, capped at 4000.
    let policy = RetryConfig::new()
        .max_attempts(5)
        .backoff(Backoff::Linear)
        .initial_interval(Duration::from_millis(1500))
        .max_interval(Duration::from_secs(4));
    check_backoff(mode, policy, &[1500, 3000, 4000, 4000]).await;
}

async fn constant_backoff_delays_follow_the_spec(mode: Mode) {
    let policy = RetryConfig::new()
        .max_attempts(4)
        .backoff(Backoff::Constant)
        .initial_interval(Duration::from_millis(2500));
    check_backoff(mode, policy, &[2500, 2500, 2500]).await;
}

async fn fatal_error_fails_at_once_and_the_workflow_can_catch_it(mode: Mode) {
    let calls = Counter::default();
    let c = calls.clone();
    // `typed` picks between the two ways of failing for good.
    let charge = activity("charge", move |_ctx: ActivityContext, typed: bool| {
        let c = c.clone();
        async move {
            c.bump();
            if typed {
                Err::<u32, StepError>(FatalError::new("card declined").into())
            } else {
                Err(StepError::fatal("card declined"))
            }
        }
    })
    // Plenty of attempts allowed, so a single attempt can only be the fatal error's doing.
    .with_options(ActivityOptions::new().retry(RetryConfig::new().max_attempts(5)));
    let c = charge.clone();
    let flow = workflow("checkout", move |ctx: WorkflowContext, typed: bool| {
        let c = c.clone();
        async move {
            match ctx.run(&c, typed).await {
                Ok(n) => Ok(format!("charged {n}")),
                Err(ContextError::ActivityFailed {
                    name,
                    attempts,
                    error,
                    ..
                }) => Ok::<_, WorkflowError>(format!(
                    "{name} failed after {attempts}: {} [{}]",
                    error.message,
                    error.code.unwrap_or_default()
                )),
                Err(other) => Err(other.into()),
            }
        }
    });
    let t = test_world(mode).await;
    t.register(&charge).unwrap().register(&flow).unwrap();
    for (i, typed) in [false, true].into_iter().enumerate() {
        let run = t
            .execute(&flow, typed, WorkflowOptions::default())
            .await
            .unwrap();
        let state = t.run_until_complete(&run.id, "1h").await.unwrap();
        assert_eq!(state.status, RunStatus::Completed);
        assert_eq!(
            run.result().await.unwrap(),
            "charge failed after 1: card declined [FATAL]",
            "typed: {typed}"
        );
        assert_eq!(calls.get(), i + 1, "one attempt per run");
        assert!(retries(&state).is_empty());
        let failed = failures(&state);
        assert_eq!(failed.len(), 1);
        assert!(!failed[0].2, "the only failure is final");
    }
}

async fn retryable_error_delay_replaces_the_backoff(mode: Mode) {
    let calls = Counter::default();
    let c = calls.clone();
    let throttled = activity("throttled", move |ctx: ActivityContext, _: ()| {
        let c = c.clone();
        async move {
            c.bump();
            if ctx.attempt() == 1 {
                return Err(StepError::retry_after(
                    "429 slow down",
                    Duration::from_millis(4321),
                ));
            }
            Ok::<_, StepError>(ctx.attempt())
        }
    });
    // A backoff far from 4321 ms, so using it instead would show.
    let flow = run_with_policy(
        &throttled,
        RetryConfig::new()
            .backoff(Backoff::Constant)
            .initial_interval(Duration::from_secs(60)),
    );
    let t = test_world(mode).await;
    t.register(&throttled).unwrap().register(&flow).unwrap();
    let run = t
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    let state = t.run_until_complete(&run.id, "1h").await.unwrap();
    assert_eq!(run.result().await.unwrap(), 2);
    assert_eq!(
        retries(&state),
        vec![(2, 4321)],
        "no jitter on a chosen delay"
    );
    let starts = attempt_starts(&state);
    assert_eq!(starts[1] - starts[0], 4321);
}

async fn exhausted_retries_fail_the_run_when_propagated(mode: Mode) {
    let calls = Counter::default();
    let broken = flaky("broken", u32::MAX, &calls);
    let flow = run_with_policy(
        &broken,
        RetryConfig::new()
            .max_attempts(3)
            .backoff(Backoff::Constant)
            .initial_interval(Duration::from_millis(100)),
    );
    let t = test_world(mode).await;
    t.register(&broken).unwrap().register(&flow).unwrap();
    let run = t
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    let state = t.run_until_complete(&run.id, "1h").await.unwrap();
    assert_eq!(state.status, RunStatus::Failed);
    assert_eq!(calls.get(), 3);

    let step = &state.activities[0];
    assert_eq!(
        (step.status, step.attempt),
        (ActivityStatus::Failed, 3),
        "{step:?}"
    );
    let failed = failures(&state);
    let (attempt, last_error, retrying) = failed.last().unwrap();
    assert_eq!((*attempt, *retrying), (3, false));
    assert_eq!(last_error.code.as_deref(), Some("RETRIES_EXHAUSTED"));
    assert_eq!(last_error.message, "attempt 3 failed");

    match run.result().await {
        Err(WorldError::RunFailed { run_id, error }) => {
            assert_eq!(run_id, run.id);
            assert_eq!(error.code.as_deref(), Some("RETRIES_EXHAUSTED"));
            assert!(
                error.message.contains("after 3 attempt(s)"),
                "{}",
                error.message
            );
        }
        other => panic!("expected RunFailed, got {other:?}"),
    }
}

async fn panicking_activity_is_retried_and_the_worker_survives(mode: Mode) {
    let calls = Counter::default();
    let c = calls.clone();
    let touchy = activity("touchy", move |ctx: ActivityContext, _: ()| {
        let c = c.clone();
        async move {
            c.bump();
            if ctx.attempt() == 1 {
                panic!("boom on attempt {}", ctx.attempt());
            }
            Ok::<_, StepError>(ctx.attempt())
        }
    });
    let flow = run_with_policy(&touchy, RetryConfig::new());
    let after_calls = Counter::default();
    let after_step = add_one("after", &after_calls);
    let s = after_step.clone();
    let after = workflow("after-the-panic", move |ctx: WorkflowContext, n: u64| {
        let s = s.clone();
        async move { Ok::<_, WorkflowError>(ctx.run(&s, n).await?) }
    });
    // A single worker: had the panic taken it down, nothing could run afterwards.
    let mut config = common::memory_config();
    config.min_workers = 1;
    config.max_workers = 1;
    let t = test_world_with(mode, config).await;
    t.register(&touchy)
        .unwrap()
        .register(&flow)
        .unwrap()
        .register(&after_step)
        .unwrap()
        .register(&after)
        .unwrap();
    let run = t
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    let state = t.run_until_complete(&run.id, "1h").await.unwrap();
    assert_eq!(run.result().await.unwrap(), 2);
    assert_eq!(calls.get(), 2);
    let failed = failures(&state);
    assert_eq!(failed.len(), 1);
    let (attempt, error, retrying) = &failed[0];
    assert_eq!((*attempt, *retrying), (1, true));
    assert!(error.message.contains("panicked"), "{}", error.message);
    assert!(
        error.message.contains("boom on attempt 1"),
        "{}",
        error.message
    );

    let workers = t.workers().list();
    assert_eq!(workers.len(), 1);
    assert_eq!(workers[0].status, WorkerStatus::Idle, "{workers:?}");
    let later = t
        .execute(&after, 41, WorkflowOptions::default())
        .await
        .unwrap();
    t.run_until_complete(&later.id, "1m").await.unwrap();
    assert_eq!(later.result().await.unwrap(), 42);
}

in_both_modes!(
    exponential_backoff_delays_follow_the_spec,
    exponential_backoff_is_capped_at_max_interval,
    linear_backoff_delays_follow_the_spec,
    constant_backoff_delays_follow_the_spec,
    fatal_error_fails_at_once_and_the_workflow_can_catch_it,
    retryable_error_delay_replaces_the_backoff,
    exhausted_retries_fail_the_run_when_propagated,
    panicking_activity_is_retried_and_the_worker_survives,
);

#[test]
fn retry_patterns_have_the_spec_values() {
    // (policy, max attempts, initial ms, max ms, multiplier), from the spec's table.
    let cases = [
        (retry_patterns::api(), 5, 1_000, 30_000, 2.0),
        (retry_patterns::database(), 3, 500, 10_000, 2.0),
        (retry_patterns::network(), 5, 2_000, 60_000, 3.0),
    ];
    for (policy, attempts, initial, max, multiplier) in cases {
        assert_eq!(policy.max_attempts, attempts);
        assert_eq!(policy.backoff, Backoff::Exponential);
        assert_eq!(policy.initial_interval.as_millis(), initial);
        assert_eq!(policy.max_interval.as_millis(), max);
        assert_eq!(policy.multiplier, multiplier);
    }
    let network: Vec<u128> = (1..=5)
        .map(|a| retry_patterns::network().base_delay(a).as_millis())
        .collect();
    assert_eq!(network, [2_000, 6_000, 18_000, 54_000, 60_000]);
}

#[test]
fn should_retry_predicates_cover_the_spec_categories() {
    for network in [
        "connect ECONNREFUSED",
        "ENOTFOUND host",
        "ETIMEDOUT",
        "network down",
    ] {
        assert!(is_network_error_message(network), "{network}");
        assert!(is_transient_error_message(network), "{network}");
    }
    for limited in ["rate limit exceeded", "HTTP 429"] {
        assert!(is_rate_limit_error_message(limited), "{limited}");
    }
    for server in ["HTTP 500", "status 502", "503 from upstream"] {
        assert!(is_server_error_message(server), "{server}");
    }
    for permanent in ["invalid card number", "404 not found", "order 15003"] {
        assert!(!is_transient_error_message(permanent), "{permanent}");
    }
}

/// Runs `task` to completion, moving the virtual clock to each deadline it sleeps until.
async fn drive<T: Send + 'static>(clock: &VirtualClock, task: tokio::task::JoinHandle<T>) -> T {
    for _ in 0..1_000 {
        for _ in 0..8 {
            tokio::task::yield_now().await;
        }
        if task.is_finished() {
            return task.await.expect("the retried task panicked");
        }
        if let Some(deadline) = clock.next_deadline() {
            clock.set(deadline);
        }
    }
    panic!("the task neither finished nor waited on the clock");
}

#[tokio::test]
async fn with_retry_on_a_virtual_clock_succeeds_on_the_third_call() {
    let clock = VirtualClock::new(0);
    let calls = Counter::default();
    let task = tokio::spawn({
        let (clock, calls) = (clock.clone(), calls.clone());
        async move {
            with_retry_on(&clock, &RetryConfig::new(), || {
                let n = calls.bump();
                async move {
                    if n < 3 {
                        Err(std::io::Error::other(format!("flaky {n}")))
                    } else {
                        Ok(n)
                    }
                }
            })
            .await
        }
    });
    for _ in 0..8 {
        tokio::task::yield_now().await;
    }
    // It waits on the virtual clock, not on real time.
    assert_eq!(calls.get(), 1);
    assert!(!task.is_finished());
    let first_wait = clock.next_deadline().expect("waiting for the second call");
    assert!((1_000..=1_100).contains(&first_wait), "{first_wait}");

    assert_eq!(drive(&clock, task).await.unwrap(), 3);
    assert_eq!(calls.get(), 3);
    // Default policy: 1 s then 2 s, each with up to 10% jitter.
    assert!(
        (3_000..=3_300).contains(&clock.now_ms()),
        "{}",
        clock.now_ms()
    );
}

#[tokio::test]
async fn retryable_on_retries_every_call_and_stops_on_fatal() {
    let clock = VirtualClock::new(0);
    let calls = Counter::default();
    let c = calls.clone();
    let lookup = retryable_on(
        Arc::new(clock.clone()),
        RetryConfig::new()
            .backoff(Backoff::Constant)
            .initial_interval(Duration::from_millis(500)),
        move |id: u32| {
            let n = c.bump();
            async move {
                match (id, n % 2) {
                    (0, _) => Err(Box::<dyn std::error::Error + Send + Sync>::from(
                        FatalError::new("no such id"),
                    )),
                    (_, 1) => Err("HTTP 503".into()),
                    _ => Ok(id * 10),
                }
            }
        },
    );
    for id in [1, 2] {
        let started = clock.now_ms();
        let task = tokio::spawn(lookup(id));
        assert_eq!(drive(&clock, task).await.unwrap(), id * 10);
        let waited = clock.now_ms() - started;
        assert!((500..=550).contains(&waited), "call {id} waited {waited}");
    }
    assert_eq!(calls.get(), 4, "each call failed once, then succeeded");

    let before = clock.now_ms();
    let error = lookup(0).await.unwrap_err();
    assert_eq!(error.to_string(), "no such id");
    assert_eq!(calls.get(), 5, "a fatal error is not retried");
    assert_eq!(clock.now_ms(), before);
}
