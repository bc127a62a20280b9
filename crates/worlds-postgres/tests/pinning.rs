//! Deployment pinning on PostgreSQL: members pinned to their code version claim only runs
//! of that version, so during a rolling deploy old runs wait for (and drain on) old code.

mod common;

use std::time::Duration;

use worlds_engine::prelude::*;
use worlds_engine::ResolveData;

fn parked() -> Workflow<u64, u64> {
    workflow("parked", |ctx: WorkflowContext, n: u64| async move {
        ctx.create_hook_with::<u64>(HookOptions::new().token(format!("pin-{n}")))
            .wait()
            .await
            .map_err(WorkflowError::from)
    })
}

async fn member(schema: &str, version: &str) -> World {
    let mut config = common::world_config(schema);
    config.code_version = Some(version.into());
    config.pin_code_version = true;
    let world = worlds_postgres::open(config).await.unwrap();
    world.register(parked()).unwrap();
    world.start().await.unwrap();
    world
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_members_claim_only_runs_of_their_version() {
    if !common::database_up().await {
        return;
    }
    let schema = common::fresh_schema();
    let v1 = member(&schema, "v1").await;
    let mut old = Vec::new();
    for n in 0..5u64 {
        let run = v1
            .execute(&parked(), n, WorkflowOptions::default())
            .await
            .unwrap();
        common::until(&v1, &run.id, |s| !s.hooks.is_empty()).await;
        old.push(run.id);
    }
    // The old code goes away (dropped, its leases released); the new code is up.
    v1.shutdown().await.unwrap();
    drop(v1);
    let v2 = member(&schema, "v2").await;
    let new = v2
        .execute(&parked(), 100, WorkflowOptions::default())
        .await
        .unwrap();
    common::until(&v2, &new.id, |s| !s.hooks.is_empty()).await;
    v2.resume_hook("pin-100", &1u64).await.unwrap();
    common::until(&v2, &new.id, |s| s.status == RunStatus::Completed).await;
    for n in 0..5u64 {
        v2.resume_hook(&format!("pin-{n}"), &n).await.unwrap();
    }
    // Long enough for several claim rounds: the v2 member leaves the v1 runs alone.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for id in &old {
        let state = v2.get_run(id, ResolveData::None).await.unwrap();
        assert_eq!(state.status, RunStatus::Running, "left to a v1 member");
    }
    // A v1 member comes back and drains them.
    let again = member(&schema, "v1").await;
    for id in &old {
        common::until(&again, id, |s| s.status == RunStatus::Completed).await;
    }
    again.shutdown().await.unwrap();
    v2.shutdown().await.unwrap();
    common::drop_schema(&schema).await;
}
