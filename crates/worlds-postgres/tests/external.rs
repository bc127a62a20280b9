//! Runs driven from outside the engine (a Workflow DevKit app) have no holder: whichever
//! member the app's calls reach writes them, while the member that created one lives and after
//! it is gone, and two members' writes to one run are ordered by the database.

mod common;

use std::sync::Arc;

use worlds_engine::clock::SystemClock;
use worlds_engine::prelude::*;
use worlds_engine::{EventKind, HookSecret, Payload, RunStatus};
use worlds_postgres::PostgresStore;

async fn member(schema: &str) -> World {
    let store = PostgresStore::connect(&common::url(), common::options(schema))
        .await
        .unwrap();
    let mut config = WorldConfig::postgres(common::url());
    config.database.schema = schema.to_owned();
    config.hook_secret = Some(HookSecret("external-test".into()));
    let world = World::with_store(config, Arc::new(SystemClock), Arc::new(store));
    world.start().await.unwrap();
    world
}

fn step(position: u32, id: &str) -> EventKind {
    EventKind::ActivityScheduled {
        position,
        activity_id: id.to_owned(),
        name: "add".into(),
        input: Payload::null(),
        options: None,
        inline: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_member_writes_a_run_driven_from_outside() {
    if !common::database_up().await {
        return;
    }
    let schema = common::fresh_schema();
    let first = member(&schema).await;
    let second = member(&schema).await;
    let run = first
        .external()
        .create(
            "workflow//app.ts//flow",
            Payload::null(),
            Some("dpl_1".into()),
        )
        .await
        .unwrap();
    let started = EventKind::WorkflowStarted {
        attempt: 1,
        first_position: 0,
    };
    first
        .external()
        .append(&run.id, vec![started, step(1, "step_a")])
        .await
        .unwrap();
    // The other member, while the first lives.
    second
        .external()
        .append(&run.id, vec![step(2, "step_b")])
        .await
        .unwrap();
    // Both at once at the same position: one is refused, nothing is lost or doubled.
    let (one, other) = (first.external(), second.external());
    let (a, b) = tokio::join!(
        one.append(&run.id, vec![step(3, "step_c")]),
        other.append(&run.id, vec![step(3, "step_d")]),
    );
    assert!(a.is_ok() != b.is_ok(), "{a:?} {b:?}");
    // The creating member goes away for good; the other goes on and ends the run.
    first.shutdown().await.unwrap();
    drop(first);
    second
        .external()
        .append(
            &run.id,
            vec![
                EventKind::ActivityStarted {
                    position: 1,
                    attempt: 1,
                },
                EventKind::ActivityCompleted {
                    position: 1,
                    attempt: 1,
                    output: Payload::encode(&3).unwrap(),
                },
                EventKind::WorkflowCompleted {
                    output: Payload::encode(&3).unwrap(),
                },
            ],
        )
        .await
        .unwrap();
    let state = second.query(&run.id).await.unwrap();
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(state.activities.len(), 3);
    // A third member started after all this reads the same.
    let third = member(&schema).await;
    assert_eq!(
        third.query(&run.id).await.unwrap().status,
        RunStatus::Completed
    );
    second.shutdown().await.unwrap();
    third.shutdown().await.unwrap();
}
