//! Nondeterminism: workflow code that changes under a run in flight.
//!
//! A run's history lives in its world's store, so a "code change" is simulated inside one
//! world: the workflow closure reads a shared flag (the "code version") and behaves
//! differently once the test flips it. With `evict_after_every_task` the run is dropped from
//! memory after each task, so when it wakes it replays its history against the *current*
//! code, exactly as after a deploy.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::{add_one, event_types, test_world, Counter, Mode};
use worlds_engine::error::codes;
use worlds_engine::prelude::*;
use worlds_engine::testing::TestWorld;
use worlds_engine::RunStatus;

/// The code version the workflows read: false = v1, true = v2.
#[derive(Clone, Default)]
struct CodeVersion(Arc<AtomicBool>);

impl CodeVersion {
    fn is_v2(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    fn deploy_v2(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

struct Steps {
    a: Activity<u64, u64>,
    b: Activity<u64, u64>,
    c: Activity<u64, u64>,
    calls_a: Counter,
    calls_b: Counter,
    calls_c: Counter,
}

fn steps() -> Steps {
    let (calls_a, calls_b, calls_c) = (Counter::default(), Counter::default(), Counter::default());
    Steps {
        a: add_one("a", &calls_a),
        b: add_one("b", &calls_b),
        c: add_one("c", &calls_c),
        calls_a,
        calls_b,
        calls_c,
    }
}

async fn world_with(mode: Mode, s: &Steps, flow: &Workflow<u64, u64>) -> TestWorld {
    let t = test_world(mode).await;
    t.register(&s.a)
        .unwrap()
        .register(&s.b)
        .unwrap()
        .register(&s.c)
        .unwrap()
        .register(flow)
        .unwrap();
    t
}

/// Starts a run and lets it record step "a" and fall asleep for an hour.
async fn run_until_asleep(t: &TestWorld, flow: &Workflow<u64, u64>) -> WorkflowHandle<u64> {
    let run = t
        .execute(flow, 1, WorkflowOptions::default())
        .await
        .unwrap();
    t.settle().await;
    let state = t.query(&run.id).await.unwrap();
    assert_eq!(state.status, RunStatus::Running);
    assert_eq!(
        event_types(&state).last().copied(),
        Some("timer_scheduled"),
        "{:?}",
        event_types(&state)
    );
    run
}

fn assert_nondeterminism(state: &worlds_engine::WorkflowState, must_name: &[&str]) {
    assert_eq!(state.status, RunStatus::Failed);
    let error = state.error.as_ref().expect("a failed run has an error");
    assert_eq!(
        error.code.as_deref(),
        Some(codes::NONDETERMINISM),
        "{error}"
    );
    for text in must_name {
        assert!(
            error.message.contains(text),
            "{text:?} missing from: {}",
            error.message
        );
    }
}

/// v1: a, sleep 1h, b. v2 (deployed while the run sleeps): c, sleep 1h, b. On wake-up the
/// replay meets "c" where history recorded "a" and must fail the run, not run "c".
#[tokio::test]
async fn changed_first_step_fails_the_replay_with_nondeterminism() {
    let version = CodeVersion::default();
    let s = steps();
    let (a, b, c, v) = (s.a.clone(), s.b.clone(), s.c.clone(), version.clone());
    let flow = workflow("versioned", move |ctx: WorkflowContext, n: u64| {
        let (a, b, c, v) = (a.clone(), b.clone(), c.clone(), v.clone());
        async move {
            let first = if v.is_v2() { &c } else { &a };
            let x = ctx.run(first, n).await?;
            ctx.sleep("1h").await?;
            Ok::<_, WorkflowError>(ctx.run(&b, x).await?)
        }
    });
    // Evicting: the wake-up must replay the history against the new code.
    let t = world_with(Mode::Evicting, &s, &flow).await;
    let run = run_until_asleep(&t, &flow).await;
    assert_eq!(s.calls_a.get(), 1);

    version.deploy_v2();
    let state = t.run_until_complete(&run.id, "2h").await.unwrap();
    assert_nondeterminism(&state, &["#0", "'a'", "'c'"]);
    // Neither the replacement step nor the rest of the workflow ran, and the recorded step
    // was not run again.
    assert_eq!(
        (s.calls_a.get(), s.calls_b.get(), s.calls_c.get()),
        (1, 0, 0)
    );
    assert_eq!(state.activities.len(), 1, "nothing new was scheduled");
    assert_eq!(state.activities[0].name, "a");
    match run.result().await.unwrap_err() {
        WorldError::RunFailed { error, .. } => assert!(error.has_code(codes::NONDETERMINISM)),
        other => panic!("expected RunFailed, got {other:?}"),
    }
}

/// v2 returns right after "a", before the sleep history holds: history has a command the code
/// no longer issues, so replay reports that the code now issues "nothing" there.
#[tokio::test]
async fn code_issuing_fewer_commands_than_history_fails_with_nondeterminism() {
    let version = CodeVersion::default();
    let s = steps();
    let (a, b, v) = (s.a.clone(), s.b.clone(), version.clone());
    let flow = workflow("shortened", move |ctx: WorkflowContext, n: u64| {
        let (a, b, v) = (a.clone(), b.clone(), v.clone());
        async move {
            let x = ctx.run(&a, n).await?;
            if v.is_v2() {
                return Ok::<_, WorkflowError>(x);
            }
            ctx.sleep("1h").await?;
            Ok(ctx.run(&b, x).await?)
        }
    });
    let t = world_with(Mode::Evicting, &s, &flow).await;
    let run = run_until_asleep(&t, &flow).await;

    version.deploy_v2();
    let state = t.run_until_complete(&run.id, "2h").await.unwrap();
    assert_nondeterminism(&state, &["#1", "timer", "nothing"]);
    assert_eq!((s.calls_a.get(), s.calls_b.get()), (1, 0));
    assert_eq!(
        state.output, None,
        "the early return did not complete the run"
    );
}

/// The same early return as a brand-new run is fine: only runs whose history disagrees with
/// the code fail. (Guards against the check above failing for the wrong reason.)
#[tokio::test]
async fn new_runs_of_the_changed_code_are_not_affected() {
    let version = CodeVersion::default();
    let s = steps();
    let (a, v) = (s.a.clone(), version.clone());
    let flow = workflow("shortened", move |ctx: WorkflowContext, n: u64| {
        let (a, v) = (a.clone(), v.clone());
        async move {
            let x = ctx.run(&a, n).await?;
            if !v.is_v2() {
                ctx.sleep("1h").await?;
            }
            Ok::<_, WorkflowError>(x)
        }
    });
    let t = world_with(Mode::Evicting, &s, &flow).await;
    version.deploy_v2();
    let run = t
        .execute(&flow, 1, WorkflowOptions::default())
        .await
        .unwrap();
    let state = t.run_until_complete(&run.id, "2h").await.unwrap();
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(run.result().await.unwrap(), 2);
}

/// Changing code *after* the part history has recorded is compatible: v2 replaces "b" (not yet
/// reached) with "c". The run replays a and the sleep, then runs "c". In cached mode the
/// live run reads the flag only when it gets there, so both modes see v2 at that point.
async fn changing_code_after_the_recorded_part_is_compatible(mode: Mode) {
    let version = CodeVersion::default();
    let s = steps();
    let (a, b, c, v) = (s.a.clone(), s.b.clone(), s.c.clone(), version.clone());
    let flow = workflow("extended", move |ctx: WorkflowContext, n: u64| {
        let (a, b, c, v) = (a.clone(), b.clone(), c.clone(), v.clone());
        async move {
            let x = ctx.run(&a, n).await?;
            ctx.sleep("1h").await?;
            let last = if v.is_v2() { &c } else { &b };
            Ok::<_, WorkflowError>(ctx.run(last, x * 10).await?)
        }
    });
    let t = world_with(mode, &s, &flow).await;
    let run = run_until_asleep(&t, &flow).await;

    version.deploy_v2();
    let state = t.run_until_complete(&run.id, "2h").await.unwrap();
    assert_eq!(state.status, RunStatus::Completed, "{:?}", state.error);
    assert_eq!(run.result().await.unwrap(), 21);
    assert_eq!(
        (s.calls_a.get(), s.calls_b.get(), s.calls_c.get()),
        (1, 0, 1),
        "the recorded step ran once; the new step ran; the old one never did"
    );
    let names: Vec<&str> = state.activities.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, vec!["a", "c"]);
}

in_both_modes!(changing_code_after_the_recorded_part_is_compatible);
