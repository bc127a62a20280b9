//! Code versions: a world given one records it in every run it accepts, and runs are listed by
//! the version that accepted them.

use worlds_engine::prelude::*;
use worlds_engine::testing::TestWorld;
use worlds_engine::WorkflowQueryFilter;

#[tokio::test]
async fn runs_record_the_code_version_that_accepted_them() {
    let hello = workflow("hello", |_ctx: WorkflowContext, n: u64| async move {
        Ok::<_, WorkflowError>(n)
    });
    let mut config = WorldConfig::memory();
    config.code_version = Some("2026.11.27".into());
    let t = TestWorld::with_config(config).await;
    t.register(&hello).unwrap();
    let run = t
        .execute(&hello, 1, WorkflowOptions::default())
        .await
        .unwrap();
    let state = t.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(state.code_version.as_deref(), Some("2026.11.27"));

    let listed = t
        .list_runs(WorkflowQueryFilter::new().code_version("2026.11.27"))
        .await
        .unwrap();
    assert_eq!(listed.data.len(), 1);
    assert!(t
        .list_runs(WorkflowQueryFilter::new().code_version("2026.11.26"))
        .await
        .unwrap()
        .data
        .is_empty());

    // Without a version, runs record none.
    let plain = TestWorld::new().await;
    plain.register(&hello).unwrap();
    let run = plain
        .execute(&hello, 1, WorkflowOptions::default())
        .await
        .unwrap();
    let state = plain.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(state.code_version, None);
}

#[test]
fn a_blank_code_version_is_refused() {
    for bad in ["", "   ", "a\0b", &"x".repeat(201)] {
        let mut config = WorldConfig::memory();
        config.code_version = Some(bad.to_owned());
        let error = config.validate().unwrap_err().to_string();
        assert!(error.contains("code_version"), "{error}");
    }
}

#[test]
fn pinning_needs_a_code_version() {
    let mut config = WorldConfig::memory();
    config.pin_code_version = true;
    let error = config.validate().unwrap_err().to_string();
    assert!(
        error.contains("pin_code_version") && error.contains("needs code_version"),
        "{error}"
    );
    config.code_version = Some("v1".into());
    config.validate().unwrap();
}

/// A world pinned to its code version leaves runs of another version to a world of theirs:
/// on the directory of a hybrid world, v2 opens after v1 stopped with runs parked, drives
/// only its own, and the v1 runs finish when a v1 world opens the directory again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_world_drives_only_its_own_versions_runs() {
    let dir = tempfile::tempdir().unwrap();
    let config = |version: &str| {
        let mut config = WorldConfig::default();
        config.persistence = Persistence::Hybrid;
        config.persistence_path = dir.path().to_path_buf();
        config.code_version = Some(version.into());
        config.pin_code_version = true;
        config
    };
    let flow = workflow("parked", |ctx: WorkflowContext, n: u64| async move {
        ctx.create_hook_with::<u64>(HookOptions::new().token(format!("go-{n}")))
            .wait()
            .await
            .map_err(WorkflowError::from)
    });
    let open = |version: &'static str| {
        let (flow, config) = (flow.clone(), config(version));
        async move {
            let world = World::new(config).unwrap();
            world.register(&flow).unwrap();
            world.start().await.unwrap();
            world
        }
    };
    async fn parked(world: &World, id: &str) {
        tokio::time::timeout(std::time::Duration::from_secs(10), async {
            while world.query(id).await.unwrap().hooks.is_empty() {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        })
        .await
        .unwrap()
    }
    let old = {
        let v1 = open("v1").await;
        let run = v1
            .execute(&flow, 1, WorkflowOptions::default())
            .await
            .unwrap();
        parked(&v1, &run.id).await;
        v1.shutdown().await.unwrap();
        run.id
    };

    let v2 = open("v2").await;
    let new = v2
        .execute(&flow, 2, WorkflowOptions::default())
        .await
        .unwrap();
    parked(&v2, &new.id).await;
    v2.resume_hook("go-2", &20u64).await.unwrap();
    assert_eq!(new.result().await.unwrap(), 20);
    // The v1 run's payload is recorded, but no v2 process drives the run on.
    v2.resume_hook("go-1", &10u64).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let state = v2.query(&old).await.unwrap();
    assert_eq!(state.status, RunStatus::Running, "left to v1");
    assert_eq!(state.code_version.as_deref(), Some("v1"));
    v2.shutdown().await.unwrap();
    drop(v2);

    let v1 = open("v1").await;
    let handle = v1.handle::<u64>(&old).await.unwrap();
    assert_eq!(handle.result().await.unwrap(), 10);
    v1.shutdown().await.unwrap();
}
