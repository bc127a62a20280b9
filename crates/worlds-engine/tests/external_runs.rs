//! Runs driven from outside the engine (`World::external`): stored and shown like any run,
//! written only by their outside runtime — never executed, failed for an unregistered
//! workflow, recovered or timed by the engine, before or after the world reopens.

use std::sync::Arc;

use worlds_engine::prelude::*;
use worlds_engine::store::HybridStore;
use worlds_engine::testing::{TestWorld, TestWorldOptions};
use worlds_engine::{ActivityStatus, EventKind, Payload, RunStatus};

fn hybrid(dir: &std::path::Path) -> WorldConfig {
    let mut config = WorldConfig::default();
    config.persistence = Persistence::Hybrid;
    config.persistence_path = dir.to_path_buf();
    config
}

#[tokio::test]
async fn the_engine_keeps_an_external_run_and_never_drives_it() {
    let dir = tempfile::tempdir().unwrap();
    let (run_id, past) = {
        let world = World::new(hybrid(dir.path())).unwrap();
        world.start().await.unwrap();
        let external = world.external();
        let input = Payload::encode(&[1, 2]).unwrap();
        let run = external
            .create("workflow//app.ts//checkout", input, Some("dpl_1".into()))
            .await
            .unwrap();
        assert!(run.external);
        assert_eq!(run.status, RunStatus::Pending);
        let past = world.clock().now_ms() - 1_000;
        external
            .append(
                &run.id,
                vec![
                    EventKind::WorkflowStarted {
                        attempt: 1,
                        first_position: 0,
                    },
                    EventKind::ActivityScheduled {
                        position: 1,
                        activity_id: "step_app_1".into(),
                        name: "charge".into(),
                        input: Payload::null(),
                        options: None,
                        inline: false,
                    },
                    // Already due: the engine must not fire it.
                    EventKind::TimerScheduled {
                        position: 2,
                        fire_at: past,
                        timer_id: Some("wait_app_1".into()),
                    },
                ],
            )
            .await
            .unwrap();
        let created = external
            .create_hook(&run.id, 3, "hook_app_1", "app-token", None)
            .await
            .unwrap()
            .unwrap();
        assert!(matches!(created[0].kind, EventKind::HookCreated { .. }));
        assert_eq!(
            external
                .hook_by_token("app-token")
                .await
                .unwrap()
                .map(|h| h.position),
            Some(3)
        );
        assert_eq!(external.step_run("step_app_1").await.unwrap(), run.id);
        world.shutdown().await.unwrap();
        (run.id, past)
    };

    // Reopened: recovery passes the run over; it is neither failed for its unregistered
    // workflow nor advanced.
    // A test world on the same directory: it settles (every task a worker could take has
    // run) and moves time past the run's timer.
    let store = Arc::new(HybridStore::open(dir.path()).unwrap());
    let test = TestWorld::with_options(TestWorldOptions {
        store: Some(store),
        initial_time: past,
        ..TestWorldOptions::default()
    })
    .await;
    test.advance("1h").await;
    let world = test.world();
    let state = world.external().get_with_history(&run_id).await.unwrap();
    assert_eq!(state.status, RunStatus::Running);
    assert_eq!(state.activities[0].status, ActivityStatus::Scheduled);
    assert_eq!(state.history.len(), 5, "queued, started, step, timer, hook");
    assert_eq!(state.code_version.as_deref(), Some("dpl_1"));

    // Its runtime goes on after the reopen, and ends it; the hook is released.
    let external = world.external();
    external
        .append(
            &run_id,
            vec![
                EventKind::TimerFired { position: 2 },
                EventKind::ActivityStarted {
                    position: 1,
                    attempt: 1,
                },
                EventKind::ActivityCompleted {
                    position: 1,
                    attempt: 1,
                    output: Payload::encode(&"charged").unwrap(),
                },
                EventKind::WorkflowCompleted {
                    output: Payload::encode(&3).unwrap(),
                },
            ],
        )
        .await
        .unwrap();
    let state = world.query(&run_id).await.unwrap();
    assert_eq!(state.status, RunStatus::Completed);
    assert!(external.hook_by_token("app-token").await.unwrap().is_none());
    let refused = external
        .append(&run_id, vec![EventKind::WorkflowCancelled { reason: None }])
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("cannot go from"), "{refused}");
    world.shutdown().await.unwrap();
}

#[tokio::test]
async fn runs_the_engine_drives_take_no_outside_records() {
    let world = World::new(WorldConfig::memory()).unwrap();
    let nap = workflow("nap", |ctx: WorkflowContext, _: ()| async move {
        ctx.sleep("1h").await?;
        Ok::<_, WorkflowError>(())
    });
    world.register(&nap).unwrap();
    world.start().await.unwrap();
    let handle = world
        .execute(&nap, (), WorkflowOptions::default())
        .await
        .unwrap();
    let refused = world
        .external()
        .append(
            &handle.id,
            vec![EventKind::WorkflowCompleted {
                output: Payload::null(),
            }],
        )
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), worlds_engine::ErrorKind::Conflict);
    let refused = world
        .external()
        .create("", Payload::null(), None)
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), worlds_engine::ErrorKind::InvalidInput);

    // A failed external run cannot be reopened here: the engine has no code to run it with.
    let run = world
        .external()
        .create("workflow//app.ts//fails", Payload::null(), None)
        .await
        .unwrap();
    world
        .external()
        .append(
            &run.id,
            vec![
                EventKind::WorkflowStarted {
                    attempt: 1,
                    first_position: 0,
                },
                EventKind::WorkflowFailed {
                    error: worlds_engine::StructuredError::new("boom"),
                },
            ],
        )
        .await
        .unwrap();
    let refused = world
        .reopen(&run.id, worlds_engine::model::ReopenRequest::retry())
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), worlds_engine::ErrorKind::Conflict);
    assert!(refused.to_string().contains("outside"), "{refused}");
    world.shutdown().await.unwrap();
}
