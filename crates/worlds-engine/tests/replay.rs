//! Deterministic replay: runs resume from history after eviction; recorded steps never run
//! again; concurrent steps and races replay the same way; divergence is detected.

mod common;

use std::sync::Arc;

use common::{add_one, event_types, test_world, Counter, Mode};
use futures::future::{select, Either};
use worlds_engine::prelude::*;
use worlds_engine::RunStatus;

async fn sequential_steps_resume_without_rerunning(mode: Mode) {
    let calls = Counter::default();
    let step = add_one("add-one", &calls);
    let s = step.clone();
    let flow = workflow("chain", move |ctx: WorkflowContext, n: u64| {
        let s = s.clone();
        async move {
            let mut v = n;
            for _ in 0..5 {
                v = ctx.run(&s, v).await?;
            }
            Ok::<_, WorkflowError>(v)
        }
    });
    let t = test_world(mode).await;
    t.register(&step).unwrap().register(&flow).unwrap();
    let run = t
        .execute(&flow, 10, WorkflowOptions::default())
        .await
        .unwrap();
    let state = t.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(run.result().await.unwrap(), 15);
    // Each step ran exactly once, however many times the workflow was replayed.
    assert_eq!(calls.get(), 5);
    assert_eq!(
        event_types(&state)
            .iter()
            .filter(|t| **t == "activity_completed")
            .count(),
        5
    );
}

async fn joined_steps_keep_program_order(mode: Mode) {
    let calls_a = Counter::default();
    let calls_b = Counter::default();
    let a = add_one("a", &calls_a);
    let b = add_one("b", &calls_b);
    let (sa, sb) = (a.clone(), b.clone());
    let flow = workflow("join", move |ctx: WorkflowContext, n: u64| {
        let (sa, sb) = (sa.clone(), sb.clone());
        async move {
            let (x, y) = futures::join!(ctx.run(&sa, n), ctx.run(&sb, n * 10));
            let z = ctx.run(&sa, x? + y?).await?;
            Ok::<_, WorkflowError>(z)
        }
    });
    let t = test_world(mode).await;
    t.register(&a)
        .unwrap()
        .register(&b)
        .unwrap()
        .register(&flow)
        .unwrap();
    let run = t
        .execute(&flow, 1, WorkflowOptions::default())
        .await
        .unwrap();
    let state = t.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(run.result().await.unwrap(), 2 + 11 + 1);
    assert_eq!((calls_a.get(), calls_b.get()), (2, 1));
    let names: Vec<(u32, String)> = state
        .activities
        .iter()
        .map(|a| (a.position, a.name.clone()))
        .collect();
    assert_eq!(
        names,
        vec![(0, "a".into()), (1, "b".into()), (2, "a".into())]
    );
}

/// A race between a long sleep and a step: the step wins the first time, and must win again
/// on every replay, even though both results are recorded by then.
async fn select_race_replays_the_same_winner(mode: Mode) {
    let calls = Counter::default();
    let step = add_one("quick", &calls);
    let s = step.clone();
    let flow = workflow("race", move |ctx: WorkflowContext, _: ()| {
        let s = s.clone();
        async move {
            let quick = ctx.run(&s, 1);
            let slow = ctx.sleep("10m");
            let winner = match select(Box::pin(quick), Box::pin(slow)).await {
                Either::Left((r, _)) => format!("step:{}", r?),
                Either::Right((r, _)) => {
                    r?;
                    "timer".to_owned()
                }
            };
            // Wait past the timer, so both results are in history before the next steps.
            ctx.sleep("1h").await?;
            let after = ctx.run(&s, 100).await?;
            Ok::<_, WorkflowError>(format!("{winner}/{after}"))
        }
    });
    let t = test_world(mode).await;
    t.register(&step).unwrap().register(&flow).unwrap();
    let run = t
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    t.run_until_complete(&run.id, "2h").await.unwrap();
    assert_eq!(run.result().await.unwrap(), "step:2/101");
    assert_eq!(calls.get(), 2);
}

