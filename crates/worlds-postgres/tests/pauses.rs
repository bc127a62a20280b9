//! Pauses on a PostgreSQL world of two members: a pause one member sets holds the runs the
//! other starts once it has read the pauses again (its 2 s refresh, on the shared virtual
//! clock), and a resume by one lets the runs the other holds start.

mod common;

use std::sync::Arc;
use std::time::Duration;

use worlds_engine::clock::VirtualClock;
use worlds_engine::model::PauseTarget;
use worlds_engine::prelude::*;
use worlds_engine::{ResolveData, RunStatus};

const T0: i64 = 1_767_225_600_000;

async fn member(schema: &str, clock: &VirtualClock) -> World {
    let world =
        worlds_postgres::open_with_clock(common::world_config(schema), Arc::new(clock.clone()))
            .await
            .unwrap();
    let report = workflow("report", |_ctx: WorkflowContext, n: u64| async move {
        Ok::<_, WorkflowError>(n)
    });
    world.register(&report).unwrap();
    world.start().await.unwrap();
    world
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_set_by_one_member_holds_the_runs_of_another_until_resumed() {
    if !common::database_up().await {
        return;
    }
    let schema = common::fresh_schema();
    let clock = VirtualClock::new(T0);
    let (a, b) = (member(&schema, &clock).await, member(&schema, &clock).await);
    let target = PauseTarget::Workflow("report".into());
    a.pause(target.clone(), "ops", "drain").await.unwrap();
    // B reads the pauses again on its next refreshes: time moves for a while (refreshes are
    // slower on a loaded machine).
    for _ in 0..20 {
        clock.advance(Duration::from_secs(1));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(b.pauses().await.unwrap().len(), 1);

    let mut ids = Vec::new();
    for (n, world) in [&a, &b, &b, &a, &b].into_iter().enumerate() {
        let handle = world
            .execute_by_name::<u64, u64>("report", n as u64, WorkflowOptions::default())
            .await
            .unwrap();
        ids.push(handle.id);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    for id in &ids {
        let run = b.get_run(id, ResolveData::None).await.unwrap();
        assert_eq!(run.status, RunStatus::Pending, "{id} is held");
    }
    let waits = b.waits(&ids[1]).await.unwrap();
    assert!(
        matches!(&waits[0].on, worlds_engine::model::WaitOn::Paused { by, .. } if by == "ops"),
        "{waits:?}"
    );

    // Lifted by A: B starts what it holds on its next refresh. Time goes on moving (a refresh
    // B began before the resume, slow on a loaded machine, must be followed by another).
    a.resume(&target, "ops").await.unwrap();
    let ticking = {
        let clock = clock.clone();
        tokio::spawn(async move {
            loop {
                clock.advance(Duration::from_secs(1));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    for (n, id) in ids.iter().enumerate() {
        let handle = a.handle::<u64>(id).await.unwrap();
        let result = tokio::time::timeout(Duration::from_secs(20), handle.result())
            .await
            .unwrap_or_else(|_| panic!("{id} did not finish once resumed"))
            .unwrap();
        assert_eq!(result, n as u64);
    }
    ticking.abort();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
    drop((a, b));
    common::drop_schema(&schema).await;
}
