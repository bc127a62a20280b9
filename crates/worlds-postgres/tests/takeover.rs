//! A member whose lease lapsed while a step ran: another member takes the run over and
//! finishes it, and the first member's late result is refused and leaves history untouched.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use worlds_engine::clock::SystemClock;
use worlds_engine::prelude::*;
use worlds_engine::store::EventStore;
use worlds_engine::{EventKind, HookSecret};
use worlds_postgres::{PostgresOptions, PostgresStore};

fn config(schema: &str) -> WorldConfig {
    let mut config = WorldConfig::postgres(common::url());
    config.database.schema = schema.to_owned();
    config.shared_poll_interval = Duration::from_millis(100).into();
    config.hook_secret = Some(HookSecret("takeover-test".into()));
    config
}

async fn member(schema: &str) -> (World, PostgresStore) {
    let options = PostgresOptions {
        lease_duration: Duration::from_secs(1),
        heartbeat_interval: Some(Duration::from_millis(200)),
        ..common::options(schema)
    };
    let store = PostgresStore::connect(&common::url(), options)
        .await
        .unwrap();
    let world = World::with_store(
        config(schema),
        Arc::new(SystemClock),
        Arc::new(store.clone()),
    );
    (world, store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_result_from_a_member_that_lost_its_lease_is_refused() {
    if !common::database_up().await {
        return;
    }
    let schema = common::fresh_schema();
    let calls = Arc::new(AtomicUsize::new(0));
    let release = Arc::new(Notify::new());
    // The first attempt (on the first member) blocks until released; later ones return at once.
    let slow = {
        let calls = calls.clone();
        let release = release.clone();
        activity("slow", move |_ctx: ActivityContext, _: ()| {
            let calls = calls.clone();
            let release = release.clone();
            async move {
                let call = calls.fetch_add(1, Ordering::SeqCst) + 1;
                if call == 1 {
                    release.notified().await;
                }
                Ok::<_, StepError>(call)
            }
        })
    };
    let step = slow.clone();
    let flow = workflow("takeover", move |ctx: WorkflowContext, _: ()| {
        let step = step.clone();
        async move { Ok::<_, WorkflowError>(ctx.run(&step, ()).await?) }
    });

    let (first, first_store) = member(&schema).await;
    first.register(&slow).unwrap();
    first.register(&flow).unwrap();
    first.start().await.unwrap();
    let handle = first
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    let run_id = handle.id.clone();
    while calls.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // The first member stops renewing its lease (as if paused); a second one takes over once
    // the lease expires and runs the step again.
    first_store.stop_heartbeat();
    let (second, _second_store) = member(&schema).await;
    second.register(&slow).unwrap();
    second.register(&flow).unwrap();
    second.start().await.unwrap();
    let done = second.handle::<usize>(&run_id).await.unwrap();
    let output = tokio::time::timeout(Duration::from_secs(20), done.result())
        .await
        .expect("the second member finishes the run")
        .unwrap();
    assert_eq!(output, 2, "the second member's attempt is the recorded one");

    // The first member's step now returns: its result must not land.
    let before = first_store.history(&run_id, 0).await.unwrap();
    release.notify_one();
    // The refused append makes the first member forget its lease on the run.
    tokio::time::timeout(Duration::from_secs(10), async {
        while first_store.held_epoch(&run_id).is_some() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the first member's late result is refused");
    let after = first_store.history(&run_id, 0).await.unwrap();
    assert_eq!(before.len(), after.len(), "the late result wrote nothing");
    let completions = after
        .iter()
        .filter(|e| matches!(e.kind, EventKind::ActivityCompleted { .. }))
        .count();
    assert_eq!(completions, 1);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(
        first_store.held_epoch(&run_id),
        None,
        "the first member let go"
    );

    second.shutdown().await.unwrap();
    first.shutdown().await.unwrap();
    common::drop_schema(&schema).await;
}