/// The reverse race: the timer fires first (the step fails and waits for a retry far in the
/// future), and replay must pick the timer again.
async fn select_race_replays_a_timer_win(mode: Mode) {
    let calls = Counter::default();
    let c = calls.clone();
    let flaky = activity("flaky", move |ctx: ActivityContext, _: ()| {
        let c = c.clone();
        async move {
            c.bump();
            if ctx.attempt() == 1 {
                return Err(StepError::retry_after(
                    "not yet",
                    std::time::Duration::from_secs(3600),
                ));
            }
            Ok::<_, StepError>("late".to_owned())
        }
    });
    let f = flaky.clone();
    let flow = workflow("race2", move |ctx: WorkflowContext, _: ()| {
        let f = f.clone();
        async move {
            let step = ctx.run(&f, ());
            let timer = ctx.sleep("1m");
            let winner = match select(Box::pin(step), Box::pin(timer)).await {
                Either::Left(_) => "step",
                Either::Right(_) => "timer",
            };
            ctx.sleep("2h").await?;
            Ok::<_, WorkflowError>(winner.to_owned())
        }
    });
    let t = test_world(mode).await;
    t.register(&flaky).unwrap().register(&flow).unwrap();
    let run = t
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    t.run_until_complete(&run.id, "3h").await.unwrap();
    assert_eq!(run.result().await.unwrap(), "timer");
    assert_eq!(
        calls.get(),
        2,
        "the step was retried once, not re-run by replay"
    );
}

async fn now_random_and_uuid_are_recorded_once(mode: Mode) {
    let seen: Arc<parking_lot::Mutex<Vec<(i64, f64, String)>>> = Arc::default();
    let calls = Counter::default();
    let step = add_one("tick", &calls);
    let (s, seen_in) = (step.clone(), seen.clone());
    let flow = workflow("values", move |ctx: WorkflowContext, _: ()| {
        let (s, seen) = (s.clone(), seen_in.clone());
        async move {
            let values = (ctx.now(), ctx.random(), ctx.uuid());
            seen.lock().push(values.clone());
            ctx.sleep("5m").await?;
            ctx.run(&s, 0).await?;
            let later = ctx.now();
            Ok::<_, WorkflowError>((values, later))
        }
    });
    let t = test_world(mode).await;
    let start = t.now();
    t.register(&step).unwrap().register(&flow).unwrap();
    let run = t
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    t.run_until_complete(&run.id, "1h").await.unwrap();
    let ((now, random, uuid), later): ((i64, f64, String), i64) = run.result().await.unwrap();
    assert_eq!(now, start);
    assert!((0.0..1.0).contains(&random));
    assert_eq!(uuid.len(), 26);
    assert_eq!(
        later,
        start + 5 * 60_000,
        "time moves only through the recorded clock"
    );
    // Every execution of the workflow body (first run and replays) saw the same values.
    let seen = seen.lock();
    assert!(!seen.is_empty());
    assert!(
        seen.iter().all(|v| *v == (now, random, uuid.clone())),
        "{seen:?}"
    );
    if mode == Mode::Evicting {
        assert!(
            seen.len() >= 3,
            "evicting mode replays at every await: {}",
            seen.len()
        );
    }
}

async fn thirty_day_sleep_completes_in_virtual_time(mode: Mode) {
    let flow = workflow("month", |ctx: WorkflowContext, _: ()| async move {
        let before = ctx.now();
        ctx.sleep("720h").await?;
        Ok::<_, WorkflowError>(ctx.now() - before)
    });
    let t = test_world(mode).await;
    t.register(&flow).unwrap();
    let wall = std::time::Instant::now();
    let run = t
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    t.run_until_complete(&run.id, "1000h").await.unwrap();
    assert_eq!(run.result().await.unwrap(), 30 * 24 * 3_600_000i64);
    assert!(wall.elapsed() < std::time::Duration::from_secs(1));
}

