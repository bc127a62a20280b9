//! Every connection of a world terminated by the server (`pg_terminate_backend`) in the middle
//! of a workload: the world reconnects, no acknowledged run is lost, and every run completes.

mod common;

use std::sync::Arc;
use std::time::Duration;

use sqlx::{AssertSqlSafe, Connection, PgConnection};
use worlds_engine::prelude::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_world_survives_every_connection_being_terminated() {
    if !common::database_up().await {
        return;
    }
    let schema = common::fresh_schema();
    let world = worlds_postgres::open(common::world_config(&schema))
        .await
        .unwrap();
    let add = activity("add", |_ctx: ActivityContext, n: u64| async move {
        tokio::time::sleep(Duration::from_millis(2)).await;
        Ok::<_, StepError>(n + 1)
    });
    let chain = common::chain(&add, 5);
    world.register(&add).unwrap();
    world.register(&chain).unwrap();
    world.start().await.unwrap();

    let items = (0..200u64).map(|n| (n * 10, WorkflowOptions::default()));
    let handles: Vec<_> = world
        .execute_batch(&chain, items)
        .await
        .unwrap()
        .into_iter()
        .map(Result::unwrap)
        .collect();

    // Twice, while the runs are in flight: every session of this world is terminated.
    let terminated = Arc::new(std::sync::atomic::AtomicU64::new(0));
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let mut admin = PgConnection::connect(&common::url()).await.unwrap();
        let killed: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
             WHERE application_name = 'worlds-engine {schema}' AND pid <> pg_backend_pid()"
        )))
        .fetch_one(&mut admin)
        .await
        .unwrap();
        terminated.fetch_add(killed as u64, std::sync::atomic::Ordering::Relaxed);
        admin.close().await.unwrap();
    }
    assert!(
        terminated.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "the test terminated no session"
    );

    for (n, handle) in handles.into_iter().enumerate() {
        let output = tokio::time::timeout(Duration::from_secs(60), handle.result()).await;
        if output.is_err() {
            let state = handle.query().await.unwrap();
            let steps: Vec<_> = state
                .activities
                .iter()
                .map(|a| (a.position, a.status, a.attempt))
                .collect();
            panic!(
                "run {n} did not finish: {:?}, steps {steps:?}",
                state.status
            );
        }
        let output = output.unwrap().unwrap_or_else(|e| panic!("run {n}: {e}"));
        assert_eq!(output, n as u64 * 10 + 5);
    }
    world.shutdown().await.unwrap();
    common::drop_schema(&schema).await;
}
