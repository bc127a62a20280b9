//! Named steps (`ctx.step`): closures recorded like activities, replayed from history, retried,
//! checked for determinism by name, and resumed after a restart.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use worlds_engine::prelude::*;
use worlds_engine::store::{FileStore, Store};
use worlds_engine::testing::{TestWorld, TestWorldOptions};
use worlds_engine::{EventKind, Payload};

use common::{event_types, test_world, Counter, Mode};

fn counting_flow(calls: &Counter) -> Workflow<u64, u64> {
    let calls = calls.clone();
    workflow("named", move |ctx: WorkflowContext, n: u64| {
        let calls = calls.clone();
        async move {
            let mut total = n;
            for i in 0..3u64 {
                let calls = calls.clone();
                total = ctx
                    .step(format!("add-{i}"), move || {
                        let calls = calls.clone();
                        async move {
                            calls.bump();
                            Ok::<_, StepError>(total + i)
                        }
                    })
                    .await?;
                ctx.sleep("1m").await?;
            }
            Ok::<_, WorkflowError>(total)
        }
    })
}

async fn named_steps_run_once_and_replay_their_results(mode: Mode) {
    let world = test_world(mode).await;
    let calls = Counter::default();
    let flow = counting_flow(&calls);
    world.register(&flow).unwrap();
    let run = world
        .execute(&flow, 10, WorkflowOptions::default())
        .await
        .unwrap();
    let state = world.run_until_complete(&run.id, "1h").await.unwrap();
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(state.output.unwrap().decode::<u64>().unwrap(), 13);
    assert_eq!(calls.get(), 3, "each step ran exactly once");
    let names: Vec<_> = state.activities.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["add-0", "add-1", "add-2"]);
    assert!(state.activities.iter().all(|a| a.inline));
    world.shutdown().await.unwrap();
}

async fn a_named_step_retries_under_its_policy(mode: Mode) {
    let world = test_world(mode).await;
    let flow = workflow("flaky", |ctx: WorkflowContext, _: ()| async move {
        let options = ActivityOptions::new().retry(
            RetryConfig::new()
                .max_attempts(3)
                .initial_interval(std::time::Duration::from_secs(1)),
        );
        let attempt = ctx
            .step_with("flaky-call", options, |step: ActivityContext| async move {
                if step.attempt() < 3 {
                    Err(StepError::msg("not yet"))
                } else {
                    Ok(step.attempt())
                }
            })
            .await?;
        Ok::<_, WorkflowError>(attempt)
    });
    world.register(&flow).unwrap();
    let run = world
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    let state = world.run_until_complete(&run.id, "1h").await.unwrap();
    assert_eq!(state.output.unwrap().decode::<u32>().unwrap(), 3);
    assert_eq!(state.activities[0].attempt, 3);
    world.shutdown().await.unwrap();
}

in_both_modes!(
    named_steps_run_once_and_replay_their_results,
    a_named_step_retries_under_its_policy,
);

#[tokio::test]
async fn a_step_name_that_changes_on_replay_is_nondeterminism() {
    let world = test_world(Mode::Evicting).await;
    let renamed = Arc::new(AtomicBool::new(false));
    let flag = renamed.clone();
    let flow = workflow("renaming", move |ctx: WorkflowContext, _: ()| {
        let flag = flag.clone();
        async move {
            // A name built from something outside history: exactly what the rule forbids.
            let name = if flag.load(Ordering::SeqCst) {
                "second-name"
            } else {
                "first-name"
            };
            ctx.step(name, || async { Ok::<_, StepError>(1u8) }).await?;
            ctx.sleep("1h").await?;
            Ok::<_, WorkflowError>(())
        }
    });
    world.register(&flow).unwrap();
    let run = world
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    world.settle().await;
    renamed.store(true, Ordering::SeqCst);
    let state = world.run_until_complete(&run.id, "2h").await.unwrap();
    assert_eq!(state.status, RunStatus::Failed);
    let error = state.error.unwrap();
    assert_eq!(error.code.as_deref(), Some("NONDETERMINISM"), "{error:?}");
    assert!(
        error.message.contains("first-name") && error.message.contains("second-name"),
        "{}",
        error.message
    );
    world.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_empty_step_name_fails_the_workflow_clearly() {
    let world = test_world(Mode::Cached).await;
    let flow = workflow("nameless", |ctx: WorkflowContext, _: ()| async move {
        ctx.step("", || async { Ok::<_, StepError>(()) }).await?;
        Ok::<_, WorkflowError>(())
    });
    world.register(&flow).unwrap();
    let run = world
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    let state = world.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(state.status, RunStatus::Failed);
    assert!(state.error.unwrap().message.contains("must not be empty"));
    world.shutdown().await.unwrap();
}

async fn world_on(dir: &std::path::Path) -> TestWorld {
    let store: Arc<dyn Store> = Arc::new(FileStore::open(dir).unwrap());
    TestWorld::with_options(TestWorldOptions {
        store: Some(store),
        config: common::memory_config(),
        autostart: false,
        ..TestWorldOptions::default()
    })
    .await
}

fn report_flow(calls: &Counter) -> Workflow<serde_json::Value, String> {
    let calls = calls.clone();
    // The input is whatever the hand-made history recorded.
    workflow(
        "report",
        move |ctx: WorkflowContext, _: serde_json::Value| {
            let calls = calls.clone();
            async move {
                let out = ctx
                    .step("send-report", move || {
                        let calls = calls.clone();
                        async move {
                            calls.bump();
                            Ok::<_, StepError>("sent".to_owned())
                        }
                    })
                    .await?;
                Ok::<_, WorkflowError>(out)
            }
        },
    )
}

#[tokio::test]
async fn a_named_step_scheduled_before_a_restart_runs_after_it() {
    let dir = tempfile::tempdir().unwrap();
    // What a process leaves behind if it stops right after recording the step: scheduled, not
    // started. On restart the step's attempt is queued before the workflow replays, so the
    // worker that takes it has no closure yet and parks it until the replay brings it.
    let run_id = {
        let store = FileStore::open(dir.path()).unwrap();
        let maker = common::store_events::Maker::new();
        let run_id = maker.create(&store, "report", "report-1").await;
        let scheduled = EventKind::ActivityScheduled {
            position: 0,
            activity_id: "step_01".into(),
            name: "send-report".into(),
            input: Payload::null(),
            options: None,
            inline: true,
        };
        maker
            .append(
                &store,
                &run_id,
                vec![common::store_events::started(), scheduled],
            )
            .await;
        run_id
    };

    let calls = Counter::default();
    let world = world_on(dir.path()).await;
    world.register(report_flow(&calls)).unwrap();
    world.world().start().await.unwrap();
    let state = world.run_until_complete(&run_id, "1m").await.unwrap();
    assert_eq!(state.status, RunStatus::Completed, "{:?}", state.error);
    assert_eq!(state.output.unwrap().decode::<String>().unwrap(), "sent");
    assert_eq!(calls.get(), 1);
    assert_eq!(
        event_types(&world.query(&run_id).await.unwrap())
            .iter()
            .filter(|t| **t == "activity_completed")
            .count(),
        1
    );
    world.shutdown().await.unwrap();
}