async fn waiting_run_holds_no_worker(mode: Mode) {
    let flow = workflow("sleeper", |ctx: WorkflowContext, _: ()| async move {
        ctx.sleep("1h").await?;
        Ok::<_, WorkflowError>(())
    });
    let t = test_world(mode).await;
    t.register(&flow).unwrap();
    let mut runs = Vec::new();
    for _ in 0..50 {
        runs.push(
            t.execute(&flow, (), WorkflowOptions::default())
                .await
                .unwrap(),
        );
    }
    t.settle().await;
    // Fifty runs are waiting on timers and the two workers are free.
    let workers = t.workers().list();
    assert_eq!(workers.len(), 2);
    assert!(
        workers.iter().all(|w| w.status == WorkerStatus::Idle),
        "{workers:?}"
    );
    for run in &runs {
        assert_eq!(run.query().await.unwrap().status, RunStatus::Running);
    }
    t.advance("1h").await;
    for run in &runs {
        run.result().await.unwrap();
    }
}

use worlds_engine::WorkerStatus;

in_both_modes!(
    sequential_steps_resume_without_rerunning,
    joined_steps_keep_program_order,
    select_race_replays_the_same_winner,
    select_race_replays_a_timer_win,
    now_random_and_uuid_are_recorded_once,
    thirty_day_sleep_completes_in_virtual_time,
    waiting_run_holds_no_worker,
);

/// Awaiting a plain tokio sleep inside a workflow cannot be recorded or resumed: the run must
/// fail with a clear error instead of hanging forever.
#[tokio::test]
async fn awaiting_a_non_command_future_fails_the_run_loudly() {
    let flow = workflow("tokio-sleep", |_ctx: WorkflowContext, _: ()| async move {
        tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
        Ok::<_, WorkflowError>(())
    });
    let t = test_world(Mode::Cached).await;
    t.register(&flow).unwrap();
    let run = t
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    let state = t.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(state.status, RunStatus::Failed);
    let error = state.error.unwrap();
    assert_eq!(error.code.as_deref(), Some("NOT_A_COMMAND"));
    assert!(error.message.contains("ctx.sleep"), "{}", error.message);
}

/// With a cache far smaller than the number of live runs, runs are evicted and resume by
/// replay; every one still finishes with each step run once.
#[tokio::test]
async fn a_small_run_cache_evicts_and_replays_without_rerunning_steps() {
    let calls = Counter::default();
    let step = add_one("cached-step", &calls);
    let s = step.clone();
    let flow = workflow("crowd", move |ctx: WorkflowContext, n: u64| {
        let s = s.clone();
        async move {
            let a = ctx.run(&s, n).await?;
            ctx.sleep("1m").await?;
            Ok::<_, WorkflowError>(ctx.run(&s, a).await?)
        }
    });
    let mut config = common::memory_config();
    config.max_cached_runs = 5;
    let t = common::test_world_with(Mode::Cached, config).await;
    t.register(&step).unwrap().register(&flow).unwrap();
    let mut runs = Vec::new();
    for n in 0..40 {
        runs.push(
            t.execute(&flow, n, WorkflowOptions::default())
                .await
                .unwrap(),
        );
    }
    t.advance("1m").await;
    for (n, run) in runs.iter().enumerate() {
        t.run_until_complete(&run.id, "1h").await.unwrap();
        assert_eq!(run.result().await.unwrap(), n as u64 + 2);
    }
    assert_eq!(calls.get(), 80);
}

/// A run asleep for a short while stays in memory and wakes without replaying; a run asleep
/// for long holds nothing and replays when its timer fires.
#[tokio::test]
async fn a_short_nap_stays_cached_and_a_long_sleep_replays() {
    let entries = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = entries.clone();
    let flow = workflow("napper", move |ctx: WorkflowContext, nap: String| {
        let seen = seen.clone();
        async move {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            ctx.sleep(nap.as_str()).await?;
            Ok::<_, WorkflowError>(())
        }
    });
    let t = test_world(Mode::Cached).await;
    t.register(&flow).unwrap();
    for (nap, entered) in [("10s", 1), ("1h", 2)] {
        entries.store(0, std::sync::atomic::Ordering::SeqCst);
        let run = t
            .execute(&flow, nap.to_owned(), WorkflowOptions::default())
            .await
            .unwrap();
        t.run_until_complete(&run.id, "2h").await.unwrap();
        run.result().await.unwrap();
        assert_eq!(
            entries.load(std::sync::atomic::Ordering::SeqCst),
            entered,
            "workflow code entered for a {nap} sleep"
        );
    }
}
