//! Joining and leaving a PostgreSQL world: the lease is a setting of `worlds_postgres::open`,
//! each member is judged by its own lease, and a world that shuts down hands its runs over at
//! once and stops counting as a live member (what `worlds doctor` reads).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use worlds_engine::clock::SystemClock;
use worlds_engine::prelude::*;
use worlds_engine::{ErrorKind, HookSecret};
use worlds_postgres::{PostgresOptions, PostgresStore};

fn config(schema: &str) -> WorldConfig {
    let mut config = common::world_config(schema);
    config.shared_poll_interval = Duration::from_millis(100).into();
    config.hook_secret = Some(HookSecret("membership-test".into()));
    config
}

/// A workflow that sleeps an hour: its run stays unfinished, leased to its member.
fn sleeper() -> Workflow<(), ()> {
    workflow("sleeper", |ctx: WorkflowContext, _: ()| async move {
        ctx.sleep("1h").await?;
        Ok::<_, WorkflowError>(())
    })
}

async fn member(
    schema: &str,
    lease: Duration,
    heartbeat: Option<Duration>,
) -> (World, PostgresStore) {
    let options = PostgresOptions {
        lease_duration: lease,
        heartbeat_interval: heartbeat,
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
    world.register(sleeper()).unwrap();
    (world, store)
}

async fn owner(store: &PostgresStore, run_id: &str) -> Option<String> {
    sqlx::query_scalar("SELECT owner FROM runs WHERE run_id = $1")
        .bind(run_id)
        .fetch_one(&common::sql(store.schema()))
        .await
        .unwrap()
}

async fn is_member(store: &PostgresStore, member: &str) -> bool {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM members WHERE member_id = $1)")
        .bind(member)
        .fetch_one(&common::sql(store.schema()))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_is_a_setting_of_open() {
    if !common::database_up().await {
        return;
    }
    let schema = common::fresh_schema();
    let mut short = config(&schema);
    short.database.lease_duration = Duration::from_millis(500).into();
    let err = worlds_postgres::open(short).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert!(
        err.to_string().contains("database.lease_duration") && err.to_string().contains("1s"),
        "{err}"
    );

    let mut config = config(&schema);
    config.database.lease_duration = Duration::from_secs(7).into();
    let world = worlds_postgres::open(config).await.unwrap();
    world.start().await.unwrap();
    let pool = sqlx::PgPool::connect(&common::url()).await.unwrap();
    let leases: Vec<Option<i64>> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT lease_ms FROM {schema}.members"
    )))
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(leases, vec![Some(7_000)], "the member records its lease");
    world.shutdown().await.unwrap();
    drop(world);
    pool.close().await;
    common::drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_with_a_longer_lease_is_not_taken_for_dead() {
    if !common::database_up().await {
        return;
    }
    let schema = common::fresh_schema();
    // Renews every 10/3 s: dead to a member that applied its own 1 s lease to it.
    let (patient, patient_store) = member(&schema, Duration::from_secs(10), None).await;
    patient.start().await.unwrap();
    let run = patient
        .execute(&sleeper(), (), WorkflowOptions::default())
        .await
        .unwrap();
    let (eager, _eager_store) = member(&schema, Duration::from_secs(1), None).await;
    eager.start().await.unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        assert_eq!(
            owner(&patient_store, &run.id).await.as_deref(),
            Some(patient_store.member_id()),
            "a member live by its own lease keeps its run"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eager.shutdown().await.unwrap();
    patient.shutdown().await.unwrap();
    common::drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_world_shut_down_hands_its_runs_over_at_once_and_leaves() {
    if !common::database_up().await {
        return;
    }
    let schema = common::fresh_schema();
    // A lease far longer than the test: only a handover at shutdown lets the other member in.
    let lease = Duration::from_secs(300);
    let (first, first_store) = member(&schema, lease, Some(Duration::from_millis(50))).await;
    first.start().await.unwrap();
    let run = first
        .execute(&sleeper(), (), WorkflowOptions::default())
        .await
        .unwrap();
    assert_eq!(
        owner(&first_store, &run.id).await.as_deref(),
        Some(first_store.member_id())
    );
    let (second, second_store) = member(&schema, lease, Some(Duration::from_millis(50))).await;
    second.start().await.unwrap();

    first.shutdown().await.unwrap();
    // The store stays open (the world may start again), but the member is gone from the
    // members table at once: `worlds doctor` does not count it as live.
    assert!(
        !is_member(&first_store, first_store.member_id()).await,
        "a shut-down world is no longer a member"
    );
    let taken = Instant::now();
    while owner(&second_store, &run.id).await.as_deref() != Some(second_store.member_id()) {
        assert!(
            taken.elapsed() < Duration::from_secs(10),
            "the other member takes the run at once, not when the lease ends"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Some heartbeats later, still gone.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!is_member(&first_store, first_store.member_id()).await);

    // Started again, it is a member again.
    first.start().await.unwrap();
    assert!(is_member(&first_store, first_store.member_id()).await);
    second.shutdown().await.unwrap();
    let back = Instant::now();
    while owner(&first_store, &run.id).await.as_deref() != Some(first_store.member_id()) {
        assert!(
            back.elapsed() < Duration::from_secs(10),
            "the restarted world claims the run the other one handed over"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    first.shutdown().await.unwrap();
    common::drop_schema(&schema).await;
}
